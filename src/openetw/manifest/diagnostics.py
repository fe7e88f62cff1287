"""Findings about a manifest that do not stop it from loading."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Severity(str, Enum):
    ERROR = "error"
    WARNING = "warning"


@dataclass(frozen=True, slots=True)
class Diagnostic:
    """One finding. ``code`` is a short stable identifier (``undefined-task``, ...)."""

    severity: Severity
    code: str
    message: str
    path: str | None = None
    line: int | None = None
    element: str | None = None

    @property
    def is_error(self) -> bool:
        return self.severity is Severity.ERROR

    def __str__(self) -> str:
        where = self.path or "<manifest>"
        if self.line is not None:
            where += f":{self.line}"
        if self.element:
            where += f": <{self.element}>"
        return f"{where}: {self.severity.value}: {self.message} [{self.code}]"
