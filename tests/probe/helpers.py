"""Running ``openetw probe`` in-process and reading corpus events plainly, for comparison."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from openetw.cli.main import main
from openetw.consumer import UserTrace


def run_probe(capsys: Any, *args: str) -> tuple[int, str, str]:
    capsys.readouterr()
    status = main(["probe", *args])
    out = capsys.readouterr()
    return status, out.out, out.err


def json_records(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def plain_events(path: Path) -> list[dict[str, Any]]:
    """Every record with a provider id, as a plain dict (what the probes must agree with)."""
    events: list[dict[str, Any]] = []

    def take(record: Any, context: Any) -> None:
        if record.provider_guid_bytes is None:
            return
        events.append({
            "guid": str(record.provider_id), "id": record.id if record.kind == "event" else record.opcode,
            "level": record.level, "keyword": record.keyword, "pid": record.pid, "tid": record.tid, "cpu": record.cpu,
            "size": record.user_data_length,
        })  # fmt: skip

    trace = UserTrace(files=[path], manifests=[])
    trace.set_default_event_callback(take)
    trace.start()
    return events
