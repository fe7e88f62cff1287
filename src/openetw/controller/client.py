"""Reaching the trace service: find its socket, start it when nobody runs one, turn errors back into exceptions.

The service is spawned on first use unless ``OPENETW_NO_AUTOSTART=1`` (or ``autostart=False``);
it then runs detached from the caller (its own session), logging to ``service.log`` beside its
socket, and stays until stopped (``openetw service stop``).
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import openetw.errors as base_errors
import openetw.session.errors as session_errors
from openetw.errors import OpenEtwError, ServiceError
from openetw.ipc.paths import SOCKET_ENV, client_socket_candidates, default_socket
from openetw.ipc.protocol import Channel, ProtocolError

__all__ = ["AUTOSTART_ENV", "ServiceClient", "error_from_reply", "spawn_service"]

AUTOSTART_ENV = "OPENETW_NO_AUTOSTART"
START_TIMEOUT = 15.0

_ERRORS: dict[str, type[OpenEtwError]] = {}
for _module in (base_errors, session_errors):
    for _name in dir(_module):
        _value = getattr(_module, _name)
        if isinstance(_value, type) and issubclass(_value, OpenEtwError):
            _ERRORS[_name] = _value
_ERRORS.pop("EtlFormatError", None)
_ERRORS.pop("ManifestError", None)
_ERRORS.pop("DecodeError", None)
_ERRORS.pop("PropertyDecodeError", None)
_ERRORS.pop("CompressionError", None)


def error_from_reply(reply: dict[str, Any]) -> OpenEtwError:
    """The exception an error reply stands for (same class as in the service when it is one of ours)."""
    error = reply.get("error")
    if not isinstance(error, dict):
        error = {}
    kind = _ERRORS.get(str(error.get("type")), ServiceError)
    message = str(error.get("message") or "the trace service refused the request")
    try:
        return kind(message)
    except TypeError:
        return ServiceError(message)


def _autostart_allowed(autostart: bool | None) -> bool:
    if autostart is not None:
        return autostart
    return os.environ.get(AUTOSTART_ENV, "") in ("", "0")


def spawn_service(socket_path: Path, *, timeout: float = START_TIMEOUT) -> int:
    """Start ``openetw service run --socket PATH`` detached and wait until it listens; its pid.

    A shell puts the service in the background and exits at once, so the service is nobody's
    child here (no zombie when it ends) and lives in a session of its own.
    """
    socket_path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    log_path = socket_path.parent / "service.log"
    read_end, write_end = os.pipe()
    log = open(log_path, "ab")  # noqa: SIM115 - handed to the service
    try:
        command = [sys.executable, "-m", "openetw", "service", "run", "--socket", str(socket_path), "--ready-fd", str(write_end)]
        shell = subprocess.Popen(
            ["/bin/sh", "-c", '"$@" &', "openetw-spawn", *command],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_end,), start_new_session=True,
        )  # fmt: skip
    finally:
        os.close(write_end)
        log.close()
    try:
        deadline = time.monotonic() + timeout
        shell.wait(timeout=timeout)
        answer = b""
        while not answer.endswith(b"\n"):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise ServiceError(f"the trace service did not start within {timeout:.0f} s (see {log_path})")
            ready, _, _ = select.select([read_end], [], [], remaining)
            if not ready:
                continue
            data = os.read(read_end, 64)
            if not data:
                # Closed without a word: it exited (another service won the race, or it failed).
                if socket_path.exists():
                    break
                raise ServiceError(f"the trace service failed to start (see {log_path})")
            answer += data
        words = answer.split()  # "ready <pid>"
        return int(words[1]) if len(words) > 1 and words[1].isdigit() else 0
    finally:
        os.close(read_end)


class ServiceClient:
    """A controller's connection to the service: ``call(op, **fields)`` returns the reply or raises."""

    def __init__(self, socket_path: str | os.PathLike[str] | None = None, *, autostart: bool | None = None, timeout: float = 5.0) -> None:
        self.socket_path = Path(socket_path) if socket_path is not None else None
        self.autostart = _autostart_allowed(autostart)
        self.timeout = timeout
        self.channel = self._connect()

    def _connect(self) -> Channel:
        candidates = [self.socket_path] if self.socket_path is not None else client_socket_candidates()
        for path in candidates:
            try:
                return Channel.connect(str(path), timeout=self.timeout)
            except (FileNotFoundError, ConnectionRefusedError):
                continue
            except PermissionError as exc:
                raise base_errors.AccessDenied(f"cannot reach the trace service at {path}: {exc.strerror}") from None
        target = self.socket_path or (Path(os.environ[SOCKET_ENV]) if os.environ.get(SOCKET_ENV) else default_socket())
        if not self.autostart:
            raise ServiceError(f"no trace service is running (looked for {', '.join(str(p) for p in candidates)})")
        spawn_service(target)
        try:
            return Channel.connect(str(target), timeout=self.timeout)
        except OSError as exc:
            raise ServiceError(f"cannot reach the trace service at {target}: {exc}") from None

    def call(self, op: str, fds: tuple[int, ...] = (), **fields: Any) -> dict[str, Any]:
        try:
            reply = self.channel.request(op, fds, **fields)
        except (OSError, ProtocolError) as exc:
            raise ServiceError(f"lost the trace service during {op!r}: {exc}") from None
        if not reply.get("ok"):
            raise error_from_reply(reply)
        return reply

    def close(self) -> None:
        self.channel.close()

    def __enter__(self) -> ServiceClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
