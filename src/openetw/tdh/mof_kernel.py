"""Classic (MOF) event layouts of the NT Kernel Logger and of KernelTraceControl, as data.

Kernel events reach a file with a SYSTEM/COMPACT/PERFINFO header carrying a HookId
(``group << 8 | type``) and the MOF version; classic user-mode events carry an
EVENT_TRACE_HEADER with the class GUID, the type (opcode) and the version. Both are looked up
here::

    match = find_layout(0x03, 1, 4)                       # group 3 = Process, type 1 = Start
    match = find_layout("b3e675d7-2554-4f18-830b-2762732560de", 36, 2)   # ImageID/DbgID_RSDS
    match.mof_class.task_name, match.event.event_name, match.event.fields

Nothing here decodes bytes: the tables say which fields follow in which order and with which
TDH types; :mod:`openetw.tdh` turns them into schemas.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

from openetw.errors import InvalidArgument
from openetw.guids import parse_guid
from openetw.tdh.mof_kernel_config import CONFIG_CLASSES
from openetw.tdh.mof_kernel_core import CORE_CLASSES, KERNEL, TDH_KERNEL
from openetw.tdh.mof_kernel_io import IO_CLASSES
from openetw.tdh.mof_kernel_types import REST, MofClass, MofEvent, MofField

__all__ = [
    "GROUP_GUIDS",
    "HOOK_ALIASES",
    "KERNEL",
    "KERNEL_CLASSES",
    "REST",
    "SYSTEM_TRACE_CONTROL_GUID",
    "TDH_KERNEL",
    "LayoutMatch",
    "MofClass",
    "MofEvent",
    "MofField",
    "event_full_name",
    "find_class",
    "find_layout",
]

SYSTEM_TRACE_CONTROL_GUID = uuid.UUID("9e814aad-3204-11d2-9a82-006008a86939")
"""The NT Kernel Logger's control GUID (the MOF provider ``MSNT_SystemTrace``)."""

KERNEL_CLASSES: tuple[MofClass, ...] = CORE_CLASSES + IO_CLASSES + CONFIG_CLASSES

GROUP_GUIDS: Mapping[int, uuid.UUID] = MappingProxyType({
    **{cls.group: cls.guid for cls in KERNEL_CLASSES if cls.group is not None},
    # EVENT_TRACE_GROUP_* whose events have no layout here, so that a decoder can still name
    # the class of an unknown hook.
    0x07: uuid.UUID("3282fc76-feed-498e-8aa7-e70f459d430e"),  # Job
    0x0A: uuid.UUID("13976d09-a327-438c-950b-7f03192815c7"),  # DbgPrint
    0x0E: uuid.UUID("0268a8b6-74fd-4302-9dd0-6e8f1795c0cf"),  # Pool
    0x10: uuid.UUID("222962ab-6180-4b88-a825-346b75f2a24a"),  # Heap
    0x12: uuid.UUID("e43445e0-0903-48c3-b878-ff0fccebdd04"),  # Power
    0x13: uuid.UUID("a9152f00-3f58-4bee-92a1-70c7d079d5dd"),  # ModBound
    0x15: uuid.UUID("b2d14872-7c5b-463d-8419-ee9bf7d23e04"),  # Dpc
    0x17: uuid.UUID("3ac66736-cc59-4cff-8115-8df50e39816b"),  # CritSec
    0x1C: uuid.UUID("c861d0e2-a2c1-4d36-9f9c-970bab943a12"),  # ThreadPool
})
"""Kernel group (the high byte of a HookId) → event class GUID."""

HOOK_ALIASES: Mapping[tuple[int, int], tuple[int, int]] = MappingProxyType({
    # Image loads are logged with the PROCESS group's HookId 0x030A and decoded as Image/Load.
    (0x03, 10): (0x14, 10),
})
"""``(group, type)`` pairs logged under one group but belonging to another class."""


class LayoutMatch(NamedTuple):
    """A found layout. ``version_fallback`` is true when the asked version is not tabulated
    and the highest lower version was taken instead."""

    mof_class: MofClass
    event: MofEvent
    version_fallback: bool


def _index() -> tuple[
    dict[uuid.UUID, MofClass],
    dict[tuple[uuid.UUID, int], list[tuple[int, MofEvent]]],
]:
    classes: dict[uuid.UUID, MofClass] = {}
    events: dict[tuple[uuid.UUID, int], list[tuple[int, MofEvent]]] = {}
    for cls in KERNEL_CLASSES:
        classes[cls.guid] = cls
        for event in cls.events:
            events.setdefault((cls.guid, event.opcode), []).append((event.version, event))
    for layouts in events.values():
        layouts.sort(key=lambda pair: pair[0])
    return classes, events


_CLASSES_BY_GUID, _EVENTS = _index()


def _class_guid(guid_or_group: uuid.UUID | str | int) -> uuid.UUID | None:
    if isinstance(guid_or_group, int):
        return GROUP_GUIDS.get(guid_or_group)
    try:
        return parse_guid(guid_or_group)
    except ValueError as error:
        raise InvalidArgument(f"not a GUID or kernel group: {guid_or_group!r}") from error


def find_class(guid_or_group: uuid.UUID | str | int) -> MofClass | None:
    """The class of an event GUID, or of a kernel group number; ``None`` if not tabulated.

    Raises :class:`~openetw.errors.InvalidArgument` for text that is not a GUID.
    """
    guid = _class_guid(guid_or_group)
    return None if guid is None else _CLASSES_BY_GUID.get(guid)


def find_layout(guid_or_group: uuid.UUID | str | int, opcode: int, version: int) -> LayoutMatch | None:
    """The layout of one event, by class GUID or kernel group, opcode (type) and version.

    An unknown version falls back to the highest known version below it (``version_fallback``
    is then set); ``None`` when there is none or the class/opcode is not tabulated.
    """
    if isinstance(guid_or_group, int):
        guid_or_group, opcode = HOOK_ALIASES.get((guid_or_group, opcode), (guid_or_group, opcode))
    guid = _class_guid(guid_or_group)
    if guid is None:
        return None
    layouts = _EVENTS.get((guid, opcode))
    if not layouts:
        return None
    best: MofEvent | None = None
    for known_version, event in layouts:
        if known_version > version:
            break
        best = event
    if best is None:
        return None
    return LayoutMatch(_CLASSES_BY_GUID[guid], best, best.version != version)


def event_full_name(mof_class: MofClass, event: MofEvent) -> str:
    """``Provider/Task/Event`` as PerfView prints it.

    Events of opcode 0 (``EventTrace/Header``, ``ImageID/Info``) and unnamed events show as
    ``Provider/Task``, as in PerfView's baselines.
    """
    provider = event.provider_name or mof_class.provider_name
    task = event.task_name or mof_class.task_name
    if event.opcode == 0 or not event.event_name:
        return f"{provider}/{task}"
    return f"{provider}/{task}/{event.event_name}"
