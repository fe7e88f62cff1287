"""Where the control socket lives, and who is on the other end of a connection.

* ``$OPENETW_SOCKET`` names a socket explicitly (tests and demos run a private service);
* the per-user service listens on ``$XDG_RUNTIME_DIR/openetw/control.sock`` (``/run/user/<uid>``
  when the variable is unset and that directory exists, else ``/tmp/openetw-<uid>``), in a
  directory of mode 0700;
* the system service listens on ``/run/openetw/control.sock``, mode 0660, group ``openetw`` when
  that group exists.
"""

from __future__ import annotations

import os
import stat
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from openetw.errors import ServiceError
from openetw.ipc.places import SOCKET_ENV, SYSTEM_SOCKET_PATH, client_socket_paths, user_socket_path
from openetw.ipc.places import SOCKET_NAME as SOCKET_NAME

if TYPE_CHECKING:
    import socket

__all__ = [
    "SOCKET_ENV",
    "SYSTEM_GROUP",
    "SYSTEM_SOCKET",
    "PeerCredentials",
    "client_socket_candidates",
    "default_socket",
    "peer_credentials",
    "prepare_socket_dir",
    "system_group_gid",
    "user_socket",
]

SYSTEM_SOCKET = Path(SYSTEM_SOCKET_PATH)
SYSTEM_GROUP = "openetw"
_UCRED = struct.Struct("3i")


def user_socket(uid: int | None = None) -> Path:
    return Path(user_socket_path(uid))


def default_socket(*, system: bool | None = None) -> Path:
    """The socket a service listens on: ``$OPENETW_SOCKET``, else system for root, per-user otherwise."""
    explicit = os.environ.get(SOCKET_ENV)
    if explicit and system is None:
        return Path(explicit)
    if system is None:
        system = os.geteuid() == 0
    return SYSTEM_SOCKET if system else user_socket()


def client_socket_candidates() -> list[Path]:
    """Sockets a client tries, in order: the explicit one alone, else per-user then system."""
    return [Path(path) for path in client_socket_paths()]


def system_group_gid() -> int | None:
    try:
        import grp  # the service's side only

        return grp.getgrnam(SYSTEM_GROUP).gr_gid
    except KeyError:
        return None


def prepare_socket_dir(path: Path, *, system: bool) -> None:
    """Create the socket's directory: 0700 and ours (per-user), 0755 (system, the socket is 0660).

    A per-user directory owned by someone else, or open to others, is refused: another user could
    otherwise swap the socket under us.
    """
    directory = path.parent
    directory.mkdir(mode=0o755 if system else 0o700, parents=True, exist_ok=True)
    info = directory.stat()
    if system:
        return
    if info.st_uid != os.geteuid():
        raise ServiceError(f"{directory} belongs to uid {info.st_uid}, not to us")
    mode = stat.S_IMODE(info.st_mode)
    if mode & (stat.S_ISVTX | stat.S_IWOTH):
        # A shared directory such as /tmp: never narrow it (other users need it), and a socket
        # there could be swapped by anyone. The socket needs a directory of its own.
        raise ServiceError(
            f"{directory} is a shared directory (mode {mode:o}); put the control socket in a directory of its own, "
            f"e.g. {directory / 'openetw'}/{path.name}"
        )
    if mode & 0o077:
        os.chmod(directory, 0o700)


@dataclass(frozen=True)
class PeerCredentials:
    """SO_PEERCRED of a connection plus the peer's supplementary groups (from /proc)."""

    pid: int
    uid: int
    gid: int
    groups: frozenset[int]
    exe: str


def peer_credentials(sock: socket.socket) -> PeerCredentials:
    import socket  # loaded already: ``sock`` is one

    pid, uid, gid = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
    return PeerCredentials(pid, uid, gid, _supplementary_groups(pid) | {gid}, process_exe(pid))


def _supplementary_groups(pid: int) -> frozenset[int]:
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as status:
            for line in status:
                if line.startswith("Groups:"):
                    return frozenset(int(g) for g in line.split()[1:] if g.isdigit())
    except OSError:
        pass
    return frozenset()


def process_exe(pid: int) -> str:
    """The peer's executable path (its command's first word when /proc/<pid>/exe is not readable)."""
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        pass
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            return cmdline.read().split(b"\0", 1)[0].decode(errors="replace")
    except OSError:
        return ""
