"""Where an index lives, whether a stored one may be used, and the cache's size cap.

An index goes beside its trace (``FILE.etl.idx``) when that directory is writable, otherwise
into the user's cache directory (``$OPENETW_INDEX_DIR``, else ``$XDG_CACHE_HOME/openetw/etl-index``,
else ``~/.cache/openetw/etl-index``). A stored index is used only when the reading user (or root)
owns it and nobody else may write it; any other is ignored and the index is built again in the
cache. The cache keeps at most ``$OPENETW_INDEX_CACHE_MB`` megabytes (default
``DEFAULT_CACHE_MB``): after an index is written there, the least recently used ones go first.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = [
    "CACHE_CAP_ENV", "DEFAULT_CACHE_MB", "INDEX_DIR_ENV", "INDEX_SUFFIX", "cache_cap_bytes", "default_cache_dir", "evict",
    "index_locations", "may_trust", "mark_used", "writable_directory",
]  # fmt: skip

INDEX_SUFFIX = ".idx"
INDEX_DIR_ENV = "OPENETW_INDEX_DIR"
CACHE_CAP_ENV = "OPENETW_INDEX_CACHE_MB"
DEFAULT_CACHE_MB = 2048


def default_cache_dir() -> Path:
    explicit = os.environ.get(INDEX_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "openetw" / "etl-index"


def index_locations(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    """(beside the file, in the cache directory): where an index of ``path`` may live."""
    source = Path(os.path.abspath(path))
    key = hashlib.sha256(str(source).encode("utf-8", "surrogateescape")).hexdigest()[:24]
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return source.with_name(source.name + INDEX_SUFFIX), cache / f"{key}-{source.name}{INDEX_SUFFIX}"


def writable_directory(directory: Path) -> bool:
    """Writable, and meant to be: a directory without any write bit is left alone even by root."""
    try:
        return bool(directory.stat().st_mode & 0o222) and os.access(directory, os.W_OK)
    except OSError:
        return False


def may_trust(location: str | os.PathLike[str]) -> bool:
    """Whether a stored index may be read: a regular file owned by the reading user or root
    that no one else may write, in a folder no one else may write to (``index_trust``)."""
    from openetw.consumer.index_trust import untrusted_reason

    return untrusted_reason(location) is None


def cache_cap_bytes() -> int:
    try:
        megabytes = float(os.environ.get(CACHE_CAP_ENV, DEFAULT_CACHE_MB))
    except ValueError:
        megabytes = DEFAULT_CACHE_MB
    return max(0, int(megabytes * (1 << 20)))


def mark_used(location: Path) -> None:
    """A cached index was used: it becomes the most recently used (eviction goes by mtime)."""
    try:
        os.utime(location)
    except OSError:
        pass


def evict(cache_dir: Path, keep: Path | None = None, cap: int | None = None) -> list[Path]:
    """Delete the least recently used indexes of ``cache_dir`` until it holds at most ``cap``
    bytes (default ``cache_cap_bytes()``); ``keep`` is never deleted. Returns what went."""
    limit = cache_cap_bytes() if cap is None else cap
    try:
        entries = [(entry.stat().st_mtime_ns, entry.stat().st_size, Path(entry.path)) for entry in os.scandir(cache_dir)
                   if entry.name.endswith(INDEX_SUFFIX) and entry.is_file(follow_symlinks=False)]  # fmt: skip
    except OSError:
        return []
    total = sum(size for _, size, _ in entries)
    gone: list[Path] = []
    for _, size, path in sorted(entries):
        if total <= limit:
            break
        if keep is not None and path == keep:
            continue
        try:
            path.unlink()
        except OSError:
            continue
        total -= size
        gone.append(path)
    return gone
