"""The optional libraries of the table form (``pip install 'openetw[export]'``), imported on demand."""

from __future__ import annotations

import importlib
from types import ModuleType

from openetw.errors import OpenEtwError

__all__ = ["MissingDependency", "require"]

_EXTRA = {"pyarrow": "export", "pyarrow.parquet": "export", "pyarrow.csv": "export", "duckdb": "export",
          "opentelemetry.sdk": "otlp", "requests": "otlp", "opentelemetry.exporter.otlp.proto.http._log_exporter": "otlp",
          "opentelemetry.exporter.otlp.proto.http.trace_exporter": "otlp"}  # fmt: skip


class MissingDependency(OpenEtwError):
    """An optional library a feature needs is not installed."""

    exit_code = 2


def require(module: str, feature: str) -> ModuleType:
    """``module`` imported, or ``MissingDependency`` saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as error:
        top = module.split(".")[0]
        if top == "opentelemetry":
            top = "opentelemetry-sdk opentelemetry-exporter-otlp-proto-http"
        extra = _EXTRA.get(module, "export")
        raise MissingDependency(
            f"{feature} needs the Python package {top!r}, which is not installed: "
            f"pip install 'openetw[{extra}]' (or pip install {top})"
        ) from error
