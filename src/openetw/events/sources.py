"""One way to open any trace source as records, under one damage policy.

A file of any known format (``.etl``, ``.evtx``, whatever ``consumer.formats`` learns next) is
opened by ``open_source``, a real-time session of the trace service by ``open_session``, each as
a ``consumer.sources.Source`` (``records()``, ``statistics()``,
``losses()``, ``notices()``), or by ``open_reader`` as a lenient reader with the ``.etl``
reader's face for the file commands. The policy is the reader's: every good record is kept;
``losses()`` say what cost records (a command fails on them, after its output), ``notices()``
what disagreed and was only counted (a command warns). ``Damage`` is that verdict for one
source, in the words every application shows it with.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from openetw.consumer.formats import ETL, EVTX, SourceReader, TraceFormat, formats, open_reader, trace_format

if TYPE_CHECKING:
    from openetw.consumer.sources import Source

__all__ = [
    "ETL", "EVTX", "Damage", "SourceReader", "TraceFormat", "damage_of", "formats", "open_reader", "open_session",
    "open_source", "trace_format",
]  # fmt: skip


def open_source(path: str | os.PathLike[str], *, as_format: TraceFormat | None = None, **options: Any) -> Source:
    """The ``Source`` for a trace file (not yet opened): of the format its first bytes tell, or
    ``as_format`` when the caller already knows it (an ``.evtx`` named on a command line is read
    as one, whatever its bytes say). ``options`` are ``.etl``'s index options."""
    return (as_format or trace_format(path)).open(path, **options)


def open_session(name: str, *, socket: str | os.PathLike[str] | None = None) -> Source:
    """The ``Source`` of an existing real-time session (not yet opened: ``open()`` attaches, and
    fails when there is no such session)."""
    from openetw.consumer.live import LiveSessionSource

    return LiveSessionSource(name, socket=socket)


@dataclass(frozen=True, slots=True)
class Damage:
    """What reading a source lost (``losses``: the command fails, after its output) and what it
    only counted (``notices``: the command warns)."""

    losses: Sequence[Any] = ()
    notices: Sequence[Any] = field(default_factory=tuple)

    @property
    def failed(self) -> bool:
        return bool(self.losses)

    def summary(self) -> str | None:
        """The first loss, and how many more (``None`` when nothing was lost)."""
        if not self.losses:
            return None
        more = len(self.losses) - 1
        return f"{self.losses[0]}" + (f" (and {more} more)" if more else "")


def damage_of(source: Any) -> Damage:
    """A source's verdict once its records were read (``losses()`` and ``notices()``; a source
    without ``notices`` counts nothing, one without ``losses`` loses its ``errors()``)."""
    losses = source.losses() if hasattr(source, "losses") else source.errors()
    notices = source.notices() if hasattr(source, "notices") else ()
    return Damage(tuple(losses), tuple(notices))
