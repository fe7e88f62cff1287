"""Moved to ``openetw.fleet.publisher`` (the stream sink belongs to the fleet's package); kept for one release."""

from openetw.fleet.publisher import StreamPublisher, attach_stream, prepare_stream, session_start_stamp, stream_sink

__all__ = ["StreamPublisher", "attach_stream", "prepare_stream", "session_start_stamp", "stream_sink"]
