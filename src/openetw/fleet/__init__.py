"""Beyond one machine: sessions streamed to NATS JetStream, the fleet's collector and its status.

``openetw.fleet.wire`` names and reads streamed messages (no I/O); ``connect`` reaches the
servers; ``spool`` keeps what waits; ``collector`` writes what the fleet sent, per host and
session; ``status`` tells how the fleet is doing.
"""

from openetw.fleet.connect import FleetError, StreamOptions

__all__ = ["FleetError", "StreamOptions"]
