"""Live probes (as root): ``etw`` probe firings at an offered event rate, and the kernel's
``syscall:::entry`` beside bpftrace on the same workload.

Live: a producer process writes TraceLogging events at ``--rate`` per second (200 000 by
default) for ``--seconds``; ``openetw probe -c`` runs it under ``etw:Bench.Probe.Live::generic_event
{ @n = count(); }``. Reported: events offered (and the rate the producer reached), firings,
firings per second of writing, and what the sessions lost.

Kernel: ``dd if=/dev/zero of=/dev/null bs=1 count=N`` (2 system calls a byte) alone, then under
bpftrace's ``tracepoint:raw_syscalls:sys_enter { @[comm] = count(); }``, then under ``openetw
probe -n 'syscall:::entry { @[execname] = count(); }'`` (both system-wide, started before the
workload, ended by SIGINT after it). Reported: the system calls each counted for ``dd``, the
workload's wall time and slowdown against the run alone, the CPU each tool used while it ran
(openetw's: the probe, the trace service and its kernel recorder), and the losses each reports.

``python benchmarks/bench_probe_live.py [--rate N] [--seconds S] [--bytes N] [--repeat N]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import machine_note, private_service, process_cpu_seconds, table

MARK = "bench-end-mark"
PRODUCER = r"""
import sys, time
from openetw.provider import TraceLoggingProvider
rate, seconds = float(sys.argv[1]), float(sys.argv[2])
provider = TraceLoggingProvider("Bench.Probe.Live").register()
event = provider.event("Tick", level=4, fields=[("N", "uint32")])
deadline = time.monotonic() + 30
while not provider.enabled and time.monotonic() < deadline:
    time.sleep(0.005)
write = event.write
total = int(rate * seconds)
chunk = 1000
start = time.monotonic()
sent = 0
while sent < total:
    for n in range(sent, min(total, sent + chunk)):
        write(n)
    sent = min(total, sent + chunk)
    ahead = start + sent / rate - time.monotonic()
    if ahead > 0:
        time.sleep(ahead)
