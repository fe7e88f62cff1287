"""Live probes: the sessions a probe program's descriptions decide, consumed as the runner's events.

``etw`` probes enable exactly the providers they name (a GUID or a provider name; wildcards are
refused, as a session cannot enable a pattern) in one private real-time session: per provider
the highest level and the union of the keywords its descriptions give, and the event ids when
every description of it names ids (so the service drops the others where they are written).
The runner still matches each event against each description, so a clause fires on exactly the
events its description admits. Providers that register after the program starts are enabled as
they come (the service keeps the session's rules for them).

Kernel probes (``openetw.probe.run.kernel_probes``) start a private real-time kernel session with
the flags the probe families need; only root may.

``LiveTarget`` is ``-p PID`` (a running process) or ``-c CMD`` (a command started held, so that
the sessions filter on its pid before it runs, then let go). The run ends when the program calls
``exit()``, when the target exits, or on ``stop()`` (SIGINT): the sessions are stopped, which
hands their last buffers to the consumers first, so nothing written before is lost.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from openetw.errors import AccessDenied, InvalidArgument, OpenEtwError, ServiceError
from openetw.events.text import UNIX_EPOCH_FILETIME
from openetw.probe.lang.descriptions import Description

__all__ = ["EtwEnable", "LiveSessions", "LiveTarget", "etw_enables"]

_LEVEL_KEYWORD_ALL = (0xFF, 0xFFFFFFFFFFFFFFFF)
KERNEL_START_SECONDS = 10.0  # longest wait, before a -c command runs, for the kernel trace's first buffers
DRAIN_SECONDS = 60.0  # longest wait, at the end, for the kernel trace to deliver what it holds


def _now_filetime() -> int:
    return UNIX_EPOCH_FILETIME + time.time_ns() // 100


@dataclass
class EtwEnable:
    """What the session asks of one provider."""

    guid: uuid.UUID
    level: int = 0
    keywords: int = 0
    ids: set[int] | None = field(default_factory=set)  # None: every id

    def options(self, pid: int | None) -> dict[str, Any]:
        from openetw.session.enable import EventFilters

        filters = EventFilters(event_ids=frozenset(self.ids or ()), pids=frozenset([pid] if pid is not None else ()))
        level = 0 if self.level >= 0xFF else self.level
        keywords = 0 if self.keywords == 0xFFFFFFFFFFFFFFFF else self.keywords
        return {"level": level, "any": keywords, "all": 0, "filters": filters if self.ids or pid is not None else None}


def _level_keyword(function: str) -> tuple[int, int]:
    if not function or function == "*":
        return _LEVEL_KEYWORD_ALL
    level, sep, keyword = function.partition("_")
    try:
        return int(level, 16), int(keyword, 16) if sep else 0
    except ValueError:
        raise InvalidArgument(f"a live etw probe names its level and keyword as 0x05_0x0000000000000001, not {function!r}") from None


def etw_enables(descriptions: Sequence[Description], *, resolve: Callable[[str], uuid.UUID] | None = None) -> dict[uuid.UUID, EtwEnable]:
    """The providers a live session enables for these ``etw`` descriptions (see the module doc)."""
    enables: dict[uuid.UUID, EtwEnable] = {}
    for desc in descriptions:
        module = desc.module
        if not module or any(c in module for c in "*?["):
            raise InvalidArgument(f"{desc.text}: a live etw probe names its provider (a GUID or a name), without wildcards")
        try:
            guid = uuid.UUID(module.strip("{}"))
        except ValueError:
            if resolve is None:
                raise InvalidArgument(f"{desc.text}: unknown provider {module!r}") from None
            guid = resolve(module)
        level, keywords = _level_keyword(desc.function)
        found = enables.setdefault(guid, EtwEnable(guid))
        found.level = max(found.level, level if level else 0xFF)
        found.keywords |= keywords if keywords else 0xFFFFFFFFFFFFFFFF
        name = desc.name
        if found.ids is not None:
            if name.isdigit():
                found.ids.add(int(name))
            else:
                found.ids = None
    return enables


def _resolve_name(name: str) -> uuid.UUID:
    from openetw.manifest.store.lookup import resolve_provider

    resolved = resolve_provider(name)
    return resolved.guid


class LiveTarget:
    """``-p PID`` or ``-c CMD``: the process a run traces; ``$target`` is its pid."""

    def __init__(self, *, pid: int | None = None, command: str | None = None) -> None:
        if (pid is None) == (command is None):
            raise InvalidArgument("a target is -p PID or -c CMD")
        self.process: subprocess.Popen[bytes] | None = None
        self._release: int | None = None
        if pid is not None:
            if pid <= 0 or not os.path.exists(f"/proc/{pid}"):
                raise InvalidArgument(f"-p {pid}: no such process")
            self.pid = pid
            return
        assert command is not None
        argv = shlex.split(command)
        if not argv:
            raise InvalidArgument("-c needs a command")
        read_end, write_end = os.pipe()
        # The command waits on a pipe before it execs itself (keeping its pid), so that sessions
        # filter on its pid before its first event.
        held = ["/bin/sh", "-c", 'read _ <&3; exec 3<&-; exec "$@"', "openetw-probe-target", *argv]
        try:
            self.process = subprocess.Popen(held, pass_fds=(read_end,), preexec_fn=_to_fd3(read_end))
        except OSError as error:
            os.close(write_end)
            raise InvalidArgument(f"-c {command!r}: {error.strerror}") from None
        finally:
            os.close(read_end)
        self._release = write_end
        self.pid = self.process.pid

    def release(self) -> None:
        """Let a ``-c`` command run (it waits until the sessions are ready)."""
        if self._release is not None:
            os.write(self._release, b"go\n")
            os.close(self._release)
            self._release = None

    def exited(self) -> bool:
        if self.process is not None:
            return self.process.poll() is not None
        try:
            with open(f"/proc/{self.pid}/stat", encoding="ascii", errors="replace") as stat:
                state = stat.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            return True
        return state in ("Z", "X")

    @property
    def status(self) -> int | None:
        """A ``-c`` command's exit status (a signal N as 128 + N), once it exited."""
        if self.process is None or self.process.returncode is None:
            return None
        code = self.process.returncode
        return 128 - code if code < 0 else code

    def close(self) -> None:
        if self._release is not None:
            os.close(self._release)
            self._release = None
        if self.process is not None and self.process.poll() is None:
            self.process.wait()


