"""Stacks resolved and named per second, next to ``perf report --stdio`` on the same workload.

In one run: a ``gcc -g`` program burns CPU in known functions (``--seconds`` of CPU time) twice,
once under an openetw kernel trace (``image`` + ``profile``, one process tree, 1000 Hz, user
stacks) and once under ``perf record -g -F 1000``. Then, for the openetw trace and for PerfView's
``net.4.5.2.x64.etl`` (compressed stacks, .NET methods):

* **cold**: a fresh ``python`` process that reads the trace, joins and names every stack and
  computes By Name (what ``openetw stacks FILE`` does: ``events.profile_columns`` over the
  file's index, which this run builds: no index exists before), its CPU time (user + system,
  from the kernel's accounting of the child); for the small inputs also the per-record path
  (``events.profile.load_profile`` over every record), cold;
* **warm**: the same work again in this process (modules imported, the index kept, the file in
  the page cache), best of ``--repeat``; CPU time of this process.

The burn trace holds a few thousand samples; to measure at scale, ``repeated_trace`` relogs it
with its ``SampledProfile`` and ``StackWalk`` records repeated after it (``--copies`` copies in
all, each shifted in time by the span of the samples: a sample's timestamp and its stack
record's ``EventTimeStamp`` move together): a >= 1 M-sample trace of the
same workload. ``perf report`` is measured on the perf.data of the recorded workload (its rate
per stack is what compares).

``perf report --stdio`` runs on the perf.data (a fresh process; its CPU time likewise). Rates
count stacks (samples with a stack) and frames (return addresses named, with repeats); the last
column is CPU per stack against perf report's on the same workload. The load average is printed:
the machine is shared.

Usage: python benchmarks/bench_stacks.py [--seconds 2] [--repeat 3] [--copies N]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CORPUS, machine_note, table

BURN_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
volatile unsigned long sink;
__attribute__((noinline)) unsigned long spin_inner(unsigned long n) {
    unsigned long s = 0; for (unsigned long i = 0; i < n; i++) s += i * i ^ (s >> 3); return s; }
__attribute__((noinline)) unsigned long burn_alpha(unsigned long n) { return spin_inner(n) + 1; }
__attribute__((noinline)) unsigned long burn_beta(unsigned long n) {
    unsigned long s = 0; for (unsigned long i = 0; i < n; i++) s += (i % 7) * (s | 1); return s; }
int main(int argc, char **argv) {
    double seconds = argc > 1 ? atof(argv[1]) : 0.5;
    struct timespec now;
    do { sink += burn_alpha(3000000); sink += burn_beta(1000000); clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now); }
    while (now.tv_sec + now.tv_nsec / 1e9 < seconds);
    printf("%lu\n", sink);
    return 0;
}
"""

COLD = """
import sys, time
from openetw.events.profile_columns import load_file_profile
from openetw.report.stacks import by_name
profile = load_file_profile(sys.argv[1])
rows = by_name(profile.samples)
print(len(profile.samples), profile.samples.frame_count, rows[0].name)
"""
# the per-record path (events.profile.load_profile over every record), for the small inputs
COLD_PER_RECORD = """
import sys
from openetw.etl.reader import EtlReader
from openetw.events.profile import load_profile
from openetw.report.stacks import by_name
with EtlReader(sys.argv[1]) as reader:
    profile = load_profile(reader.records(time_order=True))
rows = by_name(profile.samples)
print(len(profile.samples), sum(len(s.frames) for s in profile.samples), rows[0].name)
"""
_SAMPLE_HOOK, _STACKWALK_GROUP = 0x0F2E, 0x18


