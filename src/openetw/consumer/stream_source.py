"""Moved to ``openetw.fleet.source`` (the fleet's stream as a trace's source); kept for one release."""

from openetw.fleet.source import StreamSource

__all__ = ["StreamSource"]
