"""perf_event_open against the real kernel: image loads, CPU samples, own-children mode.

System-wide tests need root (or perf_event_paranoid ≤ 0); own-children mode also runs as
``nobody``.
"""

from __future__ import annotations

import collections
import io
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from openetw.etl import EtlReader
from openetw.etl.writer import EtlWriter, linux_trace_clock, new_logfile_header
from openetw.kernel import perf_format as F
from openetw.kernel.classes import KernelEventMapper
from openetw.kernel.classes_perf import install_perf_handlers
from openetw.kernel.perf import HeldCommand, PerfSource, perf_event_open
from openetw.kernel.procfs import ProcSource
from openetw.tdh.decode import decode_properties
from openetw.tdh.registry import SchemaRegistry
from tests.service.harness import as_other_user


def _system_wide() -> None:
    if not os.path.exists("/proc/sys/kernel/perf_event_paranoid"):
        pytest.skip("kernel without perf events")
    try:
        os.close(perf_event_open(F.pack_attr(F.PerfAttr(flags=F.FLAG_DISABLED)), -1, 0))
    except OSError as exc:
        pytest.skip(f"system-wide perf_event_open refused here: {exc.strerror} (needs root or perf_event_paranoid <= 0)")


def collect(source: PerfSource, until, limit: float = 20.0) -> list:
    events = []
    deadline = time.monotonic() + limit
    while not until() and time.monotonic() < deadline:
        events += source.read(0.05)
    events += source.read(0)
    source.stop()
    events += source.drain()
    return events


def to_records(events, flags=("image", "profile"), rundown_pids=None, interval_ns=1_000_000):
    mapper = KernelEventMapper({"process"})
    perf = install_perf_handlers(mapper, flags, interval_ns)
    records = perf.rundown(ProcSource(), time.monotonic_ns(), pids=rundown_pids) if rundown_pids is not None else []
    for ts, cpu, name, values in events:
        records += mapper.map(name, ts, cpu, values)
    return records


def decode(records):
    registry = SchemaRegistry()
    out = []
    for record in records:
        schema = registry.schema_for(record)
        assert schema is not None
        out.append((schema.event_name, record, dict(decode_properties(schema, record.user_data, record.pointer_size))))
    return out


def write_etl(records, path: Path) -> None:
    writer = EtlWriter(path, header=new_logfile_header(clock=linux_trace_clock(), logger_name="NT Kernel Logger", logfile_name=str(path)))
    for record in records:
        writer.write(record)
    writer.close()


LIBZ_CHILD = r"""
import ctypes, sys
lib = ctypes.CDLL("libz.so.1")
sys.stdout.write(open("/proc/self/maps").read())
sys.stdout.flush()
"""


def test_dlopen_gives_image_load_whose_base_matches_proc_maps(tmp_path):
    _system_wide()
    source = PerfSource(image=True)
    source.start()
    try:
        before = time.monotonic_ns()
        child = subprocess.Popen([sys.executable, "-c", LIBZ_CHILD], stdout=subprocess.PIPE, text=True)
        maps_text, _ = child.communicate(timeout=20)
        events = collect(source, lambda: True)
        after = time.monotonic_ns()
    finally:
        source.close()
    mine = [e for e in events if e[3].get("pid") == child.pid]
    assert {"perf_comm", "perf_mmap2", "perf_exit"} <= {e[2] for e in mine}
    assert all(before <= e[0] <= after for e in mine)  # CLOCK_MONOTONIC timestamps
    libz_lines = [line.split() for line in maps_text.splitlines() if "libz.so" in line]
    path = libz_lines[0][5]
    first = min(int(parts[0].split("-")[0], 16) for parts in libz_lines)
    text_end = max(int(parts[0].split("-")[1], 16) for parts in libz_lines if "x" in parts[1])
    loads = [v for name, _, v in decode(to_records(mine)) if name == "Image/Load" and v["FileName"] == path]
    assert len(loads) == 1
    assert (loads[0]["ImageBase"], loads[0]["ImageBase"] + loads[0]["ImageSize"], loads[0]["ProcessId"]) == (first, text_end, child.pid)
    unloads = [v for name, _, v in decode(to_records(mine)) if name == "Image/Unload" and v["FileName"] == path]
    assert len(unloads) == 1


SPIN_C = r"""
#include <time.h>
volatile unsigned long sink;
/* Spins for `seconds` of its own CPU time, however busy the machine is. */
__attribute__((noinline)) void openetw_spin(double seconds) {
    struct timespec start, now;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &start);
    do {
        for (int i = 0; i < 100000; i++) sink += i;
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    } while ((now.tv_sec - start.tv_sec) + (now.tv_nsec - start.tv_nsec) / 1e9 < seconds);
}
int main(void) { openetw_spin(0.5); return 0; }
"""


