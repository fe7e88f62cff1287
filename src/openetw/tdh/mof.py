"""Schemas from classic (MOF) event layouts: the kernel's and KernelTraceControl's tables.

The layout tables (``openetw.tdh.mof_kernel``) name types as strings; here they become a
``Schema`` with TDH's enums. Two table notions carry over to the decoder as they are:
``REST`` ("*") as a count or length ("everything left in the payload") and ``optional``
trailing fields (decoded only when bytes remain).

Names follow PerfView: ``provider_name`` "Windows Kernel" (or the event's own provider, such as
"KernelTraceControl" or "MSNT_SystemTrace"), ``event_name`` "Process/Start" (the task alone for
opcode 0 and unnamed events), ``task_name`` and ``opcode_name`` separately.
"""

from __future__ import annotations

import uuid

from openetw.etl.intypes import InType, OutType
from openetw.tdh.mof_kernel import event_full_name
from openetw.tdh.mof_kernel_types import MofClass, MofEvent, MofField
from openetw.tdh.schema import PropertyInfo, Schema

__all__ = ["schema_from_mof"]

_CACHE_LIMIT = 4096
# (id(class), id(event), provider) -> (class, event, schema); the objects are kept so that ids stay theirs.
_cache: dict[tuple[int, int, uuid.UUID | None], tuple[MofClass, MofEvent, Schema]] = {}


def _property(field: MofField) -> PropertyInfo:
    problem = None
    try:
        in_type: InType | int = InType[field.in_type]
    except KeyError:
        in_type, problem = InType.NULL, f"MOF type {field.in_type!r} is not a TDH in-type"
    out_type: OutType | None = None
    if field.out_type is not None:
        try:
            out_type = OutType[field.out_type]
        except KeyError:
            problem = problem or f"MOF out-type {field.out_type!r} is not a TDH out-type"
    elif in_type == InType.SIZET:
        out_type = OutType.UNSIGNEDLONG  # sizes and counts: decimal, where pointers show in hex
    return PropertyInfo(
        field.name,
        in_type,
        out_type,
        count=field.count,
        length=field.length,
        optional=field.optional,
        problem=problem,
    )


def _build(mof_class: MofClass, mof_event: MofEvent, provider_id: uuid.UUID | None) -> Schema:
    provider_name = mof_event.provider_name or mof_class.provider_name
    task_name = mof_event.task_name or mof_class.task_name
    full_name = event_full_name(mof_class, mof_event)
    event_name = full_name[len(provider_name) + 1 :] if full_name.startswith(provider_name + "/") else full_name
    return Schema(
        provider_id=provider_id if provider_id is not None else mof_class.guid,
        version=mof_event.version,
        opcode=mof_event.opcode,
        provider_name=provider_name,
        event_name=event_name,
        task_name=task_name,
        opcode_name=mof_event.event_name or None,
        properties=tuple(_property(field) for field in mof_event.fields),
        source="mof",
        event_guid=mof_class.guid,
    )


def schema_from_mof(mof_class: MofClass, mof_event: MofEvent, provider_id: uuid.UUID | None = None) -> Schema:
    """The schema of one MOF layout (cached per layout and provider id).

    ``provider_id`` is the record's provider (its event GUID for classic records); without it the
    class GUID is used. ``Schema.event_guid`` is always the class GUID. MOF events have no event
    id: ``event_id`` is 0 and the event type is ``opcode``.
    """
    key = (id(mof_class), id(mof_event), provider_id)
    found = _cache.get(key)
    if found is not None and found[0] is mof_class and found[1] is mof_event:
        return found[2]
    schema = _build(mof_class, mof_event, provider_id)
    if len(_cache) >= _CACHE_LIMIT:
        _cache.clear()
    _cache[key] = (mof_class, mof_event, schema)
    return schema
