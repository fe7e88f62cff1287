"""A producer process the service tests drive: one JSON command per stdin line, one JSON answer per line.

Commands::

    {"cmd": "register", "name": "Test.A"}                      -> {"enabled": bool}
    {"cmd": "register_manifest", "guid": "..."}                  -> {"enabled": bool}
    {"cmd": "wait_enabled", "name": "Test.A", "value": true}     -> {"enabled": bool}
    {"cmd": "wait_sessions", "name": "Test.A", "count": 2}        -> {"sessions": n}
    {"cmd": "write", "name": "Test.A", "count": 10, "start": 0,
     "level": 4, "keyword": 1, "event": "Tick", "pad": 0}        -> {"written": n}
    {"cmd": "write_raw", "guid": "...", "count": 3, "size": 70000} -> {"written": n, "refused": n}
    {"cmd": "callbacks", "name": "Test.A"}                        -> {"calls": [...]}
    {"cmd": "fork_write", "name": "Test.A", "count": 5}          -> {"child_pid": pid, "child_written": n}
    {"cmd": "unregister", "name": "Test.A"}                       -> {}
    {"cmd": "state", "name": "Test.A"}                            -> {"enabled": bool, "registered": bool}

Each written event carries ``index`` (its number) and ``pid``, so a test finds exactly which
events reached a file.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from openetw.provider import Provider, TraceLoggingProvider

providers: dict[str, Any] = {}
calls: dict[str, list[list[Any]]] = {}


def _callback(name: str):  # type: ignore[no-untyped-def]
    def record(enabled: bool, level: int, match_any: int, match_all: int, filter_data: Any, capture_state: bool) -> None:
        calls.setdefault(name, []).append([enabled, level, match_any, match_all, capture_state])
        if capture_state:
            providers[name].write("State", level=1, keyword=0, index=-1, pid=os.getpid())

    return record


def wait_enabled(provider: Any, value: bool, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    while provider.enabled != value and time.monotonic() < deadline:
        time.sleep(0.005)
    return bool(provider.enabled)


def handle(command: dict[str, Any]) -> dict[str, Any]:
    cmd = command["cmd"]
    if cmd == "register":
        name = command["name"]
        provider = TraceLoggingProvider(name, callback=_callback(name))
        providers[name] = provider.register(wait=command.get("wait", 2.0))
        return {"enabled": provider.enabled}
    if cmd == "register_manifest":
        provider = Provider(command["guid"], name="manifest")
        providers[command["guid"]] = provider.register()
        return {"enabled": provider.enabled}
    provider = providers.get(command.get("name") or command.get("guid", ""))
    if cmd == "wait_enabled":
        return {"enabled": wait_enabled(provider, command.get("value", True), command.get("timeout", 10.0))}
    if cmd == "wait_sessions":
        deadline = time.monotonic() + command.get("timeout", 10.0)
        while len(provider.enable_state.sessions) != command["count"] and time.monotonic() < deadline:
            time.sleep(0.005)
        return {"sessions": len(provider.enable_state.sessions)}
    if cmd == "write":
        start, count = command.get("start", 0), command["count"]
        pad = "x" * command.get("pad", 0)
        event, level, keyword = command.get("event", "Tick"), command.get("level", 4), command.get("keyword", 1)
        pid = os.getpid()
        written = 0
        for index in range(start, start + count):
            written += provider.write(event, level=level, keyword=keyword, index=index, pid=pid, pad=pad)
        return {"written": written}
    if cmd == "write_raw":
        written = 0
        before = provider.events_refused
        for _ in range(command["count"]):
            written += provider.write((7, 0, 0, 4, 0, 0, 1), bytes(command["size"]))
        return {"written": written, "refused": provider.events_refused - before}
    if cmd == "callbacks":
        return {"calls": calls.get(command["name"], [])}
    if cmd == "state":
        return {"enabled": provider.enabled, "registered": provider.registration_id is not None}
    if cmd == "unregister":
        provider.unregister()
        return {}
    if cmd == "fork_write":
        return fork_write(provider, command["count"])
    raise ValueError(f"unknown command {cmd!r}")


def fork_write(provider: Any, count: int) -> dict[str, Any]:
    """The child re-registers on its own and writes ``count`` events; reports through a pipe."""
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read_end)
        status = 1
        try:
            enabled = wait_enabled(provider, True, 10.0)
            written = sum(provider.write("Child", level=4, keyword=1, index=i, pid=os.getpid()) for i in range(count))
            os.write(write_end, json.dumps({"written": written, "enabled": enabled}).encode())
            status = 0
        finally:
            os._exit(status)
    os.close(write_end)
    with os.fdopen(read_end, "rb") as pipe:
        report = json.loads(pipe.read() or b"{}")
    os.waitpid(pid, 0)
    return {"child_pid": pid, "child_written": report.get("written", 0), "child_enabled": report.get("enabled")}


def main() -> None:
    print(json.dumps({"ready": os.getpid()}), flush=True)
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            answer = handle(json.loads(line))
        except Exception as exc:  # noqa: BLE001 - the test reads the error
            answer = {"error": f"{type(exc).__name__}: {exc}"}
        print(json.dumps(answer), flush=True)


if __name__ == "__main__":
    main()