def _build_spin(tmp_path: Path) -> tuple[Path, int, int]:
    compiler = shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        pytest.skip("no C compiler for the sampled workload")
    source, binary = tmp_path / "spin.c", tmp_path / "openetw-spin"
    source.write_text(SPIN_C)
    subprocess.run([compiler, "-O1", "-fno-omit-frame-pointer", "-o", str(binary), str(source)], check=True)
    symbols = subprocess.run(["nm", "-S", str(binary)], capture_output=True, text=True, check=True).stdout
    for line in symbols.splitlines():
        parts = line.split()
        if parts[-1] == "openetw_spin":
            return binary, int(parts[0], 16), int(parts[1], 16)
    raise AssertionError("openetw_spin not in the symbol table")


def test_busy_loop_is_sampled_with_stacks_inside_its_image(tmp_path):
    _system_wide()
    binary, spin, spin_size = _build_spin(tmp_path)
    source = PerfSource(image=True, profile=True, frequency=997)
    source.start()
    try:
        child = subprocess.Popen([str(binary)])
        events = collect(source, lambda: child.poll() is not None, limit=300)
    finally:
        source.close()
    assert child.returncode == 0
    records = to_records(events, interval_ns=source.interval_ns)
    decoded = decode(records)
    loads = [v for name, _, v in decoded if name == "Image/Load" and v["ProcessId"] == child.pid and v["FileName"] == str(binary)]
    assert len(loads) == 1
    base, size = loads[0]["ImageBase"], loads[0]["ImageSize"]
    samples = [v for name, _, v in decoded if name == "PerfInfo/Sample" and v["ThreadId"] == child.pid]
    stacks = [v for name, _, v in decoded if name == "StackWalk/Stack" and v["StackThread"] == child.pid]
    # ~500 expected for 0.5 s of CPU time (cpu-clock samples the CPU time the loop gets).
    assert len(samples) >= 350, len(samples)
    assert len(stacks) == len(samples)
    # ImageBase is where file offset 0 maps: address - base is the ELF virtual address here.
    in_spin = [s for s in samples if spin <= s["InstructionPointer"] - base < spin + spin_size]
    assert len(in_spin) >= len(samples) // 2
    inside = [s for s in stacks if any(base <= frame < base + size for frame in s["Stack"])]
    assert len(inside) >= len(stacks) * 9 // 10
    with_caller = [s for s in stacks if any(spin <= frame - base < spin + spin_size for frame in s["Stack"][1:])
                   or spin <= s["Stack"][0] - base < spin + spin_size]
    assert len(with_caller) >= len(stacks) // 2
    assert source.lost() == 0

    # The same records in a file: our reader and dissect.etl count them alike.
    output = tmp_path / "profile.etl"
    write_etl(records, output)
    with EtlReader(str(output)) as reader:
        ours = list(reader)
    assert len(ours) == len(records) + 1
    dissect_etl = pytest.importorskip("dissect.etl")
    theirs = list(dissect_etl.ETL(io.BytesIO(output.read_bytes())))
    assert len(theirs) == len(ours)
    providers = collections.Counter(str(r.header.provider_id) for r in theirs[1:])
    assert providers["ce1dbfb4-137e-4da6-87b0-3f59aa102cbc"] == sum(1 for n, _, _ in decoded if n.startswith("PerfInfo/"))
    assert providers["def2fe46-7bd6-4b80-bd94-f57fe20d0ce3"] == len([n for n, _, _ in decoded if n == "StackWalk/Stack"])
    dissect_loads = [r.event for r in theirs[1:] if str(r.header.provider_id) == "2cb15d1d-5fc1-11d2-abe1-00a0c911f518"
                     and "Image/Load" in str(r.event) and r.event.ProcessId == child.pid]
    ours_child = sorted((v["ImageBase"], v["ImageSize"]) for name, _, v in decoded if name == "Image/Load" and v["ProcessId"] == child.pid)
    assert sorted((e.ImageBase, e.ImageSize) for e in dissect_loads) == ours_child
    assert (base, size) in ours_child


def test_image_rundown_of_this_process_matches_its_maps():
    _system_wide()
    records = to_records([], rundown_pids=[os.getpid()])
    spans = {(v["FileName"], v["ImageBase"]) for name, _, v in decode(records) if name == "Image/DCStart"}
    executable = os.path.realpath(sys.executable)
    with open("/proc/self/maps") as f:
        lines = [line.split() for line in f]
    python_start = min(int(p[0].split("-")[0], 16) for p in lines if len(p) > 5 and p[5] == executable)
    assert (executable, python_start) in spans


def test_watermark_never_passes_an_unreturned_event():
    _system_wide()
    source = PerfSource(image=True, profile=True, frequency=997)
    source.start()
    late = 0
    total = 0
    try:
        loop = subprocess.Popen(["/bin/sh", "-c", "i=0; while [ $i -lt 300 ]; do /bin/true; i=$((i+1)); done"])
        while loop.poll() is None:
            mark = source.watermark
            batch = source.read(0.02)
            total += len(batch)
            late += sum(1 for e in batch if e[0] <= mark)
            assert source.watermark >= mark
            assert source.watermark <= time.monotonic_ns()
        source.stop()
        source.drain()
        assert source.watermark == (1 << 63) - 1
    finally:
        source.close()
    assert total > 1000
    assert late == 0


