"""The controller's kernel sessions: ``start_kernel_session`` / ``stop_kernel_session`` (what
``openetw kernel start`` calls) and the settings a kernel session takes."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from openetw.controller import ServiceClient, list_sessions
from openetw.controller.kernel import query_kernel_session, start_kernel_session, stop_kernel_session
from openetw.errors import InvalidArgument
from openetw.ipc.wire import config_from_json, config_to_json
from openetw.session import InvalidSessionConfig, SessionConfig, SessionKind
from tests.service.harness import ServiceProcess
from tests.service.test_kernel_sessions import _file_events


def test_kernel_settings_travel_and_are_checked() -> None:
    config = SessionConfig("K", kind=SessionKind.KERNEL, kernel_flags=("thread", "process", "thread"), kernel_buffer_kb=64)
    assert config.kernel_flags == ("process", "thread")
    assert config_from_json(config_to_json(config)) == config
    with pytest.raises(InvalidSessionConfig, match="only kernel sessions take kernel flags"):
        SessionConfig("U", kernel_flags=("process",))
    with pytest.raises(InvalidSessionConfig, match="kernel buffer size must be 4"):
        SessionConfig("K", kind=SessionKind.KERNEL, kernel_flags=("process",), kernel_buffer_kb=2)
    with pytest.raises(InvalidSessionConfig, match="kernel_flags must be a list of strings"):
        config_from_json({"name": "K", "kind": "kernel", "kernel_flags": "process"})


def test_the_kernel_source_and_profile_rate_travel_as_settings() -> None:
    config = SessionConfig("K", kind=SessionKind.KERNEL, kernel_flags=("profile", "process"), kernel_source="tracefs",
                           kernel_profile_rate_hz=250)  # fmt: skip
    body = config_to_json(config)
    assert (body["kernel_source"], body["kernel_profile_rate_hz"], body["kernel_flags"]) == ("tracefs", 250, ["process", "profile"])
    assert config_from_json(body) == config
    # A request written before these settings existed (or leaving them null) takes the defaults.
    older = {key: value for key, value in body.items() if key not in ("kernel_source", "kernel_profile_rate_hz")}
    assert (config_from_json(older).kernel_source, config_from_json(older).kernel_profile_rate_hz) == ("auto", None)
    nulls = config_from_json(older | {"kernel_source": None, "kernel_profile_rate_hz": None})
    assert (nulls.kernel_source, nulls.kernel_profile_rate_hz) == ("auto", None)
    with pytest.raises(InvalidSessionConfig, match="kernel_profile_rate_hz must be an integer, not '250'"):
        config_from_json(body | {"kernel_profile_rate_hz": "250"})
    with pytest.raises(InvalidSessionConfig, match="kernel_source must be a str, not int"):
        config_from_json(body | {"kernel_source": 1})
    with pytest.raises(InvalidSessionConfig, match="unknown kernel event source 'bpf'"):
        config_from_json(body | {"kernel_source": "bpf"})


def test_flag_lists_hold_names_only() -> None:
    from openetw.kernel.control import parse_flags

    for flags in ("process,source=proc_connector", ["profile", "profile_rate=500"]):
        with pytest.raises(InvalidArgument, match=r"kernel flags are names, not settings: (source=proc_connector|profile_rate=500);"):
            parse_flags(flags)


def test_kernel_settings_are_refused_before_a_service_is_asked(service_env: Path) -> None:
    from openetw.controller import Session

    with pytest.raises(InvalidSessionConfig, match="a profile rate needs the profile kernel flag"):
        Session.start("KRate", mode="realtime", kernel_flags="process", kernel_profile_rate=500)
    with pytest.raises(InvalidSessionConfig, match="the proc_connector source records only the process and thread flags, not image"):
        start_kernel_session("KPc", "process,image", mode="realtime", source="proc-connector")
    with pytest.raises(InvalidArgument, match="kernel_source and kernel_profile_rate need kernel_flags"):
        Session.start("URate", mode="realtime", kernel_profile_rate=500)
    assert not service_env.exists()  # refused here: with no service, asking one fails otherwise


def test_flags_are_checked_before_anything_starts(kernel_service: ServiceProcess) -> None:
    with pytest.raises(InvalidArgument, match="not recorded on Linux yet"):
        start_kernel_session("KBad", ["registry"], mode="realtime")
    with pytest.raises(InvalidArgument, match="unknown kernel flag"):  # the service checks too
        with ServiceClient() as client:
            client.call("start_session", config={"name": "KRaw", "mode": "real-time", "kind": "kernel", "kernel_flags": ["bogus"]})
    assert list_sessions() == []


def test_start_and_stop_a_kernel_session_to_a_default_file(kernel_service: ServiceProcess, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    info = start_kernel_session("KCtl", "process", buffer_size_kb=256)
    assert info["file_name"] == str(tmp_path / "KCtl.etl")
    assert info["kernel_flags"] == ["process"] and info["kernel_buffer_kb"] == 256
    child = subprocess.Popen(["/bin/sh", "-c", "exit 17"])
    child.wait()
    assert query_kernel_session("KCtl")["state"] == "running"
    final = stop_kernel_session("KCtl")
    assert final["state"] == "stopped" and final["kernel"]["state"] == "stopped"
    stops = [values for name, _, values in _file_events(tmp_path / "KCtl.etl")[:-1] if name == "Process/Stop"]
    assert {"ProcessID": child.pid, "ExitStatus": 17, "ParentID": os.getpid()}.items() <= next(
        v for v in stops if v["ProcessID"] == child.pid
    ).items()
    with pytest.raises(InvalidArgument, match="writes no file"):
        start_kernel_session("KOut", "process", mode="realtime", output=tmp_path / "x.etl")
