"""``--start`` and ``--end`` of every command that reads trace files (``dump``, ``report``,
``export``): one option helper and one time parser.

A bound is an ISO 8601 time (``2024-05-01T10:00:02.5Z``; without an offset it is UTC) or a number
of seconds from the trace's start (``2.5``; the earliest start of the files given). Both bounds
are inclusive. A command decorated with :func:`time_window_options` receives ``window`` (a
:class:`TimeSpec`) and turns it into a ``TimeWindow`` over its readers with :meth:`TimeSpec.resolve`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import click

from openetw.cli.option_group import option_group
from openetw.errors import InvalidArgument
from openetw.etl.clock import datetime_to_filetime
from openetw.etl.reader import EtlReader
from openetw.etl.record import EventRecord

__all__ = ["TimeBound", "TimeSpec", "TimeWindow", "parse_time_bound", "time_window_options", "within"]

_TICKS_PER_SECOND = 10_000_000


@dataclass(frozen=True)
class TimeBound:
    """Either ``seconds`` after the trace start or an absolute ``filetime``."""

    seconds: float | None = None
    filetime: int | None = None

    def at(self, trace_start: int) -> int:
        if self.filetime is not None:
            return self.filetime
        assert self.seconds is not None
        return trace_start + round(self.seconds * _TICKS_PER_SECOND)


def parse_time_bound(text: str, what: str = "time") -> TimeBound:
    """``2.5`` (seconds from the trace start) or an ISO 8601 time; ``InvalidArgument`` otherwise."""
    stripped = text.strip()
    try:
        seconds = float(stripped)
    except ValueError:
        pass
    else:
        if not math.isfinite(seconds) or seconds < 0:
            raise InvalidArgument(f"{what} {text!r}: seconds from the trace start must be a finite number >= 0")
        return TimeBound(seconds=seconds)
    try:
        when = datetime.fromisoformat(stripped[:-1] + "+00:00" if stripped.endswith(("Z", "z")) else stripped)
    except ValueError:
        raise InvalidArgument(
            f"{what} {text!r} is neither seconds from the trace start (2.5) nor an ISO 8601 time (2024-05-01T10:00:02Z)"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return TimeBound(filetime=datetime_to_filetime(when.astimezone(UTC).replace(tzinfo=None)))


@dataclass(frozen=True)
class TimeWindow:
    """``start <= filetime <= end`` (FILETIME ticks); either bound may be open."""

    start: int | None = None
    end: int | None = None

    def contains(self, filetime: int) -> bool:
        return (self.start is None or filetime >= self.start) and (self.end is None or filetime <= self.end)


@dataclass(frozen=True)
class TimeSpec:
    """The ``--start``/``--end`` a user gave, before the trace start is known."""

    start: TimeBound | None = None
    end: TimeBound | None = None

    @property
    def given(self) -> bool:
        return self.start is not None or self.end is not None

    def resolve(self, readers: Sequence[EtlReader]) -> TimeWindow | None:
        """The window over these files (relative bounds count from their earliest start);
        ``None`` when no bound was given."""
        if not self.given:
            return None
        starts = [reader.header.start_time for reader in readers if reader.header.start_time > 0]
        trace_start = min(starts, default=0)
        start = self.start.at(trace_start) if self.start is not None else None
        end = self.end.at(trace_start) if self.end is not None else None
        if start is not None and end is not None and start > end:
            raise InvalidArgument("--start is after --end")
        return TimeWindow(start, end)


def within(records: Iterable[EventRecord], window: TimeWindow | None) -> Iterator[EventRecord]:
    """The records inside ``window`` (all of them when it is ``None``); damaged records whose time
    is unknown are kept, so that damage is still shown."""
    if window is None:
        yield from records
        return
    for record in records:
        if record.kind == "unknown" or window.contains(record.filetime):
            yield record


def _bound(what: str) -> Callable[[click.Context, click.Parameter, str | None], TimeBound | None]:
    def convert(_ctx: click.Context, _param: click.Parameter, value: str | None) -> TimeBound | None:
        if value is None:
            return None
        try:
            return parse_time_bound(value, what)
        except InvalidArgument as error:
            raise click.BadParameter(str(error), param_hint=what) from None

    return convert


_HELP = "Only records {}: ISO 8601 (UTC without an offset) or seconds from the trace start."
_START = click.option("--start", default=None, metavar="TIME", callback=_bound("--start"), help=_HELP.format("from this time on"))
_END = click.option("--end", default=None, metavar="TIME", callback=_bound("--end"), help=_HELP.format("up to this time"))
time_window_options = option_group((_START, _END), ("start", "end"), "window", TimeSpec)
time_window_options.__doc__ = "``--start`` and ``--end``; the command receives them as ``window`` (a ``TimeSpec``)."
