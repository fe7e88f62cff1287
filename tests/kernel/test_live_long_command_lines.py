"""A process whose command line is over ETW's 64 KB record neither stops a kernel session from
starting nor ends its reader: the field is cut as ETW cuts it, and counted."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

from openetw.etl import EtlReader
from openetw.kernel import KernelSession
from openetw.tdh.decode import decode_properties
from openetw.tdh.registry import SchemaRegistry

LONG_ARGUMENT = "y" * 100_000


def _long_sleeper(tag: str, seconds: float) -> subprocess.Popen[bytes]:
    return subprocess.Popen(["/bin/sh", "-c", f"sleep {seconds}; true", tag, LONG_ARGUMENT])


def _process_command_lines(path: Path) -> dict[int, list[str]]:
    registry = SchemaRegistry()
    found: dict[int, list[str]] = {}
    with EtlReader(str(path)) as reader:
        for record in reader:
            schema = registry.schema_for(record)
            if schema is None or not (schema.event_name or "").startswith("Process/"):
                continue
            values = decode_properties(schema, record.user_data, record.pointer_size)
            found.setdefault(values["ProcessID"], []).append(values["CommandLine"])
    return found


def test_a_kernel_session_records_around_100_kb_command_lines(tracefs_root, tmp_path: Path) -> None:
    output = tmp_path / "long.etl"
    before = _long_sleeper("openetw-long-before", 60)
    try:
        time.sleep(0.2)
        session = KernelSession(flags={"process", "thread"}, output=output, name=f"t_long_{os.getpid()}", flush_interval=0.05)
        session.start()  # the rundown meets the long command line
        try:
            during = _long_sleeper("openetw-long-during", 0.3)
            time.sleep(0.5)
            short = subprocess.run(["/bin/sh", "-c", "exit 0", "openetw-short-after"], check=True)
            assert short.returncode == 0
            during.wait()
            time.sleep(0.3)
            assert session.stats["state"] == "running"  # the reader goes on
        finally:
            stats = session.stop()  # raises if the reader failed
    finally:
        before.kill()
        before.wait()
    assert stats["events_truncated"] >= 1
    lines = _process_command_lines(output)
    assert before.pid in lines
    cut = [text for text in lines[before.pid] if text]
    assert cut and all(len(text) < 40_000 and text.startswith("/bin/sh -c sleep 60; true openetw-long-before yyy") for text in cut)
    assert during.pid in lines
