"""A private real-time session, as krabsetw's user trace starts one, fed by a provider in this process.

The trace starts its own real-time session in the trace service with the enabled provider's level
and keywords, delivers events to the callback as their buffers are flushed (every second), and
stops the session when it stops. The trace service is started on first use (it keeps running:
``openetw service stop`` ends it); with ``OPENETW_NO_AUTOSTART=1`` and no service, the example
says what is missing.

    .venv/bin/python examples/consumer/live_session.py
"""

from __future__ import annotations

import threading
import time

from openetw.consumer import LiveSessionUnavailable, Provider, UserTrace
from openetw.provider import TraceLoggingProvider

NAME = "Contoso.LiveExample"


def main() -> None:
    trace = UserTrace("openetw-live-example", manifests=[])
    provider = Provider(NAME).level(4).any(0x1)
    provider.add_on_event_callback(
        lambda record, context: print(f"{record.time:%H:%M:%S.%f} {context.schema_for(record).event_name} {context.parser_for(record).as_dict()}")
    )
    trace.enable(provider)
    try:
        trace.open()  # starts the session (and the service, when allowed)
    except LiveSessionUnavailable as error:
        print(f"no live session: {error}")
        return
    runner = threading.Thread(target=trace.process)
    runner.start()

    writer = TraceLoggingProvider(NAME).register()
    deadline = time.monotonic() + 5
    while not writer.enabled and time.monotonic() < deadline:
        time.sleep(0.01)
    for index in range(5):
        writer.write("Tick", level=4, keyword=0x1, index=index)
    writer.write("TooVerbose", level=5, keyword=0x1)  # above the session's level: never written
    time.sleep(2.5)  # buffers reach the consumer when the session's flush timer fires

    trace.stop()
    runner.join()
    trace.close()
    writer.unregister()
    stats = trace.query_stats()
    print(f"handled {stats['events_handled']} events; the session wrote {stats['events_written']}, lost {stats['events_lost']}")


if __name__ == "__main__":
    main()
