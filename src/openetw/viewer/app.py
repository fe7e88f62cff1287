"""The viewer's web application (Starlette): the page, its static files and the JSON API.

Who may use it is ``viewer.auth``'s: the launch token (``?token=…`` on the first request) is
exchanged once for a session: an HttpOnly, SameSite=Strict cookie named for the port, which
opens the page, and a CSRF token handed to the page in the fragment of the URL its answer refreshes to, which every API
request must carry. The ``Host`` must name this server and an ``Origin`` be its own. The page is
served with a Content-Security-Policy that allows only this server's own scripts, so no event
content can run as script even if it were put into the page unescaped.

API (all JSON, filters as ``viewer.model.parse_query`` reads them):
``GET /api/sources``, ``POST /api/open {"path"}``, ``GET /api/sessions``, ``POST /api/attach
{"session"}``, ``GET /api/logs``, ``POST /api/logs/open {"name", "directory"}``, and per source ``/api/s/{id}``: ``rows?offset&limit``, ``facets``,
``timeline?bins&by``, ``event/{row}``, ``export?format``, ``tail?cursor`` (SSE),
``counts`` (providers and events with counts, as PerfView's Events view lists them),
``POST close`` (the source is closed; a source that failed to open can be closed too).
"""

from __future__ import annotations

import asyncio
import html
import itertools
import json
import os
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import numpy as np

from openetw.errors import InvalidArgument, OpenEtwError
from openetw.viewer.auth import CSRF_HEADER, Sessions, cookie_name, host_allowed, origin_allowed
from openetw.viewer.model import Query, facet_counts, histogram, matching_rows, parse_query
from openetw.viewer.sources import LiveSource, ViewerSource, default_registry, open_file

try:
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import HTMLResponse, JSONResponse, Response, StreamingResponse
    from starlette.routing import Route
except ImportError as _missing:  # pragma: no cover - the message is the point
    raise ImportError("openetw viewer needs the 'viewer' extra: pip install 'openetw[viewer]'") from _missing

__all__ = ["Viewer", "make_app"]

MAX_PAGE = 500
TAIL_GATHER_SECONDS = 0.02  # a live tail's events sent together, at most this much later
_STATIC = {"index.html": "text/html; charset=utf-8", "viewer.js": "text/javascript; charset=utf-8", "viewer.css": "text/css; charset=utf-8"}
_CSP = ("default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
        "base-uri 'none'; form-action 'none'; frame-ancestors 'none'")  # fmt: skip

