"""Fully decoded events per second: openetw vs dissect.etl, same run, best of N.

Each reader goes through every record of a file and materializes every field of its event; a
record counts as decoded only when that fully succeeds.

* openetw: read, look the schema up in a registry given the corpus .NET manifests (dotnet/runtime's
  and PerfView's), decode every property through the registry (``SchemaRegistry.decode``);
  decoded means a schema was found and every property decoded.
* dissect.etl, as a black box: iterate ``ETL(f)``, take ``record.event`` and read every public
  field of it. ``Event.event_values()`` raises for kernel events, so the fields are the event's
  public attributes (its methods left out), listed once per (event name, header version). Decoded
  means dissect.etl knows the event (``symbol()`` is not ``None``: otherwise it only has the
  header's fields) and every field could be read.

Prints decoded events per second, records per second, the share of records each decodes and the
ratio to dissect.etl. Imports and building the registry are not timed.
Usage: python benchmarks/bench_decode.py [--repeat 3]
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CORPUS, best_of, machine_note, table  # noqa: E402

# Imports are excluded from the timings.
from dissect.etl import ETL  # noqa: E402

from openetw.etl import EtlReader  # noqa: E402
from openetw.events.registry import build_registry  # noqa: E402
from openetw.tdh.registry import SchemaRegistry  # noqa: E402

FILES = [
    "perfview/net.4.5.2.x64.etl",
    "perfview/diaghub-dotnetcore3.1-win-x64-diagsession/diaghub.kernel.1.etl",
]
MANIFESTS = [CORPUS / "manifests" / "dotnet-runtime", CORPUS / "manifests" / "perfview"]

# dissect.etl's Event methods; every other public attribute of an event is one of its fields.
_EVENT_METHODS = frozenset({"event_values", "provider_id", "provider_name", "symbol", "ts"})


def openetw_decode(path: str, registry: SchemaRegistry) -> tuple[int, int]:
    """(records, records fully decoded)."""
    records = decoded = 0
    with EtlReader(path) as reader:
        for record in reader:
            records += 1
            schema = registry.schema_for(record)
            if schema is not None and registry.decode(schema, record.user_data, record.pointer_size).ok:
                decoded += 1
    return records, decoded


def dissect_decode(path: str) -> tuple[int, int]:
    """(records, records fully decoded)."""
    records = decoded = 0
    fields: dict[tuple[Any, Any], list[str]] = {}
    with open(path, "rb") as f:
        for record in ETL(f):
            records += 1
            try:
                event = record.event
                name = event.symbol()
                if name is None:
                    continue
                key = (name, getattr(record.header, "version", None))
                names = fields.get(key)
                if names is None:
                    names = fields[key] = [a for a in dir(event) if not a.startswith("_") and a not in _EVENT_METHODS]
                values = {a: getattr(event, a) for a in names}
            except Exception:  # whatever dissect.etl cannot do counts as not decoded
                continue
            if len(values) == len(names):
                decoded += 1
    return records, decoded


def measure(decode: Callable[[], tuple[int, int]], repeat: int) -> tuple[float, int, int]:
    """(best seconds, records, records decoded)."""
    seconds, (records, decoded) = best_of(decode, repeat)  # type: ignore[arg-type, misc]
    return seconds, records, decoded


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args, _ = parser.parse_known_args()

    rows = []
    for rel in FILES:
        path = str(CORPUS / "etl" / rel)
        registry = build_registry(MANIFESTS, installed=False)  # a manifest is parsed when its provider first appears
        results = {
            "openetw": measure(lambda: openetw_decode(path, registry), args.repeat),
            "dissect.etl": measure(lambda: dissect_decode(path), args.repeat),
        }
        seconds, _, decoded = results["dissect.etl"]
        base = decoded / seconds
        for name, (seconds, records, decoded) in results.items():
            rate = decoded / seconds
            rows.append([
                Path(rel).name, name, f"{records:,}", f"{decoded:,}", f"{decoded / records:.1%}",
                f"{rate:,.0f}", f"{records / seconds:,.0f}", f"{rate / base:.1f}x" if base else "-",
            ])
    print(f"Fully decoded events per second (best of {args.repeat}; ratio of decoded events/s to dissect.etl's)")
    print(table(["file", "reader", "records", "decoded", "share", "decoded events/s", "records/s", "vs dissect"], rows))
    print()
    print(machine_note())


if __name__ == "__main__":
    main()
