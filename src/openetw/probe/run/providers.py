"""The registry of probe providers: which provider names a description may use and who fires them.

``etw`` fires on the records of trace files or live sessions; ``dtrace`` (BEGIN/END/ERROR) and
the timers (``profile`` ``tick-N``, ``interval``) are run by the runner itself; ``syscall``,
``proc``, ``sched``, ``io``, ``tcp`` (and live ``profile-N``) fire from a live kernel trace
(``openetw.probe.run.kernel_probes``).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["FAMILIES", "PROBE_PROVIDERS", "ProbeProvider", "register_provider"]


@dataclass(frozen=True)
class ProbeProvider:
    name: str
    description: str
    over_files: bool


PROBE_PROVIDERS: dict[str, ProbeProvider] = {}


def register_provider(provider: ProbeProvider) -> None:
    PROBE_PROVIDERS[provider.name] = provider


register_provider(ProbeProvider("etw", "ETW events: etw:<provider>:<level>_<keyword>:<event id|name|generic_event>", True))
register_provider(ProbeProvider("dtrace", "BEGIN, END and ERROR", True))
register_provider(ProbeProvider("profile", "tick-N timers on trace time", True))
register_provider(ProbeProvider("interval", "interval:<unit>:<count> timers on trace time", True))
register_provider(ProbeProvider("syscall", "system calls: syscall::<name>:entry|return (live, root)", False))
register_provider(ProbeProvider("proc", "processes: proc:::exec-success|exit|create (live, root)", False))
register_provider(ProbeProvider("sched", "context switches: sched:::on-cpu|off-cpu (live, root)", False))
register_provider(ProbeProvider("io", "disk requests: io::read|write|flush:start|done (live, root)", False))
register_provider(ProbeProvider("tcp", "TCP payloads: tcp:::send|receive (live, root)", False))

FAMILIES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # family -> (probe names, kernel flags the session needs)
    "syscall": (("entry", "return"), ("syscall", "cswitch", "process", "thread")),
    "proc": (("exec-success", "exit", "create"), ("process",)),
    "sched": (("on-cpu", "off-cpu"), ("cswitch", "process", "thread")),
    "io": (("start", "done"), ("disk_io", "process", "thread")),
    "tcp": (("send", "receive"), ("network", "process")),
    "profile": ((), ("profile", "process", "thread", "image")),
}
"""Each kernel probe provider: its probe names and the kernel flags its probes need."""