Scope = MutableMapping[str, Any]
ASGIApp = Callable[[Scope, Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class Viewer:
    """The open sources of one viewer run."""

    def __init__(self, token: str | None = None, socket: str | None = None, *, keep_index: bool = True, index_beside: bool | None = None) -> None:
        self.sessions = Sessions(token)
        self.launch_files: list[str] = []  # removed once their token is exchanged
        self.socket = socket
        self.index_options = {"save": keep_index, "beside": index_beside}  # EtlIndex.open's: where .etl indexes are kept
        self.registry = default_registry()
        self.sources: dict[str, ViewerSource] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._masks: dict[tuple[Any, ...], np.ndarray] = {}
        self._profiles: dict[tuple[str, str | None], Any] = {}  # the named stacks of a source, once asked for
        self.closing = threading.Event()  # set when the server stops: event streams end

    def stacks(self, source: ViewerSource, process: str | None, fold: float) -> dict[str, Any]:
        """The CPU stacks of an ``.etl`` source (``openetw stacks``): By Name (the first 50 rows)
        and the call tree folded at ``fold`` percent, for the flame graph pane."""
        path = getattr(source, "path", None)
        if source.kind != "etl" or not isinstance(path, str):
            raise InvalidArgument("stacks come from .etl files")
        key = (source.id, process)
        with self._lock:
            profile = self._profiles.get(key)
        if profile is None:
            profile = self._load_profile(source, path, process)
            with self._lock:
                self._profiles[key] = profile
        from openetw.report.stacks import by_name, call_tree

        total = profile.total
        return {
            "samples": total, "naming": profile.naming.as_json(),
            "by_name": [row.as_json(total) for row in by_name(profile.samples)[:50]],
            "tree": call_tree(profile.samples).as_json(total, fold),
        }  # fmt: skip

    def _load_profile(self, source: ViewerSource, path: str, process: str | None) -> Any:
        """The named stacks of ``path``: CPU samples of one .etl from its index, on arrays
        (``events.profile_columns``, as ``openetw stacks`` takes them), else record by record."""
        if (process is None or process.isdigit()) and path.lower().endswith(".etl") and os.path.isfile(path):
            from openetw.events.profile_columns import load_file_profile

            index = getattr(source, "index", None)
            if index is None:
                from openetw.consumer.index import EtlIndex

                options: dict[str, Any] = dict(self.index_options)
                index = EtlIndex.open(path, **options)
            return load_file_profile(path, registry=self.registry, process=process, index=index)
        from openetw.etl.reader import EtlReader
        from openetw.events.profile import load_profile

        with EtlReader(path, strict=False) as reader:
            return load_profile(reader.records(time_order=True), registry=self.registry, process=process)

    @property
    def token(self) -> str:
        """The launch token (good for one exchange, see ``viewer.auth``)."""
        return self.sessions.token

    def launched(self) -> None:
        """The launch token was exchanged: a launch file holding it has done its work."""
        for path in self.launch_files:
            try:
                os.unlink(path)
            except OSError:
                pass
        self.launch_files.clear()

    def open(self, path: str) -> ViewerSource:
        with self._lock:
            for source in self.sources.values():
                if getattr(source, "path", None) is not None and source.path == _real(path):  # type: ignore[attr-defined]
                    return source
            source = open_file(f"f{next(self._ids)}", path, self.registry, index_options=self.index_options)
            self.sources[source.id] = source
            return source

    def attach(self, session: str) -> ViewerSource:
        with self._lock:
            for source in self.sources.values():
                if source.live and source.name == session:
                    return source
            live = LiveSource(f"s{next(self._ids)}", session, self.registry, socket=self.socket)
            self.sources[live.id] = live
            return live

    def open_log(self, name: str, directory: str | None = None) -> ViewerSource:
        """A log of the Event Log, from one of the directories ``logs.log_dirs`` names."""
        from openetw.viewer.logs import LogSource, log_dirs

        allowed = [str(path) for _, path in log_dirs()]
        if directory is None:
            directory = next((d for d in allowed if os.path.isfile(os.path.join(d, _log_file(name)))), None)
        if directory is None or directory not in allowed:
            raise InvalidArgument(f"no log {name!r} (`openetw log list` lists the logs)")
        with self._lock:
            for source in self.sources.values():
                if isinstance(source, LogSource) and source.name == name and source.store.directory == Path(directory):
                    return source
            log = LogSource(f"l{next(self._ids)}", directory, name, self.registry)
            self.sources[log.id] = log
            return log

    def source(self, source_id: str) -> ViewerSource:
        source = self.sources.get(source_id)
        if source is None:
            raise InvalidArgument(f"no source {source_id!r}")
        if not source.ready.wait(120):
            raise InvalidArgument(f"{source.name} is still being opened")
        if not source.healthy():
            raise InvalidArgument(source.error or f"{source.name} failed")
        return source

    def close_source(self, source_id: str) -> None:
        """Close one source (a failed one too); the others stay as they are."""
        with self._lock:
            source = self.sources.pop(source_id, None)
            self._masks = {key: rows for key, rows in self._masks.items() if key[0] != source_id}
        if source is None:
            raise InvalidArgument(f"no source {source_id!r}")
        source.close()

    def selected(self, source: ViewerSource, query: Query) -> np.ndarray:
        """Row numbers the query selects (the last few answers are kept)."""
        columns = source.columns()
        key = (source.id, len(columns), repr(query))
        rows = self._masks.get(key)
        if rows is None:
            rows = np.flatnonzero(matching_rows(columns, query, source.search, source.xpath))
            if len(self._masks) > 16:
                self._masks.clear()
            self._masks[key] = rows
        return rows

    def close(self) -> None:
        self.closing.set()
        self.launched()
        for source in list(self.sources.values()):
            source.close()


def _real(path: str) -> str:
    return os.path.realpath(path)


def _log_file(name: str) -> str:
    from openetw.eventlog.channels import log_file_name

    return log_file_name(name)


MAX_BODY = 65536  # bytes of a request's JSON body
MAX_PARAM = 8192  # characters of one query parameter (a filter, a search, an XPath)


def _params(request: Request) -> dict[str, str]:
    params = dict(request.query_params.items())
    for name, value in params.items():
        if len(value) > MAX_PARAM:
            raise InvalidArgument(f"{name}: longer than {MAX_PARAM} characters")
        if "\0" in value:
            raise InvalidArgument(f"{name}: holds a NUL character")
    return params


def _int_param(params: dict[str, str], name: str, default: int, low: int, high: int) -> int:
    """A whole-number parameter, refused (400) unless it is one from ``low`` to ``high``."""
    text = params.get(name)
    if text is None or text == "":
        return default
    text = text.strip()
    if not (text.isascii() and text.lstrip("-").isdigit()) or len(text) > 20:
        raise InvalidArgument(f"{name}: {text[:40]!r} is not a whole number")
    value = int(text)
    if not low <= value <= high:
        raise InvalidArgument(f"{name}: {value} is not from {low} to {high}")
    return value


def _error(error: Exception, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": " ".join(str(error).split())}, status_code=status)


def _json_endpoint(work: Callable[[Request], Any]) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            result = await run_in_threadpool(work, request)
        except (InvalidArgument, OpenEtwError, ValueError) as error:
            return _error(error)
        except Exception as error:  # noqa: BLE001 - one bad source or value answers 400, never breaks the viewer
            return _error(InvalidArgument(f"cannot answer {request.url.path}: {type(error).__name__}: {error}"))
        if isinstance(result, Response):
            return result
        return JSONResponse(result)

    return endpoint


class TokenGuard:
    """ASGI middleware: the checks of ``viewer.auth`` on every request (see the module doc)."""

    def __init__(self, app: ASGIApp, viewer: Viewer, port: int, bind: str = "127.0.0.1") -> None:
        self.app = app
        self.viewer = viewer
        self.port = port
        self.bind = bind
        self.cookie = cookie_name(port)
        names: tuple[str, ...] = ()
        if bind in ("0.0.0.0", "::", ""):
            import socket

            names = (socket.gethostname(), socket.getfqdn())
        self.names = names

    async def _deny(self, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]], reason: str) -> None:
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        denied = Response(f"403 Forbidden: {reason}\n", status_code=403, media_type="text/plain",
                          headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer"})  # fmt: skip
        await denied(scope, receive, send)

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        headers = _headers(scope)
        authority = headers.get("host", "")
        if not host_allowed(authority, self.port, self.bind, self.names):
            await self._deny(scope, receive, send, "the Host header does not name this server")
            return
        origin = headers.get("origin")
        method = scope.get("method", "GET")
        if origin is not None and not origin_allowed(origin, authority):
            await self._deny(scope, receive, send, "a request from another origin")
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = query.get("token", [None])[0]
        if given is not None:
            session = self.viewer.sessions.exchange(given) if scope["type"] == "http" and method == "GET" else None
            if session is None:
                await self._deny(scope, receive, send, "this link is not valid or was used already (the viewer's link opens one session)")
                return
            self.viewer.launched()
            rest = {key: values[-1] for key, values in query.items() if key != "token"}
            target = scope.get("path", "/") + (f"?{urlencode(rest)}" if rest else "") + f"#csrf={session.csrf}"
            # Not a redirect: a browser started on the launch file (file://) came from another
            # site, and a SameSite=Strict cookie is not sent along a redirect of that navigation;
            # this page's own refresh is a same-site navigation, which carries it.
            page = (f'<!DOCTYPE html><meta charset="utf-8"><meta http-equiv="refresh" content="0;url={html.escape(target)}">'
                    f'<title>openetw viewer</title><a href="{html.escape(target)}">Open the Event Viewer</a>\n')  # fmt: skip
            response = HTMLResponse(page, headers={"Cache-Control": "no-store", "Referrer-Policy": "no-referrer", "Refresh": f"0;url={target}",
                                                   "Content-Security-Policy": _CSP})  # fmt: skip
            response.set_cookie(self.cookie, session.cookie, httponly=True, samesite="strict", path="/")
            await response(scope, receive, send)
            return
        sid = self.viewer.sessions.session_of(_cookies(scope).get(self.cookie))
        if sid is None:
            await self._deny(scope, receive, send, "open the URL the viewer printed (it carries the token)")
            return
        path = scope.get("path", "/")
        if path.startswith("/api/") or scope["type"] == "websocket":
            fetch_site = headers.get("sec-fetch-site")
            if fetch_site is not None and fetch_site not in ("same-origin", "none"):
                await self._deny(scope, receive, send, f"a {fetch_site} request")
                return
            if method not in ("GET", "HEAD") and origin is None:
                await self._deny(scope, receive, send, "a state-changing request without an Origin")
                return
            csrf = headers.get(CSRF_HEADER)
            if csrf is None and method in ("GET", "HEAD"):
                csrf = query.get("csrf", [None])[0]
            if not self.viewer.sessions.csrf_valid(sid, csrf):
                await self._deny(scope, receive, send, "the request lacks this session's CSRF token")
                return
        await self.app(scope, receive, send)


def _headers(scope: Scope) -> dict[str, str]:
    """The request's headers by lower-case name (the first of a repeated one)."""
    out: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        out.setdefault(name.decode("latin-1").lower(), value.decode("latin-1"))
    return out


def _cookies(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        if name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, text = part.strip().partition("=")
                out[key] = text
    return out


def _static_endpoint(name: str) -> Callable[[Request], Awaitable[Response]]:
    """One of the page's files, with the headers that keep event content from running as script."""

    async def endpoint(request: Request) -> Response:
        data = resources.files("openetw.viewer").joinpath("static", name).read_bytes()
        headers = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store",
                   "Referrer-Policy": "no-referrer"}  # fmt: skip
        return Response(data, media_type=_STATIC[name], headers=headers)

    return endpoint


def _body_endpoint(work: Callable[[Request], Any]) -> Callable[[Request], Awaitable[Response]]:
    """``work`` as a JSON endpoint whose request carries a JSON object (``request.state.body``),
    read up to ``MAX_BODY`` bytes."""
    inner = _json_endpoint(work)

    async def endpoint(request: Request) -> Response:
        data = b""
        async for chunk in request.stream():
            data += chunk
            if len(data) > MAX_BODY:
                return _error(InvalidArgument(f"the body is larger than {MAX_BODY} bytes"))
        try:
            body = json.loads(data or b"{}")
        except (ValueError, RecursionError):
            return _error(InvalidArgument("the body must be JSON"))
        if not isinstance(body, dict):
            return _error(InvalidArgument("the body must be a JSON object"))
        request.state.body = body
        return await inner(request)

    return endpoint


class ViewerApi:
    """The API's handlers over one ``Viewer``: the plain ones run in a worker thread and answer
    JSON (``make_app`` wraps them); ``tail`` streams."""

    def __init__(self, viewer: Viewer) -> None:
        self.viewer = viewer

    # -- what can be opened ------------------------------------------------------------------
    def sources(self, request: Request) -> Any:
        return {"sources": [source.info() for source in self.viewer.sources.values()]}

    def open_path(self, request: Request) -> Any:
        path = str(request.state.body.get("path", "")).strip()
        if not path:
            raise InvalidArgument("give the path of an .etl or .evtx file")
        return self.viewer.open(path).info()

    def attach(self, request: Request) -> Any:
        name = str(request.state.body.get("session", "")).strip()
        if not name:
            raise InvalidArgument("give a session name")
        return self.viewer.attach(name).info()

    def sessions(self, request: Request) -> Any:
        from openetw.controller import list_sessions

        try:
            listed = list_sessions(socket=self.viewer.socket)
        except (OpenEtwError, OSError) as error:
            return {"sessions": [], "error": str(error)}
        return {"sessions": [{"name": s.get("name"), "realtime": "realtime" in str(s.get("mode", "")) or bool(s.get("realtime"))}
                             for s in listed]}  # fmt: skip

    def logs(self, request: Request) -> Any:
        from openetw.viewer.logs import logs_tree

        return {"logs": logs_tree()}

    def open_log(self, request: Request) -> Any:
        name = str(request.state.body.get("name", "")).strip()
        directory = request.state.body.get("directory")
        if not name:
            raise InvalidArgument("give a log name")
        return self.viewer.open_log(name, str(directory) if directory else None).info()

    # -- one source ----------------------------------------------------------------------------
    def info(self, request: Request) -> Any:
        source = self.viewer.sources.get(request.path_params["sid"])
        if source is None:
            raise InvalidArgument(f"no source {request.path_params['sid']!r}")
        return source.info()

    def close_source(self, request: Request) -> Any:
        self.viewer.close_source(request.path_params["sid"])
        return {"closed": request.path_params["sid"]}

    def rows(self, request: Request) -> Any:
        source = self.viewer.source(request.path_params["sid"])
        params = _params(request)
        selected = self.viewer.selected(source, parse_query(params))
        offset = _int_param(params, "offset", 0, 0, 2**62)
        limit = _int_param(params, "limit", 100, 0, MAX_PAGE)
        page = selected[offset : offset + limit]
        return {"total": len(selected), "events": len(source.columns()), "offset": offset, "rows": source.render(page.tolist())}

    def facets(self, request: Request) -> Any:
        source = self.viewer.source(request.path_params["sid"])
        query = parse_query(_params(request))
        columns = source.columns()
        total = len(self.viewer.selected(source, query))
        return {"total": total, "events": len(columns), "facets": facet_counts(columns, query, source.search, xpath=source.xpath)}

    def timeline(self, request: Request) -> Any:
        source = self.viewer.source(request.path_params["sid"])
        params = _params(request)
        query = parse_query(params)
        columns = source.columns()
        mask = matching_rows(columns, Query(query.wanted, query.keyword_bits, None, None, query.text, query.xpath), source.search, source.xpath)
        bins = _int_param(params, "bins", 200, 1, 2000)
        return histogram(columns, mask, bins, params.get("by", "level"))

    def counts(self, request: Request) -> Any:
        source = self.viewer.source(request.path_params["sid"])
        columns = source.columns()
        facet = facet_counts(columns, Query(), None, limit=100000)
        return {"providers": facet["provider"], "events": facet["event"], "total": len(columns)}

    def event(self, request: Request) -> Any:
        source = self.viewer.source(request.path_params["sid"])
        return source.detail(int(request.path_params["row"]))

    def stacks(self, request: Request) -> Any:
        source = self.viewer.source(request.path_params["sid"])
        params = _params(request)
        try:
            fold = float(params.get("fold", "0.5"))
        except ValueError:
            raise InvalidArgument("fold must be a number (percent)") from None
        return self.viewer.stacks(source, params.get("process") or None, min(max(fold, 0.0), 100.0))

    def export_rows(self, request: Request) -> Any:
        from openetw.viewer.export import EXPORT_FORMATS, export

        source = self.viewer.source(request.path_params["sid"])
        params = _params(request)
        fmt = params.get("format", "csv")
        data = export(source, self.viewer.selected(source, parse_query(params)), fmt)
        stem = "".join(c if c.isascii() and (c.isalnum() or c in "-_.") else "_" for c in source.name.rsplit(".", 1)[0]) or "events"
        headers = {"Content-Disposition": f'attachment; filename="{stem}-filtered.{fmt}"'}
        return Response(data, media_type=EXPORT_FORMATS[fmt], headers=headers)

    def text_index(self, request: Request) -> Any:
        source = self.viewer.source(request.path_params["sid"])
        source.text_index()
        return source.info()["text_index"]

    # -- a live source's tail (server-sent events) ------------------------------------------------
    async def tail(self, request: Request) -> Response:
        try:
            source = await run_in_threadpool(self.viewer.source, request.path_params["sid"])
            if not source.live:
                raise InvalidArgument(f"{source.name} is a file: only a live session or a log has a tail")
            params = _params(request)
            query = parse_query(params)
            resume = request.headers.get("last-event-id")
            cursor = _int_param({"cursor": resume} if resume else params, "cursor", 0, 0, 2**62)
        except (InvalidArgument, OpenEtwError, ValueError) as error:
            return _error(error)
        stream = _tail_stream(self.viewer.closing, request, source, query, cursor)
        return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})


