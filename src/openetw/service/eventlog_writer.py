"""Moved to ``openetw.eventlog.writer`` (the Event Log's store thread); kept for one release."""

from openetw.eventlog.writer import DEPTH, PAUSE_AFTER_COMMIT_ENV, PAUSE_BEFORE_COMMIT_ENV, StoreBatch, StoreWriter

__all__ = ["DEPTH", "PAUSE_AFTER_COMMIT_ENV", "PAUSE_BEFORE_COMMIT_ENV", "StoreBatch", "StoreWriter"]
