"""Who may use a viewer run: its launch token, the sessions it is exchanged for, and the
checks every request passes (no I/O here; ``viewer.app`` applies them to each request).

A browser shares its cookies for ``127.0.0.1`` with every port of that host, and a page on
``127.0.0.1:<another port>`` is *same-site* with the viewer, so neither a cookie nor SameSite
keeps the viewer's secret from another local user's server. Hence:

* The launch token (in the URL the viewer prints or writes to its 0600 launch file) is good
  for one exchange: it becomes a *session*, and is refused afterwards.
* A session is two values. The cookie (``openetw_viewer_<port>``, HttpOnly, SameSite=Strict)
  carries the session id and its signature; it opens the page and its static files only.
  The CSRF token, an HMAC of the session id under this run's key, is handed to the page in
  the fragment of the URL the exchange refreshes to (never sent to any server) and kept in the page origin's storage,
  which a page on another port cannot read. Every API request must carry it
  (``X-OpenETW-CSRF``; a plain GET such as the event stream or a download may give it as the
  ``csrf`` parameter). A cookie a server on another port receives opens nothing.
* The ``Host`` must name this server (no DNS rebinding), an ``Origin`` must be this server's
  own, and a state-changing request must carry one; ``Sec-Fetch-Site`` other than
  ``same-origin``/``none`` is refused on the API.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import secrets
import threading
from collections import OrderedDict
from dataclasses import dataclass

__all__ = ["CSRF_HEADER", "Session", "Sessions", "cookie_name", "host_allowed", "origin_allowed"]

CSRF_HEADER = "x-openetw-csrf"
MAX_SESSIONS = 16  # the oldest session is dropped when another is made


def cookie_name(port: int) -> str:
    """The run's cookie: named for its port, so that two runs never share one."""
    return f"openetw_viewer_{int(port)}"


@dataclass(frozen=True)
class Session:
    """One browser's session: ``cookie`` (the cookie's value) and ``csrf`` (the API's token)."""

    sid: str
    cookie: str
    csrf: str


class Sessions:
    """The launch token of one run and the sessions made from it."""

    def __init__(self, token: str | None = None) -> None:
        self.token = token or secrets.token_urlsafe(32)
        self._key = secrets.token_bytes(32)
        self._live: OrderedDict[str, None] = OrderedDict()
        self._lock = threading.Lock()
        self.exchanged = False

    def _sign(self, purpose: str, sid: str) -> str:
        return hmac.new(self._key, f"{purpose}:{sid}".encode(), hashlib.sha256).hexdigest()

    def new(self) -> Session:
        """A fresh session (the oldest of more than ``MAX_SESSIONS`` is dropped)."""
        sid = secrets.token_urlsafe(24)
        with self._lock:
            self._live[sid] = None
            while len(self._live) > MAX_SESSIONS:
                self._live.popitem(last=False)
        return Session(sid, f"{sid}.{self._sign('cookie', sid)}", self._sign("csrf", sid))

    def exchange(self, token: str) -> Session | None:
        """A session for the launch token, once; ``None`` for a wrong or already used token."""
        with self._lock:
            if self.exchanged or not hmac.compare_digest(token.encode(), self.token.encode()):
                return None
            self.exchanged = True
        return self.new()

    def session_of(self, cookie: str | None) -> str | None:
        """The session id a cookie value carries, if it is one of this run's live sessions."""
        if not cookie:
            return None
        sid, _, signature = cookie.partition(".")
        if not hmac.compare_digest(signature.encode(), self._sign("cookie", sid).encode()):
            return None
        with self._lock:
            return sid if sid in self._live else None

    def csrf_valid(self, sid: str, given: str | None) -> bool:
        return given is not None and hmac.compare_digest(given.encode(), self._sign("csrf", sid).encode())


def _host_part(authority: str) -> tuple[str, str]:
    """``host:port`` (or ``[v6]:port``) split in two; the port is '' when absent."""
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        return host, rest.removeprefix(":")
    host, _, port = authority.rpartition(":") if authority.count(":") == 1 else (authority, "", "")
    return host, port


def host_allowed(authority: str, port: int, bind: str, names: tuple[str, ...] = ()) -> bool:
    """Whether a ``Host`` header names this server: its port, and an address literal, ``localhost``,
    the bound address or one of ``names`` (the machine's own names, for a wildcard ``--bind``).
    A name that merely resolves here (DNS rebinding) is refused."""
    host, given_port = _host_part(authority.strip().lower())
    if given_port != str(port):
        return False
    if host in ("localhost", bind.lower()) or host in (name.lower() for name in names):
        return True
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        return False
    if bind in ("0.0.0.0", "::", ""):
        return True
    return address.is_loopback and ipaddress.ip_address(bind).is_loopback if _is_address(bind) else address.is_loopback


def _is_address(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def origin_allowed(origin: str, authority: str) -> bool:
    """Whether an ``Origin`` header is this server's own (the scheme, host and port the request
    was sent to)."""
    return origin.strip().lower() == f"http://{authority.strip().lower()}"
