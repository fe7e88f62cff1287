"""The modules ``openetw mc`` makes of the authored sample manifests write every event into a real
session, and decoding the session's file gives back exactly the values written.

One service and one session serve the whole module. Each provider is enabled for every level
and every keyword (channel bits included), so every writable event is written with random values
in its types' ranges; afterwards each record of the file is matched to what was written (by
provider, event id, version and order) and its decoded fields compared.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.controller import Session
from openetw.mc import generate_from_file, load_module
from openetw.mc.runtime import field_from_literal
from openetw.tdh import decode_properties
from tests.conftest import corpus_path
from tests.mc.roundtrip_values import check_supported, event_values, same
from tests.mc.samples import WIDGET_MANIFEST
from tests.service.harness import ServiceProcess, read_events, start_service

AUTHORED = (
    "PowerShell.Core.Instrumentation.man",
    "general_DCHU_osrfx2_DCHU_base_osrfx2_DCHU_base_osrusbfx2.man",
    "general_tracing_evntdrv_Eventdrv_evntdrv.xml",
    "usb_kmdf_fx2_driver_osrusbfx2.man",
    "usb_ufxclientsample_UfxClientSample.man",
)
ALL_KEYWORDS = (1 << 64) - 1
EXAMPLES = 25


@dataclass
class Written:
    module: str
    event: str
    arguments: tuple[Any, ...]
    expected: dict[str, Any]


@dataclass
class Trace:
    output: Path
    session: Session
    modules: list[ModuleType]
    skipped: list[tuple[str, str, str]]  # (module, event, why it cannot be written)
    written: dict[tuple[Any, int, int], list[Written]] = field(default_factory=lambda: defaultdict(list))


def wait_for(condition: Any, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _modules(tmp: Path) -> tuple[list[ModuleType], list[tuple[str, str, str]]]:
    widget = tmp / "widget.man"  # arrays, structs, counted strings, FILETIME, floats: what the corpus lacks
    widget.write_bytes(WIDGET_MANIFEST)
    paths = [corpus_path("manifests", "authored-samples", name) for name in AUTHORED] + [widget]
    modules, skipped = [], []
    for number, path in enumerate(paths):
        generated, _notes = generate_from_file(path)
        for item in generated:
            name = f"{item.name}_{number}"  # the two OSR manifests make modules of one name
            modules.append(load_module(item.source, name))
            skipped += [(name, label, why) for label, why in item.unwritable]
    return modules, skipped


@pytest.fixture(scope="module")
def trace(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Trace]:
    tmp = tmp_path_factory.mktemp("authored")
    modules, skipped = _modules(tmp)
    with pytest.MonkeyPatch.context() as patch:
        socket = tmp / "control.sock"
        patch.setenv("OPENETW_SOCKET", str(socket))
        patch.setenv("OPENETW_NO_AUTOSTART", "1")
        service: ServiceProcess = start_service(socket)
        try:
            guids = sorted({str(m.PROVIDER_GUID) for m in modules})
            output = tmp / "authored.etl"
            session = Session.start(
                "AuthoredRoundTrip", output=output, socket=socket, buffer_size=256, max_buffers=256,
                providers=[(guid, {"level": 0, "any": ALL_KEYWORDS}) for guid in guids],
            )  # fmt: skip
            try:
                for module in modules:
                    module.register()
                assert wait_for(lambda: all(m.provider.enabled for m in modules)), "a provider was not enabled"
                yield Trace(output, session, modules, skipped)
            finally:
                for module in modules:
                    module.unregister()
                session.stop()
        finally:
            service.kill()


def _writable(module: ModuleType, skipped: list[tuple[str, str, str]]) -> list[tuple[Any, tuple[Any, ...]]]:
    """The events ``module`` can write (those ``openetw mc`` lists as unwritable left out), with their fields."""
    unwritable = {label for name, label, _ in skipped if name == module.__name__}
    events = []
    for info in module.provider.EVENTS:
        if info.label in unwritable:
            continue
        fields = tuple(field_from_literal(literal) for literal in info.fields)
        for prop in fields:
            check_supported(prop)
        events.append((info, fields))
    return events


def test_every_event_of_the_authored_manifests_decodes_to_the_values_written(trace: Trace) -> None:
    plan = [(module, info, fields) for module in trace.modules for info, fields in _writable(module, trace.skipped)]
    assert len(plan) >= 217, "every event of the authored manifests is written"
    strategies = [event_values(fields) for _, _, fields in plan]

    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
    @given(st.tuples(*strategies))
    def write_everything(drawn: tuple[tuple[tuple[Any, ...], dict[str, Any]], ...]) -> None:
        for (module, info, _), (arguments, expected) in zip(plan, drawn, strict=True):
            flag = getattr(module.provider, info.flag)
            assert flag, f"{info.describe()} is not enabled"
            assert getattr(module.provider, f"write_{info.name}")(*arguments), f"{info.describe()} was not written"
            d = info.descriptor
            trace.written[(module.PROVIDER_GUID, d.id, d.version)].append(Written(module.__name__, info.name, arguments, expected))

    write_everything()
    statistics = trace.session.stop()
    assert (statistics["events_lost"], statistics["log_buffers_lost"]) == (0, 0), statistics

    schemas = {(m.PROVIDER_GUID, s.event_id, s.version): s for m in trace.modules for s in m.schemas()}
    pending = {key: list(items) for key, items in trace.written.items()}
    total = sum(len(items) for items in pending.values())
    equal = 0
    for record in read_events(trace.output):
        key = (record.provider_id, record.id, record.version)
        assert pending.get(key), f"a record nobody wrote: {key}"
        written = pending[key].pop(0)
        decoded = decode_properties(schemas[key], record.user_data, record.pointer_size)
        values = {name: decoded[name] for name in written.expected}
        mismatched = {name: (values[name], want) for name, want in written.expected.items() if not same(values[name], want)}
        assert not mismatched, f"{written.module}.write_{written.event}{written.arguments!r}: decoded != written: {mismatched}"
        equal += 1
    assert all(not items for items in pending.values()), {k: len(v) for k, v in pending.items() if v}
    assert equal == total == statistics["events_written"] > 0
    print(f"\n{len(plan)} events, {total} written, {equal} decoded equal; skipped as unwritable: {trace.skipped}")
