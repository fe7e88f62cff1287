"""Where the control socket lives, as text: what a producer needs to find the service.

``paths`` gives the same places as ``Path`` objects (and the service's side of the socket); this
module loads only ``os``, so a program that writes events finds the service without ``pathlib``.
"""

from __future__ import annotations

import os

__all__ = ["SOCKET_ENV", "SOCKET_NAME", "SYSTEM_SOCKET_PATH", "client_socket_paths", "user_socket_path"]

SOCKET_ENV = "OPENETW_SOCKET"
SOCKET_NAME = "control.sock"
SYSTEM_SOCKET_PATH = "/run/openetw/control.sock"


def user_socket_path(uid: int | None = None) -> str:
    """The per-user socket: ``$XDG_RUNTIME_DIR/openetw``, else ``/run/user/<uid>/openetw`` when that
    directory exists, else ``/tmp/openetw-<uid>``."""
    uid = os.getuid() if uid is None else uid
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        return os.path.join(runtime, "openetw", SOCKET_NAME)
    run_user = f"/run/user/{uid}"
    if os.path.isdir(run_user):
        return os.path.join(run_user, "openetw", SOCKET_NAME)
    return os.path.join(f"/tmp/openetw-{uid}", SOCKET_NAME)


def client_socket_paths() -> list[str]:
    """Sockets a client tries, in order: the explicit one alone, else per-user then system."""
    explicit = os.environ.get(SOCKET_ENV)
    if explicit:
        return [explicit]
    if os.geteuid() == 0:
        return [SYSTEM_SOCKET_PATH, user_socket_path()]
    return [user_socket_path(), SYSTEM_SOCKET_PATH]
