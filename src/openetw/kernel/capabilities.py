"""What kernel event sources this machine offers to this process, and why not when it does not.

``probe()`` returns data (no printing, nothing raised): one :class:`Capability` per source with
``available`` and a short reason such as ``"tracefs: needs root"``, ``"tracefs: not mounted"``,
``"perf side-band: own children only"`` or ``"proc connector: available"`` (found by
subscribing to it, not only by opening a socket).
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from openetw.errors import OpenEtwError
from openetw.kernel.classes import FLAG_EVENTS
from openetw.kernel.proc_connector import ProcConnectorSource
from openetw.kernel.tracefs import find_tracefs

__all__ = ["Capability", "KernelCapabilities", "probe"]


@dataclass(frozen=True, slots=True)
class Capability:
    name: str
    available: bool
    reason: str
    detail: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class KernelCapabilities:
    kernel: str
    euid: int
    items: tuple[Capability, ...]

    def get(self, name: str) -> Capability | None:
        return next((item for item in self.items if item.name == name), None)

    def as_dict(self) -> dict[str, Any]:
        return {"kernel": self.kernel, "euid": self.euid, "items": [asdict(item) for item in self.items]}


def _read_int(path: str) -> int | None:
    try:
        return int(Path(path).read_text().strip())
    except (OSError, ValueError):
        return None


def _tracefs() -> tuple[Capability, Capability]:
    root = find_tracefs()
    if root is None:
        default = Path("/sys/kernel/tracing")
        reason = "tracefs: needs root" if default.exists() and not os.access(default, os.R_OK) else "tracefs: not mounted"
        missing = Capability("tracepoints", False, "tracepoints: tracefs unavailable")
        return Capability("tracefs", False, reason), missing
    if not os.access(root, os.R_OK | os.X_OK) or not os.access(root / "instances", os.W_OK):
        return Capability("tracefs", False, "tracefs: needs root"), Capability("tracepoints", False, "tracepoints: tracefs unavailable")
    tracefs = Capability("tracefs", True, f"tracefs: available at {root}")
    absent = sorted({event for events in FLAG_EVENTS.values() for event in events if not (root / "events" / event).is_dir()})
    flags_missing = sorted(flag for flag, events in FLAG_EVENTS.items() if any(e in absent for e in events))
    if absent:
        reason = f"tracepoints: missing {', '.join(absent)} (flags affected: {', '.join(flags_missing)})"
    else:
        reason = "tracepoints: every flag's tracepoints present"
    return tracefs, Capability("tracepoints", not absent, reason, tuple(absent))


def _perf() -> Capability:
    paranoid = _read_int("/proc/sys/kernel/perf_event_paranoid")
    if not Path("/proc/sys/kernel/perf_event_paranoid").exists():
        return Capability("perf", False, "perf: not built into this kernel")
    if os.geteuid() == 0:
        return Capability("perf", True, "perf side-band: system-wide (root)")
    if paranoid is not None and paranoid >= 3:
        return Capability("perf", False, f"perf side-band: disabled (perf_event_paranoid={paranoid})")
    if paranoid is not None and paranoid <= 0:
        return Capability("perf", True, f"perf side-band: system-wide (perf_event_paranoid={paranoid})")
    return Capability("perf", True, f"perf side-band: own children only (perf_event_paranoid={paranoid})")


def _proc_connector() -> Capability:
    """Subscribes for real (and unsubscribes): binding alone succeeds where the kernel then
    refuses the subscription (before Linux 6.6 without CAP_NET_ADMIN) or ignores it (outside
    the initial user and pid namespaces)."""
    source = ProcConnectorSource(receive_buffer=65536, subscribe_timeout=0.5, exact_loss=False)
    try:
        source.start()
    except OpenEtwError as error:
        return Capability("proc_connector", False, str(error))
    finally:
        source.close()
    return Capability("proc_connector", True, "proc connector: available")


def _bpf() -> Capability:
    disabled = _read_int("/proc/sys/kernel/unprivileged_bpf_disabled")
    if not Path("/sys/kernel/btf/vmlinux").exists():
        return Capability("bpf", False, "bpf: no BTF (/sys/kernel/btf/vmlinux)")
    if os.geteuid() == 0:
        return Capability("bpf", True, "bpf: available (root)")
    if disabled:
        return Capability("bpf", False, f"bpf: needs root (unprivileged_bpf_disabled={disabled})")
    return Capability("bpf", True, "bpf: available unprivileged")


def probe() -> KernelCapabilities:
    """Probes every source; cheap (a few file reads and one netlink socket)."""
    tracefs, tracepoints = _tracefs()
    return KernelCapabilities(
        kernel=platform.release(),
        euid=os.geteuid(),
        items=(tracefs, tracepoints, _perf(), _proc_connector(), _bpf()),
    )
