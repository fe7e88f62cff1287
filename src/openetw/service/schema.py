"""The shape every request must have before a handler sees it.

A peer is anyone who can reach the socket, so a request is checked as data first: the
operation's name, the request id, the types of the fields the handlers read, the range of every
integer anywhere in the message and how deeply it nests. Non-finite numbers never get this far
(the frame decoder refuses ``NaN``, ``Infinity`` and ``1e999``). A request that fails here is
answered with an error (``InvalidRequest``) and its connection goes on; one the service cannot
even answer (an ``id`` it could not echo) is a protocol error that closes the connection.
"""

from __future__ import annotations

from typing import Any

from openetw.errors import InvalidArgument

__all__ = [
    "FIELD_TYPES",
    "InvalidRequest",
    "MAX_DEPTH",
    "MAX_ID_TEXT",
    "MAX_INT",
    "MIN_INT",
    "MAX_OP_NAME",
    "check_request",
    "request_id_problem",
]

MIN_INT = -(1 << 63)
MAX_INT = (1 << 64) - 1  # keywords are u64
MAX_DEPTH = 8  # a session configuration with its providers' filters nests 5 deep
MAX_OP_NAME = 64
MAX_ID_TEXT = 128
MAX_TEXT = 64 * 1024  # any one string

# The top-level fields the handlers read, by name (a name means the same in every request).
# ``None`` in a tuple: the field may be null (the handler takes its default).
FIELD_TYPES: dict[str, tuple[type | None, ...]] = {
    "op": (str,),
    "session": (str, int),
    "provider": (str,),
    "name": (str, None),
    "classic": (bool, None),
    "registration": (int,),
    "pool_id": (int,),
    "token": (int,),
    "file_name": (str,),
    "config": (dict,),
    "changes": (dict, None),
    "providers": (list, None),
    "stats": (dict, None),
    "error": (dict, str, None),
    "events": (int, None),
    "level": (int, None),
    "match_any": (int, None),
    "match_all": (int, None),
    "properties": (int, None),
    "filters": (dict, None),
    "fds": (int,),
    "owners": (list,),
    "buffers": (int,),
    "acks": (bool, None),
}

# Fields whose integer value is a count, an id or a bit mask: never negative.
_NON_NEGATIVE = frozenset({"registration", "pool_id", "token", "events", "level", "match_any", "match_all", "properties", "session", "buffers"})


class InvalidRequest(InvalidArgument):
    """A request that does not have the shape of the protocol's requests."""


def request_id_problem(request_id: Any) -> str | None:
    """Why ``request_id`` cannot be echoed in a reply, or ``None`` (absent, an integer in
    range, or a short string)."""
    if request_id is None:
        return None
    if isinstance(request_id, bool):
        return "a request id is an integer or a string, not a boolean"
    if isinstance(request_id, int):
        return None if MIN_INT <= request_id <= MAX_INT else f"request id {request_id} is out of range"
    if isinstance(request_id, str):
        return None if len(request_id) <= MAX_ID_TEXT else f"a request id is at most {MAX_ID_TEXT} characters"
    return f"a request id is an integer or a string, not a JSON {_json_type(request_id)}"


def check_request(body: dict[str, Any]) -> None:
    """``InvalidRequest`` unless ``body`` has the request's shape (see the module's text)."""
    op = body.get("op")
    if not isinstance(op, str) or not 0 < len(op) <= MAX_OP_NAME:
        raise InvalidRequest(f"a request needs an \"op\" string of 1 to {MAX_OP_NAME} characters")
    for key, kinds in FIELD_TYPES.items():
        if key not in body:
            continue
        value = body[key]
        if not _is_one_of(value, kinds):
            wanted = " or ".join("null" if kind is None else _TYPE_NAMES[kind] for kind in kinds)
            raise InvalidRequest(f"{op}: {key!r} must be {wanted}, not a JSON {_json_type(value)}")
        if key in _NON_NEGATIVE and isinstance(value, int) and not isinstance(value, bool) and value < 0:
            raise InvalidRequest(f"{op}: {key!r} must not be negative")
    _check_value(body, op, "request", 0)


def _is_one_of(value: Any, kinds: tuple[type | None, ...]) -> bool:
    for kind in kinds:
        if kind is None:
            if value is None:
                return True
        elif kind is int:
            if isinstance(value, int) and not isinstance(value, bool):
                return True
        elif isinstance(value, kind):
            return True
    return False


def _check_value(value: Any, op: str, where: str, depth: int) -> None:
    if depth > MAX_DEPTH:
        raise InvalidRequest(f"{op}: the {where} nests deeper than {MAX_DEPTH} levels")
    if isinstance(value, bool) or value is None:
        return
    if isinstance(value, int):
        if not MIN_INT <= value <= MAX_INT:
            raise InvalidRequest(f"{op}: an integer in the {where} is out of the 64-bit range")
    elif isinstance(value, float):
        if value != value or value in (float("inf"), float("-inf")):  # the decoder already refuses these
            raise InvalidRequest(f"{op}: the {where} holds a number that is not finite")
    elif isinstance(value, str):
        if len(value) > MAX_TEXT:
            raise InvalidRequest(f"{op}: a string in the {where} is longer than {MAX_TEXT} characters")
    elif isinstance(value, dict):
        for key, item in value.items():
            _check_value(item, op, key if depth == 0 else where, depth + 1)
    elif isinstance(value, list):
        for item in value:
            _check_value(item, op, where, depth + 1)


_TYPE_NAMES = {str: "a string", int: "an integer", bool: "true or false", dict: "an object", list: "an array"}


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"
