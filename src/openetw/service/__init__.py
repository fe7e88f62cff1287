"""The trace service: the process that owns the sessions, their pools and their sinks (see docs/service.md).

The Event Log's part of the service and the fleet's stream sink moved to their own packages; their
old module paths (``openetw.service.eventlog``, ``.eventlog_writer``, ``.stream``) are kept for
one release and import the moved modules themselves.
"""

from openetw._moved import keep_old_paths as _keep_old_paths

__all__: list[str] = []

_keep_old_paths(__name__, "", {
    "eventlog": "openetw.eventlog.service",
    "eventlog_writer": "openetw.eventlog.writer",
    "stream": "openetw.fleet.publisher",
})  # fmt: skip
