"""Delivering records: time window, state learning, providers, filters, callbacks, errors.

Every record a source gives is counted exactly once (``TraceStatistics``): handled (a provider
admitted it, the default callback or an iterator took it), dropped (an iterator's queue was
full), filtered (an enabled provider's rule refused it), unmatched (no provider and nobody
else wanted it), outside the window, or a state record before the window (those still teach the
decode context and reach the rundown callback).

Exceptions from user code (callbacks, predicates) are reported to the error handlers and
counted; processing goes on unless ``stop_on_callback_error`` is set.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from openetw.consumer.context import TraceContext
from openetw.consumer.provider import EventCallback, Provider, match_guid
from openetw.consumer.state import is_state_record
from openetw.consumer.stats import TraceStatistics
from openetw.consumer.window import TimeWindow
from openetw.errors import DecodeError, OpenEtwError

__all__ = ["Dispatcher", "ErrorHandler", "Sink"]

_log = logging.getLogger("openetw.consumer")
_LOGGED_ERRORS = 10  # without an error handler, the first ones are logged

ErrorHandler = Callable[[BaseException, Any], Any]
"""``handler(error, record_or_None)``."""
Sink = Callable[[Any], None]
"""Where an iterator form takes accepted records (it counts them handled or dropped)."""


class Dispatcher:
    """The delivery rules of one trace (built when it opens)."""

    def __init__(
        self,
        context: TraceContext,
        stats: TraceStatistics,
        providers: list[Provider],
        *,
        default_callback: EventCallback | None = None,
        rundown_callback: EventCallback | None = None,
        window: TimeWindow = TimeWindow(),
        learn_state: bool = True,
        error_handlers: list[ErrorHandler] | None = None,
        stop_on_callback_error: bool = False,
    ) -> None:
        self.context = context
        self.stats = stats
        self.providers: list[Provider] = []
        self.by_key: dict[bytes, list[Provider]] = {}
        self.by_name: dict[str, list[Provider]] = {}
        self.default_callback: EventCallback | None = None
        self.rundown_callback: EventCallback | None = None
        self.configure(providers, default_callback, rundown_callback)
        self.window = window
        self.learn_state = learn_state
        self.error_handlers = error_handlers if error_handlers is not None else []
        self.stop_on_callback_error = stop_on_callback_error
        self.stopping = False
        self.failure: BaseException | None = None
        self.sink: Sink | None = None
        self.logged = 0

    def configure(self, providers: list[Provider], default_callback: EventCallback | None, rundown_callback: EventCallback | None) -> None:
        """Who gets what: the enabled providers (by GUID) and the default and rundown callbacks."""
        self.providers = list(providers)
        self.by_key = {}
        self.by_name = {}
        for provider in self.providers:
            if provider.guid is not None:
                self.by_key.setdefault(provider.guid.bytes_le, []).append(provider)
            if provider.name:
                self.by_name.setdefault(provider.name.casefold(), []).append(provider)
        self.default_callback = default_callback
        self.rundown_callback = rundown_callback

    # -- errors -------------------------------------------------------------------------------
    def report(self, error: BaseException, record: Any = None) -> None:
        """Tell the error handlers (an error in a handler itself stops the trace); without any
        handler the error goes to the ``openetw.consumer`` logger, so it is never silent."""
        if isinstance(error, DecodeError):
            self.stats.decode_errors += 1
        if not self.error_handlers:
            self.logged += 1
            if self.logged <= _LOGGED_ERRORS:
                _log.warning("%s (record: %r)", error, record, exc_info=error if error.__traceback__ is not None else None)
            elif self.logged == _LOGGED_ERRORS + 1:
                _log.warning("more errors: they are counted in query_stats(); set on_error() to see each one")
            return
        for handler in self.error_handlers:
            try:
                handler(error, record)
            except Exception as handler_error:  # noqa: BLE001 - a broken handler must not hide the first error
                self.stopping = True
                self.failure = handler_error
                return

    def callback_failed(self, error: Exception, record: Any) -> None:
        self.stats.callback_errors += 1
        self.report(error, record)
        if self.stop_on_callback_error:
            self.stopping = True
            if self.failure is None:
                self.failure = error

    # -- delivery -----------------------------------------------------------------------------
    def deliver(self, record: Any) -> None:
        """The whole path for one record from a stream (window, state, providers, callbacks)."""
        stats = self.stats
        stats.events_read += 1
        window = self.window
        if window.bounded:
            filetime = record.filetime
            if filetime < window.low:
                if is_state_record(record):
                    stats.state_events_before_window += 1
                    self.observe_before_window(record)
                else:
                    stats.events_outside_window += 1
                return
            if filetime > window.high:
                stats.events_outside_window += 1
                return
        if self.learn_state and is_state_record(record):
            self.observe(record)
        providers = self.by_key.get(match_guid(record)) if self.by_key else None  # type: ignore[arg-type]
        if providers is None and record.kind == "evtx" and self.by_name:
            # An Event Log record names its provider (classic sources have no GUID at all).
            providers = self.by_name.get(record.provider_name.casefold())
        if providers is None:
            self.deliver_unmatched(record)
            return
        admitted = [p for p in providers if p.admits(record, self._executable(record, p))]
        if not admitted:
            stats.events_filtered += 1
            return
        self.deliver_admitted(record, admitted)

    def observe(self, record: Any, schema: Any = None) -> None:
        """Teach the decode context what ``record`` says (``schema``: its decoding schema, when
        found already)."""
        try:
            self.context.decode_context.observe(record, schema=schema)
        except OpenEtwError as error:
            self.report(error, record)

    def observe_before_window(self, record: Any) -> None:
        """A state record before the window: it teaches the context and reaches the rundown callback."""
        if self.learn_state:
            self.observe(record)
        callback = self.rundown_callback
        if callback is not None:
            try:
                callback(record, self.context)
            except Exception as error:  # noqa: BLE001 - user code: reported, processing goes on
                self.callback_failed(error, record)

    def deliver_unmatched(self, record: Any) -> None:
        """A record no enabled provider claims: the default callback's, else an iterator's
        when no provider is enabled at all, else counted unmatched."""
        callback = self.default_callback
        sink = self.sink
        if callback is None and (sink is None or self.by_key):
            self.stats.events_unmatched += 1
            return
        if callback is not None:
            try:
                callback(record, self.context)
            except Exception as error:  # noqa: BLE001
                self.callback_failed(error, record)
        if sink is not None and not self.by_key:
            sink(record)
        else:
            self.stats.events_handled += 1

    def deliver_admitted(self, record: Any, providers: list[Provider]) -> None:
        """Callbacks and filters of providers whose rule admitted ``record``."""
        context = self.context
        for provider in providers:
            for callback in provider.callbacks:
                try:
                    callback(record, context)
                except Exception as error:  # noqa: BLE001
                    self.callback_failed(error, record)
            for event_filter in provider.filters:
                try:
                    if not event_filter.matches(record, context):
                        continue
                except Exception as error:  # noqa: BLE001 - a predicate is user code too
                    self.callback_failed(error, record)
                    continue
                for callback in event_filter.callbacks:
                    try:
                        callback(record, context)
                    except Exception as error:  # noqa: BLE001
                        self.callback_failed(error, record)
        sink = self.sink
        if sink is not None:
            sink(record)
        else:
            self.stats.events_handled += 1

    def admitted_of(self, record: Any, providers: list[Provider]) -> list[Provider]:
        """The providers of a prefiltered record whose own rule admits it (several providers may
        share a GUID with different rules; the executable filter is only checked here)."""
        if len(providers) == 1 and not providers[0].needs_process_name:
            return providers
        return [p for p in providers if p.admits(record, self._executable(record, p))]

    def _executable(self, record: Any, provider: Provider) -> str | None:
        return self.context.executable_of(record) if provider.needs_process_name else None
