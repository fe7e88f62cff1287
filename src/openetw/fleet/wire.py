"""What one streamed message is: subject, message id and headers of a session's buffers.

A streaming session publishes whole ETL buffers: sequence 0 is the logfile header buffer, then
each buffer as it completes or flushes (1, 2, ...), then one ``end`` message with no payload and
the session's final loss counts. Every message carries the loss counts so far, so a collector
that saw any message knows what the host has counted lost up to then; a buffer the host could
not keep (its spool was full) keeps its sequence number, which then never arrives: a gap, and
the next message that does arrive names it (``Openetw-Gap: FIRST-LAST``).

This module only builds and reads names and headers: no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from openetw.errors import InvalidArgument
from openetw.ipc.stream_options import DEFAULT_STREAM, subject_token  # declared with the settings that name them

__all__ = [
    "DEFAULT_STREAM",
    "DEFAULT_SUBJECT",
    "H_BUFFERS_LOST",
    "H_EVENTS",
    "H_EVENTS_LOST",
    "H_GAP",
    "H_HOST",
    "H_KIND",
    "H_SEQUENCE",
    "H_SESSION",
    "H_START",
    "KIND_BUFFER",
    "KIND_END",
    "KIND_HEADER",
    "MessageInfo",
    "message_headers",
    "message_id",
    "parse_headers",
    "subject_for",
    "subject_token",
]

STREAM_SUBJECTS = "etw.>"
DEFAULT_SUBJECT = "etw.{host}.{session}"

H_HOST = "Openetw-Host"
H_SESSION = "Openetw-Session"
H_START = "Openetw-Start"
H_SEQUENCE = "Openetw-Sequence"
H_EVENTS_LOST = "Openetw-Events-Lost"
H_BUFFERS_LOST = "Openetw-Buffers-Lost"
H_EVENTS = "Openetw-Events"  # the records this buffer holds, as the host counted them
H_KIND = "Openetw-Kind"
H_GAP = "Openetw-Gap"

KIND_HEADER, KIND_BUFFER, KIND_END = "header", "buffer", "end"
_KINDS = frozenset({KIND_HEADER, KIND_BUFFER, KIND_END})


def subject_for(template: str, host: str, session: str) -> str:
    """The subject a session publishes on: ``template``'s ``{host}`` and ``{session}`` filled in
    with subject-safe tokens. It must stay under the stream's ``etw.>``."""
    try:
        subject = template.format(host=subject_token(host), session=subject_token(session))
    except (KeyError, IndexError, ValueError) as exc:
        raise InvalidArgument(f"subject template {template!r}: only {{host}} and {{session}} may be filled in ({exc})") from None
    tokens = subject.split(".")
    if len(tokens) < 2 or tokens[0] != "etw" or any(not token or token in ("*", ">") for token in tokens):
        raise InvalidArgument(f"subject {subject!r} is not a plain subject under etw. (the fleet's stream takes etw.>)")
    if len(tokens) < 3 or tokens[1] != subject_token(host) or subject_token(session) not in tokens[2:]:
        # The collector takes a message's host from the subject (what NATS authenticated).
        raise InvalidArgument(f"subject {subject!r}: the fleet's subjects are etw.<host>.<...> with the session a later token"
                              f" (etw.{{host}}. first, then {{session}})")  # fmt: skip
    return subject


def message_id(host: str, session: str, start: int, sequence: int, nonce: str = "") -> str:
    """JetStream's de-duplication id: ``<host>:<session>:<start>:<sequence>[:<nonce>]``.

    JetStream drops a message whose id it saw in its window, whoever sent it: the publisher's
    ``nonce`` (random, per session) keeps another host from taking a session's ids first."""
    return f"{host}:{session}:{start}:{sequence}" + (f":{nonce}" if nonce else "")


def message_headers(
    *, host: str, session: str, start: int, sequence: int, kind: str, events: int, events_lost: int, buffers_lost: int,
    gap: tuple[int, int] | None = None, nonce: str = "",
) -> dict[str, str]:  # fmt: skip
    headers = {
        "Nats-Msg-Id": message_id(host, session, start, sequence, nonce),
        H_HOST: host,
        H_SESSION: session,
        H_START: str(start),
        H_SEQUENCE: str(sequence),
        H_KIND: kind,
        H_EVENTS: str(events),
        H_EVENTS_LOST: str(events_lost),
        H_BUFFERS_LOST: str(buffers_lost),
    }
    if gap is not None:
        headers[H_GAP] = f"{gap[0]}-{gap[1]}"
    return headers


@dataclass(frozen=True)
class MessageInfo:
    """A streamed message's headers, read back."""

    host: str
    session: str
    start: int
    sequence: int
    kind: str
    events: int
    events_lost: int
    buffers_lost: int
    gap: tuple[int, int] | None = None

    @property
    def key(self) -> tuple[str, str, int]:
        return (self.host, self.session, self.start)


def parse_headers(headers: Mapping[str, str] | None) -> MessageInfo:
    """The message's identity and counts; ``InvalidArgument`` for a message that is not one of a
    streaming session's (missing or malformed headers)."""
    if not headers:
        raise InvalidArgument("a message without openetw headers")
    try:
        gap_text = headers.get(H_GAP)
        gap = None
        if gap_text:
            first, last = gap_text.split("-", 1)
            gap = (int(first), int(last))
        kind = headers.get(H_KIND, KIND_BUFFER)
        if kind not in _KINDS:
            raise ValueError(f"kind {kind!r}")
        return MessageInfo(
            host=headers[H_HOST],
            session=headers[H_SESSION],
            start=int(headers[H_START]),
            sequence=int(headers[H_SEQUENCE]),
            kind=kind,
            events=int(headers.get(H_EVENTS, "0")),
            events_lost=int(headers.get(H_EVENTS_LOST, "0")),
            buffers_lost=int(headers.get(H_BUFFERS_LOST, "0")),
            gap=gap,
        )
    except (KeyError, ValueError) as exc:
        raise InvalidArgument(f"a message with malformed openetw headers ({exc})") from None
