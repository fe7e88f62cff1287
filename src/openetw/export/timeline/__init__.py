"""Traces as timelines: Perfetto, Chrome trace JSON and OpenTelemetry, from one model.

``timeline`` (``builder``) turns records into the items of ``model``; ``perfetto``, ``chrome`` and
``otlp`` encode those items. ``export_timeline`` reads ``.etl`` inputs merged in time order and
writes one of ``TIMELINE_FORMATS``, streaming: memory does not grow with the trace.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from openetw.errors import InvalidArgument
from openetw.events.stacks import StackKeys
from openetw.events.trace_state import TraceState
from openetw.export.pipeline import _young_collections
from openetw.export.source import Selection, merged_records, open_inputs
from openetw.export.timeline.builder import Naming, TimelineStats, learn_naming, timeline
from openetw.export.timeline.model import Item
from openetw.tdh.registry import SchemaRegistry

__all__ = ["TIMELINE_FORMATS", "Naming", "TimelineSummary", "export_timeline", "timeline"]

TIMELINE_FORMATS = ("perfetto", "chrome", "otlp")
_KERNEL_KINDS = frozenset({"system", "compact", "perfinfo"})
_PERFINFO_GROUP, _SAMPLE = 0x0F, 46  # SampledProfile
Progress = Callable[[int, float], None]


@dataclass(slots=True)
class TimelineSummary:
    """What a timeline export read and wrote."""

    inputs: list[str]
    output: str
    format: str
    stats: TimelineStats = field(default_factory=TimelineStats)
    written: int = 0
    bytes: int = 0
    seconds: float = 0.0
    delivery: dict[str, int] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)

    def as_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "inputs": self.inputs, "output": self.output, "format": self.format, "records_read": self.stats.records,
            "written": self.written, "bytes": self.bytes, "seconds": round(self.seconds, 3),
            "timeline": {key: value for key, value in self.stats.as_json().items() if key != "errors"},
            "errors": self.errors + self.stats.errors,
        }  # fmt: skip
        if self.delivery:
            out.update(self.delivery)
        return out

    def lines(self) -> list[str]:
        stats = self.stats
        rate = f", {stats.records / self.seconds:,.0f} records/s" if self.seconds > 0 else ""
        unit = "packets" if self.format == "perfetto" else "trace events" if self.format == "chrome" else "records sent"
        out = [
            f"wrote {self.output} ({self.format}): {self.written:,} {unit} from {stats.records:,} records{rate}",
            f"  {stats.slices} slices ({stats.lost_starts} starts and {stats.lost_stops} stops unpaired), "
            f"{stats.instants} instants, {stats.counters} counter values",
            f"  {stats.switches} context switches, {stats.wakeups} wake-ups, {stats.samples} samples "
            f"({stats.samples_with_stacks} with stacks)",
        ]
        if self.delivery:
            out.append("  " + ", ".join(f"{key} {value}" for key, value in self.delivery.items()))
        return out


def _counted(items: Iterator[Item], progress: Progress | None, started: float) -> Iterator[Item]:
    """``items``, with ``progress`` told now and then, and the young generations collected every
    65,536 items (the collector's automatic passes are off: the pass makes millions of
    short-lived objects without cycles)."""
    with _young_collections():
        for count, item in enumerate(items):
            if not count & 0xFFFF:
                gc.collect(1)
                if progress is not None:
                    progress(count, time.perf_counter() - started)
            yield item


def export_timeline(
    paths: Sequence[str], output: str, fmt: str, *, registry: SchemaRegistry | None = None,
    selection: Selection | None = None, progress: Progress | None = None, endpoint: str | None = None,
    otlp_options: dict[str, Any] | None = None, naming: Naming | None = None, columns: bool = True,
) -> TimelineSummary:  # fmt: skip
    """Export ``paths`` (merged in time order) as ``fmt``: a Perfetto trace or Chrome JSON
    written to ``output`` (``-`` is stdout for chrome), or OTLP sent to ``endpoint``. Samples'
    frames are named as ``naming`` says (no symbol files by default), on what a first pass over
    the inputs learned (``learn_naming``). With ``columns``, Chrome JSON of one ``.etl`` without
    samples and with no selection is written from the file's index (``chrome_columns``: the same
    file), and so is a Perfetto trace (``perfetto_columns``: the same packets)."""
    if fmt not in TIMELINE_FORMATS:
        raise InvalidArgument(f"unknown timeline format {fmt!r}; formats are {', '.join(TIMELINE_FORMATS)}")
    if fmt == "otlp" and not endpoint:
        raise InvalidArgument("--to otlp needs --endpoint URL (an OTLP/HTTP receiver, e.g. http://localhost:4318)")
    registry = registry if registry is not None else SchemaRegistry()
    summary = TimelineSummary(inputs=list(paths), output=(endpoint or "") if fmt == "otlp" else output, format=fmt)
    naming = replace(naming) if naming is not None else Naming()
    started = time.perf_counter()
    if columns and fmt == "chrome" and len(paths) == 1 and output != "-" and _unselected(selection) and (
        naming.state is None or naming.keys is None
    ) and _mostly_plain(paths[0]):  # fmt: skip
        from openetw.export.timeline.chrome_columns import write_chrome_from_columns

        with _young_collections():
            written = write_chrome_from_columns(paths[0], registry, lambda: _text_output(output), summary.stats, naming,
                                                progress)  # fmt: skip
        if written is not None:
            summary.written = written.events
            summary.seconds = time.perf_counter() - started
            return summary
    if columns and fmt == "perfetto" and len(paths) == 1 and _unselected(selection) and (
        naming.state is None or naming.keys is None
    ) and _mostly_plain(paths[0]):  # fmt: skip
        from openetw.export.timeline.perfetto_columns import write_perfetto_from_columns

        with _young_collections():
            perfetto = write_perfetto_from_columns(paths[0], registry, lambda: _binary_output(output), summary.stats,
                                                   naming, progress)  # fmt: skip
        if perfetto is not None:
            summary.written, summary.bytes = perfetto.packets, perfetto.bytes
            if perfetto.late:
                summary.errors.append(f"{perfetto.late} samples or scheduling events came more than 1 s after newer ones: not written")
            summary.seconds = time.perf_counter() - started
            return summary
    if naming.state is None or naming.keys is None:
        if _without_samples(paths):  # no frame to name: the first pass would learn for nothing
            naming.state, naming.keys = TraceState(registry, learn_manifests=False, learn_threads=False), StackKeys()
        else:
            _first_pass(paths, registry, naming)
    readers = open_inputs(paths)
    try:
        items = timeline(merged_records(readers), registry, selection=selection, stats=summary.stats, messages=fmt == "otlp",
                         naming=naming)  # fmt: skip
        items = _counted(items, progress, started)
        if fmt == "perfetto":
            from openetw.export.timeline.perfetto import write_perfetto

            with _binary_output(output) as out:
                writer = write_perfetto(items, out)
            summary.written, summary.bytes = writer.packets, writer.bytes
            if writer.late:
                summary.errors.append(f"{writer.late} samples or scheduling events came more than 1 s after newer ones: not written")
        elif fmt == "chrome":
            from openetw.export.timeline.chrome import write_chrome

            with _text_output(output) as text:
                chrome = write_chrome(items, text)
            summary.written = chrome.events
        else:
            from openetw.export.timeline.otlp import send_otlp

            assert endpoint is not None
            delivery = send_otlp(items, endpoint, **(otlp_options or {}))
            summary.written = delivery.exported
            summary.delivery = delivery.as_json()
        summary.errors.extend(str(error) for reader in readers for error in reader.stats.errors)
    finally:
        for reader in readers:
            reader.close()
    summary.seconds = time.perf_counter() - started
    return summary


def _unselected(selection: Selection | None) -> bool:
    return selection is None or selection.everything


_PREFIX_RECORDS = 4096


def _mostly_plain(path: str) -> bool:
    """Whether the first ``_PREFIX_RECORDS`` records of ``path`` (an ``.etl``, in file order, no
    payload decoded) are mostly not kernel records and hold no CPU sample: a trace worth building
    the index of for the Chrome column path (which looks at every record's header again)."""
    from openetw.errors import OpenEtwError
    from openetw.etl.reader import EtlReader

    if not path.lower().endswith(".etl"):
        return False
    kernel = seen = 0
    try:
        with EtlReader(path, strict=False) as reader:
            for record in reader.records():
                if record.kind in _KERNEL_KINDS:
                    if (record.hook_id or 0) >> 8 == _PERFINFO_GROUP and record.opcode == _SAMPLE:
                        return False
                    kernel += 1
                seen += 1
                if seen >= _PREFIX_RECORDS:
                    break
    except OpenEtwError:
        return False
    return kernel * 2 <= seen


def _without_samples(paths: Sequence[str]) -> bool:
    """Whether no input holds a kernel SampledProfile record (every input an ``.etl``, its records
    looked at in file order, no payload decoded): then the timeline names no frame."""
    from openetw.etl.reader import EtlReader

    readers = open_inputs(paths)
    try:
        for reader in readers:
            if not isinstance(reader, EtlReader):
                return False
            for record in reader.records():
                if record.kind in _KERNEL_KINDS and (record.hook_id or 0) >> 8 == _PERFINFO_GROUP and record.opcode == _SAMPLE:
                    return False
    finally:
        for reader in readers:
            reader.close()
    return True


def _first_pass(paths: Sequence[str], registry: SchemaRegistry, naming: Naming) -> None:
    """``learn_naming`` over ``paths`` (reading only)."""
    readers = open_inputs(paths)
    try:
        with _young_collections():
            learn_naming(merged_records(readers), registry, naming)
    finally:
        for reader in readers:
            reader.close()


class _binary_output:
    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> Any:
        try:
            self.stream = open(self.path, "wb")
        except OSError as error:
            raise InvalidArgument(f"cannot write {self.path}: {error.strerror}") from error
        return self.stream

    def __exit__(self, *exc: object) -> None:
        self.stream.close()


class _text_output:
    def __init__(self, path: str) -> None:
        self.path = path

    def __enter__(self) -> Any:
        import sys

        if self.path == "-":
            self.stream = None
            return sys.stdout
        try:
            self.stream = open(self.path, "w", encoding="utf-8")
        except OSError as error:
            raise InvalidArgument(f"cannot write {self.path}: {error.strerror}") from error
        return self.stream

    def __exit__(self, *exc: object) -> None:
        if self.stream is not None:
            self.stream.close()
