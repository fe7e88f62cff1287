"""The whole story in one command (``make demo``): ETW's driver walkthrough, run on Linux.

1. A glance at a real Windows trace (when the shared corpus is beside this checkout).
2. The "Sample Driver" of the walkthrough: a private trace service; its manifest compiled by
   ``openetw mc``; two sessions (one to a file and a live view, one admitting SampleEventA only);
   the driver program in its own process; its events shown live with their messages; the report;
   what the second session got; the manifest installed, so the driver's System-channel events
   also land in the Event Log's System log, read back at the end. Nothing is left running,
   whatever happens.
3. The README's tour reads the session's file: it is left as ``trace.etl`` (and the filtered
   session's as ``only_irp_a.etl``) in the current directory, or in ``--tour-dir DIR``.
"""

from __future__ import annotations

import argparse
import os
import select
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parent.parent
CORPUS_TRACE = REPO.parent / "shared" / "corpus" / "etl" / "perfview" / "net.4.5.2.x64.etl"
DRIVER = REPO / "examples" / "sample_driver"
PROVIDER_GUID = "b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6"
SAMPLE_EVENT_A = 2
WIDTH = 150
_print_lock = threading.Lock()


def say(text: str = "") -> None:
    with _print_lock:
        print(text, flush=True)


def title(text: str) -> None:
    say(f"\n== {text}")


def openetw(*args: str, head: int | None = None) -> str:
    """Run an ``openetw`` command as a person would, show it and (the first ``head`` lines of) its output."""
    shown = " ".join(shlex.quote(a) for a in args)
    say(f"\n$ openetw {shown}")
    result = subprocess.run([sys.executable, "-m", "openetw", *args], capture_output=True, text=True, timeout=120)
    lines = result.stdout.rstrip("\n").splitlines()
    for line in lines[:head]:
        say(line if len(line) <= WIDTH else line[: WIDTH - 3] + "...")
    if head is not None and len(lines) > head:
        say(f"... ({len(lines) - head} more lines)")
    if result.stderr.strip():
        say(result.stderr.rstrip())
    if result.returncode != 0:
        raise SystemExit(f"demo step failed: openetw {shown} (exit {result.returncode})")
    return result.stdout


# -- part 1 ------------------------------------------------------------------------------------


def windows_trace() -> None:
    if not CORPUS_TRACE.exists():
        say(f"(no Windows sample traces beside this checkout at {CORPUS_TRACE.parent}; skipping the glance)")
        return
    title("A real Windows trace: PerfView's compressed, relogged file (kernel + CLR events)")
    openetw("info", str(CORPUS_TRACE), head=9)
    openetw("dump", "--time-order", "--limit", "4", str(CORPUS_TRACE))


# -- part 2 ------------------------------------------------------------------------------------


@contextmanager
def private_service(directory: Path) -> Iterator[subprocess.Popen[bytes]]:
    """``openetw service run`` on a socket of our own; stopped (killed if need be) on the way out."""
    socket = directory / "control.sock"
    os.environ["OPENETW_SOCKET"] = str(socket)  # every openetw client from here on, children too
    os.environ["OPENETW_NO_AUTOSTART"] = "1"  # never start (or find) the user's own service
    read_end, write_end = os.pipe()
    log = open(directory / "service.log", "wb")  # noqa: SIM115 - closed below
    command = [sys.executable, "-m", "openetw", "service", "run", "--socket", str(socket), "--ready-fd", str(write_end)]
    service = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_end,), preexec_fn=_end_with_parent
    )  # fmt: skip
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], 30)
        if not ready or not os.read(read_end, 16).startswith(b"ready"):
            raise SystemExit(f"the trace service did not start: {(directory / 'service.log').read_text()}")
        os.close(read_end)
        say(f"$ openetw service run --socket {socket}    (pid {service.pid}; OPENETW_SOCKET points every tool at it)")
        yield service
    finally:
        if service.poll() is None:
            service.send_signal(signal.SIGTERM)
            try:
                service.wait(timeout=15)
            except subprocess.TimeoutExpired:
                service.kill()
                service.wait(timeout=15)
        log.close()
        say(f"trace service (pid {service.pid}) stopped")


