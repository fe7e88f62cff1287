"""The CLI's own failure: a command that already printed what it could and must end non-zero."""

from __future__ import annotations


class ReportedFailure(Exception):
    """Raised by a command that printed its output and wants the run to end with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = 2) -> None:
        super().__init__(message)
        self.exit_code = exit_code
