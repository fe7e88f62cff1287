"""The collector's files (its .etl files, its books, its Event Log) are private from the moment
they exist, whatever the umask: they hold every host's events."""

from __future__ import annotations

import os
from pathlib import Path

from openetw.fleet.check import Checked, check_message
from openetw.fleet.store import FleetStore
from openetw.fleet.wire import KIND_BUFFER, KIND_HEADER, message_headers
from tests.conftest import corpus_path


def test_the_collectors_files_are_private(tmp_path: Path) -> None:
    data = corpus_path("etl", "perfview", "primitive-types.etl").read_bytes()
    directory = tmp_path / "collected"

    def message(kind: str, sequence: int, payload: bytes) -> Checked:
        headers = message_headers(host="h", session="S", start=1, sequence=sequence, kind=kind, events=6, events_lost=0, buffers_lost=0)
        return check_message("etw.h.S", headers, payload)

    old = os.umask(0o022)
    try:
        store = FleetStore(directory, outputs=frozenset({"etl", "log"}))
        store.add(message(KIND_HEADER, 0, data[:8192]))
        store.add(message(KIND_BUFFER, 1, data[8192:16384]))
        store.commit()
        assert store.log.written() == 6
        store.close()
    finally:
        os.umask(old)
    assert directory.stat().st_mode & 0o777 == 0o700
    files = [path for path in directory.rglob("*") if path.is_file()]
    assert any(path.suffix == ".etl" for path in files) and any(path.suffix == ".db" for path in files) and len(files) >= 3
    assert [(str(path.relative_to(directory)), oct(path.stat().st_mode & 0o777)) for path in files if path.stat().st_mode & 0o077] == []