async def _tail_stream(
    closing: threading.Event, request: Request, source: ViewerSource, query: Query, cursor: int
) -> AsyncIterator[str]:
    """The tail's messages from ``cursor`` on: the new rows that match, a page at most each time;
    a comment while nothing comes; the reason if it fails."""
    yield "retry: 1000\n\n"
    try:
        while not closing.is_set() and not await request.is_disconnected():
            count = await run_in_threadpool(source.wait_for_more, cursor, 1.0)
            if count <= cursor:
                yield ": idle\n\n"
                continue
            await asyncio.sleep(TAIL_GATHER_SECONDS)  # a busy source: one message for what comes meanwhile
            upto = min(len(source.columns()), cursor + MAX_PAGE)
            text = await run_in_threadpool(_tail_message, source, query, cursor, upto)
            cursor = upto
            yield text
    except Exception as error:  # noqa: BLE001 - the stream ends with its reason, never a reset
        reason = " ".join(f"{type(error).__name__}: {error}".split())
        yield f"event: failed\ndata: {json.dumps({'error': reason})}\n\n"


def _tail_message(source: ViewerSource, query: Query, cursor: int, upto: int) -> str:
    """One tail message: the rows from ``cursor`` to ``upto`` that match ``query``."""
    columns = source.columns()
    part = columns.part(cursor, upto)
    mask = matching_rows(part, query, lambda needle: source.search(needle)[cursor:upto], lambda text: source.xpath(text)[cursor:upto])
    rendered = source.render((np.flatnonzero(mask) + cursor).tolist())
    body = json.dumps({"cursor": upto, "events": len(columns), "rows": rendered, **source.lost()})
    return f"id: {upto}\nevent: rows\ndata: {body}\n\n"


