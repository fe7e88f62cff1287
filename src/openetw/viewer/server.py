"""Serving the viewer: uvicorn on a socket bound before it starts (a free port unless one is
given), in the foreground (``openetw viewer``) or on a thread (tests, benchmarks)."""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any

from openetw.errors import InvalidArgument
from openetw.viewer.app import Viewer, make_app

__all__ = ["ViewerServer"]


class ViewerServer:
    """One viewer run: its ``Viewer``, its socket and its ``url`` (carrying the token)."""

    def __init__(self, viewer: Viewer, *, host: str = "127.0.0.1", port: int = 0) -> None:
        try:
            import uvicorn
        except ImportError as error:
            raise ImportError("openetw viewer needs the 'viewer' extra: pip install 'openetw[viewer]'") from error
        self.viewer = viewer
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.socket(family, socket.SOCK_STREAM)
        self.socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self.socket.bind((host, port))
        except OSError as error:
            self.socket.close()
            raise InvalidArgument(f"cannot listen on {host}:{port}: {error.strerror or error}") from None
        self.socket.listen(128)
        self.host = host
        self.port = int(self.socket.getsockname()[1])
        config = uvicorn.Config(make_app(viewer, port=self.port, bind=host), log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=3)
        self.server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None

    @property
    def base(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "") else f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    @property
    def url(self) -> str:
        return f"{self.base}/?token={self.viewer.token}"

    def client_headers(self) -> dict[str, str]:
        """Headers of a new session of this run, for a program on this machine that calls the API
        itself (benchmarks, tests): its cookie and its CSRF token (see ``viewer.auth``)."""
        from openetw.viewer.auth import cookie_name

        session = self.viewer.sessions.new()
        return {"Cookie": f"{cookie_name(self.port)}={session.cookie}", "X-OpenETW-CSRF": session.csrf}

    def launch_file(self, directory: str | None = None) -> str:
        """A file that sends a browser to ``url``, readable by this user only from the moment it
        exists (mode 0600), so that a browser is started with its path and never with the token
        on a command line (which ``/proc`` shows every user). It is removed once its token is
        exchanged, or when the viewer stops."""
        import html
        import tempfile

        descriptor, path = tempfile.mkstemp(prefix="openetw-viewer-", suffix=".html", dir=directory)  # created 0600
        target = html.escape(self.url, quote=True)
        page = (f'<!DOCTYPE html><html><head><meta charset="utf-8"><meta name="referrer" content="no-referrer">'
                f'<meta http-equiv="refresh" content="0;url={target}"><title>openetw viewer</title></head>'
                f'<body><p><a href="{target}">Open the openetw Event Viewer</a></p></body></html>\n')  # fmt: skip
        with os.fdopen(descriptor, "w", encoding="utf-8") as out:
            out.write(page)
        self.viewer.launch_files.append(path)
        return path

    def run(self) -> None:
        """Serve until interrupted."""
        try:
            self.server.run(sockets=[self.socket])
        finally:
            self.viewer.close()

    def start(self) -> ViewerServer:
        """Serve on a thread; returns once the server answers."""
        self._thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.socket]}, name="viewer-server", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started and time.monotonic() < deadline:
            time.sleep(0.02)
        return self

    def stop(self) -> None:
        self.viewer.closing.set()  # open event streams end within a second
        self.server.should_exit = True
        if self._thread is not None:
            self._thread.join(10)
        self.socket.close()
        self.viewer.close()

    def __enter__(self) -> ViewerServer:
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