took = time.monotonic() - start
print(f"{sent} {took}", file=sys.stderr, flush=True)
"""


def tree_cpu(root: int) -> float:
    """CPU seconds of a process and its descendants (from /proc)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                parent = int(stat.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(parent, []).append(int(entry))
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        total += process_cpu_seconds(pid)
        todo.extend(children.get(pid, []))
    return total


def settle(pids: list[int], idle_share: float = 0.3, step: float = 0.5, longest: float = 300.0) -> None:
    """Wait until these processes (and their children) use less than ``idle_share`` of a CPU
    over ``step`` seconds twice in a row: they have handled what they were behind on."""
    quiet, deadline = 0, time.monotonic() + longest
    last = sum(tree_cpu(pid) for pid in pids)
    while quiet < 2 and time.monotonic() < deadline:
        time.sleep(step)
        now = sum(tree_cpu(pid) for pid in pids)
        quiet = quiet + 1 if now - last < idle_share * step else 0
        last = now


def children_cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def wait_for_line(stream: Any, pattern: str, timeout: float = 60.0) -> str:
    """Lines of ``stream`` until one matches ``pattern`` (returned)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([stream], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        line = stream.readline()
        if not line:
            break
        if re.search(pattern, line):
            return str(line)
    raise RuntimeError(f"no line matching {pattern!r} within {timeout} s")


def live_etw(rate: float, seconds: float) -> list[object]:
    with tempfile.TemporaryDirectory() as work:
        out = Path(work) / "probe.json"
        command = f"{sys.executable} -c {shlex_quote(PRODUCER)} {rate} {seconds}"
        result = subprocess.run(
            [sys.executable, "-m", "openetw", "probe", "-q", "-f", "json", "-o", str(out), "-c", command,
             "-n", "etw:Bench.Probe.Live::generic_event { @n = count(); }"],
            capture_output=True, text=True, timeout=seconds * 20 + 120, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(result.stderr)
        sent_line = [line for line in result.stderr.splitlines() if re.fullmatch(r"\d+ [\d.]+", line.strip())]
        sent, took = sent_line[-1].split()
        records = [json.loads(line) for line in out.read_text().splitlines()]
    fired = next(r["data"]["@n"] for r in records if r["type"] == "map")
    lost = next(r["data"] for r in records if r["type"] == "lost")
    return [int(sent), f"{int(sent) / float(took):,.0f}", fired, f"{fired / float(took):,.0f}", lost["events_lost"], lost["buffers_lost"]]


def shlex_quote(text: str) -> str:
    import shlex

    return shlex.quote(text)


def workload(count: int) -> tuple[float, int]:
    start = time.perf_counter()
    process = subprocess.run(["dd", "if=/dev/zero", "of=/dev/null", "bs=1", f"count={count}"], capture_output=True, check=True)
    return time.perf_counter() - start, process.returncode


def with_bpftrace(count: int) -> dict[str, Any]:
    tool = subprocess.Popen(["bpftrace", "-f", "json", "-e", "tracepoint:raw_syscalls:sys_enter { @[comm] = count(); }"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert tool.stdout is not None
        wait_for_line(tool.stdout, "attached_probes|Attaching")
        time.sleep(1.0)  # bpftrace says so as it attaches; let every CPU's probe be live
        before = process_cpu_seconds(tool.pid)
        took, _ = workload(count)
        cpu = process_cpu_seconds(tool.pid) - before
        tool.send_signal(signal.SIGINT)
        out, err = tool.communicate(timeout=120)
    finally:
        if tool.poll() is None:
            tool.kill()
            tool.wait()
    counts: dict[str, int] = {}
    lost = 0
    for line in out.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if record.get("type") == "map":
            counts = record["data"]["@"]
        elif record.get("type") == "lost_events":
            lost += int(record["data"].get("events", 0))
    return {"took": took, "cpu": cpu, "dd": counts.get("dd", 0), "lost": lost, "note": err.strip()[-200:]}


def with_openetw(count: int, bufsize: str) -> dict[str, Any]:
    with private_service("openetw-bench-probe-") as (service, directory):
        mark = str(directory / MARK)
        shutil.copy("/bin/true", mark)
        service_cpu = 0.0
        children_before = children_cpu()
        tool = subprocess.Popen(
            [sys.executable, "-m", "openetw", "probe", "-q", "-f", "json", "-x", f"bufsize={bufsize}",
             "-n", "syscall:::entry { @[execname] = count(); }",
             "-n", f'proc:::exec-success /execname == "{MARK}"/ {{ exit(0); }}'],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            assert tool.stderr is not None
            wait_for_line(tool.stderr, "tracing")
            service_before, probe_before = tree_cpu(service.pid), process_cpu_seconds(tool.pid)
            dd_before = children_cpu()
            took, _ = workload(count)
            dd_cpu = children_cpu() - dd_before
            # The probe ends itself when it reaches the marker program's exec, run after the
            # workload: it has then handled every system call the workload made.
            marked = time.perf_counter()
            subprocess.run([mark], check=True)
            while tool.poll() is None and time.perf_counter() - marked < 600:
                service_cpu = tree_cpu(service.pid) - service_before  # the recorder ends with the session
                time.sleep(0.2)
            caught_up = time.perf_counter() - marked
            out, _err = tool.communicate(timeout=600)
            probe_cpu = children_cpu() - children_before - dd_cpu  # the probe's whole life
            cpu = service_cpu + max(0.0, probe_cpu - probe_before)
        finally:
            if tool.poll() is None:
                tool.kill()
                tool.wait()
    records = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    counts = next((r["data"]["@"] for r in records if r["type"] == "map"), {})
    lost = next((r["data"] for r in records if r["type"] == "lost"), {})
    return {"took": took, "cpu": cpu, "service_cpu": service_cpu, "probe_cpu": cpu - service_cpu, "dd": counts.get("dd", 0), "caught_up": caught_up,
            "lost": f"{lost.get('events_lost', 0)} events, {lost.get('buffers_lost', 0)} buffers", "note": ""}  # fmt: skip


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rate", type=float, default=200_000)
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument("--bytes", type=int, default=500_000, help="dd's byte count (two system calls each)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--bufsize", default="64m", help="openetw probe's -x bufsize: the kernel ring buffer per CPU")
    options = parser.parse_args()
    if os.geteuid() != 0:
        print("bench_probe_live: needs root (kernel probes, bpftrace); skipped")
        return 0
    print(machine_note())
    with private_service("openetw-bench-live-"):
        rows = [live_etw(options.rate, options.seconds) for _ in range(options.repeat)]
    print(f"\nLive etw probe, {options.rate:,.0f} events/s offered for {options.seconds} s:")
    print(table(["offered", "offered/s reached", "firings", "firings/s", "events lost", "buffers lost"], rows))
    alone = min(workload(options.bytes)[0] for _ in range(3))
    rows = []
    if shutil.which("bpftrace"):
        for _ in range(options.repeat):
            b = with_bpftrace(options.bytes)
            rows.append(["bpftrace", b["dd"], f"{b['took']:.2f}", f"{b['took'] / alone:.2f}x", f"{b['cpu']:.2f}", b["lost"]])
    for _ in range(options.repeat):
        o = with_openetw(options.bytes, options.bufsize)
        rows.append(["openetw probe", o["dd"], f"{o['took']:.2f}", f"{o['took'] / alone:.2f}x",
                     f"{o['cpu']:.2f} (service and recorder {o['service_cpu']:.2f}, probe {o['probe_cpu']:.2f})",
                     o["lost"] + f"; caught up {o['caught_up']:.1f} s after"])  # fmt: skip
    print(f"\nsyscall:::entry {{ @[execname] = count(); }} over dd bs=1 count={options.bytes} (alone: {alone:.2f} s):")
    print(table(["tool", "dd's system calls", "dd wall s", "slowdown", "tool CPU s", "lost"], rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