def make_app(viewer: Viewer, *, port: int, bind: str = "127.0.0.1") -> TokenGuard:
    """The application of one viewer run on ``port``, behind its token (``viewer.auth``)."""
    api = ViewerApi(viewer)
    routes = [
        Route("/", _static_endpoint("index.html")),
        *(Route(f"/static/{name}", _static_endpoint(name)) for name in _STATIC if name != "index.html"),
        Route("/api/sources", _json_endpoint(api.sources)),
        Route("/api/open", _body_endpoint(api.open_path), methods=["POST"]),
        Route("/api/attach", _body_endpoint(api.attach), methods=["POST"]),
        Route("/api/sessions", _json_endpoint(api.sessions)),
        Route("/api/logs", _json_endpoint(api.logs)),
        Route("/api/logs/open", _body_endpoint(api.open_log), methods=["POST"]),
        Route("/api/s/{sid}", _json_endpoint(api.info)),
        Route("/api/s/{sid}/rows", _json_endpoint(api.rows)),
        Route("/api/s/{sid}/facets", _json_endpoint(api.facets)),
        Route("/api/s/{sid}/timeline", _json_endpoint(api.timeline)),
        Route("/api/s/{sid}/counts", _json_endpoint(api.counts)),
        Route("/api/s/{sid}/event/{row:int}", _json_endpoint(api.event)),
        Route("/api/s/{sid}/stacks", _json_endpoint(api.stacks)),
        Route("/api/s/{sid}/export", _json_endpoint(api.export_rows)),
        Route("/api/s/{sid}/text-index", _json_endpoint(api.text_index), methods=["POST"]),
        Route("/api/s/{sid}/tail", api.tail),
        Route("/api/s/{sid}/close", _body_endpoint(api.close_source), methods=["POST"]),
    ]
    return TokenGuard(Starlette(routes=routes), viewer, port, bind)
