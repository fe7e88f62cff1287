"""The per-file counts of ../shared/corpus/evtx/SOURCES.md, read from its table."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class EvtxFacts:
    name: str
    header_chunks: int
    flags: int
    chunks_found: int
    crate_ok: int
    crate_errors: int
    python_evtx: int
    record_walk: int

    @property
    def best_reader(self) -> int:
        """The larger of the two independent readers' counts."""
        return max(self.crate_ok, self.python_evtx)


def read_facts(sources_md: Path) -> list[EvtxFacts]:
    facts = []
    for line in sources_md.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 9 or not cells[0].endswith(".evtx"):
            continue
        ok, errors = (int(x.strip().replace(",", "")) for x in cells[6].split("/"))
        facts.append(
            EvtxFacts(
                name=cells[0],
                header_chunks=int(cells[2]),
                flags=int(cells[3], 16),
                chunks_found=int(cells[4]),
                crate_ok=ok,
                crate_errors=errors,
                python_evtx=int(cells[7].replace(",", "")),
                record_walk=int(cells[8].replace(",", "")),
            )
        )
    return facts
