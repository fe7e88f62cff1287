"""Providers in the application's process: register, learn who listens, write events into the pools.

::

    provider = TraceLoggingProvider("MyCompany.MyComponent").register()
    provider.write("Started", level=4, keyword=0x10, port=8080, host="example")

    started = provider.event("Started", level=4, keyword=0x10, fields=(("port", "uint16"), ("host", "string")))
    started.write(8080, "example")  # hot code: the fields declared once, the values by position

    manifest = Provider("{5eadbeef-...}").register()
    started = manifest.event((1, 0, 0, 4, 0, 0, 0x10), [("port", InType.UINT16)])
    manifest.write(started, 8080)

Registering never fails for want of a service: without one the provider is simply disabled and
attaches when a service appears. ``enabled`` is a plain attribute, so a disabled write costs one
attribute test. An enabled write is encoded once and copied into the pool of every session whose
rule (level, keywords, event id filter) takes it; a pool with no free buffer drops the event and
counts it, a record over 64 KB (or over the session's buffer) is refused and counted: the
session's ``events_lost`` includes both. ``write`` returns whether some session got the event.

The enable callback is ``callback(enabled, level, match_any, match_all, filter_data,
capture_state)``: ``level`` and ``match_any`` combine every enabling session (the most verbose
level, the union of keywords), ``match_all`` is what all of them require, ``filter_data`` lists
each session's rule. It runs on the provider runtime's own thread.
"""

from __future__ import annotations

import contextvars
import functools
import os
import struct
import sys
import threading
import time
import uuid
import weakref
from collections.abc import Callable, Mapping, Sequence
from types import CodeType, FunctionType
from typing import TYPE_CHECKING, Any, Self

from openetw._native import module
from openetw.errors import InvalidArgument
from openetw.etl import layouts as L
from openetw.guids import parse_guid, provider_guid_from_name
from openetw.provider.activity import activity_state, activity_variable, claim_activity_ids
from openetw.provider.link import REGISTER_WAIT, link

# The link hands pool writers over: a process that no session traces never loads the pool.
# The encoders load with the first event a session takes, the first declared event or the first
# manifest provider (``_load_encoding``): a TraceLogging provider nobody enables loads none of them.
if TYPE_CHECKING:
    from openetw.etl.extended import EXT_RELATED_ACTIVITYID, ExtendedItem, encode_extended_items
    from openetw.etl.intypes import InType
    from openetw.etl.payload import FieldSpec
    from openetw.etl.schema import PropertyInfo
    from openetw.ipc.pool import PoolWriter
    from openetw.provider.encode import (
        EventDescriptor,
        EventTooLarge,
        ManifestEventEncoder,
        TraceLoggingEncoderCache,
        TraceLoggingEventEncoder,
    )
    from openetw.session.enable import EnableState, SessionEnable

__all__ = ["EnableCallback", "Provider", "TraceLoggingEvent", "TraceLoggingProvider"]

EnableCallback = Callable[[bool, int, int, int, Any, bool], None]
WriteFn = Callable[[bytes, int, int], bool]
Target = tuple["SessionEnable", WriteFn]
Routes = dict[Any, tuple[WriteFn, ...]]  # by (level, keyword, event id)
# Whole writes outside activities, generated per event and routes (encoder.fast_writer_code):
# by manifest event encoder (``fast(values)``), or by (event name, level, keyword, opcode) of a
# TraceLogging event and by its name alone for its first variant (``fast(fields, level, keyword,
# opcode)``). They return whether a session got the event, or None: the general path decides.
FastWrite = Callable[..., "bool | None"]
FastWrites = dict[Any, FastWrite]
# The (field names, value types) each TraceLogging fast write was made for.
Shapes = dict[Any, Any]  # (name, level, keyword, opcode) -> (field names, value types); name -> its first such key
Routing = tuple[tuple[Target, ...], Routes, FastWrites, Shapes]  # replaced whole when sessions change

