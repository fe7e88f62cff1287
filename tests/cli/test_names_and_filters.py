"""The seed's driver story in every order, misspelt names announced, and every CLI filter giving
the events of the Python API's equivalent, against a live provider and a real service."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from openetw.cli.main import main
from openetw.controller import Session
from openetw.etl.extended import EXT_SID, EXT_TS_ID, ExtendedItem
from openetw.etl.relog import is_logfile_header_record
from openetw.provider.properties import unix_user_sid
from openetw.provider_names import ProviderNameWarning
from openetw.session import EventFilters
from openetw.session.enable import EnableProperty
from tests.cli.driver_child import PROGRAM
from tests.service.harness import ServiceProcess, read_events

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "sample_driver"
GUID = "b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6"
NONE = ExtendedItem(0, b"")


class Driver:
    def __init__(self) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", PROGRAM, str(EXAMPLE / "generated" / "sample_driver.py")],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=dict(os.environ),
        )  # fmt: skip
        self.pid = int(self._read()["ready"])

    def _read(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        line = self.process.stdout.readline()
        assert line, f"the driver exited with {self.process.wait(timeout=5)}"
        return json.loads(line)  # type: ignore[no-any-return]

    def send(self, **command: Any) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(json.dumps(command) + "\n")
        self.process.stdin.flush()
        return self._read()

    def run(self, sessions: int) -> None:
        """Wait until ``sessions`` sessions enable the provider here, then write the three events."""
        assert self.send(cmd="wait", sessions=sessions)["sessions"] == sessions
        self.send(cmd="write")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait(timeout=10)


@pytest.fixture
def drivers() -> Iterator[Any]:
    started: list[Driver] = []

    def start() -> Driver:
        started.append(Driver())
        return started[-1]

    try:
        yield start
    finally:
        for driver in started:
            driver.close()


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path / "data"))
    return tmp_path / "data"


def install_manifest(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["manifest", "install", str(EXAMPLE / "evntdrv.xml")]) == 0
    capsys.readouterr()


def events_of(path: Path) -> list[tuple[int, int]]:
    return [(r.pid, r.id) for r in read_events(path) if not is_logfile_header_record(r)]


def cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    err = capsys.readouterr().err
    assert code == 0, err
    return err


@pytest.mark.parametrize("order", ["session-install-run", "install-session-run", "run-session"])
def test_the_driver_story_in_every_order(order: str, service: ServiceProcess, data_dir: Path, drivers, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    output = tmp_path / "drv.etl"
    start = ("session", "start", "Drv", "-p", "Sample Driver", "-o", str(output))
    if order == "session-install-run":
        err = cli(capsys, *start)
        assert "'Sample Driver'" in err and "'*Sample Driver'" in err and "enables it by name" in err
        install_manifest(capsys)
        driver = drivers()
    elif order == "install-session-run":
        install_manifest(capsys)
        assert cli(capsys, *start) == ""  # the installed manifest names it: nothing to announce
        driver = drivers()
    else:
        driver = drivers()  # registered, carrying its name; no manifest installed anywhere
        assert cli(capsys, *start) == ""
    driver.run(sessions=1)
    query = json.loads(main(["session", "query", "Drv", "--json"]) == 0 and capsys.readouterr().out)
    assert [(p["guid"], p["pending"]) for p in query["providers"]] == [(GUID, False)]
    cli(capsys, "session", "stop", "Drv")
    assert [event_id for _, event_id in events_of(output)] == [1, 2, 3]


def test_a_misspelt_name_is_announced_not_silently_hashed(service: ServiceProcess, data_dir: Path, drivers,
                                                          tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    install_manifest(capsys)
    driver = drivers()
    err = cli(capsys, "session", "start", "Typo", "-p", "Sampel Driver", "-o", str(tmp_path / "typo.etl"))
    assert err.startswith("openetw: warning:") and "'Sampel Driver'" in err and "'*Sampel Driver'" in err
    attached = Session.attach("Typo")
    with pytest.warns(ProviderNameWarning, match="Sampel Driver"):
        attached.enable("Sampel Driver")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        attached.enable("*Sampel Driver")  # the hash on purpose: nothing to announce
    attached.detach()
    driver.run(sessions=0)
    cli(capsys, "session", "stop", "Typo")
    assert events_of(tmp_path / "typo.etl") == []


def _api_options(case: dict[str, Any], pids: dict[str, int]) -> dict[str, Any]:
    options: dict[str, Any] = {}
    if "properties" in case:
        options["properties"] = case["properties"]
    filters = case.get("filters")
    if filters is not None:
        options["filters"] = EventFilters(
            frozenset(filters.get("ids", ())), filters.get("include", True),
            frozenset(pids[p] for p in filters.get("pids", ())), frozenset(filters.get("exe", ())),
        )  # fmt: skip
    return options


EXE = os.path.basename(os.path.realpath(sys.executable))
# (CLI arguments with {one}/{two} for the two drivers' pids, the API's equivalent, events expected)
FILTER_CASES = [
    (["--event-ids", "2"], {"filters": {"ids": [2]}}, {("one", 2), ("two", 2)}),
    (["--exclude-event-ids", "1,3"], {"filters": {"ids": [1, 3], "include": False}}, {("one", 2), ("two", 2)}),
    (["--pids", "{one}"], {"filters": {"pids": ["one"]}}, {("one", 1), ("one", 2), ("one", 3)}),
    (["--exe", EXE, "--event-ids", "3"], {"filters": {"ids": [3], "exe": [EXE]}}, {("one", 3), ("two", 3)}),
    (["--exe", "no-such-program"], {"filters": {"exe": ["no-such-program"]}}, set()),
    (["--stack", "--sid", "--ts"], {"properties": 0x7}, {(d, i) for d in ("one", "two") for i in (1, 2, 3)}),
    (
        ["-p", "Sample Driver;pids={two};exclude-event-ids=2;sid"],
        {"properties": int(EnableProperty.SID), "filters": {"pids": ["two"], "ids": [2], "include": False}},
        {("two", 1), ("two", 3)},
    ),
]


def test_every_cli_filter_gives_the_api_s_events(service: ServiceProcess, data_dir: Path, drivers, tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    install_manifest(capsys)
    one, two = drivers(), drivers()
    pids = {"one": one.pid, "two": two.pid}
    names = {pid: name for name, pid in pids.items()}
    for number, (arguments, api_case, expected) in enumerate(FILTER_CASES):
        argv = [a.format(**pids) for a in arguments]
        if "-p" not in argv:
            argv = ["-p", "Sample Driver", *argv]
        by_cli, by_api = tmp_path / f"cli{number}.etl", tmp_path / f"api{number}.etl"
        cli(capsys, "session", "start", f"Cli{number}", "-o", str(by_cli), *argv)
        api = Session.start(f"Api{number}", output=by_api, providers=[(GUID, _api_options(api_case, pids))])
        cli_rule = json.loads(main(["session", "query", f"Cli{number}", "--json"]) == 0 and capsys.readouterr().out)["providers"]
        assert [{k: v for k, v in p.items() if k != "name"} for p in cli_rule] == [
            {k: v for k, v in p.items() if k != "name"} for p in api.info()["providers"]
        ]
        for name, driver in (("one", one), ("two", two)):
            driver.run(sessions=2 if any(who == name for who, _ in expected) else 0)
        cli(capsys, "session", "stop", f"Cli{number}")
        api.stop()
        got_cli = {(names[pid], event_id) for pid, event_id in events_of(by_cli)}
        got_api = {(names[pid], event_id) for pid, event_id in events_of(by_api)}
        assert got_cli == got_api == expected, arguments
        for path in (by_cli, by_api):  # the SID and terminal session id the properties ask for, in both
            wanted = {EXT_SID: unix_user_sid(os.geteuid()), EXT_TS_ID: struct.pack("<I", os.getsid(0))}
            asked = {t for t, bit in ((EXT_SID, EnableProperty.SID), (EXT_TS_ID, EnableProperty.TS_ID)) if api_case.get("properties", 0) & bit}
            for record in read_events(path):
                assert {t: (record.extended_item(t) or NONE).data for t in wanted} == {t: wanted[t] if t in asked else b"" for t in wanted}
