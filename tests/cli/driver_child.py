"""A Sample Driver process for the CLI tests, driven over stdin (one JSON command a line).

Imported by the tests for ``PROGRAM`` (its text, run with ``python -c``), so that no file of the
checkout is executed by the child.
"""

from __future__ import annotations

PROGRAM = r'''
import json, os, sys, time
from openetw.mc import load_module

events = load_module(open(sys.argv[1], encoding="utf-8").read(), "sample_driver")
provider = events.provider
provider.register()
print(json.dumps({"ready": os.getpid()}), flush=True)
for line in sys.stdin:
    command = json.loads(line)
    if command["cmd"] == "wait":
        deadline = time.monotonic() + 15
        while len(provider.enable_state.sessions) != command["sessions"] and time.monotonic() < deadline:
            time.sleep(0.01)
        print(json.dumps({"sessions": len(provider.enable_state.sessions)}), flush=True)
    elif command["cmd"] == "write":
        written = [
            provider.write_start_event(32, "\\Device\\EventDrv", 0),
            provider.write_sample_event_a(),
            provider.write_unload_event(0x1234),
        ]
        print(json.dumps({"written": written}), flush=True)
    else:
        break
provider.unregister()
'''
