"""A producer writing numbered events at a steady pace, then printing how many it wrote.

    paced_producer.py PROVIDER COUNT RATE [PAD]

It registers ``PROVIDER`` (TraceLogging), waits until a session enables it, writes ``COUNT``
events ``Tick`` (fields ``index`` and ``pid``) at ``RATE`` events a second, and prints
``{"written": n, "pid": pid}``. The service is ``$OPENETW_SOCKET``'s.
"""

from __future__ import annotations

import json
import os
import sys
import time

from openetw.provider import TraceLoggingProvider


def main() -> None:
    name, count, rate = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
    pad = "x" * (int(sys.argv[4]) if len(sys.argv) > 4 else 0)
    provider = TraceLoggingProvider(name).register(wait=5.0)
    deadline = time.monotonic() + 10
    while not provider.enabled and time.monotonic() < deadline:
        time.sleep(0.01)
    pid = os.getpid()
    written = 0
    started = time.monotonic()
    step = max(1, int(rate // 50))  # 50 bursts a second
    for index in range(count):
        written += provider.write("Tick", level=4, keyword=1, index=index, pid=pid, pad=pad)
        if (index + 1) % step == 0:
            ahead = started + (index + 1) / rate - time.monotonic()
            if ahead > 0:
                time.sleep(ahead)
    provider.unregister()
    print(json.dumps({"written": written, "pid": pid}), flush=True)


if __name__ == "__main__":
    main()
