"""What a decoder learns from the trace itself: process, thread and image names, in-trace manifests.

A ``DecodeContext`` is fed records in time order (``observe``). It learns

* process lifetimes and names from kernel Process events (Start, DCStart, End, DCEnd)
  and from Microsoft-Windows-Kernel-Process ProcessStart/ProcessStop;
* which process a thread belongs to from kernel Thread events;
* which image is loaded where from kernel Image events (Load, DCStart, Unload, DCEnd);
* EventSource manifests carried in the trace (``ManifestData`` events), which it adds to the
  registry so that the source's later events decode;
* TDH metadata carried in the trace: the TRACE_EVENT_INFO and EVENT_MAP_INFO blobs that
  xperf/PerfView merging writes as KernelTraceControl ``MetaData/EventInfo`` and
  ``MetaData/EventMapInfo`` events. ``schema_for`` uses them for events the registry has no
  schema of that exact version for.

Lookups take the time of the record being named, so a pid that is reused gets the right name.
Rundown (DCStart/DCEnd) describes what existed when tracing started or stopped, so a process
known from rundown is named for every record of that pid since the start of the trace; a
process end keeps its name for the end record itself. Feeding a whole file once
(``learn``) before naming its records gives every record the names the trace holds.
"""

from __future__ import annotations

import ntpath
import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any, Protocol, TypeVar

from openetw.errors import OpenEtwError
from openetw.etl.intypes import InType
from openetw.tdh.decode import decode_properties
from openetw.tdh.event_info import TraceMetadata
from openetw.tdh.registry import SchemaRegistry
from openetw.tdh.schema import REST, PropertyInfo, Schema

__all__ = [
    "DecodeContext",
    "ImageInfo",
    "ProcessInfo",
    "process_name_from_image",
]

KERNEL_PROCESS_PROVIDER = uuid.UUID("22fb2cd6-0e7b-422b-a0c7-2fad1fd0e716")
_PROCESS_GROUP, _THREAD_GROUP, _IMAGE_GROUP = 0x03, 0x05, 0x14
_START, _END, _DC_START, _DC_END = 1, 2, 3, 4
_IMAGE_LOAD = 10
_MANIFEST_DATA_ID = 0xFFFE
_MANIFEST_ENVELOPE = 8  # format, major, minor, magic (u8 each), chunk count, chunk number (u16 each)
_MANIFEST_MAGIC = 0x5B
_MAX_MANIFEST_CHUNKS = 4096
_METADATA_CLASS = uuid.UUID("bbccf6c1-6cd1-48c4-80ff-839482e37671")
_EVENT_INFO, _EVENT_MAP_INFO = 32, 33
# EventSource's ManifestEnvelope, then the chunk of manifest XML.
_MANIFEST_ENVELOPE_PROPERTIES = (
    PropertyInfo("Format", InType.UINT8),
    PropertyInfo("MajorVersion", InType.UINT8),
    PropertyInfo("MinorVersion", InType.UINT8),
    PropertyInfo("Magic", InType.UINT8),
    PropertyInfo("TotalChunks", InType.UINT16),
    PropertyInfo("ChunkNumber", InType.UINT16),
    PropertyInfo("Data", InType.BINARY, length=REST),
)
_EARLIEST = -(1 << 62)
_LATEST = 1 << 62


@lru_cache(maxsize=4096)  # asked for every record named; a trace has few distinct images
def process_name_from_image(image: str) -> str:
    """``C:\\Windows\\System32\\svchost.exe`` -> ``svchost`` (the last path part, without extension)."""
    base = ntpath.basename(image.rstrip("\\/"))
    stem, dot, _ = base.rpartition(".")
    return stem if dot and stem else base


@dataclass(slots=True)
class ProcessInfo:
    """One process lifetime: from ``start`` to ``end`` (FILETIMEs, inclusive)."""

    pid: int
    start: int = _EARLIEST
    end: int = _LATEST
    image: str | None = None
    parent_pid: int | None = None
    command_line: str | None = None

    @property
    def name(self) -> str | None:
        return process_name_from_image(self.image) if self.image else None


@dataclass(slots=True)
class ImageInfo:
    """An image mapped at ``base`` for ``size`` bytes into process ``pid``."""

    pid: int
    base: int
    size: int
    file_name: str
    start: int = _EARLIEST
    end: int = _LATEST

    def contains(self, address: int) -> bool:
        return self.base <= address < self.base + self.size


@dataclass(slots=True)
class _ThreadSpan:
    tid: int
    pid: int
    start: int = _EARLIEST
    end: int = _LATEST


@dataclass(slots=True)
class _PendingManifest:
    total: int
    chunks: dict[int, bytes] = field(default_factory=dict)


class _Span(Protocol):
    start: int
    end: int


_SpanT = TypeVar("_SpanT", bound=_Span)


