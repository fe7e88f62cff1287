"""A live openetw kernel trace with CPU samples and stacks, while a ``gcc -g`` program burns CPU in
known functions: the hottest functions appear by name in By Name, speedscope and pprof."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from openetw.cli.main import cli
from openetw.etl.reader import EtlReader
from openetw.events.profile import load_profile
from openetw.export.flame import write_folded, write_pprof, write_speedscope
from openetw.kernel import KernelSession
from openetw.kernel.perf import HeldCommand
from openetw.report.stacks import by_name
from tests.export.test_flame import parse_pprof, pprof_stacks

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
    do {  /* 3 parts spin_inner (through burn_alpha) to 1 part burn_beta, for `seconds` of CPU time */
        sink += burn_alpha(3000000); sink += burn_beta(1000000);
        clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &now);
    } while (now.tv_sec + now.tv_nsec / 1e9 < seconds);
    printf("%lu\n", sink);
    return 0;
}
"""


def build_burn(directory: Path) -> Path:
    """The workload, compiled with gcc -g (frame pointers kept: the kernel walks user stacks by them)."""
    gcc = shutil.which("gcc")
    if gcc is None:
        if os.environ.get("CI") == "true":
            pytest.fail("gcc is missing (CI must have it: make test installs it)")
        pytest.skip("gcc is not installed")
    source, binary = directory / "burn.c", directory / "burn"
    source.write_text(BURN_C)
    subprocess.run([gcc, "-g", "-O0", "-fno-omit-frame-pointer", "-o", str(binary), str(source)], check=True)
    return binary


def _perf_allowed() -> None:
    try:
        with open("/proc/sys/kernel/perf_event_paranoid") as f:
            paranoid = int(f.read())
    except OSError:
        pytest.skip("kernel without perf events")
    if paranoid > 2 and os.geteuid() != 0:
        pytest.skip("perf_event_paranoid > 2 forbids perf events here")


def record_burn(directory: Path, seconds: float = 0.6) -> tuple[Path, int]:
    """A kernel trace (image + profile, one process tree) of the workload."""
    _perf_allowed()
    binary = build_burn(directory)
    output = directory / "burn.etl"
    held = HeldCommand([str(binary), str(seconds)])
    with KernelSession(flags={"image", "profile"}, output=str(output), source="perf_children", target_pid=held.pid, profile_rate_hz=1000):
        held.release()
        assert held.wait(timeout=120) == 0
    return output, held.pid


def test_the_hottest_functions_appear_by_name(tmp_path: Path) -> None:
    trace, pid = record_burn(tmp_path)
    with EtlReader(str(trace)) as reader:
        profile = load_profile(reader.records(time_order=True))
    assert profile.total >= 300  # 0.6 s of CPU time at 1000 Hz
    rows = by_name(profile.samples)
    top = [row.name for row in rows[:2]]
    assert top == ["burn!spin_inner", "burn!burn_beta"]
    inclusive = {row.name: row.inclusive for row in rows}
    assert inclusive["burn!main"] >= profile.total * 9 // 10
    assert inclusive["burn!burn_alpha"] >= inclusive["burn!spin_inner"] * 9 // 10  # spin_inner is called from burn_alpha
    assert profile.naming.by_source["elf"] >= 4 and profile.naming.named >= 4
    program = next(image for image in profile.state.images(pid) if image.file_name.endswith("/burn"))
    assert profile.state.build_id(program) is not None and not profile.naming.symbol_errors  # the file that ran

    speedscope = io.BytesIO()
    write_speedscope(profile.samples, speedscope)
    document = json.loads(speedscope.getvalue())
    names = [frame["name"] for frame in document["shared"]["frames"]]
    heaviest = document["profiles"][0]
    leaf_counts: dict[str, int] = {}
    for stack, weight in zip(heaviest["samples"], heaviest["weights"], strict=True):
        leaf_counts[names[stack[-1]]] = leaf_counts.get(names[stack[-1]], 0) + weight
    assert max(leaf_counts, key=leaf_counts.__getitem__) == "burn!spin_inner"

    pprof = io.BytesIO()
    write_pprof(profile.samples, pprof)
    leaves: dict[str, int] = {}
    for stack, count in pprof_stacks(parse_pprof(pprof.getvalue())).items():
        leaves[stack[0]] = leaves.get(stack[0], 0) + count
    assert sorted(leaves, key=lambda name: -leaves[name])[:2] == ["burn!spin_inner", "burn!burn_beta"]

    folded = io.BytesIO()
    assert write_folded(profile.samples, folded) == profile.total
    assert sum(int(line.rsplit(b" ", 1)[1]) for line in folded.getvalue().splitlines()) == profile.total

    result = CliRunner().invoke(cli, ["stacks", str(trace), "--json", "--process", "burn"])
    assert result.exit_code == 0, result.output
    view = json.loads(result.output)
    assert [row["name"] for row in view["by_name"][:2]] == ["burn!spin_inner", "burn!burn_beta"]
    assert view["samples"] == profile.total and view["naming"]["named"] >= 4
    assert {sample.process for sample in profile.samples} == {f"burn ({pid})"}  # named by its program: no process events


def test_kernel_frames_are_named_from_the_symbols_the_trace_recorded(tmp_path: Path) -> None:
    """A system-wide trace writes, when it stops, the kallsyms symbols its samples' kernel frames
    fell in: the trace names them itself, with no kallsyms at hand when it is read."""
    from openetw.kernel.procfs import ProcSource

    if os.geteuid() != 0:
        pytest.skip("a system-wide kernel trace needs root")
    if not ProcSource().kernel_symbols():
        pytest.skip("kernel addresses hidden here (kptr_restrict)")
    output = tmp_path / "system.etl"
    workload = "import os, time\nwhile time.process_time() < 0.3: os.stat('/')"
    with KernelSession(flags={"image", "profile"}, output=str(output), source="auto", profile_rate_hz=997):
        subprocess.run([sys.executable, "-c", workload], check=True)
    with EtlReader(str(output)) as reader:
        profile = load_profile(reader.records(time_order=True), kallsyms=None)
    kernel = [frame for sample in profile.samples for frame in sample.frames if frame.address >= 0xFFFF800000000000]
    assert len(kernel) >= 50
    named = [frame for frame in kernel if frame.source == "kallsyms"]
    assert len(named) >= len(kernel) * 9 // 10
    assert any("sys" in (frame.function or "") for frame in named)  # system call entry and the stat family
