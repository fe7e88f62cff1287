"""The viewer's web application (Starlette): the page, its static files and the JSON API.

Every request needs the run's secret: ``?token=…`` on the first one sets an HttpOnly,
SameSite=Strict cookie (and redirects to the same place without the token); a request (HTTP,
Server-Sent Events or WebSocket) without a valid token or cookie gets 403. The page is served
with a Content-Security-Policy that allows only this server's own scripts, so no event content
can run as script even if it were put into the page unescaped.

API (all JSON, filters as ``viewer.model.parse_query`` reads them):
``GET /api/sources``, ``POST /api/open {"path"}``, ``GET /api/sessions``, ``POST /api/attach
{"session"}``, ``GET /api/logs``, ``POST /api/logs/open {"name", "directory"}``, and per source ``/api/s/{id}``: ``rows?offset&limit``, ``facets``,
``timeline?bins&by``, ``event/{row}``, ``export?format``, ``tail?cursor`` (SSE),
``counts`` (providers and events with counts, as PerfView's Events view lists them).
"""

from __future__ import annotations

import asyncio
import hmac
import itertools
import json
import os
import secrets
import threading
from collections.abc import Awaitable, Callable, MutableMapping
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode

import numpy as np

from openetw.errors import InvalidArgument, OpenEtwError
from openetw.viewer.model import Query, facet_counts, histogram, matching_rows, parse_query
from openetw.viewer.sources import LiveSource, ViewerSource, default_registry, open_file

try:
    from starlette.applications import Starlette
    from starlette.concurrency import run_in_threadpool
    from starlette.requests import Request
    from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
    from starlette.routing import Route
except ImportError as _missing:  # pragma: no cover - the message is the point
    raise ImportError("openetw viewer needs the 'viewer' extra: pip install 'openetw[viewer]'") from _missing

__all__ = ["COOKIE", "Viewer", "make_app"]

COOKIE = "openetw_viewer"
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
        self.token = token or secrets.token_urlsafe(32)
        self.socket = socket
        self.index_options = {"save": keep_index, "beside": index_beside}  # EtlIndex.open's: where .etl indexes are kept
        self.registry = default_registry()
        self.sources: dict[str, ViewerSource] = {}
        self._ids = itertools.count(1)
        self._lock = threading.Lock()
        self._masks: dict[tuple[Any, ...], np.ndarray] = {}
        self.closing = threading.Event()  # set when the server stops: event streams end

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
        if source.error is not None:
            raise InvalidArgument(source.error)
        return source

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
        for source in self.sources.values():
            source.close()


def _real(path: str) -> str:
    return os.path.realpath(path)


def _log_file(name: str) -> str:
    from openetw.eventlog.channels import log_file_name

    return log_file_name(name)


def _params(request: Request) -> dict[str, str]:
    return dict(request.query_params.items())


def _error(error: Exception, status: int = 400) -> JSONResponse:
    return JSONResponse({"error": " ".join(str(error).split())}, status_code=status)


def _json_endpoint(work: Callable[[Request], Any]) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        try:
            result = await run_in_threadpool(work, request)
        except (InvalidArgument, OpenEtwError, ValueError) as error:
            return _error(error)
        if isinstance(result, Response):
            return result
        return JSONResponse(result)

    return endpoint


class TokenGuard:
    """ASGI middleware: 403 for any request without the run's token (see the module doc)."""

    def __init__(self, app: ASGIApp, token: str) -> None:
        self.app = app
        self.token = token

    def _valid(self, value: str | None) -> bool:
        return value is not None and hmac.compare_digest(value.encode(), self.token.encode())

    async def __call__(self, scope: Scope, receive: Callable[[], Awaitable[Any]], send: Callable[[Any], Awaitable[None]]) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        query = parse_qs(scope.get("query_string", b"").decode("latin-1"))
        given = query.get("token", [None])[0]
        cookies = _cookies(scope)
        if self._valid(given):
            if scope["type"] == "http" and scope.get("method") == "GET":
                rest = {key: values[-1] for key, values in query.items() if key != "token"}
                target = scope.get("path", "/") + (f"?{urlencode(rest)}" if rest else "")
                response = RedirectResponse(target, status_code=303)
                response.set_cookie(COOKIE, self.token, httponly=True, samesite="strict", path="/")
                await response(scope, receive, send)
                return
            await self.app(scope, receive, send)
            return
        if self._valid(cookies.get(COOKIE)):
            await self.app(scope, receive, send)
            return
        if scope["type"] == "websocket":
            await send({"type": "websocket.close", "code": 1008})
            return
        denied = Response("403 Forbidden: open the URL the viewer printed (it carries the token)\n", status_code=403,
                          media_type="text/plain")  # fmt: skip
        await denied(scope, receive, send)