def _to_fd3(fd: int) -> Callable[[], None]:
    def move() -> None:
        if fd != 3:
            os.dup2(fd, 3)

    return move


class LiveSessions:
    """The live sessions of a run, as the runner's event source (``run(callback)``, ``stop()``)."""

    index = False
    live = True

    def __init__(self, etw: Sequence[Description], *, kernel_flags: Sequence[str] = (), profile_rate: int | None = None,
                 target: LiveTarget | None = None, resolve: Callable[[str], uuid.UUID] | None = None,
                 buffer_size_kb: int = 64, kernel_buffer_kb: int = 4096, ready: Callable[[str], Any] | None = None,
                 manifests: Any = None, kernel_syscall_args: Sequence[str] | None = None,
                 kernel_syscall_args_execnames: Sequence[str] | None = None) -> None:  # fmt: skip
        """``kernel_syscall_args``, ``kernel_syscall_args_execnames``: the system calls whose
        arguments the ``syscall_args`` kernel flag records, of threads of these names (see
        ``Session.start``; the target's processes only when there is a target)."""
        self.ready = ready
        self.paths: list[str] = []
        self.evtx: list[str] = []
        self.manifests = manifests  # what the sessions decode with (a schema registry; None: the installed manifests)
        self.errors: list[BaseException] = []
        self.trace: Any = None
        self.target = target
        self.enables = etw_enables(etw, resolve=resolve or _resolve_name) if etw else {}
        self.kernel_flags = list(kernel_flags)
        self.kernel_syscall_args = list(kernel_syscall_args) if kernel_syscall_args is not None else None
        self.kernel_syscall_args_execnames = list(kernel_syscall_args_execnames) if kernel_syscall_args_execnames is not None else None
        self.profile_rate = profile_rate
        self.buffer_size_kb = buffer_size_kb
        self.kernel_buffer_kb = kernel_buffer_kb
        self.sessions: list[Any] = []
        self.traces: list[Any] = []
        self.stats: dict[str, Any] = {}
        self.kernel_behind = False  # the run ended before the kernel trace had delivered up to its end
        self._done = threading.Event()
        self._stopping = threading.Event()  # the run ends the sessions: their streams end with them
        self._lock = threading.Lock()
        if self.kernel_flags and os.geteuid() != 0:
            raise AccessDenied(
                "kernel probes need root: the kernel trace reads tracefs and perf events, which only root may "
                f"(run openetw probe as root; these probes need the kernel flags {', '.join(self.kernel_flags)})"
            )

    @property
    def lock(self) -> threading.Lock:
        """Held while a record is delivered: timers firing from another thread take it too."""
        return self._lock

    def _start_sessions(self) -> None:
        from openetw.controller import Session

        stamp = f"{os.getpid()}-{time.monotonic_ns() % 10**9}"
        pid = self.target.pid if self.target is not None else None
        if self.enables:
            providers = [(str(e.guid), e.options(pid)) for e in self.enables.values()]
            self.sessions.append(Session.start(f"openetw-probe-{stamp}", mode="realtime", flush_timer=1, end_with_connection=True,
                                               buffer_size=self.buffer_size_kb, providers=providers))  # fmt: skip
        if self.kernel_flags:
            self.sessions.append(Session.start(
                f"openetw-probe-kernel-{stamp}", mode="realtime", flush_timer=1, end_with_connection=True,
                buffer_size=max(256, self.buffer_size_kb),
                max_buffers=max(64, self.kernel_buffer_kb // 256),
                kernel_flags=self.kernel_flags, kernel_buffer_size=self.kernel_buffer_kb, kernel_profile_rate=self.profile_rate,
                kernel_syscall_args=self.kernel_syscall_args if "syscall_args" in self.kernel_flags else None,
                # The probes fire for the target and its children only: so are the arguments recorded.
                kernel_syscall_args_pids=[pid] if pid is not None and "syscall_args" in self.kernel_flags else None,
                kernel_syscall_args_execnames=self.kernel_syscall_args_execnames if "syscall_args" in self.kernel_flags else None,
            ))  # fmt: skip

    def run(self, callback: Callable[[Any, Any], None], kernel_batch: Callable[[Any], None] | None = None,
            caught_up: Callable[[int, bool], bool] | None = None) -> dict[str, Any]:  # fmt: skip
        """Start the sessions, let the target go, deliver every record until the run ends: etw
        records to ``callback(record, context)``, the kernel session's batches of buffers (each a
        ``BufferIndex``) to ``kernel_batch``; ``caught_up(filetime)`` says whether the kernel
        batches reached that time, and with a target that exited, its exit (the run waits for it, at most ``DRAIN_SECONDS``, before it
        stops the kernel session)."""
        from openetw.consumer import UserTrace
        from openetw.events.sources import open_session

        lock = self._lock

        def deliver(record: Any, context: Any) -> None:
            with lock:
                callback(record, context)

        kernel_flowing = threading.Event()

        def deliver_kernel(batch: Any) -> None:
            kernel_flowing.set()
            assert kernel_batch is not None
            kernel_batch(batch)

        try:
            self._start_sessions()
            threads = []
            for session in self.sessions:
                if "kernel" in session.name:
                    if kernel_batch is None:
                        raise InvalidArgument("kernel probes need a runner that takes kernel batches")
                    source = open_session(session.name)
                    source.open()
                    self.traces.append(source)
                    threads.append(threading.Thread(target=self._consume_kernel, args=(source, deliver_kernel), daemon=True))
                    continue
                trace = UserTrace(sessions=[session.name], manifests=self.manifests)
                trace.set_default_event_callback(deliver)
                trace.on_error(lambda error, record: self.errors.append(error))
                trace.open()
                self.traces.append(trace)
                self.trace = trace
                threads.append(threading.Thread(target=self._consume, args=(trace,), daemon=True))
            for thread in threads:
                thread.start()
            if self.ready is not None:
                self.ready(self.describe())
            if self.target is not None:
                if self.kernel_flags:
                    # The kernel trace reaches its consumer a flush later than the session starts:
                    # a command let go before then would run its first moments untraced.
                    kernel_flowing.wait(KERNEL_START_SECONDS)
                self.target.release()
            while not self._done.wait(0.05):
                if self.target is not None and self.target.exited():
                    break
                if threads and not any(thread.is_alive() for thread in threads):
                    break  # (a program of BEGIN, END and timers alone has no sessions: it runs until exit() or Ctrl-C)
            if caught_up is not None:
                # The kernel trace reads each CPU's ring on its own and stopping it drops what it
                # has not read: first let it come up to now (or to exit()'s moment).
                end = _now_filetime()
                deadline = time.monotonic() + DRAIN_SECONDS
                exited = self.target is not None and self.target.exited()
                while not caught_up(end, exited) and time.monotonic() < deadline and any(thread.is_alive() for thread in threads):
                    time.sleep(0.05)
                if not caught_up(end, exited):
                    self.kernel_behind = True  # stopped before the kernel trace delivered up to the end: said at exit
            self._stopping.set()
            self._stop_sessions()
            for thread in threads:
                thread.join()
        finally:
            self._stop_sessions()
            for trace in self.traces:
                trace.close()
            if self.target is not None:
                self.target.close()
        return self.stats

    def describe(self) -> str:
        """What the run traces, for the line a live run prints when it starts."""
        parts = [f"{len(self.enables)} provider(s)"] if self.enables else []
        if self.kernel_flags:
            parts.append(f"kernel flags {','.join(self.kernel_flags)}")
        if self.target is not None:
            parts.append(f"process {self.target.pid}")
        if not self.enables and not self.kernel_flags:
            parts.append("no events (BEGIN, END and timers only)")
        return "tracing " + "; ".join(parts)

    def _consume(self, trace: Any) -> None:
        try:
            trace.process()
            self._ended_early("the session's")
        except OpenEtwError as error:
            self.errors.append(error)
        finally:
            self._done.set()

    def _consume_kernel(self, source: Any, kernel_batch: Callable[[Any], None]) -> None:
        try:
            for index in source.buffer_indexes():
                with self._lock:
                    kernel_batch(index)
            self._ended_early("the kernel session's")
        except OpenEtwError as error:
            self.errors.append(error)
        finally:
            self._done.set()

    def _ended_early(self, whose: str) -> None:
        """A stream that ends while the run goes on: its session ended without us (the trace
        service stopped or died, or someone stopped the session)."""
        if not self._stopping.is_set():
            self.errors.append(ServiceError(f"{whose} real-time stream ended before the run did: the trace service stopped or "
                                            "went away, or the session was stopped; what came before is reported"))  # fmt: skip

    def _stop_sessions(self) -> None:
        sessions, self.sessions = self.sessions, []
        totals: dict[str, int] = {}
        for session in sessions:
            try:
                final = session.stop()
            except OpenEtwError as error:
                self.errors.append(error)
                continue
            for key, value in final.items():
                totals[key] = totals.get(key, 0) + int(value)
        if sessions:
            self.stats = totals

    def stop(self) -> None:
        """End the run (``exit()``, SIGINT): from any thread."""
        self._stopping.set()
        self._done.set()