# A record no pool can take: writing it makes the pool count one refused event (shared memory,
# read by the service into events_lost) when the real record would have exceeded 64 KB.
_OVERSIZE = bytes(0x10000)
_ROUTE_CACHE_LIMIT = 4096
# Value types whose TraceLogging field follows from the type alone (ints: unless past 2**63,
# which the fast encoder's struct refuses, so the general path decides).
_PLAIN_TYPES = frozenset({bool, int, float, str, bytes, uuid.UUID})
_monotonic_ns = time.monotonic_ns
_native_id = threading.get_native_id
_EVENT_HEADER = L.EVENT_HEADER
# What a write into a pool unmapped under us raises (its session went away): nobody wants the event.
_UNMAPPED = (ValueError, IndexError, TypeError, BufferError)
# The process id every record carries: a module global costs the write path least (the
# generated fast writes read it from a list).
_pid = os.getpid()
_PID = [_pid]
# Each thread's native id, asked of the kernel once per thread (a system call per event was a
# sixth of an enabled write's cost); ``_thread_id()`` fills it in.
_thread_ids = threading.local()
# The activity state outside any activity block: the ContextVar's default.
_NO_ACTIVITY = contextvars.Context().run(activity_state)


def _thread_id() -> int:
    tid = _thread_ids.tid = _native_id()
    return tid


def _current_thread_id() -> int:
    try:
        return _thread_ids.tid  # type: ignore[no-any-return]
    except AttributeError:
        return _thread_id()


def _new_pid() -> None:
    global _pid
    _pid = _PID[0] = os.getpid()
    _thread_ids.__dict__.clear()  # the forking thread, the child's only one, has another id there


_FAST_WRITE_NAMES = {
    "CURRENT_ACTIVITY": activity_state, "NO_ACTIVITY": _NO_ACTIVITY, "CLOCK": _monotonic_ns, "THREAD_IDS": _thread_ids,
    "THREAD_ID": _thread_id, "PID": _PID, "UNMAPPED": _UNMAPPED,
}  # fmt: skip


_ENCODING_NAMES = (
    "EXT_RELATED_ACTIVITYID", "EventDescriptor", "EventTooLarge", "ExtendedItem", "InType", "ManifestEventEncoder", "PropertyInfo",
    "TraceLoggingEncoderCache", "TraceLoggingEventEncoder", "encode_extended_items",
)  # fmt: skip


def _load_encoding() -> None:
    """Bind the encoders and their types as this module's globals (once; later calls cost a lookup)."""
    if "EventTooLarge" in globals():
        return
    from openetw.etl import extended, intypes, schema
    from openetw.provider import encode

    found = {name: getattr(module, name) for module in (extended, intypes, schema, encode) for name in _ENCODING_NAMES if hasattr(module, name)}
    globals().update({name: found[name] for name in _ENCODING_NAMES})


