"""``openetw fleet status``: the fleet as the stream or the collector's directory sees it.

From a directory: the collector's books (hosts, sessions, buffers, events, rates over the time
they were received, gaps, losses the hosts counted, messages refused by the collector's check). From ``nats://``: the stream's subjects
(one per host and session, with its message count), and each durable consumer's lag (messages
not delivered yet, and delivered but not acknowledged).
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from openetw.errors import InvalidArgument
from openetw.fleet.connect import StreamOptions, connect, require_nats
from openetw.fleet.store import STATE_FILE

__all__ = ["status_of_directory", "status_of_stream"]


def status_of_directory(directory: str | Path) -> dict[str, Any]:
    path = Path(directory) / STATE_FILE
    try:
        state = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InvalidArgument(f"{directory} holds no collector's books ({STATE_FILE})") from None
    except (OSError, ValueError) as exc:
        raise InvalidArgument(f"{path}: {exc}") from None
    now = time.time()
    hosts: dict[str, dict[str, Any]] = {}
    sessions = []
    for item in state.get("sessions", []):
        seen = item["seen"]
        top = item["end_sequence"] if item["end_sequence"] is not None else (seen[-1][1] if seen else -1)
        held = sum(last - first + 1 for first, last in seen)
        gaps = max(0, top + 1 - held)
        span = max(item["last_received"] - item["first_received"], 1e-9)
        session = {
            "host": item["host"], "session": item["session"], "start": item["start"], "buffers": item["buffers"],
            "events": item["events"], "events_per_second": round(item["events"] / span, 1) if item["buffers"] > 1 else 0.0,
            "gaps": gaps, "events_lost": item["events_lost"], "buffers_lost": item["buffers_lost"],
            "duplicates": item["duplicates"], "ended": item["end_sequence"] is not None, "damaged_buffers": item.get("damaged_buffers", 0),
            "seconds_since_last": round(now - item["last_received"], 1), "files": [f["path"] for f in item["files"]],
        }  # fmt: skip
        sessions.append(session)
        host = hosts.setdefault(item["host"], _new_host())
        host["sessions"] += 1
        host["running"] += 0 if session["ended"] else 1
        for name in ("buffers", "events", "gaps", "events_lost", "buffers_lost"):
            host[name] += session[name]
        since = session["seconds_since_last"]
        host["seconds_since_last"] = since if host["seconds_since_last"] is None else min(host["seconds_since_last"], since)
    rejected = state.get("rejected") or {}
    for name, entry in rejected.items():
        host = hosts.setdefault(name, _new_host())
        host["rejected"] = entry["messages"]
        host["rejected_reasons"] = entry["reasons"]
    return {"source": str(directory), "hosts": hosts, "sessions": sessions, "rejected": rejected}


def _new_host() -> dict[str, Any]:
    return {"sessions": 0, "running": 0, "buffers": 0, "events": 0, "gaps": 0, "events_lost": 0, "buffers_lost": 0,
            "seconds_since_last": None, "rejected": 0, "rejected_reasons": {}}  # fmt: skip


async def status_of_stream(options: StreamOptions) -> dict[str, Any]:
    require_nats()
    from nats.js.errors import NotFoundError

    client = await connect(options, name="openetw fleet status", reconnect=False)
    try:
        jsm = client.jsm(timeout=5.0)
        try:
            info = await jsm.stream_info(options.stream, subjects_filter=">")
        except NotFoundError:
            raise InvalidArgument(f"no stream {options.stream} on {','.join(options.servers)}") from None
        subjects: dict[str, int] = dict(info.state.subjects or {})
        hosts: dict[str, dict[str, Any]] = {}
        for subject, count in sorted(subjects.items()):
            parts = subject.split(".")
            host = parts[1] if len(parts) > 1 else subject
            entry = hosts.setdefault(host, {"subjects": 0, "messages": 0})
            entry["subjects"] += 1
            entry["messages"] += count
        consumers = []
        for consumer in await jsm.consumers_info(options.stream):
            consumers.append({
                "name": consumer.name, "pending": consumer.num_pending, "unacknowledged": consumer.num_ack_pending,
                "redelivered": consumer.num_redelivered,
                "delivered": consumer.delivered.stream_seq if consumer.delivered else 0,
            })  # fmt: skip
        cluster = info.cluster
        return {
            "source": ",".join(options.servers),
            "stream": options.stream,
            "messages": info.state.messages,
            "bytes": info.state.bytes,
            "replicas": info.config.num_replicas,
            "leader": cluster.leader if cluster is not None else None,
            "hosts": hosts,
            "subjects": subjects,
            "consumers": consumers,
        }
    finally:
        await client.close()
