"""Access decisions, pure: owner, readers group, writers group, others, Application isolation."""

from __future__ import annotations

import pytest

from openetw.eventlog.access import Caller, ReadAccess, may_configure, may_write, read_access
from openetw.eventlog.channels import default_config

READERS, WRITERS = 900, 901
SYSTEM = default_config("System", "Admin", "System", system=True, owner=0, readers=READERS, writers=WRITERS)
SECURITY = default_config("Security", "Admin", "System", system=True, owner=0, readers=READERS, writers=WRITERS)
APP = default_config("My/Operational", "Operational", "Application", system=True, owner=0, readers=READERS, writers=WRITERS)
ANALYTIC = default_config("My/Analytic", "Analytic", "Application", system=True, owner=0, readers=READERS, writers=WRITERS)

ROOT, NOBODY = Caller(0), Caller(65534, frozenset({65534}))
READER, WRITER = Caller(1000, frozenset({READERS})), Caller(1001, frozenset({WRITERS}))


@pytest.mark.parametrize(("config", "caller", "read", "write"), [
    (SYSTEM, ROOT, ReadAccess.ALL, True),
    (SYSTEM, NOBODY, ReadAccess.NONE, False),
    (SYSTEM, READER, ReadAccess.ALL, False),
    (SYSTEM, WRITER, ReadAccess.NONE, True),
    (SECURITY, WRITER, ReadAccess.NONE, False),
    (SECURITY, READER, ReadAccess.ALL, False),
    (APP, NOBODY, ReadAccess.READ_OWN, True),
    (APP, READER, ReadAccess.ALL, True),
])  # fmt: skip
def test_the_machine_services_logs(config, caller, read, write) -> None:  # type: ignore[no-untyped-def]
    assert read_access(config, caller) is read
    assert may_write(config, caller) is write


def test_analytic_logs_start_disabled_and_only_owners_configure() -> None:
    assert not ANALYTIC.enabled and ANALYTIC.retention == "retain"
    assert APP.enabled and SYSTEM.enabled
    assert may_configure(SYSTEM, ROOT) and not may_configure(SYSTEM, READER) and not may_configure(APP, NOBODY)