def _end_with_parent() -> None:
    """In the service's process, before it runs: should the demo be killed outright (no ``finally``
    runs then), the kernel sends the service SIGTERM, so it never outlives the demo."""
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass


def load_generated(directory: Path) -> ModuleType:
    from openetw.mc import load_module

    path = directory / "sample_driver.py"
    return load_module(path.read_text(encoding="utf-8"), "sample_driver", str(path))


class LiveView:
    """A real-time consumer of a session on a thread: each event decoded and shown as it arrives."""

    def __init__(self, session: Any, events: ModuleType) -> None:
        from openetw.tdh.registry import SchemaRegistry

        self.registry = SchemaRegistry()
        for schema in events.schemas():  # decoded from the module's embedded manifest, nothing installed
            self.registry.add_schema(schema, "sample_driver module")
        self.consumer = session.consumer()
        self.seen: list[str] = []
        self.thread = threading.Thread(target=self._run, name="live view", daemon=True)
        self.thread.start()

    def _run(self) -> None:
        from openetw.tdh import decode_all, format_event_message, format_properties

        for record in self.consumer:
            schema = self.registry.schema_for(record)
            if schema is None:
                say(f"  live   | {record.time_iso} event {getattr(record, 'id', '?')} of an unknown provider")
                continue
            decoded = decode_all(schema, record.user_data, record.pointer_size)
            fields = " ".join(f"{name}={value}" for name, value in format_properties(decoded).items())
            message = format_event_message(decoded) or ""
            self.seen.append(message)
            quoted = f'"{message}"'
            say(f"  live   | {record.time_iso}  pid {record.pid:<6} {schema.event_name:<17} {quoted:<18} {fields}".rstrip())

    def wait_for(self, count: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while len(self.seen) < count and time.monotonic() < deadline:
            time.sleep(0.05)
        return len(self.seen) >= count

    def close(self) -> None:
        self.thread.join(timeout=10)
        self.consumer.close()


def run_driver(generated: Path, requests: int) -> None:
    command = [sys.executable, str(DRIVER / "sample_driver.py"), "--generated", str(generated), "--requests", str(requests), "--interval", "0.4"]
    say(f"$ python examples/sample_driver/sample_driver.py --generated {generated} --requests {requests}    (its own process)")
    driver = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert driver.stdout is not None
        for line in driver.stdout:
            say(f"  driver | {line.rstrip().removeprefix('sample driver | ')}")
        if driver.wait(timeout=60) != 0:
            raise SystemExit(f"the sample driver failed (exit {driver.returncode})")
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


def event_counts(path: Path, events: ModuleType) -> Counter[str]:
    from openetw.etl import EtlReader
    from openetw.etl.relog import is_logfile_header_record

    names = {s.event_id: s.event_name for s in events.schemas()}
    with EtlReader(path) as reader:
        return Counter(names.get(r.id, f"id {r.id}") for r in reader if not is_logfile_header_record(r))


def sample_driver(workdir: Path) -> tuple[Path, Path]:
    """The walkthrough; the two sessions' files."""
    from openetw.controller import Session
    from openetw.session import EventFilters

    title("The Sample Driver: ETW's kernel-mode driver walkthrough, on Linux")
    say(f"manifest: {DRIVER / 'evntdrv.xml'} (provider \"Sample Driver\" {PROVIDER_GUID}, events StartEvent, SampleEventA, UnloadEvent)")
    os.environ["OPENETW_DATA_DIR"] = str(workdir / "data")  # the demo's own manifest store and Event Log
    with private_service(workdir):
        generated = workdir / "generated"
        say("\nStep 3 of the walkthrough, Mc.exe: the manifest becomes code (here, a Python module)")
        openetw("mc", str(DRIVER / "evntdrv.xml"), "-o", str(generated))
        events = load_generated(generated)

        say("\nStep 5, install the manifest: its System channel now always listens, no trace session needed")
        openetw("manifest", "install", str(DRIVER / "evntdrv.xml"))

        trace_file, filtered_file = workdir / "sample_driver.etl", workdir / "only_irp_a.etl"
        say("\nStep 7, test the driver: two trace sessions enable the provider before it starts")
        everything = Session.start("SampleDriverTrace", output=trace_file, realtime=True, flush_timer=1, providers=[PROVIDER_GUID])
        say(f"  session SampleDriverTrace: every event of the provider -> {trace_file} and a live view")
        only_a = Session.start(
            "OnlyIrpA", output=filtered_file, providers=[(PROVIDER_GUID, {"filters": EventFilters(frozenset({SAMPLE_EVENT_A}))})]
        )
        say(f"  session OnlyIrpA: an event-id filter admitting SampleEventA (id {SAMPLE_EVENT_A}) only -> {filtered_file}")
        live = LiveView(everything, events)
        try:
            say("")
            run_driver(generated, requests=3)
            if not live.wait_for(5, timeout=15):
                say("  (the live view did not see every event in time)")
        finally:
            final = everything.stop()
            only_a.stop()
            live.close()
        say(f"\nsessions stopped: SampleDriverTrace wrote {final['events_written']} events, lost {final['events_lost']}")

        title("The report of the session's file, decoded with the manifest")
        openetw("report", "--format", "summary", "--manifest", str(DRIVER / "evntdrv.xml"), str(trace_file))
        say(f"\nthe .etl file: {trace_file}")

        title("The second session, configured differently, received only its share")
        openetw("report", "--format", "summary", "--manifest", str(DRIVER / "evntdrv.xml"), str(filtered_file))
        full, filtered = event_counts(trace_file, events), event_counts(filtered_file, events)
        say(f"\nSampleDriverTrace: {sum(full.values())} events ({', '.join(f'{n} {name}' for name, n in sorted(full.items()))})")
        say(f"OnlyIrpA:          {sum(filtered.values())} events ({', '.join(f'{n} {name}' for name, n in sorted(filtered.items()))})")
        if set(filtered) != {"SampleEventA"} or filtered["SampleEventA"] != full["SampleEventA"]:
            raise SystemExit("the filtered session did not get exactly the SampleEventA events")

        title("Step 8, view the results: the driver's System-channel events in the Event Log")
        openetw("log", "flush")
        openetw("log", "query", "System", "--format", "text")
        say(f"\nthe System log: {workdir / 'data' / 'logs'} (`openetw log query System` reads it, service up or down)")
    return trace_file, filtered_file


def leave_for_the_tour(files: tuple[Path, Path], tour_dir: Path) -> None:
    """The README's tour reads ``trace.etl`` and ``only_irp_a.etl``: copies of the sessions' files."""
    tour_dir.mkdir(parents=True, exist_ok=True)
    for source, name in zip(files, ("trace.etl", "only_irp_a.etl"), strict=True):
        shutil.copyfile(source, tour_dir / name)
    where = "here" if tour_dir.resolve() == Path.cwd().resolve() else str(tour_dir)
    bin_dir = Path(sys.executable).parent
    title("Next: the README's tour")
    say(f"trace.etl and only_irp_a.etl are {where}. The `openetw` command is installed in {bin_dir}:")
    say(f"  . {bin_dir / 'activate'}    # puts it on your PATH (or: export PATH=\"{bin_dir}:$PATH\")")
    say("  openetw info trace.etl")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tour-dir", type=Path, default=Path.cwd(), help="where trace.etl is left for the tour (default: here)")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # a kill still stops the service (finally)
    windows_trace()
    workdir = Path(tempfile.mkdtemp(prefix="openetw-demo-"))
    files = sample_driver(workdir)
    leave_for_the_tour(files, args.tour_dir)
    say(f"\ndemo finished; nothing left running. Files kept in {workdir}")


if __name__ == "__main__":
    main()
