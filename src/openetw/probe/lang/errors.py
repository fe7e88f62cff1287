"""The probe language's errors: compile errors carry the D line and column."""

from __future__ import annotations

from openetw.errors import OpenEtwError

__all__ = ["ProbeCompileError", "ProbeRuntimeError"]


class ProbeCompileError(OpenEtwError):
    """A D program that does not parse or type-check: ``line``/``column`` are 1-based."""

    exit_code = 2

    def __init__(self, message: str, *, line: int | None = None, column: int | None = None, source: str = "<program>") -> None:
        self.message = message
        self.line = line
        self.column = column
        self.source = source
        super().__init__(str(self))

    def __str__(self) -> str:
        if self.line is None:
            return f"{self.source}: {self.message}"
        return f"{self.source}:{self.line}:{self.column}: {self.message}"


class ProbeRuntimeError(OpenEtwError):
    """A failure while a clause runs (invalid address, division by zero, a missing field)."""

    exit_code = 1

    def __init__(self, message: str, *, line: int | None = None) -> None:
        self.message = message
        self.line = line
        super().__init__(message if line is None else f"line {line}: {message}")
