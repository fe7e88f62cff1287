"""The text PerfView's TraceEvent ``GeneralParsing`` test writes: ``EVENT`` lines, then ``COUNT`` lines.

For each event TraceLog keeps (see ``tracelog``) and the test does not skip::

    EVENT <ms since session start, n3>: <Provider>/<Event> PID=..; TID=..; PName=..; ProceNum=..; DataLen=..; <field>=<value>; ...

for at most five events of each name, values cut to 20 characters; then one
``COUNT <Provider>/<Event>:<n>`` line per name, in ordinal order. Field lists and value
formats are TraceEvent's (``views_*`` modules, ``render``); PName comes from the trace-state
tracker (``openetw.events.trace_state.TraceState``, a ``DecodeContext``)
that has learned the whole trace (PerfView names a process from anywhere in the trace).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, Any

from openetw.errors import OpenEtwError
from openetw.events.trace_state import TraceState
from openetw.report.perfview import dotnet
from openetw.report.perfview.catalog import view_for
from openetw.report.perfview.render import render_property
from openetw.report.perfview.state import PerfViewState, relative_msec
from openetw.report.perfview.tracelog import event_identity, removed_by_tracelog, skipped_by_test
from openetw.report.perfview.views import EventInput
from openetw.tdh.context import DecodeContext
from openetw.tdh.registry import SchemaRegistry

if TYPE_CHECKING:
    from openetw.etl.record import EventRecord

__all__ = ["MAX_EVENTS_PER_NAME", "PerfViewReport", "perfview_lines"]

MAX_EVENTS_PER_NAME = 5


class PerfViewReport:
    """Turns records (in time order) into PerfView's lines; ``counts`` holds the histogram."""

    def __init__(self, registry: SchemaRegistry, context: DecodeContext, *, max_per_name: int = MAX_EVENTS_PER_NAME) -> None:
        self.registry = registry
        self.context = context
        self.max_per_name = max_per_name
        self.counts: dict[str, int] = {}
        self.state = PerfViewState(context)

    def learn(self, records: Iterable[Any]) -> None:
        """A first pass over the whole trace: names the trace gives anywhere (processes, files,
        .NET types). Call it before ``event_lines`` with the same records."""
        for record in records:
            self.context.observe(record)
            if record.kind == "unknown":
                continue
            schema = self._schema(record)
            if schema is not None and _worth_learning(record):
                props = dict(self.registry.decode(schema, record.user_data, record.pointer_size).items())
                self.state.learn(record, props)

    def _schema(self, record: Any) -> Any:
        try:
            return self.context.schema_for(record)
        except OpenEtwError:
            return None

    def event_lines(self, records: Iterable[Any]) -> Iterator[str]:
        """The ``EVENT`` lines of ``records``; counts every event shown or not (``counts``)."""
        for record in records:
            if record.kind == "unknown":
                continue
            schema = self._schema(record)
            props: dict[str, Any] = {}
            if schema is not None:
                props = dict(self.registry.decode(schema, record.user_data, record.pointer_size).items())
            line = self._count(record, schema, props)
            if line is not None:
                yield line
            self.state.observe(record, props)

    def _count(self, record: Any, schema: Any, props: dict[str, Any]) -> str | None:
        """Count the event when PerfView would; its line while fewer than five of its name were shown."""
        if removed_by_tracelog(record, props):
            return None
        registry_name = None
        if schema is None and record.provider_guid_bytes is not None:
            try:
                registry_name = self.registry.provider_name(record)
            except (ImportError, OpenEtwError):
                registry_name = None
        provider, event = event_identity(record, schema, registry_name)
        if skipped_by_test(provider, event, schema):
            return None
        key = f"{provider}/{event}"
        count = self.counts[key] = self.counts.get(key, 0) + 1
        return self.line(record, key, schema, props) if count <= self.max_per_name else None

    def line(self, record: Any, key: str, schema: Any, props: dict[str, Any]) -> str:
        data = EventInput(props, schema, record, self.state)
        view = view_for(key, record, schema)
        pid, tid = dotnet.as_signed(record.pid, 32), dotnet.as_signed(record.tid, 32)
        if view is not None:
            if view.pid is not None:
                found = view.pid(data)
                pid = pid if found is None else found
            if view.tid is not None:
                found = view.tid(data)
                tid = tid if found is None else found
            pairs = view.render(data)
        else:
            pairs = self._schema_pairs(schema, props, self._from_manifest_xml(schema))
        parts = [
            f"EVENT {dotnet.n3_exact(relative_msec(record))}: {key} ",
            f"PID={pid}; TID={tid}; PName={self.process_name(pid, record)}; ",
            f"ProceNum={record.cpu}; DataLen={record.user_data_length}; ",
        ]
        parts.extend(f"{name}={dotnet.truncate(value)}; " for name, value in pairs)
        return "".join(parts)

    def _from_manifest_xml(self, schema: Any) -> bool:
        return schema is not None and schema.source == "manifest" and not self.context.is_carried(schema)

    @staticmethod
    def _schema_pairs(schema: Any, props: dict[str, Any], from_xml: bool) -> list[tuple[str, str]]:
        """The schema's properties as TraceEvent's generic parsers show them: a property that
        only gives another one's length is not shown."""
        if schema is None:
            return []
        lengths = {prop.length for prop in schema.properties if isinstance(prop.length, str)}
        return [
            (prop.name, render_property(props.get(prop.name), prop, schema.maps, unsigned_64_as_address=from_xml))
            for prop in schema.properties
            if prop.name not in lengths
        ]

    def process_name(self, pid: int, record: Any) -> str:
        if pid == -1:
            return ""
        name = self.context.process_name(pid & 0xFFFFFFFF, record.filetime)
        return name if name is not None else f"Process({pid})"

    def count_lines(self) -> list[str]:
        return [f"COUNT {key}:{self.counts[key]}" for key in sorted(self.counts, key=_ordinal)]


def _worth_learning(record: EventRecord) -> bool:
    """File names, disk event times, .NET type names and volume mappings: what ``PerfViewState.learn`` reads."""
    if record.kind in ("system", "compact", "perfinfo"):
        group = (record.hook_id or 0) >> 8
        return group == 0x04 or (group == 0x01 and record.opcode in (10, 11, 14))
    if record.kind in ("classic", "instance"):
        return record.opcode == 35
    return record.kind == "event" and record.id == 15


def _ordinal(text: str) -> list[int]:
    """.NET's ordinal string order: by UTF-16 code units."""
    encoded = text.encode("utf-16-le")
    return [int.from_bytes(encoded[i : i + 2], "little") for i in range(0, len(encoded), 2)]


def perfview_lines(read: Callable[[], Iterable[Any]], registry: SchemaRegistry, context: DecodeContext | None = None) -> Iterator[str]:
    """Every line of the report: the ``EVENT`` lines, then the ``COUNT`` lines.

    ``read`` returns the trace's records in time order each time it is called: once to learn
    the names the trace gives, once to show its events.
    """
    report = PerfViewReport(registry, context if context is not None else TraceState(registry))
    report.learn(read())
    yield from report.event_lines(read())
    yield from report.count_lines()
