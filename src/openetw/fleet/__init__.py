"""Beyond one machine: sessions streamed to NATS JetStream, the fleet's collector and its status.

``wire`` names and reads streamed messages (no I/O); ``connect`` reaches the servers and makes
the stream; ``spool`` keeps what waits for them, in order; ``store`` is the collector's files and
books, ``to_log`` its Event Log output, ``collector`` the consumer that feeds them; ``status``
tells how the fleet is doing. ``publisher`` is a streamed session's sink in the trace service (the
publishing thread), ``source`` the live view of the stream as a trace's source. See docs/fleet.md.
"""

from openetw.fleet.connect import FleetError, StreamOptions

__all__ = ["FleetError", "StreamOptions"]
