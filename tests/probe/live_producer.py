"""A producer process for the live probe tests: the seed's Kernel-Memory GUID as a manifest
provider writing a fixed mix of events (id, level, keyword), each with a u32 ``Seq`` field.

``live_producer.py [--wait-enabled] [--touch FILE] [--await FILE] [--base N] [--repeat N] [--report FILE]``:
register; optionally wait until a session enables the provider, touch a file, or wait for one;
then write ``EVENTS`` ``repeat`` times with Seq = base, base + 1, ...; print one JSON line per
event written ({"seq", "id", "level", "keyword"}) and exit.
"""

from __future__ import annotations

import argparse
import json
import os
import time

from openetw.etl.intypes import InType
from openetw.provider import Provider
from openetw.provider.encode import EventDescriptor

GUID = "d1d93ef7-e1f2-4f45-9943-03d245fe6c00"
# (event id, level, keyword)
EVENTS = [(12, 4, 0x1), (13, 4, 0x1), (12, 5, 0x2), (12, 2, 0x4), (14, 1, 0x1), (12, 0, 0), (12, 3, 0x8000000000000000), (12, 2, 0x5)]


def _wait(check: object, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not check() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.01)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--wait-enabled", action="store_true")
    parser.add_argument("--touch")
    parser.add_argument("--await", dest="wait_for")
    parser.add_argument("--base", type=int, default=0)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--report", help="write the JSON lines here rather than on stdout")
    options = parser.parse_args()
    provider = Provider(GUID, name="Probe-Test-Memory").register()
    encoders = {e: provider.event(EventDescriptor(e[0], 0, 0, e[1], 0, 0, e[2]), [("Seq", InType.UINT32)]) for e in EVENTS}
    if options.wait_enabled:
        _wait(lambda: provider.enabled)
    if options.touch:
        open(options.touch, "w").close()
    if options.wait_for:
        _wait(lambda: os.path.exists(options.wait_for))
    report = open(options.report, "w") if options.report else None  # noqa: SIM115
    seq = options.base
    for _ in range(options.repeat):
        for event in EVENTS:
            written = provider.write(encoders[event], seq)
            print(json.dumps({"seq": seq, "id": event[0], "level": event[1], "keyword": event[2], "written": written}), file=report, flush=True)
            seq += 1
    provider.unregister()


if __name__ == "__main__":
    main()