def _covering(spans: list[_SpanT] | None, when: int) -> _SpanT | None:
    """The latest span whose [start, end] holds ``when``."""
    if not spans:
        return None
    for span in reversed(spans):
        if span.start <= when <= span.end:
            return span
    return None


def _value(properties: Mapping[str, Any], *names: str) -> Any:
    for name in names:
        if name in properties:
            return properties[name]
    return None


class DecodeContext:
    """Process, thread and image facts learned from a trace, looked up by (id, time).

    ``registry`` decodes the kernel events this needs (a kernel-only ``SchemaRegistry`` by
    default) and receives the manifests found in the trace. ``learn_manifests=False`` ignores
    what the trace says about its own events (EventSource manifests, TDH metadata).
    ``learn_threads=False`` / ``learn_images=False`` skip the thread and image events (for
    readers that only ask for processes: those events are many and costly to decode).
    """

    def __init__(
        self, registry: SchemaRegistry | None = None, *, learn_manifests: bool = True, learn_threads: bool = True,
        learn_images: bool = True,
    ) -> None:  # fmt: skip
        self.registry = registry if registry is not None else SchemaRegistry()
        self.learn_manifests = learn_manifests
        self.learn_threads = learn_threads
        self.learn_images = learn_images
        self._processes: dict[int, list[ProcessInfo]] = {}
        self._threads: dict[int, list[_ThreadSpan]] = {}
        self._images: dict[int, list[ImageInfo]] = {}
        self._pending_manifests: dict[tuple[bytes | None, int], _PendingManifest] = {}
        self._seen_manifests: set[bytes] = set()
        self.manifest_errors: list[OpenEtwError] = []
        self.manifests_learned = 0
        self._metadata = TraceMetadata()
        self._envelopes: dict[uuid.UUID, Schema] = {}
        self._decoded: tuple[Any, Mapping[str, Any]] | None = None
        self._schema_given: tuple[Any, Schema] | None = None

    # -- feeding -----------------------------------------------------------------------------
    def learn(self, records: Iterable[Any]) -> DecodeContext:
        """Observe every record (a first pass over a trace); returns ``self``."""
        for record in records:
            self.observe(record)
        return self

    def observe(self, record: Any, decoded: Mapping[str, Any] | None = None, *, schema: Schema | None = None) -> None:
        """Learn what ``record`` says about processes, threads, images or manifests.
        ``decoded`` is the record's properties when the caller decoded them already (by the
        schema ``schema_for`` gives): they are not decoded again. ``schema`` is what
        ``schema_for(record)`` gives, when the caller found it already: it is not looked up again."""
        self._decoded = (record, decoded) if decoded is not None else None
        self._schema_given = (record, schema) if schema is not None else None
        kind = record.kind
        if kind in ("system", "compact", "perfinfo"):
            group = (record.hook_id or 0) >> 8
            if group == _PROCESS_GROUP and record.opcode == _IMAGE_LOAD:
                group = _IMAGE_GROUP
            if group == _PROCESS_GROUP:
                self._kernel_process(record)
            elif group == _THREAD_GROUP and self.learn_threads:
                self._kernel_thread(record)
            elif group == _IMAGE_GROUP and self.learn_images:
                self._kernel_image(record)
        elif kind == "event":
            if record.id == _MANIFEST_DATA_ID and self.learn_manifests and record.opcode == 254:
                self._manifest_chunk(record)
            elif record.provider_guid_bytes is not None and record.provider_id == KERNEL_PROCESS_PROVIDER:
                self._manifest_process(record)
        elif (
            kind in ("classic", "instance") and record.provider_guid_bytes is not None
            and record.provider_id == _METADATA_CLASS and self.learn_manifests
        ):
            data = record.user_data
            if record.opcode == _EVENT_INFO:
                self._metadata.add_event_info(data)
            elif record.opcode == _EVENT_MAP_INFO and len(data) > 16:
                self._metadata.add_map_info(uuid.UUID(bytes_le=data[:16]), data[16:])

    # -- schemas -----------------------------------------------------------------------------
    def schema_for(self, record: Any) -> Schema | None:
        """The registry's schema for ``record``, or one from TDH metadata the trace carries
        when the registry has none of the record's exact version. An EventSource's manifest
        chunks (event 0xFFFE) have their envelope's schema."""
        try:
            found = self.registry.schema_for(record)
        except ImportError:  # a schema source not available in this installation
            found = None
        if found is None and record.kind == "event" and record.id == _MANIFEST_DATA_ID and record.opcode == 254:
            return self._manifest_data_schema(record)
        if (found is not None and found.version == record.version) or record.provider_guid_bytes is None:
            return found
        if record.kind == "event":
            carried = self._metadata.schema(record.provider_id, record.id, record.version)
        elif record.kind in ("classic", "instance"):
            carried = self._metadata.schema(record.provider_id, record.opcode, record.version)
        else:
            carried = None
        if carried is not None and (found is None or carried.version == record.version):
            return carried
        return found

    def _manifest_data_schema(self, record: Any) -> Schema:
        provider = record.provider_id
        found = self._envelopes.get(provider)
        if found is None:
            try:
                name = self.registry.provider_name(record)
            except ImportError:
                name = None
            found = self._envelopes[provider] = Schema(
                provider_id=provider, event_id=_MANIFEST_DATA_ID, version=record.version, opcode=254,
                task=_MANIFEST_DATA_ID, provider_name=name, event_name="ManifestData", task_name="ManifestData",
                properties=_MANIFEST_ENVELOPE_PROPERTIES,
            )
        return found

    def is_carried(self, schema: Schema) -> bool:
        """Whether ``schema`` came from TDH metadata carried in the trace."""
        return self._metadata.holds(schema)

    @property
    def carried_schemas(self) -> int:
        """How many event descriptions the trace's TDH metadata gave."""
        return len(self._metadata.infos)

    def _decode(self, record: Any) -> Mapping[str, Any] | None:
        given = self._decoded
        if given is not None and given[0] is record:
            return given[1]
        found = self._schema_given
        schema = found[1] if found is not None and found[0] is record else self.schema_for(record)
        if schema is None:
            return None
        if record.pointer_size in (4, 8):  # every property is asked for: decode them at once
            return self.registry.compiled(schema, record.pointer_size)(record.user_data)[0]
        return decode_properties(schema, record.user_data, record.pointer_size)

    # -- processes ---------------------------------------------------------------------------
    def _kernel_process(self, record: Any) -> None:
        opcode = record.opcode
        # Defunct (39) reports a process that already ended: it names nothing (PerfView agrees).
        if opcode not in (_START, _END, _DC_START, _DC_END):
            return
        props = self._decode(record)
        if props is None:
            return
        pid = _value(props, "ProcessID", "ProcessId")
        if not isinstance(pid, int):
            return
        image = _value(props, "ImageFileName")
        command_line = _value(props, "CommandLine")
        parent = _value(props, "ParentID", "ParentId")
        when = record.filetime
        if opcode == _START:
            info = self._begin_process(pid, when)
        elif opcode == _DC_START:
            info = self._process_at(pid, when) or self._begin_process(pid, _EARLIEST)
        else:
            info = self._process_at(pid, when) or self._begin_process(pid, _EARLIEST)
            if opcode == _END:
                info.end = min(info.end, when)
        self._describe(info, image, parent, command_line)

    def _manifest_process(self, record: Any) -> None:
        if record.id not in (1, 2):
            return
        props = self._decode(record)
        if props is None:
            return
        pid = _value(props, "ProcessID", "ProcessId")
        if not isinstance(pid, int):
            return
        when = record.filetime
        if record.id == 1:
            info = self._process_at(pid, when)
            if info is None or (info.start == _EARLIEST and info.image is not None):
                info = self._begin_process(pid, when)  # a start: the pid's earlier process has ended
        else:
            info = self._process_at(pid, when) or self._begin_process(pid, _EARLIEST)
            info.end = min(info.end, when)
        self._describe(info, _value(props, "ImageName"), _value(props, "ParentProcessID"), None)

    def _begin_process(self, pid: int, start: int) -> ProcessInfo:
        spans = self._processes.setdefault(pid, [])
        for span in spans:
            if span.end == _LATEST and span.start < start:
                span.end = start - 1  # a pid is reused only after its process ended
        info = ProcessInfo(pid, start)
        spans.append(info)
        spans.sort(key=lambda span: span.start)
        return info

    def _process_at(self, pid: int, when: int) -> ProcessInfo | None:
        return _covering(self._processes.get(pid), when)

    @staticmethod
    def _describe(info: ProcessInfo, image: Any, parent: Any, command_line: Any) -> None:
        if isinstance(image, str) and image and not info.image:
            info.image = image
        if isinstance(parent, int) and info.parent_pid is None:
            info.parent_pid = parent
        if isinstance(command_line, str) and command_line and not info.command_line:
            info.command_line = command_line

    def process(self, pid: int, when: int | None = None) -> ProcessInfo | None:
        """The process ``pid`` at FILETIME ``when`` (its latest lifetime when ``when`` is None)."""
        spans = self._processes.get(pid)
        if not spans:
            return None
        if when is None:
            return spans[-1]
        return _covering(spans, when)

    def lifetimes(self, pid: int) -> list[ProcessInfo]:
        """Every lifetime of ``pid`` known so far, by start (``process`` picks the latest holding a time)."""
        return list(self._processes.get(pid, ()))

    def process_name(self, pid: int, when: int | None = None) -> str | None:
        """The image name without extension (``svchost``), as PerfView's ``PName`` shows it."""
        info = self.process(pid, when)
        return None if info is None else info.name

    def process_name_of(self, record: Any) -> str | None:
        """The name of the process that logged ``record`` at the time it was logged."""
        return self.process_name(record.pid, record.filetime)

    @property
    def processes(self) -> list[ProcessInfo]:
        return [info for spans in self._processes.values() for info in spans]

    # -- threads -----------------------------------------------------------------------------
    def _kernel_thread(self, record: Any) -> None:
        opcode = record.opcode
        if opcode not in (_START, _END, _DC_START, _DC_END):
            return
        props = self._decode(record)
        if props is None:
            return
        tid, pid = _value(props, "TThreadId", "ThreadId"), _value(props, "ProcessId", "ProcessID")
        if not isinstance(tid, int) or not isinstance(pid, int):
            return
        when = record.filetime
        spans = self._threads.setdefault(tid, [])
        span = _covering(spans, when)
        if opcode == _START or span is None or span.pid != pid:
            span = _ThreadSpan(tid, pid, when if opcode == _START else _EARLIEST)
            for other in spans:
                if other.end == _LATEST and other.start < span.start:
                    other.end = span.start - 1
            spans.append(span)
            spans.sort(key=lambda item: item.start)
        if opcode == _END:
            span.end = min(span.end, when)

    def thread_process(self, tid: int, when: int | None = None) -> int | None:
        """The pid of the process thread ``tid`` belonged to at ``when``."""
        spans = self._threads.get(tid)
        if not spans:
            return None
        span = spans[-1] if when is None else _covering(spans, when)
        return None if span is None else span.pid

    # -- images ------------------------------------------------------------------------------
    def _kernel_image(self, record: Any) -> None:
        opcode = record.opcode
        if opcode not in (_IMAGE_LOAD, _END, _DC_START, _DC_END):
            return
        props = self._decode(record)
        if props is None:
            return
        base, size = _value(props, "ImageBase", "BaseAddress"), _value(props, "ImageSize", "ModuleSize")
        name = _value(props, "FileName", "ImageFileName")
        pid = _value(props, "ProcessId", "ProcessID")
        if not isinstance(pid, int):
            pid = record.pid
        if not isinstance(base, int) or not isinstance(size, int) or not isinstance(name, str):
            return
        when = record.filetime
        images = self._images.setdefault(pid, [])
        found = next((image for image in reversed(images) if image.base == base and image.start <= when <= image.end), None)
        if opcode in (_IMAGE_LOAD, _DC_START):
            if found is None:
                images.append(ImageInfo(pid, base, size, name, when if opcode == _IMAGE_LOAD else _EARLIEST))
        else:
            if found is None:
                found = ImageInfo(pid, base, size, name)
                images.append(found)
            if opcode == _END:
                found.end = min(found.end, when)

    def image_at(self, pid: int, address: int, when: int | None = None) -> ImageInfo | None:
        """The image of process ``pid`` (or of the kernel, pid 0) holding ``address``."""
        for owner in (pid, 0) if pid else (0,):
            for image in reversed(self._images.get(owner, ())):
                if image.contains(address) and (when is None or image.start <= when <= image.end):
                    return image
        return None

    def images(self, pid: int) -> list[ImageInfo]:
        return list(self._images.get(pid, ()))

    # -- manifests carried in the trace ------------------------------------------------------
    def _manifest_chunk(self, record: Any) -> None:
        data = record.user_data
        if len(data) < _MANIFEST_ENVELOPE or data[3] != _MANIFEST_MAGIC or data[0] != 1:
            return
        total = int.from_bytes(data[4:6], "little")
        number = int.from_bytes(data[6:8], "little")
        if not 0 < total <= _MAX_MANIFEST_CHUNKS or number >= total:
            return
        key = (record.provider_guid_bytes, record.pid)
        pending = self._pending_manifests.get(key)
        if pending is None or pending.total != total or number == 0:
            pending = self._pending_manifests[key] = _PendingManifest(total)
        pending.chunks[number] = data[_MANIFEST_ENVELOPE:]
        if len(pending.chunks) < total:
            return
        del self._pending_manifests[key]
        xml = b"".join(pending.chunks[index] for index in range(total))
        self._add_manifest(xml, record)

    def _add_manifest(self, xml: bytes, record: Any) -> None:
        xml = xml.rstrip(b"\0")
        if xml in self._seen_manifests:
            return
        self._seen_manifests.add(xml)
        from openetw.manifest.parser import parse_manifest

        origin = f"<ManifestData of {record.provider_id}>"
        try:
            manifest = parse_manifest(xml, path=origin).manifest
            self.registry.add_manifest(manifest, source=origin)
        except OpenEtwError as error:
            self.manifest_errors.append(error)
            return
        except ImportError:
            return
        self.manifests_learned += 1
