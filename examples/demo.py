"""The main job end to end, as a person would run it: read real Windows traces, write our own.

Run with ``make demo``. Every step is a real ``openetw`` command, printed before it runs.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
CORPUS = REPO.parent / "shared" / "corpus" / "etl"
OPENETW = [sys.executable, "-m", "openetw"]


def run(*args: str) -> None:
    shown = " ".join(shlex.quote(a) for a in args)
    print(f"\n$ openetw {shown}", flush=True)
    result = subprocess.run([*OPENETW, *args])
    if result.returncode != 0:
        sys.exit(f"demo step failed with exit code {result.returncode}")


def write_own_trace(path: str) -> None:
    """A small trace written through the library: TraceLogging-style provider id, a few events."""
    from openetw.etl.build import build_event_record
    from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
    from openetw.guids import provider_guid_from_name

    provider = provider_guid_from_name("OpenEtw.Demo")
    clock = linux_trace_clock()
    header = new_logfile_header(clock=clock, logger_name="openetw-demo", logfile_name=path, buffer_size=8192)
    with EtlWriter(path, header=header) as writer:
        for i in range(5):
            writer.write(
                build_event_record(
                    provider_id=provider, id=i + 1, level=4, keyword=0x1, pid=os.getpid(), tid=os.getpid(),
                    timestamp=clock.reference_timestamp + i * 1_000_000, cpu=i % 2, activity_id=uuid.uuid4(),
                    user_data=f"request {i}".encode("utf-16-le") + b"\0\0",
                )
            )
    print(f"wrote {path}: 5 events of provider OpenEtw.Demo ({provider})")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="openetw-demo-") as tmp:
        sample = CORPUS / "perfview" / "net.4.5.2.x64.etl"
        if sample.exists():
            print("== A real Windows trace: a compressed, relogged PerfView file (kernel + CLR events)")
            run("info", str(sample))
            print("\n== Its first records, merged into time order across per-CPU buffers")
            run("dump", "--time-order", "--limit", "8", str(sample))
            second = CORPUS / "tx" / "HTTP_Server.etl"
            merged = os.path.join(tmp, "merged.etl")
            print("\n== Two traces from different machines and clocks, merged into one uncompressed file")
            run("relog", str(sample), str(second), "-o", merged)
            run("info", merged)
        else:
            print(f"(the Windows sample traces are not beside this checkout: {CORPUS}; showing our own trace only)")

        own = os.path.join(tmp, "own.etl")
        print("\n== A trace written on Linux in the real ETL format")
        write_own_trace(own)
        run("dump", own)
        run("dump", "--json", "--limit", "1", own)
    print("\ndemo finished; nothing left running")


if __name__ == "__main__":
    main()
