"""``KernelTrace``: krabsetw's kernel trace, over a real-time kernel session of the trace service.

::

    trace = KernelTrace()
    processes = process_provider()                 # KernelProvider("process")
    processes.add_on_event_callback(lambda record, context: ...)
    trace.enable(processes)
    trace.start()                      # blocks; trace.stop() from another thread ends it

A kernel provider names a kernel flag (what the session records: ``process``, ``thread``,
``image``, ``cswitch``, ``disk_io``, ``file_io``, ``network``, ``page_fault``, ``syscall``,
``profile``; the names of ``openetw kernel start --flags`` work too) and the event class GUID its records carry
(Process ``3d6fa8d0-...``, Thread ``3d6fa8d1-...``, ...): callbacks and filters work as on a
``UserTrace`` and records decode through the kernel's MOF schemas (``context.parser_for``).

``KernelTrace()`` starts a private real-time kernel session with the flags of its providers
(and ``flags=[...]``) and stops it when the trace closes; ``KernelTrace(sessions=["Name"])``
consumes a kernel session someone started (``openetw session start Name --kernel-flags ...
--mode realtime``). Starting one needs root: others get ``AccessDenied`` saying what they may
do instead.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterable, Sequence
from typing import Any

from openetw.consumer.errors import LiveSessionUnavailable
from openetw.consumer.live import private_session_name
from openetw.consumer.provider import Provider
from openetw.consumer.trace import UserTrace
from openetw.errors import InvalidArgument, OpenEtwError, ServiceError
from openetw.tdh.mof_kernel import GROUP_GUIDS

__all__ = [
    "KERNEL_PROVIDER_GROUPS",
    "KernelProvider",
    "KernelTrace",
    "context_switch_provider",
    "disk_io_provider",
    "network_tcpip_provider",
    "process_provider",
    "system_call_provider",
    "thread_provider",
]

KERNEL_PROVIDER_GROUPS: dict[str, int] = {
    "process": 0x03,  # Process
    "thread": 0x05,  # Thread
    "cswitch": 0x05,  # Thread/CSwitch
    "image": 0x14,  # Image
    "disk_io": 0x01,  # DiskIo
    "file_io": 0x04,  # FileIo
    "network": 0x06,  # TcpIp
    "page_fault": 0x02,  # PageFault
    "syscall": 0x0F,  # PerfInfo/SysClEnter, SysClExit
    "profile": 0x0F,  # PerfInfo/SampledProfile
}
"""Kernel flag → the kernel group (event class) whose records it brings."""


def _flag(name: str) -> str:
    """A kernel flag by any name ``openetw kernel start --flags`` takes (``disk``, ``net``, ...)."""
    from openetw.kernel.control import parse_flags

    (flag,) = parse_flags([name])
    if flag not in KERNEL_PROVIDER_GROUPS:
        raise InvalidArgument(f"kernel flag {name!r} has no event class here; known: {', '.join(KERNEL_PROVIDER_GROUPS)}")
    return flag


class KernelProvider(Provider):
    """krabsetw's ``kernel_provider``: a kernel flag and the event class GUID of its records.

    ``KernelProvider("process")`` takes the class GUID of the flag's group; give ``guid`` to
    receive another class the flag's records belong to.
    """

    def __init__(self, flag: str, guid: uuid.UUID | str | None = None) -> None:
        self.flag = _flag(flag)
        super().__init__(guid if guid is not None else GROUP_GUIDS[KERNEL_PROVIDER_GROUPS[self.flag]])
        self.name = f"kernel:{self.flag}"

    def __repr__(self) -> str:
        return f"<KernelProvider {self.flag} {self.guid} callbacks={len(self.callbacks)} filters={len(self.filters)}>"


def process_provider() -> KernelProvider:
    return KernelProvider("process")


def thread_provider() -> KernelProvider:
    return KernelProvider("thread")


def context_switch_provider() -> KernelProvider:
    return KernelProvider("cswitch")


def disk_io_provider() -> KernelProvider:
    return KernelProvider("disk_io")


def network_tcpip_provider() -> KernelProvider:
    return KernelProvider("network")


def system_call_provider() -> KernelProvider:
    return KernelProvider("syscall")


class KernelTrace(UserTrace):
    """The kernel trace, live (see the module doc). Everything else is ``UserTrace``'s."""

    def __init__(
        self,
        name: str | None = None,
        *,
        flags: Iterable[str] = (),
        sessions: Sequence[str] | None = None,
        kernel_buffer_size: int = 1024,
        buffer_size: int = 64,
        socket: str | os.PathLike[str] | None = None,
        flush_timer: int = 1,
        **options: Any,
    ) -> None:
        if options.get("files"):
            raise InvalidArgument("a kernel trace is live; read kernel .etl files with UserTrace(files=[...])")
        super().__init__(name, sessions=sessions, socket=socket, flush_timer=flush_timer, **options)
        self.flags = [_flag(flag) for flag in flags]
        self.kernel_buffer_size = kernel_buffer_size
        self.buffer_size = buffer_size
        self._own_session: Any = None
        self.session_final: dict[str, Any] | None = None

    def enable(self, provider: Provider) -> None:
        """A ``KernelProvider`` adds its flag to the session; any ``Provider`` (by class GUID)
        gets the records of that class the session's flags bring."""
        super().enable(provider)

    @property
    def kernel_flags(self) -> list[str]:
        wanted = list(self.flags)
        for provider in self.providers:
            if isinstance(provider, KernelProvider) and provider.flag not in wanted:
                wanted.append(provider.flag)
        return wanted

    def open(self) -> KernelTrace:
        """Start the private kernel session (unless consuming named ones), then attach to it."""
        if self._opened:
            return self
        if not self.sessions:
            self._start_own_session()
        try:
            super().open()
        except BaseException:
            self._stop_own_session()
            raise
        return self

    def _start_own_session(self) -> None:
        flags = self.kernel_flags
        if not flags:
            raise InvalidArgument("a kernel trace needs a kernel provider (KernelProvider(\"process\"), ...) or flags=[...]")
        try:
            from openetw.controller import Session
        except ImportError as error:
            raise LiveSessionUnavailable(f"kernel traces need the trace service and its controller: {error}") from error
        name = self.name or private_session_name()
        try:
            self._own_session = Session.start(
                name, mode="realtime", kernel_flags=flags, kernel_buffer_size=self.kernel_buffer_size,
                buffer_size=self.buffer_size, flush_timer=self.flush_timer, socket=self.socket, end_with_connection=True,
            )  # fmt: skip
        except ServiceError as error:
            if type(error) is ServiceError:  # the service itself could not be reached
                raise LiveSessionUnavailable(f"kernel traces need the trace service: {error}") from error
            raise
        self.sessions = [name]

    def close(self) -> None:
        super().close()
        self._stop_own_session()

    def _stop_own_session(self) -> None:
        session, self._own_session = self._own_session, None
        if session is not None:
            try:
                session.stop()
                self.session_final = session.info()
            except OpenEtwError:
                pass

    def query_stats(self) -> dict[str, Any]:
        """``UserTrace.query_stats`` plus the kernel session's statistics under ``"session"``."""
        out = super().query_stats()
        if self._own_session is not None:
            try:
                out["session"] = self._own_session.query()
            except OpenEtwError:
                pass
        elif self.session_final is not None:
            out["session"] = {key: self.session_final.get(key) for key in ("events_written", "events_lost", "buffers_written", "realtime_buffers_lost")}
        return out

    def __repr__(self) -> str:
        return f"<KernelTrace {self.name or ''} flags={','.join(self.kernel_flags)} providers={len(self.providers)}>"