def repeated_trace(source: Path, target: Path, copies: int) -> int:
    """``source`` relogged to ``target`` with its samples and stack records repeated ``copies``
    times (module doc); the samples written."""
    import struct

    from openetw.etl.reader import EtlReader
    from openetw.etl.relog import is_logfile_header_record
    from openetw.etl.writer import EtlWriter, relog_header

    with EtlReader(str(source)) as reader:
        header = reader.header
        records = [record for record in reader.records(time_order=True) if not is_logfile_header_record(record)]
    kernel = ("system", "compact", "perfinfo")
    repeated = [r for r in records if r.kind in kernel and (r.hook_id == _SAMPLE_HOOK or (r.hook_id or 0) >> 8 == _STACKWALK_GROUP)]
    first, last = repeated[0].timestamp, repeated[-1].timestamp
    span = last - first + 1
    size = max(header.buffer_size, 1 << 20)
    out = relog_header(header, buffer_size=size, events_lost=0, buffers_lost=0, clock=header.clock, logfile_name=str(target))
    samples = 0
    with EtlWriter(str(target), header=out) as writer:
        for record in records:  # the first copy: the trace as it is
            writer.write(record)
            samples += record.kind in kernel and record.hook_id == _SAMPLE_HOOK
        for copy in range(1, copies):
            shift = copy * span
            for record in repeated:
                moved = record.with_timestamp(record.timestamp + shift)
                raw = moved.raw
                if record.hook_id != _SAMPLE_HOOK and (record.hook_id & 0xFF) in (32, 37, 38):  # Stack, StackKey*: EventTimeStamp
                    at = record.user_data_offset
                    raw = bytearray(raw)
                    struct.pack_into("<q", raw, at, struct.unpack_from("<q", raw, at)[0] + shift)
                    raw = bytes(raw)
                else:
                    samples += record.hook_id == _SAMPLE_HOOK
                writer.write_raw(raw, record.cpu, moved.timestamp)
    return samples


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def run_child(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, str]:
    before = children_cpu()
    out = subprocess.run(argv, capture_output=True, text=True, check=True, env=env).stdout
    return children_cpu() - before, out


def record_openetw(binary: Path, seconds: float, output: Path) -> float:
    from openetw.kernel import KernelSession
    from openetw.kernel.perf import HeldCommand

    before = self_cpu() + children_cpu()
    held = HeldCommand([str(binary), str(seconds)])
    with KernelSession(flags={"image", "profile"}, output=str(output), source="perf_children", target_pid=held.pid, profile_rate_hz=1000):
        held.release()
        held.wait(timeout=600)
    return self_cpu() + children_cpu() - before