def _cookies(scope: Scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for name, value in scope.get("headers", ()):
        if name == b"cookie":
            for part in value.decode("latin-1").split(";"):
                key, _, text = part.strip().partition("=")
                out[key] = text
    return out


def make_app(viewer: Viewer) -> TokenGuard:
    """The application of one viewer run, behind its token."""

    def static(name: str) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            data = resources.files("openetw.viewer").joinpath("static", name).read_bytes()
            headers = {"Content-Security-Policy": _CSP, "X-Content-Type-Options": "nosniff", "Cache-Control": "no-store",
                       "Referrer-Policy": "no-referrer"}  # fmt: skip
            return Response(data, media_type=_STATIC[name], headers=headers)

        return endpoint

    def sources(request: Request) -> Any:
        return {"sources": [source.info() for source in viewer.sources.values()]}

    def open_path(request: Request) -> Any:
        path = str(request.state.body.get("path", "")).strip()
        if not path:
            raise InvalidArgument("give the path of an .etl or .evtx file")
        return viewer.open(path).info()

    def attach(request: Request) -> Any:
        name = str(request.state.body.get("session", "")).strip()
        if not name:
            raise InvalidArgument("give a session name")
        return viewer.attach(name).info()

    def sessions(request: Request) -> Any:
        from openetw.controller import list_sessions

        try:
            listed = list_sessions(socket=viewer.socket)
        except (OpenEtwError, OSError) as error:
            return {"sessions": [], "error": str(error)}
        return {"sessions": [{"name": s.get("name"), "realtime": "realtime" in str(s.get("mode", "")) or bool(s.get("realtime"))}
                             for s in listed]}  # fmt: skip

    def logs(request: Request) -> Any:
        from openetw.viewer.logs import logs_tree

        return {"logs": logs_tree()}

    def open_log(request: Request) -> Any:
        name = str(request.state.body.get("name", "")).strip()
        directory = request.state.body.get("directory")
        if not name:
            raise InvalidArgument("give a log name")
        return viewer.open_log(name, str(directory) if directory else None).info()

    def info(request: Request) -> Any:
        source = viewer.sources.get(request.path_params["sid"])
        if source is None:
            raise InvalidArgument(f"no source {request.path_params['sid']!r}")
        return source.info()

    def rows(request: Request) -> Any:
        source = viewer.source(request.path_params["sid"])
        params = _params(request)
        selected = viewer.selected(source, parse_query(params))
        offset = max(0, int(params.get("offset", 0)))
        limit = max(0, min(MAX_PAGE, int(params.get("limit", 100))))
        page = selected[offset : offset + limit]
        return {"total": len(selected), "events": len(source.columns()), "offset": offset, "rows": source.render(page.tolist())}

    def facets(request: Request) -> Any:
        source = viewer.source(request.path_params["sid"])
        query = parse_query(_params(request))
        columns = source.columns()
        total = len(viewer.selected(source, query))
        return {"total": total, "events": len(columns), "facets": facet_counts(columns, query, source.search, xpath=source.xpath)}

    def timeline(request: Request) -> Any:
        source = viewer.source(request.path_params["sid"])
        params = _params(request)
        query = parse_query(params)
        columns = source.columns()
        mask = matching_rows(columns, Query(query.wanted, query.keyword_bits, None, None, query.text, query.xpath), source.search, source.xpath)
        bins = int(params.get("bins", 200))
        return histogram(columns, mask, bins, params.get("by", "level"))

    def counts(request: Request) -> Any:
        source = viewer.source(request.path_params["sid"])
        columns = source.columns()
        facet = facet_counts(columns, Query(), None, limit=100000)
        return {"providers": facet["provider"], "events": facet["event"], "total": len(columns)}

    def event(request: Request) -> Any:
        source = viewer.source(request.path_params["sid"])
        return source.detail(int(request.path_params["row"]))

    def export_rows(request: Request) -> Any:
        from openetw.viewer.export import EXPORT_FORMATS, export

        source = viewer.source(request.path_params["sid"])
        params = _params(request)
        fmt = params.get("format", "csv")
        data = export(source, viewer.selected(source, parse_query(params)), fmt)
        stem = source.name.rsplit(".", 1)[0] or "events"
        headers = {"Content-Disposition": f'attachment; filename="{stem}-filtered.{fmt}"'}
        return Response(data, media_type=EXPORT_FORMATS[fmt], headers=headers)

    def text_index(request: Request) -> Any:
        source = viewer.source(request.path_params["sid"])
        source.text_index()
        return source.info()["text_index"]

    async def tail(request: Request) -> Response:
        try:
            source = await run_in_threadpool(viewer.source, request.path_params["sid"])
            params = _params(request)
            query = parse_query(params)
            cursor = int(request.headers.get("last-event-id") or params.get("cursor") or 0)
        except (InvalidArgument, OpenEtwError, ValueError) as error:
            return _error(error)

        def message(upto: int) -> str:
            columns = source.columns()
            part = columns.part(cursor, upto)
            mask = matching_rows(part, query, lambda needle: source.search(needle)[cursor:upto], lambda text: source.xpath(text)[cursor:upto])
            rendered = source.render((np.flatnonzero(mask) + cursor).tolist())
            body = json.dumps({"cursor": upto, "events": len(columns), "rows": rendered, **source.lost()})
            return f"id: {upto}\nevent: rows\ndata: {body}\n\n"

        async def stream() -> Any:
            nonlocal cursor
            yield "retry: 1000\n\n"
            while not viewer.closing.is_set() and not await request.is_disconnected():
                count = await run_in_threadpool(source.wait_for_more, cursor, 1.0)
                if count <= cursor:
                    yield ": idle\n\n"
                    continue
                await asyncio.sleep(TAIL_GATHER_SECONDS)  # a busy source: one message for what comes meanwhile
                upto = min(len(source.columns()), cursor + MAX_PAGE)
                text = await run_in_threadpool(message, upto)
                cursor = upto
                yield text

        return StreamingResponse(stream(), media_type="text/event-stream", headers={"Cache-Control": "no-store", "X-Accel-Buffering": "no"})

    def with_body(work: Callable[[Request], Any]) -> Callable[[Request], Awaitable[Response]]:
        inner = _json_endpoint(work)

        async def endpoint(request: Request) -> Response:
            try:
                body = json.loads(await request.body() or b"{}")
            except ValueError:
                return _error(InvalidArgument("the body must be JSON"))
            if not isinstance(body, dict):
                return _error(InvalidArgument("the body must be a JSON object"))
            request.state.body = body
            return await inner(request)

        return endpoint

    routes = [
        Route("/", static("index.html")),
        *(Route(f"/static/{name}", static(name)) for name in _STATIC if name != "index.html"),
        Route("/api/sources", _json_endpoint(sources)),
        Route("/api/open", with_body(open_path), methods=["POST"]),
        Route("/api/attach", with_body(attach), methods=["POST"]),
        Route("/api/sessions", _json_endpoint(sessions)),
        Route("/api/logs", _json_endpoint(logs)),
        Route("/api/logs/open", with_body(open_log), methods=["POST"]),
        Route("/api/s/{sid}", _json_endpoint(info)),
        Route("/api/s/{sid}/rows", _json_endpoint(rows)),
        Route("/api/s/{sid}/facets", _json_endpoint(facets)),
        Route("/api/s/{sid}/timeline", _json_endpoint(timeline)),
        Route("/api/s/{sid}/counts", _json_endpoint(counts)),
        Route("/api/s/{sid}/event/{row:int}", _json_endpoint(event)),
        Route("/api/s/{sid}/export", _json_endpoint(export_rows)),
        Route("/api/s/{sid}/text-index", _json_endpoint(text_index), methods=["POST"]),
        Route("/api/s/{sid}/tail", tail),
    ]
    return TokenGuard(Starlette(routes=routes), viewer.token)
