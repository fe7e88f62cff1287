"""Where the service keeps its provider security table between runs, and reading it back.

The table (``session/security.py``) is saved whenever root changes it and read when the service
starts:

* the machine's service (on ``/run/openetw/control.sock``): ``/var/lib/openetw/provider-security.json``;
* a per-user service on its standard socket: ``$XDG_STATE_HOME/openetw/provider-security.json``
  (``~/.local/state/openetw/...``);
* a service on a socket of its own (``--socket``, ``$OPENETW_SOCKET``): beside that socket, so
  that private services never share one.

The file is the service's own: written atomically (a whole new file renamed over the old) with
mode 0600. At start a file that is not a regular file, is not owned by the service's user, may be
written by others, or does not parse as a table is refused with a line in the service's log, and
the defaults (the Security and System providers root's only) apply alone.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Callable
from pathlib import Path

from openetw.errors import InvalidArgument
from openetw.ipc.paths import SYSTEM_SOCKET, user_socket
from openetw.manifest.store.files import write_atomically
from openetw.session.security import ProviderSecurity

__all__ = ["SECURITY_FILE", "load_provider_security", "save_provider_security", "security_table_path"]

SECURITY_FILE = "provider-security.json"
SYSTEM_STATE_DIR = Path("/var/lib/openetw")
MAX_TABLE_BYTES = 16 << 20


def user_state_dir() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"), ".local", "state")
    return Path(base) / "openetw"


def security_table_path(socket_path: Path, *, system: bool) -> Path:
    """Where a service on ``socket_path`` keeps its table (see the module doc)."""
    standard = SYSTEM_SOCKET if system else user_socket()
    if Path(socket_path) != standard:
        return Path(socket_path).parent / SECURITY_FILE
    return (SYSTEM_STATE_DIR if system else user_state_dir()) / SECURITY_FILE


def load_provider_security(path: Path, log: Callable[[str], None]) -> ProviderSecurity:
    """The defaults, with the saved table at ``path`` over them when it can be trusted."""
    table = ProviderSecurity()
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return table
    except OSError as exc:
        log(f"provider security table {path} refused ({exc.strerror}); only the defaults apply")
        return table
    try:
        info = os.fstat(fd)
        problem = None
        if not stat.S_ISREG(info.st_mode):
            problem = "not a regular file"
        elif info.st_uid != os.geteuid():
            problem = f"owned by uid {info.st_uid}, not by the service's uid {os.geteuid()}"
        elif info.st_mode & 0o022:
            problem = f"others may write it (mode {stat.S_IMODE(info.st_mode):o})"
        elif info.st_size > MAX_TABLE_BYTES:
            problem = f"larger than {MAX_TABLE_BYTES} bytes"
        if problem is None:
            with os.fdopen(os.dup(fd), "rb") as handle:
                data = handle.read(MAX_TABLE_BYTES + 1)
            try:
                table.load_document(json.loads(data))
            except (ValueError, RecursionError, InvalidArgument) as exc:  # JSON errors are ValueErrors
                problem = f"damaged: {exc}"
    finally:
        os.close(fd)
    if problem is not None:
        log(f"provider security table {path} refused ({problem}); only the defaults apply")
        return ProviderSecurity()
    return table


def save_provider_security(path: Path, table: ProviderSecurity, *, system: bool) -> None:
    """Write ``table`` to ``path`` atomically, owner-only (``OSError`` when it cannot)."""
    path.parent.mkdir(mode=0o755 if system else 0o700, parents=True, exist_ok=True)
    data = json.dumps(table.as_document(), indent=1).encode() + b"\n"
    write_atomically(path, data, mode=0o600)