def __getattr__(name: str) -> Any:
    if name in _ENCODING_NAMES:
        _load_encoding()
        return globals()[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _nobody(*values: Any) -> bool:
    return False


_compiled = module("_write")


def _compiled_twin(python: Callable[..., Any], namespace: dict[str, Any], route: list[WriteFn | None], names: dict[str, Any]) -> Callable[..., Any]:
    """The compiled twin of a generated ``write_fast`` (``openetw._native._write.FastWrite``)
    when the compiled core runs and the event's fields are ones it encodes; else ``python``.
    The twin hands every write it does not make itself to ``python``, the same arguments."""
    plan = namespace.get("NATIVE_PLAN")
    if _compiled is None or plan is None or names["CURRENT_ACTIVITY"] is not activity_state:
        return python
    clock = names["CLOCK"]
    twin: Callable[..., Any] = _compiled.FastWrite(
        plan, python, route, activity_variable, names["NO_ACTIVITY"], names["PID"], None if clock is time.monotonic_ns else clock, names["UNMAPPED"],
    )  # fmt: skip
    return twin


def _fast_write(made: tuple[CodeType, dict[str, Any]], writes: tuple[WriteFn, ...]) -> FastWrite:
    """An event's generated ``write_fast`` bound to the pools that take it (or its compiled twin)."""
    if not writes:
        return _nobody
    code, namespace = made
    write = writes[0] if len(writes) == 1 else functools.partial(_write_many, writes)
    python = FunctionType(code, {**namespace, **_FAST_WRITE_NAMES, "WRITE": write})
    return _compiled_twin(python, namespace, [write], _FAST_WRITE_NAMES)


def _write_many(writes: tuple[WriteFn, ...], record: bytes, timestamp: int, cpu: int) -> bool:
    return _write_all(writes, record, timestamp)


def _fast_tracelogging_write(fast_writes: FastWrites, key: Any, fields: Mapping[str, Any], level: int, keyword: int, opcode: int) -> bool | None:
    """A TraceLogging write through the fast write found under ``key``; None when there is none,
    or it leaves the write to the general path (``TraceLoggingProvider.write`` inlines this)."""
    try:
        fast = fast_writes.get(key)
    except TypeError:  # an unhashable name: the general path says what is wrong
        return None
    return None if fast is None else fast(fields, level, keyword, opcode)


def positional_writer(made: tuple[CodeType, dict[str, Any]], route: list[WriteFn | None], general: Callable[[tuple[Any, ...]], bool]) -> Callable[..., bool]:
    """An event's generated positional ``write_fast`` (``fast_writer_code(positional=True)``):
    it writes through ``route[0]`` (``None``: no session takes the event) and hands what it
    cannot write itself to ``general(values)``."""
    code, namespace = made
    python = FunctionType(code, {**namespace, **_FAST_WRITE_NAMES, "ROUTE": route, "GENERAL": general})
    twin: Callable[..., bool] = _compiled_twin(python, namespace, route, _FAST_WRITE_NAMES)
    return twin


def write_route(writes: tuple[WriteFn, ...]) -> WriteFn | None:
    """What a declared event's writer writes through: None for no session."""
    if not writes:
        return None
    return writes[0] if len(writes) == 1 else functools.partial(_write_many, writes)


os.register_at_fork(after_in_child=_new_pid)


def _routes_for(targets: tuple[Target, ...], routes: Routes, level: int, keyword: int, event_id: int) -> tuple[WriteFn, ...]:
    """The pools (write functions) whose session takes this event; the process filters were
    applied by the service already."""
    found = tuple(
        write
        for entry, write in targets
        if entry.rule.admits_level(level) and entry.rule.admits_keyword(keyword) and entry.rule.filters.admits_event_id(event_id)
    )
    if len(routes) < _ROUTE_CACHE_LIMIT:
        routes[(level, keyword, event_id)] = found
    return found


def _write_all(writes: tuple[WriteFn, ...], record: bytes, timestamp: int) -> bool:
    written = False
    for write in writes:
        try:
            written = write(record, timestamp, 0) or written
        except _UNMAPPED:
            pass
    return written


class _Disabled:
    """A provider's enable state until the service gives it one: ``DISABLED``, loaded on first
    look (a provider that finds no service never looks, nor loads the enable states)."""

    def __get__(self, instance: object, owner: type | None = None) -> EnableState:
        from openetw.session.enable import DISABLED

        return DISABLED


class _ProviderBase:
    """Registration, enable state and routing; the subclasses add their ``write``."""

    _state: EnableState = _Disabled()  # type: ignore[assignment]  # each instance's own once applied

    def __init__(self, guid: uuid.UUID, name: str | None, callback: EnableCallback | None) -> None:
        self.guid = guid
        self.name = name
        self.provider_text = str(guid)
        self.enabled = False
        self.registration_id: int | None = None
        self.registered = threading.Event()
        self.events_refused = 0
        self._callback = callback
        self._routing: Routing = ((), {}, {}, {})
        # The compiled ``write``'s view of the routing: its fast writes while enabled, else None
        # (one list item to read, not two attributes).
        self._live: list[FastWrites | None] = [None]
        self._is_registered = False
        self._events: weakref.WeakSet[TraceLoggingEvent] = weakref.WeakSet()

    # -- registration --------------------------------------------------------------------------
    def register(self, *, wait: float = REGISTER_WAIT) -> Self:
        """EventRegister. Returns the provider. With a service running, its enable state is known
        when this returns (waiting at most ``wait`` seconds); without one it attaches later."""
        if not self._is_registered:
            self._is_registered = True
            link().add(self, wait=wait)
        return self

    def unregister(self) -> None:
        """EventUnregister: sessions stop receiving this provider's events; the callback sees it disabled."""
        if self._is_registered:
            self._is_registered = False
            link().remove(self)

    def __enter__(self) -> Self:
        return self.register()

    def __exit__(self, *exc: object) -> None:
        self.unregister()

    # -- enable state --------------------------------------------------------------------------
    @property
    def enable_state(self) -> EnableState:
        return self._state

    def is_enabled(self, level: int = 0, keyword: int = 0) -> bool:
        """EventProviderEnabled: might some session want an event of this level and keyword?"""
        return self.enabled and self._state.is_enabled(level, keyword)

    def _apply_state(self, state: EnableState, writers: dict[int, PoolWriter], *, notify: bool = True) -> None:
        previous = self._state
        self._state = state
        self._refresh_writers(writers)
        if notify and state != previous:
            self._call_back(capture_state=False)

    def _refresh_writers(self, writers: dict[int, PoolWriter]) -> None:
        # A session that asked for enable properties gets its events with their extended items.
        if self._state.sessions:
            _load_encoding()  # a session may take events now
            from openetw.provider.properties import with_properties
        targets = tuple(
            (entry, with_properties(writers[entry.session_id].write, entry.rule.properties))
            for entry in self._state.sessions
            if entry.session_id in writers
        )
        routing: Routing = (targets, {}, {}, {})
        self._routing = routing
        self._live[0] = routing[2] if targets else None
        self.enabled = bool(targets)
        for event in list(self._events):
            event._route[0] = write_route(self._writes_for(event.level, event.keyword, 0)) if targets else None

    def _capture_state(self, session_id: int) -> None:
        self._call_back(capture_state=True)

    def _call_back(self, *, capture_state: bool) -> None:
        if self._callback is None:
            return
        from openetw.ipc.wire import filters_to_json
        from openetw.session.enable import ALL_KEYWORDS

        state = self._state
        match_all = ALL_KEYWORDS if state.sessions else 0
        for entry in state.sessions:
            match_all &= entry.match_all
        filter_data = [
            {"session_id": e.session_id, "level": e.level, "match_any": e.match_any, "match_all": e.match_all, **filters_to_json(e.filters)}
            for e in state.sessions
        ]
        try:
            self._callback(state.enabled, state.max_level, state.any_keyword, match_all, filter_data or None, capture_state)
        except Exception as exc:  # noqa: BLE001 - the callback is the application's; the runtime goes on
            print(f"openetw: enable callback of {self.name or self.guid} failed: {exc!r}", file=sys.stderr)

    def _writes_for(self, level: int, keyword: int, event_id: int, routing: Routing | None = None) -> tuple[WriteFn, ...]:
        """The pools that take this event, by ``routing`` (the current one if ``None``): one
        routing throughout a write, so what it caches belongs to the routes it was made from."""
        targets, routes = (self._routing if routing is None else routing)[:2]
        writes = routes.get((level, keyword, event_id))
        if writes is None:
            writes = _routes_for(targets, routes, level, keyword, event_id)
        return writes

    def _refuse(self, writes: tuple[WriteFn, ...], timestamp: int) -> bool:
        self.events_refused += 1
        _write_all(writes, _OVERSIZE, timestamp)
        return False


class TraceLoggingProvider(_ProviderBase):
    """A self-describing provider named ``"Company.Component"`` (GUID: ETW's hash of the name)."""

    def __init__(self, name: str, *, group: uuid.UUID | None = None, guid: uuid.UUID | None = None, callback: EnableCallback | None = None) -> None:
        if not isinstance(name, str) or not name.strip():
            raise InvalidArgument("a TraceLogging provider needs a name")
        super().__init__(guid or provider_guid_from_name(name), name, callback)
        self._group = group
        self._encoder_cache: TraceLoggingEncoderCache | None = None  # made by the first event a session takes (``_encoders``)
        if _compiled is not None:
            # The method as one compiled call: the fields from the call's keywords into the event's
            # compiled fast write; whatever that does not take goes to the method below.
            self.write = _compiled.TraceLoggingWrite(self, TraceLoggingProvider.write, self._live)  # type: ignore[method-assign]

    @property
    def _encoders(self) -> TraceLoggingEncoderCache:
        cache = self._encoder_cache
        if cache is None:
            _load_encoding()
            cache = self._encoder_cache = TraceLoggingEncoderCache(self.name or "", self._group, provider_id=self.guid)
        return cache

    def write(self, event_name: str, level: int = 5, keyword: int = 0, opcode: int = 0, **fields: Any) -> bool:
        """TraceLoggingWrite: the event, its fields typed from their Python values."""
        if not self.enabled:
            return False
        # EventWrite's hot path: every call and lookup here is paid by every event. An event
        # written again with the same field names, value types, level, keyword and opcode is one
        # generated function, found by the event's name (other variants: see ``_write``).
        try:
            fast = self._routing[2].get(event_name)
        except TypeError:  # an unhashable name: the general path says what is wrong
            fast = None
        if fast is not None:
            written = fast(fields, level, keyword, opcode)
            if written is not None:
                return written
        return self._write(event_name, fields, level, keyword, opcode, 0)

    def user_events(self, *, roots: Sequence[str] | None = None) -> Any:
        """This provider's events published to Linux ``user_events`` as EventHeader events
        (``openetw.provider.user_events``); ``UserEventsUnavailable`` on a kernel without them."""
        from openetw.provider.user_events import TRACEFS_ROOTS, UserEventsProvider

        return UserEventsProvider(self.name or "", roots=TRACEFS_ROOTS if roots is None else roots)

    def event(
        self, event_name: str, *, level: int = 5, keyword: int = 0, opcode: int = 0, tags: int = 0, fields: Sequence[FieldSpec | tuple[str, str]] = ()
    ) -> TraceLoggingEvent:
        """An event with declared fields, for hot code: ``event.write(v0, v1, ...)`` takes the
        values by position, skipping the keyword arguments, the type inference and the lookup
        by name that ``write`` pays on every call. ``fields`` are ``(name, in_type)`` pairs
        (``InType`` or its name: ``"uint32"``, ``"unicodestring"``; ``"string"`` is
        UNICODESTRING, what ``write`` makes of a ``str``), ``(name, in_type, out_type[,
        count])`` or ``tl_field`` results. The bytes are those of ``TraceLoggingEventEncoder``
        with the same fields."""
        encoders = self._encoders
        encoder = TraceLoggingEventEncoder(
            encoders.provider_name, event_name, [_declared_field(spec) for spec in fields], level=level, keyword=keyword,
            opcode=opcode, tags=tags, provider_group=encoders.provider_group, provider_id=self.guid,
        )  # fmt: skip
        event = TraceLoggingEvent(self, encoder)
        self._events.add(event)
        if self.enabled:
            event._route[0] = write_route(self._writes_for(level, keyword, 0))
        return event

    def _write_event(self, event: TraceLoggingEvent, values: tuple[Any, ...]) -> bool:
        """A declared event's general path: in an activity, or values its generated writer
        does not take (the encoder checks them and names a bad one)."""
        writes = self._writes_for(event.level, event.keyword, 0)
        if not writes:
            return False
        timestamp = _monotonic_ns()
        activity_id, related = claim_activity_ids()
        try:
            record = event.encoder.encode(
                values, timestamp=timestamp, pid=_pid, tid=_current_thread_id(), activity_id=activity_id, related_activity_id=related
            )
        except EventTooLarge:
            return self._refuse(writes, timestamp)
        return _write_all(writes, record, timestamp)

    def write_fields(self, event_name: str, fields: Mapping[str, Any], *, level: int = 5, keyword: int = 0, opcode: int = 0, tags: int = 0) -> bool:
        """``write`` with the fields as a mapping (names that clash with the arguments are fine here)."""
        if not self.enabled:
            return False
        if tags == 0 and type(fields) is dict:
            written = _fast_tracelogging_write(self._routing[2], event_name, fields, level, keyword, opcode)
            if written is not None:
                return written
        return self._write(event_name, fields, level, keyword, opcode, tags)

    def _write(self, event_name: str, fields: Mapping[str, Any], level: int, keyword: int, opcode: int, tags: int) -> bool:
        routing = self._routing
        if tags == 0 and type(fields) is dict:
            # The name's first variant did not take it: another level, keyword or opcode may have one.
            written = _fast_tracelogging_write(routing[2], (event_name, level, keyword, opcode), fields, level, keyword, opcode)
            if written is not None:
                return written
        writes = routing[1].get((level, keyword, 0))
        if writes is None:
            writes = self._writes_for(level, keyword, 0, routing)
        if not writes:
            return False
        timestamp = _monotonic_ns()
        activity_id, related = claim_activity_ids()
        try:
            record = self._encoders.encode(
                event_name, fields, level=level, keyword=keyword, opcode=opcode, tags=tags, timestamp=timestamp,
                pid=_pid, tid=_current_thread_id(), activity_id=activity_id, related_activity_id=related,
            )  # fmt: skip
        except EventTooLarge:
            return self._refuse(writes, timestamp)
        if tags == 0:
            self._learn_shape(routing, event_name, fields, level, keyword, opcode, writes)
        if len(writes) == 1:
            try:
                return writes[0](record, timestamp, 0)
            except _UNMAPPED:
                return False
        return _write_all(writes, record, timestamp)

    def _learn_shape(
        self, routing: Routing, event_name: str, fields: Mapping[str, Any], level: int, keyword: int, opcode: int, writes: tuple[WriteFn, ...]
    ) -> None:
        """Make ``write``'s fast write for this event's field names and value types (plain
        values only: a list or a dict may need other fields on the next write)."""
        _, _, fast_writes, shapes = routing
        if type(fields) is not dict or len(fast_writes) >= _ROUTE_CACHE_LIMIT:
            return
        key = (event_name, level, keyword, opcode)
        shape = (tuple(fields), tuple(map(type, fields.values())))
        if shapes.get(key) == shape:
            return
        if not _PLAIN_TYPES.issuperset(shape[1]) or not all(type(name) is str for name in shape[0]):
            return
        encoder = self._encoders.encoder_for(event_name, fields, level=level, keyword=keyword, opcode=opcode)
        shapes[key] = shape
        fast = fast_writes[key] = _fast_write(encoder.fast_writer_code(shape[1], shape[0], variant=(level, keyword, opcode)), writes)
        # The name finds its first variant directly (``write``'s lookup needs no tuple then).
        if shapes.setdefault(event_name, key) == key:
            fast_writes[event_name] = fast


_IN_TYPE_ALIASES = {"string": "UNICODESTRING"}


def _declared_field(spec: FieldSpec | tuple[Any, ...]) -> FieldSpec:
    """A declared TraceLogging field with its in-type given by name made an ``InType``."""
    if isinstance(spec, tuple) and len(spec) >= 2 and isinstance(spec[1], str):
        name = spec[1].lower()
        try:
            in_type = InType[_IN_TYPE_ALIASES.get(name, name.upper())]
        except KeyError:
            raise InvalidArgument(f"field {spec[0]!r}: no TraceLogging in-type is named {spec[1]!r}") from None
        return (spec[0], in_type, *spec[2:])
    if not isinstance(spec, (tuple, PropertyInfo)):
        raise InvalidArgument(f"a declared field is (name, in_type[, out_type[, count]]) or a tl_field, not {spec!r}")
    return spec


class TraceLoggingEvent:
    """One TraceLogging event with declared fields (``TraceLoggingProvider.event``).

    ``write(v0, v1, ...)`` writes it with one value per field, in order, and returns whether a
    session got it (False at once when none takes the event). It is one generated function for
    the event's life: sessions coming and going change where it writes, not the function, so
    keeping ``event.write`` in a local is fine. A value the generated code cannot pack, a write
    in an activity, a record over 64 KB go the general path, which raises ``InvalidArgument``
    (naming the field) for a bad value and counts an oversized event refused. A wrong number of
    values raises ``TypeError``, as any Python call does.
    """

    __slots__ = ("provider", "encoder", "name", "level", "keyword", "opcode", "write", "_route", "__weakref__")

    def __init__(self, provider: TraceLoggingProvider, encoder: TraceLoggingEventEncoder) -> None:
        self.provider = provider
        self.encoder = encoder
        self.name = encoder.event_name
        d = encoder.descriptor
        self.level, self.keyword, self.opcode = d.level, d.keyword, d.opcode
        self._route: list[WriteFn | None] = [None]
        general = functools.partial(provider._write_event, self)
        self.write: Callable[..., bool] = positional_writer(encoder.fast_writer_code(positional=True), self._route, general)

    @property
    def fields(self) -> tuple[PropertyInfo, ...]:
        return self.encoder.fields

    def __repr__(self) -> str:
        return f"<TraceLoggingEvent {self.provider.name}/{self.name} level={self.level} keyword={self.keyword:#x}>"


class Provider(_ProviderBase):
    """A manifest-based provider, known by its GUID (``name`` is only shown by ``openetw providers``)."""

    def __init__(self, guid: uuid.UUID | str, *, name: str | None = None, callback: EnableCallback | None = None) -> None:
        try:
            parsed = parse_guid(guid)
        except (ValueError, AttributeError, TypeError):
            raise InvalidArgument(f"a provider GUID is needed, not {guid!r}") from None
        _load_encoding()  # its writes and events are encoders' from the start
        super().__init__(parsed, name, callback)
        self._raw_heads: dict[EventDescriptor, bytes] = {}
        if _compiled is not None and type(self).write is Provider.write:
            # The method as one compiled call: the values from the call's arguments into the
            # encoder's compiled fast write; whatever that does not take goes to the method below.
            self.write = _compiled.ProviderWrite(self, Provider.write, self._live)  # type: ignore[method-assign]

    def event(self, descriptor: EventDescriptor | Sequence[int], fields: Sequence[FieldSpec] = ()) -> ManifestEventEncoder:
        """An encoder for one of this provider's events: descriptor (id, version, channel, level,
        opcode, task, keyword) and the template's fields."""
        return ManifestEventEncoder(self.guid, descriptor, fields)

    def write(self, event: ManifestEventEncoder | EventDescriptor | Sequence[int], *values: Any) -> bool:
        """EventWrite. ``event`` is an encoder (``values`` are its fields, or one mapping by
        name), or a bare descriptor (``values`` are bytes, the user data as it is)."""
        if not self.enabled:
            return False
        # EventWrite's hot path: every call and lookup here is paid by every event. An encoder's
        # event is one generated function, made on its first write.
        try:
            fast = self._routing[2].get(event)
        except TypeError:  # a descriptor given as a list
            fast = None
        if fast is not None:
            written = fast(values)
            if written is not None:
                return written
        return self._write(event, values)

    def _write(self, event: ManifestEventEncoder | EventDescriptor | Sequence[int], values: tuple[Any, ...]) -> bool:
        if type(event) is not ManifestEventEncoder and not isinstance(event, ManifestEventEncoder):
            return self._write_raw(event, values)
        d = event.descriptor
        routing = self._routing
        writes = self._writes_for(d.level, d.keyword, d.id, routing)
        fast_writes = routing[2]
        if event not in fast_writes and len(fast_writes) < _ROUTE_CACHE_LIMIT:
            fast_writes[event] = _fast_write(event.fast_writer_code(), writes)
        if not writes:
            return False
        payload: Any = values[0] if len(values) == 1 and isinstance(values[0], Mapping) else values
        timestamp = _monotonic_ns()
        activity_id, related = claim_activity_ids()
        try:
            record = event.encode(payload, timestamp=timestamp, pid=_pid, tid=_current_thread_id(), activity_id=activity_id, related_activity_id=related)
        except EventTooLarge:
            return self._refuse(writes, timestamp)
        if len(writes) == 1:
            try:
                return writes[0](record, timestamp, 0)
            except _UNMAPPED:
                return False
        return _write_all(writes, record, timestamp)

    def _write_raw(self, event: EventDescriptor | Sequence[int], values: tuple[Any, ...]) -> bool:
        descriptor = event if isinstance(event, EventDescriptor) else EventDescriptor(*event)
        writes = self._writes_for(descriptor.level, descriptor.keyword, descriptor.id)
        if not writes:
            return False
        try:
            user_data = b"".join(bytes(value) for value in values)
        except TypeError:
            raise InvalidArgument("a write with a bare descriptor takes bytes-like values only") from None
        timestamp = _monotonic_ns()
        activity_id, related = claim_activity_ids()
        extended = b""
        flags = 0
        if related is not None:
            extended = encode_extended_items([ExtendedItem(EXT_RELATED_ACTIVITYID, related.bytes_le)])
            flags = L.EVENT_HEADER_FLAG_EXTENDED_INFO
        size = _EVENT_HEADER.size + len(extended) + len(user_data)
        if size > 0xFFFF:
            return self._refuse(writes, timestamp)
        d = descriptor
        try:
            head = _EVENT_HEADER.pack(
                size, L.HEADER_TYPE_EVENT_HEADER64, L.MARKER_FLAGS_TYPED, flags, 0, _current_thread_id(), _pid, timestamp,
                self.guid.bytes_le, d.id, d.version, d.channel, d.level, d.opcode, d.task, d.keyword, 0, activity_id.bytes_le,
            )  # fmt: skip
        except struct.error as exc:
            raise InvalidArgument(f"event descriptor out of range: {exc}") from None
        return _write_all(writes, head + extended + user_data, timestamp)
