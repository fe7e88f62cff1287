"""A producer process for the load tests: register, say ready, write flat out on ``go``, report.

Run as ``python tests/service/load_producer.py NAME SECONDS``; one JSON line when enabled, one
with ``attempted`` and ``written`` (writes that returned True) once ``SECONDS`` have passed.
"""

from __future__ import annotations

import json
import sys
import time

from openetw._native import module
from openetw.provider import TraceLoggingProvider


def main(name: str, seconds: float) -> None:
    provider = TraceLoggingProvider(name).register(wait=10.0)
    deadline = time.monotonic() + 15
    while not provider.enabled and time.monotonic() < deadline:
        time.sleep(0.005)
    print(json.dumps({"ready": provider.enabled}), flush=True)
    if sys.stdin.readline().strip() != "go":
        return
    write = provider.write
    attempted = written = 0
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        for index in range(attempted, attempted + 200):
            written += write("Counted", level=4, keyword=0x10, count=index, total=index, name="twenty characters..!")
        attempted += 200
    provider.unregister()
    print(json.dumps({"attempted": attempted, "written": written, "compiled": module("_write") is not None}), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]))
