"""Header-level iteration over real .etl files: openetw vs dissect.etl vs etl-parser, same run.

Equal work on both sides: every record yielded and its time read, once as the integer FILETIME
(openetw ``record.filetime``; dissect.etl ``header._etl.get_filetime_for_event(header.time_delta)``,
the integer its own ``header.timestamp`` is built from) and once as an aware ``datetime`` (openetw
``record.time``; dissect.etl ``header.timestamp``). etl-parser builds its own parsed objects per
record and is timed as it comes (counting only). Times are CPU time of this process
(``time.process_time``), best of ``--repeat``.

Prints records per second and the ratio to dissect.etl, then the peak RSS of reading a large
(default 1 GB) relogged file, in file order and in time order, in a fresh process each.
Usage: python benchmarks/bench_etl_read.py [--big-mb 1024] [--repeat 3]
"""

from __future__ import annotations

import argparse
import io
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CORPUS, best_of, machine_note, table  # noqa: E402

# Imports are excluded from the timings.
from dissect.etl import ETL  # noqa: E402
from etl.etl import IEtlFileObserver, build_from_stream  # noqa: E402

from openetw.etl import EtlReader  # noqa: E402

FILES = [
    "perfview/diaghub-dotnetcore3.1-win-x64-diagsession/diaghub.etl",
    "perfview/net.4.5.2.x64.etl",
    "etl-parser/ShutdownPerfDiagLogger.etl",
    "tx/Process.etl",
]


def openetw_filetime(path: str) -> int:
    n = 0
    with EtlReader(path) as reader:
        for record in reader:
            record.filetime  # noqa: B018 - the record's time as an integer FILETIME
            n += 1
    return n


def openetw_datetime(path: str) -> int:
    n = 0
    with EtlReader(path) as reader:
        for record in reader:
            record.time  # noqa: B018 - the record's time as a datetime
            n += 1
    return n


def dissect_filetime(path: str) -> int:
    n = 0
    with open(path, "rb") as f:
        for event in ETL(f):
            header = event.header
            header._etl.get_filetime_for_event(header.time_delta)
            n += 1
    return n


def dissect_datetime(path: str) -> int:
    n = 0
    with open(path, "rb") as f:
        for event in ETL(f):
            event.header.timestamp  # noqa: B018 - dissect.etl's datetime
            n += 1
    return n


def etl_parser_count(path: str) -> int:
    class Counter(IEtlFileObserver):
        n = 0

        def on_event_record(self, event):  # type: ignore[no-untyped-def]
            self.n += 1

        on_trace_record = on_perfinfo_trace = on_system_trace = on_win_trace = on_event_record

    with open(path, "rb") as f:
        data = f.read()
    counter = Counter()
    build_from_stream(data).parse(counter)
    return counter.n + 1  # + the logfile header record it consumes itself


def measure(fn, path: str, repeat: int) -> tuple[str, float | None, str]:  # type: ignore[no-untyped-def]
    try:
        seconds, count = best_of(lambda: fn(path), repeat, clock=time.process_time)
    except Exception as exc:  # the alternatives fail on parts of the corpus: report it
        return "failed", None, f"{type(exc).__name__}: {str(exc)[:60]}"
    return str(count), count / seconds, ""


def make_big_file(target: str, megabytes: int) -> int:
    """A large relogged file: diaghub.etl relogged, its data buffers repeated to the size.

    Each copy's timestamps are shifted past the previous copy's, so the file reads like one long
    trace (buffers overlap in time only as much as in the original).
    """
    from openetw.etl.relog import relog

    src = str(CORPUS / "etl" / FILES[0])
    out = io.BytesIO()
    with EtlReader(src) as reader:
        relog([reader], out)
    data = out.getvalue()
    buffer_size = int.from_bytes(data[0:4], "little")
    header, body = data[:buffer_size], bytearray(data[buffer_size:])
    # Where each record's timestamp sits in the body (all records here have it at +0x10 or +0x08).
    stamps = []
    with EtlReader(bytes(data)) as reader:
        for record in reader:
            if record.buffer_index == 0:
                continue
            at = (record.buffer_index - 1) * buffer_size + record._pos + (8 if record.kind == "perfinfo" else 0x10)
            stamps.append((at, record.timestamp))
    span = max(ts for _, ts in stamps) - min(ts for _, ts in stamps) + 1
    copies = max(1, (megabytes << 20) // len(body))
    pack_into = struct.Struct("<q").pack_into
    with open(target, "wb") as f:
        f.write(header)
        for copy in range(copies):
            shift = copy * span
            for at, ts in stamps:
                pack_into(body, at, ts + shift)
            f.write(body)
    return os.path.getsize(target)


# VmHWM, not ru_maxrss: Linux carries ru_maxrss across fork+exec, so a child would report its parent's peak.
_RSS_PROBE = """
import sys
from openetw.etl import EtlReader
n = 0
with EtlReader(sys.argv[1]) as r:
    for rec in r.records(time_order=sys.argv[2] == 'time'):
        n += 1
hwm = next(line for line in open('/proc/self/status') if line.startswith('VmHWM'))
print(n, hwm.split()[1])
"""


def peak_rss(path: str, order: str) -> tuple[int, int]:
    out = subprocess.run([sys.executable, "-c", _RSS_PROBE, path, order], check=True, capture_output=True, text=True).stdout.split()
    return int(out[0]), int(out[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--big-mb", type=int, default=1024, help="size of the large file for the memory check (0: skip)")
    args = parser.parse_args()

    rows = []
    for rel in FILES:
        path = str(CORPUS / "etl" / rel)
        for time_as, mine, theirs in (("FILETIME", openetw_filetime, dissect_filetime), ("datetime", openetw_datetime, dissect_datetime)):
            results = {name: measure(fn, path, args.repeat) for name, fn in (("openetw", mine), ("dissect.etl", theirs))}
            if time_as == "FILETIME":
                results["etl-parser"] = measure(etl_parser_count, path, args.repeat)
            base = results["dissect.etl"][1]
            for name, (count, rate, note) in results.items():
                ratio = f"{rate / base:.2f}x" if rate and base else "-"
                shown = "- (count only)" if name == "etl-parser" else time_as
                rows.append([Path(rel).name, name, shown, count, f"{rate:,.0f}" if rate else "-", ratio, note])
    print(f"Header-level iteration (records/s of CPU time, best of {args.repeat}; ratio vs dissect.etl doing the same work)")
    print(table(["file", "reader", "time read as", "records", "records/s", "vs dissect", "note"], rows))

    if args.big_mb:
        with tempfile.TemporaryDirectory() as tmp:
            big = os.path.join(tmp, "big.etl")
            size = make_big_file(big, args.big_mb)
            mem_rows = []
            for order in ("file", "time"):
                count, rss_kb = peak_rss(big, order)
                mem_rows.append([f"{size / 2**20:,.0f} MB", order, f"{count:,}", f"{rss_kb / 1024:,.1f} MB"])
            print()
            print("Peak RSS reading a large relogged file (fresh process)")
            print(table(["file size", "order", "records", "peak RSS"], mem_rows))
    print()
    print(machine_note())


if __name__ == "__main__":
    main()
