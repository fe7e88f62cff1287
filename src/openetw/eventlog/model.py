"""What the Event Log stores and reports: new events, stored events, a log's settings and numbers.

Pure data. ``NewEvent`` is one event on its way into a log (its ``<System>`` facts as columns,
its whole record bytes, its rendered fields and message); ``StoredEvent`` is one read back, with
its ``record_id``; ``LogConfig`` is what ``wevtutil sl`` sets; ``LogInfo`` is what ``gli`` says.
Every log keeps ``written = stored + refused + lost``.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from openetw.errors import InvalidArgument

__all__ = ["AppendResult", "LogConfig", "LogInfo", "NewEvent", "Retention", "StoredEvent", "RECORD_FORMATS"]

Retention = Literal["circular", "retain", "autobackup"]
RETENTIONS: tuple[Retention, ...] = ("circular", "retain", "autobackup")
# ``etw``: the record is an EVENT_RECORD as a producer wrote it (EVENT_HEADER, extended items,
# user data); ``evtx``: the record is an .evtx event record as its chunk held it.
RECORD_FORMATS = ("etw", "evtx")
DEFAULT_MAX_SIZE = 20 << 20  # Windows' default for a new log: 20 MiB
MIN_MAX_SIZE = 1 << 20  # Windows refuses less than 1 MiB (64 KiB steps)


@dataclass
class NewEvent:
    """One event to store. ``keywords`` is the unsigned 64-bit mask; ``uid`` the writer's user
    (``None``: unknown), which Application-isolation logs let read its own events."""

    time_created: int  # FILETIME
    provider: str
    event_id: int
    record: bytes
    format: str = "etw"
    provider_guid: str | None = None
    version: int = 0
    level: int = 0
    task: int = 0
    opcode: int = 0
    keywords: int = 0
    channel: str = ""
    computer: str = ""
    pid: int = 0
    tid: int = 0
    user_sid: str | None = None
    uid: int | None = None
    activity_id: str | None = None
    fields: dict[str, Any] | None = None
    message: str | None = None
    xml: str | None = None  # the rendered XML when the record carries it (.evtx); else made on demand
    rendered: bool = True  # False: stored first, ``fields`` and ``message`` made later from ``record``


@dataclass
class StoredEvent(NewEvent):
    """An event read back from a log: ``record_id`` is its EventRecordID in that log."""

    record_id: int = 0
    log: str = ""

    def to_json(self) -> dict[str, Any]:
        """The JSON object ``log query --format json`` prints (the record bytes as hex)."""
        out = asdict(self)
        out["record"] = self.record.hex()
        out.pop("rendered", None)
        out["keywords"] = f"0x{self.keywords:016x}"
        return out


@dataclass(frozen=True)
class LogConfig:
    """A log's settings (``wevtutil gl`` / ``sl``). ``mode`` holds Unix permission bits for the
    owner, the group (the readers group) and others; ``writers`` is a group that may write
    besides the owner (the service accounts of System); ``isolation`` ``Application`` lets
    other users read the events they wrote themselves."""

    enabled: bool = True
    retention: Retention = "circular"
    max_size: int = DEFAULT_MAX_SIZE
    level: int | None = None
    keywords: int | None = None
    owner: int = 0
    group: int = 0
    mode: int = 0o640
    writers: int | None = None
    isolation: str = "Application"
    type: str = "Admin"

    def __post_init__(self) -> None:
        if self.retention not in RETENTIONS:
            raise InvalidArgument(f"retention is one of {', '.join(RETENTIONS)}, not {self.retention!r}")
        if self.max_size < MIN_MAX_SIZE // 16:
            raise InvalidArgument(f"a log's maximum size is at least {MIN_MAX_SIZE // 16} bytes, not {self.max_size}")
        if not 0 <= self.mode <= 0o777:
            raise InvalidArgument(f"a log's mode is three octal digits, not {self.mode:o}")

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["mode"] = f"{self.mode:03o}"
        if self.keywords is not None:
            out["keywords"] = f"0x{self.keywords:016x}"
        return out

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> LogConfig:
        values = dict(data)
        if isinstance(values.get("mode"), str):
            values["mode"] = int(values["mode"], 8)
        if isinstance(values.get("keywords"), str):
            values["keywords"] = int(values["keywords"], 16)
        known = set(cls.__dataclass_fields__)
        return cls(**{k: v for k, v in values.items() if k in known})

    def dumps(self) -> str:
        return json.dumps(self.to_json(), sort_keys=True)


@dataclass(frozen=True)
class LogInfo:
    """``wevtutil gli``: ``records`` held now, ``bytes`` of all its files, ``oldest_record_id``
    (``None`` when empty), ``last_write`` (ISO time or ``None``), ``refused`` and ``lost``
    (events counted, never stored); ``written`` = stored ever + refused + lost."""

    name: str
    records: int
    bytes: int
    oldest_record_id: int | None
    last_write: str | None
    refused: int
    lost: int
    written: int
    stored: int
    next_record_id: int
    log_id: str
    # uid (as text) -> its share: "bytes" held, "refused" and "overwritten" (its own oldest,
    # to stay within its share) of the writers other than root and the log's owner
    writers: dict[str, dict[str, int]] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class AppendResult:
    """What one ``append`` did: events ``stored``, ``refused`` (a full retain log, or access),
    ``overwritten`` (circular), and the ``archives`` an auto-backup log made; ``refused``
    includes what writers' shares refused."""

    stored: int = 0
    refused: int = 0
    overwritten: int = 0
    archives: list[str] = field(default_factory=list)
