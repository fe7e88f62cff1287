"""A ``logging`` handler that writes each record as a TraceLogging event.

::

    import logging
    from openetw import EtwLoggingHandler

    logging.getLogger("myapp").addHandler(EtwLoggingHandler("MyCompany.MyApp"))
    logging.getLogger("myapp.db").warning("slow query", extra={"ms": 812})

The provider is a ``TraceLoggingProvider`` (its GUID is ETW's hash of its name), registered when
the handler is made. The provider name defaults to the logger's name (``EtwLoggingHandler.install``
makes the handler for a logger and adds it), "Python.Logging" for the root logger.

Each record becomes one event, named after its logger (or ``event_name``), at the ETW level of its
logging level (CRITICAL 1, ERROR 2, WARNING 3, INFO 4, DEBUG 5; levels in between take the next
more severe one), with the fields ``logger``, ``message`` (formatted), ``level`` (the level's name),
``exception`` (when the record carries one), ``stack`` (with ``stack_info``), ``file``, ``line``,
``function``, then the record's ``extra`` attributes, typed from their values (those TraceLogging
cannot hold are written as their ``str``; an extra named like a standard field becomes ``extra_<name>``).

Whether some session wants the event (``provider.is_enabled(level, keyword)``) is asked before the
record is filtered, locked or formatted, so a handler nobody listens to costs one call per record.
"""

from __future__ import annotations

import datetime
import logging
import numbers
import uuid
from collections.abc import Mapping
from typing import Any

from openetw.errors import InvalidArgument
from openetw.provider.encode import field_for_value
from openetw.provider.runtime import TraceLoggingProvider

__all__ = ["DEFAULT_PROVIDER_NAME", "EtwLoggingHandler", "etw_level"]

DEFAULT_PROVIDER_NAME = "Python.Logging"
_STANDARD_ATTRIBUTES = frozenset(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime", "taskName"}
_FIELDS = ("logger", "message", "level", "exception", "stack", "file", "line", "function")
_PLAIN_TYPES = (bool, str, bytes, float, uuid.UUID, datetime.datetime)
_INT64_LOW, _UINT64_END = -(1 << 63), 1 << 64


def etw_level(levelno: int) -> int:
    """The ETW level of a ``logging`` level: CRITICAL 1, ERROR 2, WARNING 3, INFO 4, DEBUG and below 5."""
    if levelno >= logging.CRITICAL:
        return 1
    if levelno >= logging.ERROR:
        return 2
    if levelno >= logging.WARNING:
        return 3
    if levelno >= logging.INFO:
        return 4
    return 5


def _provider_name_for(logger: logging.Logger | str | None) -> str:
    name = logger.name if isinstance(logger, logging.Logger) else logger
    return DEFAULT_PROVIDER_NAME if not name or name == "root" else name


def _text(value: str) -> str:
    """Strings are written NUL-terminated: a NUL inside one is shown as ``\\0``."""
    return value.replace("\0", "\\0") if "\0" in value else value


def _writable(name: str, value: Any) -> Any:
    """``value`` if TraceLogging can write it as it is, else its text."""
    if isinstance(value, str):
        return _text(value)
    if isinstance(value, _PLAIN_TYPES):
        return value
    if isinstance(value, numbers.Integral):
        whole = int(value)
        return whole if _INT64_LOW <= whole < _UINT64_END else str(value)
    if isinstance(value, (Mapping, list, tuple)) or not isinstance(value, numbers.Number):
        try:
            field_for_value(name, value)
        except InvalidArgument:
            return str(value)
        return value
    return float(value) if isinstance(value, numbers.Real) else str(value)


class EtwLoggingHandler(logging.Handler):
    """Writes log records as TraceLogging events of ``provider_name`` (see the module's text).

    ``provider`` uses a provider you made (and registered) instead of making one; the handler then
    leaves its registration alone on ``close()``. ``keyword`` is the events' keyword.
    """

    def __init__(
        self,
        provider_name: str | None = None,
        *,
        logger: logging.Logger | str | None = None,
        event_name: str | None = None,
        keyword: int = 0,
        level: int = logging.NOTSET,
        provider: TraceLoggingProvider | None = None,
    ) -> None:
        super().__init__(level)
        if not 0 <= keyword < 1 << 64:
            raise InvalidArgument(f"keyword must be a 64-bit mask, not {keyword!r}")
        self.keyword = keyword
        self.event_name = event_name
        self._owns_provider = provider is None
        self.provider = provider if provider is not None else TraceLoggingProvider(provider_name or _provider_name_for(logger))
        if self._owns_provider:
            self.provider.register()

    @classmethod
    def install(cls, logger: logging.Logger | str | None = None, **options: Any) -> EtwLoggingHandler:
        """A handler for ``logger`` (a logger or its name; the root logger by default), whose
        provider is named after it unless ``provider_name`` says otherwise, added to it."""
        target = logger if isinstance(logger, logging.Logger) else logging.getLogger(logger)
        handler = cls(logger=target, **options)
        target.addHandler(handler)
        return handler

    def handle(self, record: logging.LogRecord) -> logging.LogRecord | bool:  # type: ignore[override]
        if not self.provider.is_enabled(etw_level(record.levelno), self.keyword):
            return False  # nobody listens: no filter, no lock, no formatting
        return super().handle(record)

    def emit(self, record: logging.LogRecord) -> None:
        level = etw_level(record.levelno)
        try:
            fields = self.fields(record)
            self.provider.write_fields(self.event_name or record.name or "root", fields, level=level, keyword=self.keyword)
        except RecursionError:
            raise
        except Exception:  # noqa: BLE001 - logging's contract: a failing handler reports through handleError
            self.handleError(record)

    def fields(self, record: logging.LogRecord) -> dict[str, Any]:
        """The event's fields for ``record``, in order."""
        message = self.format(record) if self.formatter is not None else record.getMessage()
        fields: dict[str, Any] = {"logger": _text(record.name), "message": _text(message), "level": _text(record.levelname)}
        if record.exc_info:
            formatter = self.formatter or logging.Formatter()
            fields["exception"] = _text(record.exc_text or formatter.formatException(record.exc_info))
        elif record.exc_text:
            fields["exception"] = _text(record.exc_text)
        if record.stack_info:
            fields["stack"] = _text(record.stack_info)
        fields.update(file=_text(record.pathname), line=int(record.lineno), function=_text(record.funcName or ""))
        for name, value in record.__dict__.items():
            if name in _STANDARD_ATTRIBUTES or name.startswith("_"):
                continue
            key = f"extra_{name}" if name in _FIELDS else name
            fields[key] = _writable(key, value)
        return fields

    def close(self) -> None:
        if self._owns_provider:
            self.provider.unregister()
        super().close()
