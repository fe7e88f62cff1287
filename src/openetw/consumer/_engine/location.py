"""Where an index lives, whether a stored one may be used, and the cache's size cap.

A read never writes beside what it reads: a new index goes into the user's cache directory
(``$OPENETW_INDEX_DIR``, else ``$XDG_CACHE_HOME/openetw/index``, else ``~/.cache/openetw/index``;
directories made 0700, files 0600), named by the trace's identity (device, inode, size,
modification time). Writing it beside the trace (``FILE.etl.idx``) is an opt-in:
``$OPENETW_INDEX_BESIDE=1`` or ``beside=True`` (``--index-beside`` on the command line); such an
index is created with the trace's mode bits, at most 0644. An index already beside a trace is
read (it is a read), once it passes the checks every stored index passes.

A stored index is used only when the reading user (or root) owns it and nobody else may write
it; any other is ignored and the index is built again in the cache. The cache keeps at most
``$OPENETW_INDEX_CACHE_MB`` megabytes (default ``DEFAULT_CACHE_MB``): after an index is written
there, the least recently used ones go first (a cached index that is used has its modification
time set to now, so eviction goes by that stamp).
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

__all__ = [
    "BESIDE_ENV", "CACHE_CAP_ENV", "CACHE_FILE_MODE", "DEFAULT_CACHE_MB", "INDEX_DIR_ENV", "INDEX_SUFFIX", "beside_setting",
    "cache_cap_bytes", "default_cache_dir", "evict", "index_locations", "make_private_dirs", "may_trust", "mark_used",
    "writable_directory",
]  # fmt: skip

INDEX_SUFFIX = ".idx"
INDEX_DIR_ENV = "OPENETW_INDEX_DIR"
CACHE_CAP_ENV = "OPENETW_INDEX_CACHE_MB"
BESIDE_ENV = "OPENETW_INDEX_BESIDE"
DEFAULT_CACHE_MB = 1024
CACHE_FILE_MODE = 0o600
_PART_SUFFIX = ".idx-part"
_STALE_PART_SECONDS = 24 * 3600


def default_cache_dir() -> Path:
    explicit = os.environ.get(INDEX_DIR_ENV)
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "openetw" / "index"


def beside_setting() -> bool:
    """Whether ``$OPENETW_INDEX_BESIDE`` asks for new indexes beside their traces."""
    return os.environ.get(BESIDE_ENV, "").strip().lower() in ("1", "true", "yes", "on")


def _identity_key(source: Path) -> str:
    try:
        info = os.stat(source)
        identity = f"{info.st_dev}:{info.st_ino}:{info.st_size}:{info.st_mtime_ns}"
    except OSError:
        identity = "path:" + str(source)
    return hashlib.sha256(identity.encode("utf-8", "surrogateescape")).hexdigest()[:32]


def index_locations(path: str | os.PathLike[str], cache_dir: str | os.PathLike[str] | None = None) -> tuple[Path, Path]:
    """(beside the file, in the cache directory): where an index of ``path`` may live. The
    cached one is named by the file's identity, so a changed or replaced file gets a new one."""
    source = Path(os.path.abspath(path))
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    return source.with_name(source.name + INDEX_SUFFIX), cache / f"{_identity_key(source)}{INDEX_SUFFIX}"


def make_private_dirs(directory: Path) -> None:
    """Make ``directory`` and any missing parent, each created 0700 (existing ones are left)."""
    missing: list[Path] = []
    at = directory
    while not at.exists() and at != at.parent:
        missing.append(at)
        at = at.parent
    for folder in reversed(missing):
        try:
            os.mkdir(folder, 0o700)
        except FileExistsError:
            pass


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
    bytes (default ``cache_cap_bytes()``); ``keep`` is never deleted, nor is a part being
    written (one left behind by a build that died goes after a day). Returns what went."""
    limit = cache_cap_bytes() if cap is None else cap
    entries: list[tuple[int, int, Path]] = []
    stale: list[Path] = []
    try:
        with os.scandir(cache_dir) as listing:
            for entry in listing:
                if not entry.is_file(follow_symlinks=False):
                    continue
                info = entry.stat(follow_symlinks=False)
                if entry.name.endswith(INDEX_SUFFIX):
                    entries.append((info.st_mtime_ns, info.st_size, Path(entry.path)))
                elif entry.name.endswith(_PART_SUFFIX) and _older_than(info.st_mtime_ns, _STALE_PART_SECONDS):
                    stale.append(Path(entry.path))
    except OSError:
        return []
    gone: list[Path] = []
    for path in stale:
        try:
            path.unlink()
            gone.append(path)
        except OSError:
            pass
    total = sum(size for _, size, _ in entries)
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


def _older_than(mtime_ns: int, seconds: int) -> bool:
    import time

    return time.time_ns() - mtime_ns > seconds * 1_000_000_000