def test_a_full_ring_reports_lost_events():
    _system_wide()
    source = PerfSource(image=True, profile=True, frequency=4000, ring_pages=1)
    source.start()
    try:
        subprocess.run(["/bin/sh", "-c", "i=0; while [ $i -lt 100 ]; do /bin/true; i=$((i+1)); done"], check=True)
        events = collect(source, lambda: True)
    finally:
        source.close()
    assert source.lost() > 0
    assert events


def _own_children_run() -> dict:
    with HeldCommand(["/bin/sh", "-c", "/bin/true; exit 4"]) as held:
        source = PerfSource(image=True, profile=True, frequency=997, target_pid=held.pid)
        source.start()
        try:
            held.release()
            events = collect(source, lambda: held.wait(timeout=0) is not None)
        finally:
            source.close()
    return {
        "pid": held.pid, "status": held.returncode,
        "events": [
            (name, {k: v for k, v in values.items() if k in ("pid", "ppid", "tid", "comm", "exec", "filename")})
            for _, _, name, values in events if name != "perf_sample"
        ],
        "sample_pids": sorted({values["pid"] for _, _, name, values in events if name == "perf_sample"}),
        "kernel_frames": sum(1 for _, _, name, values in events if name == "perf_sample" and F.split_callchain(values.get("callchain", ()))[0]),
    }


def _check_own_children(result: dict) -> None:
    assert "error" not in result, result
    pid = result["pid"]
    assert result["status"] == 4
    events = result["events"]
    kinds = collections.Counter(name for name, _ in events)
    assert {"perf_comm", "perf_mmap2", "perf_fork", "perf_exit"} <= set(kinds)
    comms = [(v["pid"], v["comm"], v["exec"]) for name, v in events if name == "perf_comm"]
    assert (pid, "sh", True) in comms
    forks = [(v["pid"], v["ppid"]) for name, v in events if name == "perf_fork"]
    children = [child for child, parent in forks if parent == pid and child != pid]
    assert len(children) == 1
    assert (children[0], "true", True) in comms
    files = {(v["pid"], v["filename"]) for name, v in events if name == "perf_mmap2"}
    assert (pid, os.path.realpath("/bin/sh")) in files
    assert (children[0], os.path.realpath("/bin/true")) in files
    exits = {v["pid"] for name, v in events if name == "perf_exit"}
    assert exits == {pid, children[0]}
    assert {v["pid"] for _, v in events} <= {pid, children[0]}  # nothing from other processes
    assert set(result["sample_pids"]) <= {pid, children[0]}
    assert result["kernel_frames"] == 0


def test_own_children_mode_sees_the_command_tree():
    if not os.path.exists("/proc/sys/kernel/perf_event_paranoid"):
        pytest.skip("kernel without perf events")
    _check_own_children(_own_children_run())


def test_own_children_mode_works_unprivileged():
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    with open("/proc/sys/kernel/perf_event_paranoid") as f:
        if int(f.read()) > 2:
            pytest.skip("perf_event_paranoid > 2 forbids perf events to unprivileged users")
    _check_own_children(as_other_user(_own_children_run))


def test_held_command_runs_only_when_released(tmp_path):
    marker = tmp_path / "ran"
    with HeldCommand(["/bin/sh", "-c", f"touch {marker}; exit 3"]) as held:
        time.sleep(0.1)
        assert held.wait(timeout=0) is None and not marker.exists()
    assert held.returncode == 125 and not marker.exists()  # left held: cancelled, never ran
    with HeldCommand(["/bin/sh", "-c", f"touch {marker}; exit 3"]) as held:
        held.release()
        assert held.wait(timeout=10) == 3
    assert marker.exists()


def test_kernel_samples_fall_inside_the_kernel_images_of_the_rundown():
    _system_wide()
    images = ProcSource().kernel_images()
    if not images:
        pytest.skip("kernel addresses hidden here (kptr_restrict)")
    source = PerfSource(image=False, profile=True, frequency=997)
    source.start()
    try:
        # 0.3 s of CPU time, much of it in the kernel (system calls)
        subprocess.run([sys.executable, "-c", "import os, time\nwhile time.process_time() < 0.3: os.stat('/')"], check=True)
        events = collect(source, lambda: True)
    finally:
        source.close()
    kernel_ips = [v["ip"] for _, _, name, v in events if name == "perf_sample" and v["ip"] >= 0xFFFF800000000000]
    assert len(kernel_ips) >= 50
    inside = [ip for ip in kernel_ips if any(base <= ip < base + size for _, base, size in images)]
    assert len(inside) >= len(kernel_ips) * 9 // 10
    perf = install_perf_handlers(KernelEventMapper({"process"}), ("image", "profile"))
    records = perf.rundown(ProcSource(), time.monotonic_ns())  # system-wide: the kernel too
    kernel = [v for name, _, v in decode(records) if name == "Image/DCStart" and v["ProcessId"] == 0]
    assert [(v["FileName"], v["ImageBase"], v["ImageSize"]) for v in kernel] == images
