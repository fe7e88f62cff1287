"""Facts about the corpus .etl files, from ../shared/corpus/etl/SOURCES.md (measured independently)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EtlFacts:
    path: str
    records: int
    os_build: int
    buffers: int
    pointer_size: int = 8
    kinds: dict[str, int] = field(default_factory=dict)
    events_lost: int = 0
    compressed: bool = False


DIAGHUB = "perfview/diaghub-dotnetcore3.1-win-x64-diagsession"

CORPUS_ETL = [
    EtlFacts("perfview/gcevents.etl", 71, 19045, 5, kinds={"system": 2, "event": 69}),
    EtlFacts("perfview/gcrundownevents.etl", 112, 19045, 2, kinds={"system": 2, "event": 110}),
    EtlFacts("perfview/primitive-types.etl", 7, 19043, 2, kinds={"system": 2, "event": 5}),
    EtlFacts(
        "perfview/net.4.5.2.x64.etl", 179474, 9200, 360,
        kinds={"perfinfo": 100157, "system": 3191, "event": 34765 + 33378, "classic": 7956 + 27}, compressed=True,
    ),
    EtlFacts(f"{DIAGHUB}/diaghub.etl", 62379, 19041, 103, kinds={"system": 1, "classic": 62378}),
    EtlFacts(f"{DIAGHUB}/diaghub.kernel.1.etl", 16335, 19041, 59, kinds={"perfinfo": 15299, "event": 1}),
    EtlFacts(f"{DIAGHUB}/diaghub.user_injected.1.etl", 4, 19041, 2, kinds={"event": 3}),
    EtlFacts("perfview/SelfDescribingSingleEvent.etl", 23, 22000, 3, kinds={"system": 4, "classic": 18, "event": 1}, compressed=True),
    EtlFacts("etl-parser/AMSITrace.etl", 21, 18362, 6, kinds={"event": 19}, events_lost=3),
    EtlFacts("etl-parser/ShutdownPerfDiagLogger.etl", 17078, 18362, 49, kinds={"perfinfo": 8645, "system": 8433}),
    EtlFacts("etl-parser/lxcore_kernel.etl", 4, 19041, 3, kinds={"event": 2}),
    EtlFacts("krabsetw/powershell.etl", 114, 22623, 26, kinds={"event": 112}),
    EtlFacts("tx/HTTP_Server.etl", 2042, 7601, 36, kinds={"event": 2041}),
    EtlFacts("tx/CrossMachineHTTP.etl", 3397, 7601, 68),
    EtlFacts("tx/Process.etl", 10344, 7600, 182),
    EtlFacts("tx/BondEtwSample.etl", 13, 10240, 3, kinds={"event": 12}),
]

# Small enough to run every heavy check on (relog, dissect, mutations) in a few seconds each.
SMALL = [f for f in CORPUS_ETL if f.records < 20000]
