"""SQL over the table layout with DuckDB.

``open_database`` makes a DuckDB connection over one or more layout directories: a view
``events`` over every ``events.parquet`` and a view ``"<Provider>/<Event>"`` per event table
(all versions of the event, columns united by name). ``layout_for`` turns trace files into a
layout in a cache directory first (one export per set of inputs, reused while the files, the
manifests given and the layout version are unchanged).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Callable, Sequence
from typing import Any

from openetw.errors import InvalidArgument
from openetw.export._deps import require
from openetw.export.parquet import SCHEMAS_FILE
from openetw.export.pipeline import LAYOUT_VERSION

__all__ = ["Query", "default_cache_dir", "is_layout", "layout_for", "list_tables", "open_database", "run_query"]


def default_cache_dir() -> str:
    """``$OPENETW_CACHE_DIR``, else ``$XDG_CACHE_HOME/openetw/tables``, else ``~/.cache/openetw/tables``."""
    explicit = os.environ.get("OPENETW_CACHE_DIR")
    if explicit:
        return explicit
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "openetw", "tables")


def is_layout(path: str) -> bool:
    """Whether ``path`` is a directory holding an exported layout."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, SCHEMAS_FILE))


def _cache_key(files: Sequence[str], extra: Sequence[str]) -> str:
    from openetw import __version__

    digest = hashlib.sha256(f"layout {LAYOUT_VERSION} openetw {__version__}\n".encode())
    for path in files:
        info = os.stat(path)
        digest.update(f"{os.path.abspath(path)}\0{info.st_size}\0{info.st_mtime_ns}\n".encode())
    for item in extra:
        digest.update(f"extra\0{item}\n".encode())
    return digest.hexdigest()[:24]


def layout_for(
    files: Sequence[str], export: Callable[[list[str], str], Any], *, cache_dir: str | None = None, extra: Sequence[str] = (),
) -> tuple[str, bool]:
    """The layout directory of trace ``files`` (exported by ``export(files, directory)`` when not
    cached) and whether it was exported now. ``extra`` names what else changes the export."""
    for path in files:
        if not os.path.isfile(path):
            raise InvalidArgument(f"no such file: {path}")
    root = cache_dir or default_cache_dir()
    target = os.path.join(root, _cache_key(files, extra))
    if is_layout(target):
        return target, False
    os.makedirs(root, exist_ok=True)
    scratch = tempfile.mkdtemp(prefix=".export-", dir=root)
    try:
        export(list(files), scratch)
        try:
            os.replace(scratch, target)
        except OSError:  # another export of the same inputs finished first
            if not is_layout(target):
                raise
            shutil.rmtree(scratch, ignore_errors=True)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return target, True


def _quote(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _literal(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _files(paths: list[str]) -> str:
    return "[" + ", ".join(_literal(path) for path in paths) + "]"


def open_database(directories: Sequence[str]) -> Any:
    """An in-memory DuckDB connection with the views of the layouts in ``directories``."""
    duckdb = require("duckdb", "openetw sql")
    tables: dict[str, list[str]] = {}
    events: list[str] = []
    for directory in [layout for given in directories for layout in _layouts_in(given)]:
        with open(os.path.join(directory, SCHEMAS_FILE), encoding="utf-8") as stream:
            layout = json.load(stream)
        events.append(os.path.join(directory, layout["events"]["file"]))
        for table in layout["tables"]:
            tables.setdefault(table["table"], []).append(os.path.join(directory, table["file"]))
    # A partitioned tree of layouts (a fleet collector's host=/date=/ folders): the partitions are columns.
    hive = ", hive_partitioning = true" if any(_PARTITION.search(path) for path in events) else ""
    connection = duckdb.connect(":memory:")
    connection.execute(f"CREATE VIEW events AS SELECT * FROM read_parquet({_files(events)}, union_by_name = true{hive})")
    for name, files in tables.items():
        connection.execute(f"CREATE VIEW {_quote(name)} AS SELECT * FROM read_parquet({_files(files)}, union_by_name = true{hive})")
    return connection


_PARTITION = re.compile(r"[/\\][^/\\=]+=[^/\\]*[/\\]")


def _layouts_in(directory: str) -> list[str]:
    """``directory`` when it is a layout, else the layouts below it (a tree of partitioned
    layouts, as the fleet's collector writes), in name order."""
    if is_layout(directory):
        return [directory]
    found = sorted(root for root, _, files in os.walk(directory) if SCHEMAS_FILE in files) if os.path.isdir(directory) else []
    if not found:
        raise InvalidArgument(f"{directory} is not an exported layout (no {SCHEMAS_FILE}, here or below)")
    return found


class Query:
    """A query's result: column names and rows (Python values)."""

    def __init__(self, columns: list[str], rows: list[tuple[Any, ...]]) -> None:
        self.columns = columns
        self.rows = rows


def run_query(connection: Any, sql: str) -> Query:
    """Runs ``sql``; a DuckDB error becomes ``InvalidArgument`` with DuckDB's message."""
    duckdb = require("duckdb", "openetw sql")
    try:
        result = connection.execute(sql)
        rows = result.fetchall()
    except duckdb.Error as error:
        raise InvalidArgument(f"SQL: {error}") from None
    columns = [item[0] for item in result.description] if result.description else []
    return Query(columns, rows)


def list_tables(connection: Any) -> list[dict[str, Any]]:
    """Every view: name and columns (name, DuckDB type), ``events`` first, then by name."""
    found = connection.execute(
        "SELECT table_name, column_name, data_type FROM information_schema.columns "
        "WHERE table_schema = 'main' ORDER BY table_name, ordinal_position"
    ).fetchall()
    tables: dict[str, list[dict[str, str]]] = {}
    for table, column, kind in found:
        tables.setdefault(table, []).append({"name": column, "type": kind})
    order = sorted(tables, key=lambda name: (name != "events", name))
    return [{"table": name, "columns": tables[name]} for name in order]