def warm(path: Path, repeat: int) -> tuple[float, int, int]:
    """Best CPU of ``repeat`` runs in this process (the index built by the cold run reused)."""
    from openetw.events.profile_columns import load_file_profile
    from openetw.report.stacks import by_name

    best = float("inf")
    stacks = frames = 0
    for _ in range(repeat):
        started = self_cpu()
        profile = load_file_profile(path)
        by_name(profile.samples)
        best = min(best, self_cpu() - started)
        stacks, frames = len(profile.samples), profile.samples.frame_count  # type: ignore[attr-defined]
    return best, stacks, frames


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=2.0)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--copies", type=int, default=0, help="copies of the burn trace's samples in the large input (default: enough for 1 M samples)")
    args = parser.parse_args()
    gcc, perf = shutil.which("gcc"), shutil.which("perf")
    if gcc is None:
        sys.exit("needs gcc")
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1] / "src"))
    os.environ.pop("OPENETW_INDEX_BESIDE", None)
    rows: list[list[object]] = []
    with tempfile.TemporaryDirectory(prefix="openetw-bench-stacks-") as scratch:
        directory = Path(scratch)
        (directory / "burn.c").write_text(BURN_C)
        binary = directory / "burn"
        subprocess.run([gcc, "-g", "-O0", "-fno-omit-frame-pointer", "-o", str(binary), str(directory / "burn.c")], check=True)
        trace = directory / "burn.etl"
        record_cpu = record_openetw(binary, args.seconds, trace)
        print(f"openetw kernel trace of {args.seconds} s of CPU: {trace.stat().st_size:,} bytes, CPU of every process {record_cpu:.2f} s (workload included)")
        from openetw.etl.reader import EtlReader

        with EtlReader(str(trace)) as reader:
            burned = sum(1 for record in reader.records() if record.kind == "perfinfo" and record.hook_id == _SAMPLE_HOOK)
        copies = args.copies or -(-1_000_000 // max(burned, 1))
        large = directory / "burn-repeated.etl"
        written = repeated_trace(trace, large, copies)
        print(f"{large.name}: the burn trace's {burned:,} samples and their stacks x {copies} = {written:,} samples, {large.stat().st_size:,} bytes")
        inputs = [("burn.etl (openetw kernel trace)", trace), (f"burn x {copies} ({written:,} samples)", large)]
        net = CORPUS / "etl" / "perfview" / "net.4.5.2.x64.etl"
        if net.exists():
            inputs.append(("net.4.5.2.x64.etl (PerfView)", net))
        # the index lives in a cache of this run's own: the cold run builds it, as a first `openetw stacks` would
        os.environ["OPENETW_INDEX_DIR"] = env["OPENETW_INDEX_DIR"] = str(directory / "index-cache")
        for label, path in inputs:
            runs = [("openetw stacks, cold (new process, no index)", COLD)]
            if path != large:
                runs.append(("per-record path, cold (new process)", COLD_PER_RECORD))
            for what, script in runs:
                cold_cpu, out = run_child([sys.executable, "-c", script, str(path)], env=env)
                stacks, frames, top = out.split(maxsplit=2)
                rows.append([label, what, stacks, frames, f"{cold_cpu:.2f}", f"{int(stacks) / cold_cpu:,.0f}", f"{int(frames) / cold_cpu:,.0f}", top.strip()])
            warm_cpu, warm_stacks, warm_frames = warm(path, args.repeat)
            rows.append([label, "openetw stacks, warm (index kept, file cached)", warm_stacks, warm_frames, f"{warm_cpu:.2f}",
                         f"{warm_stacks / warm_cpu:,.0f}", f"{warm_frames / warm_cpu:,.0f}", ""])  # fmt: skip
        if perf is not None:
            data = directory / "perf.data"
            recorded, _ = run_child([perf, "record", "-q", "-g", "-F", "1000", "-o", str(data), "--", str(binary), str(args.seconds)])
            # call chains printed (perf's default), the sample count per symbol shown (-n)
            report_cpu, report = run_child([perf, "report", "--stdio", "-n", "-i", str(data), "--no-children", "--sort", "sym"])
            counted = [re.match(r"\s+[\d.]+%\s+(\d+)\s+\[.\]\s+(\S+)", line) for line in report.splitlines()]
            found = [match for match in counted if match]
            samples = sum(int(match.group(1)) for match in found)
            hottest = max(found, key=lambda match: int(match.group(1))).group(2) if found else "?"
            rows.append(["perf.data (same workload)", "perf report --stdio", samples, "", f"{report_cpu:.2f}",
                         f"{samples / report_cpu:,.0f}" if report_cpu else "", "", hottest])  # fmt: skip
            print(f"perf record: CPU of every process {recorded:.2f} s (workload included), {data.stat().st_size:,} bytes")
    # CPU per stack against perf report's on the same workload (the burn rows; net.4.5.2 has no perf.data)
    perf_rate = next((float(str(row[5]).replace(",", "")) for row in rows if row[1] == "perf report --stdio" and row[5]), None)
    for row in rows:
        own = str(row[5]).replace(",", "")
        row.append(f"{perf_rate / float(own):.2f}x" if perf_rate and own and row[0].startswith("burn") else "")
    print(table(["input", "what", "stacks", "frames", "CPU s", "stacks/s", "frames/s", "hottest", "CPU/stack vs perf report"], rows))
    print(f"load average {' '.join(f'{value:.2f}' for value in os.getloadavg())}; {machine_note()}")


if __name__ == "__main__":
    started = time.monotonic()
    main()
    print(f"({time.monotonic() - started:.0f} s)")
