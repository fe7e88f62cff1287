"""A kernel trace, as krabsetw's kernel_trace: process starts and stops with their exit codes.

The trace starts a private real-time kernel session in the trace service (root only: others are
told what they may record instead), runs three short commands, prints their Process/Start and
Process/Stop events, and stops the session when it stops.

    sudo .venv/bin/python examples/consumer/kernel_trace.py
"""

from __future__ import annotations

import subprocess
import threading
import time

from openetw.consumer import KernelTrace, LiveSessionUnavailable
from openetw.consumer.kernel_trace import process_provider
from openetw.errors import AccessDenied


def main() -> None:
    children: set[int] = set()
    trace = KernelTrace("openetw-kernel-example")
    processes = process_provider()

    def on_process(record, context) -> None:
        if record.pid not in children:
            return
        parser = context.parser_for(record)
        event = context.schema_for(record).event_name
        print(f"{record.time:%H:%M:%S.%f} {event:<24} pid {parser.parse('ProcessID')} parent {parser.parse('ParentID')} "
              f"exit {parser.parse('ExitStatus')} {parser.parse('CommandLine')!r}")

    processes.add_on_event_callback(on_process)
    trace.enable(processes)
    try:
        trace.open()
    except (AccessDenied, LiveSessionUnavailable) as error:
        print(f"no kernel trace: {error}")
        return
    runner = threading.Thread(target=trace.process)
    runner.start()
    for command in (["sh", "-c", "exit 3"], ["true"], ["sh", "-c", "sleep 0.2; exit 7"]):
        children.add(subprocess.Popen(command).pid)
    time.sleep(3)  # buffers reach the consumer when the session's flush timer fires
    trace.stop()
    runner.join()
    trace.close()


if __name__ == "__main__":
    main()
