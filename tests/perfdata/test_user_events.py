"""Publishing to ``user_events``: the kernel's lack of it is said plainly; what would be written
is EventHeader that decodes back."""

from __future__ import annotations

import struct
import uuid
from pathlib import Path

import pytest

from openetw.errors import InvalidArgument, UserEventsUnavailable
from openetw.perfdata.encode import encode_event
from openetw.perfdata.eventheader import decode_fields, parse_event
from openetw.provider.runtime import TraceLoggingProvider
from openetw.provider.user_events import DIAG_IOCSREG, UserEventsProvider, fields_for, registration, user_events_status


def test_a_kernel_without_user_events_is_said_plainly(tmp_path: Path) -> None:
    status = user_events_status([str(tmp_path)])
    assert not status.available and "no user_events" in status.reason and "CONFIG_USER_EVENTS" in status.reason
    with pytest.raises(UserEventsUnavailable, match="this kernel has no user_events"):
        TraceLoggingProvider("MyCompany_Component").user_events(roots=[str(tmp_path)])


def test_a_file_that_takes_no_registration_is_refused(tmp_path: Path) -> None:
    (tmp_path / "user_events_data").write_bytes(b"")  # a regular file: the ioctl is not for it
    with UserEventsProvider("MyCompany_Component", roots=[str(tmp_path)]) as provider:
        with pytest.raises(UserEventsUnavailable, match="refused the tracepoint 'MyCompany_Component_L5K1'"):
            provider.write("Started", level=5, keyword=1, port=80)


def test_this_machine_status_matches_tracefs() -> None:
    status = user_events_status()
    assert status.available == (status.path is not None and status.reason == "")


def test_the_registration_and_the_event_bytes() -> None:
    request = registration(0x1000, 0x2000, 3)
    assert struct.unpack("<IBBHQQI", request) == (len(request), 3, 4, 0, 0x1000, 0x2000, 0)
    assert DIAG_IOCSREG == 0xC0082A00
    values = {
        "ok": True,
        "port": 8080,
        "ratio": 0.25,
        "name": "api",
        "blob": b"\x00\x01",
        "id": uuid.UUID(int=7),
        "ids": [1, 2],
    }
    fields, ordered = fields_for(values)
    event = parse_event(encode_event("Started", fields, ordered, level=4))
    assert dict(decode_fields(event)) == {**values, "ok": 1}
    with pytest.raises(InvalidArgument):
        fields_for({"bad": object()})
