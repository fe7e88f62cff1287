"""The reading flags of the commands that read a trace: ``--no-index`` and ``--index-beside``.

A read never writes beside the trace by default: an index goes into the user's cache
(``$XDG_CACHE_HOME/openetw/index``). ``--index-beside`` (or ``OPENETW_INDEX_BESIDE=1``) asks
for ``FILE.etl.idx`` beside the trace; ``--no-index`` writes no index anywhere.
"""

from __future__ import annotations

from typing import Any

import click

__all__ = ["index_beside_option", "no_index_option", "streamed_no_index_option"]

_STREAMED_HELP = "Accepted for uniformity: this command reads each file in one streamed pass and writes no index."


def no_index_option(command: Any) -> Any:
    """``--no-index`` (``no_index``) on a command that indexes its files."""
    return click.option("--no-index", "no_index", is_flag=True,
                        help="Write no index, in the cache or beside the files.")(command)  # fmt: skip


def streamed_no_index_option(command: Any) -> Any:
    """``--no-index`` on a command that streams its files and never indexes them (no value)."""
    return click.option("--no-index", is_flag=True, expose_value=False, help=_STREAMED_HELP)(command)


def index_beside_option(command: Any) -> Any:
    """``--index-beside`` (``index_beside``: ``True``, or ``None`` to follow the setting)."""
    return click.option(
        "--index-beside", "index_beside", is_flag=True, default=None, callback=lambda _ctx, _param, value: True if value else None,
        help="Keep each file's index beside it (FILE.etl.idx; also OPENETW_INDEX_BESIDE=1) instead of in the user's cache.",
    )(command)  # fmt: skip
