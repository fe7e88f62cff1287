"""Progress of long file work on a terminal: a bar on stderr while records are read.

Shown only when stderr is a terminal and the records' output is not (a bar between dumped lines
helps nobody); never on a pipe; ``--quiet`` silences it.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import click

from openetw.etl.reader import EtlReader
from openetw.etl.record import EventRecord

__all__ = ["quiet_option", "show_progress", "with_progress"]

_EVERY = 4096  # records between updates

quiet_option = click.option("-q", "--quiet", is_flag=True, help="No progress bar on the terminal.")


def show_progress(quiet: bool, *, output_is_stdout: bool = True) -> bool:
    """Whether to draw a bar: not quiet, stderr a terminal, and the output not on it."""
    if quiet or not _isatty(sys.stderr):
        return False
    return not (output_is_stdout and _isatty(sys.stdout))


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):
        return False


def _size(path: str | None) -> int:
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


def with_progress(records: Iterable[EventRecord], readers: Sequence[EtlReader], enabled: bool) -> Iterator[EventRecord]:
    """``records`` unchanged; with ``enabled``, a bar of the bytes read so far on stderr."""
    return _drawing(records, readers) if enabled else iter(records)


def _drawing(records: Iterable[EventRecord], readers: Sequence[EtlReader]) -> Iterator[EventRecord]:
    sizes = {reader.path: _size(reader.path) for reader in readers}
    offsets: dict[str | None, int] = {}
    total = sum(sizes.values()) or 1
    with click.progressbar(length=total, label="reading", file=sys.stderr, show_eta=True) as bar:
        done = 0
        for count, record in enumerate(records, 1):
            if count % _EVERY == 0:
                path = record._ctx.source  # which file the record came from
                buffer_size = next((r.header.buffer_size for r in readers if r.path == path), 0)
                if path is not None and record.buffer_index is not None:
                    offsets[path] = min(sizes.get(path, 0), (record.buffer_index + 1) * buffer_size)
                now = sum(offsets.values())
                if now > done:
                    bar.update(now - done)
                    done = now
            yield record
        bar.update(total - done)
