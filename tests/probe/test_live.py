"""Live ``etw`` probes over a provider in another process (seed 002's first command), ``-c`` and ``-p``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.service.harness import ServiceProcess

PRODUCER = Path(__file__).with_name("live_producer.py")
GUID = "d1d93ef7-e1f2-4f45-9943-03d245fe6c00"
SEED = f"etw:{GUID}:0xff_0xffffffffffffffff:12"


def probe(*args: str, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "openetw", "probe", *args], capture_output=True, text=True, timeout=timeout, check=False)


def producer_command(*args: str) -> str:
    return " ".join([sys.executable, str(PRODUCER), *args])


def written(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def test_seed_command_fires_on_exactly_the_enabled_events(service: ServiceProcess, tmp_path: Path) -> None:
    out, log = tmp_path / "probe.txt", tmp_path / "producer.txt"
    result = probe("-o", str(out), "-n", SEED, "-c", producer_command("--wait-enabled", "--repeat", "3", "--report", str(log)))
    assert result.returncode == 0, result.stderr
    lines = out.read_text().splitlines()
    assert lines[0].split() == ["CPU", "ID", "FUNCTION:NAME"]
    fired = [line for line in lines[1:] if line.strip()]
    # The producer writes 6 kinds of id 12 among 8 kinds of events, three times over.
    assert len([e for e in written(log.read_text()) if e["id"] == 12]) == len(fired) == 18
    assert all(line.split()[-1] == "0xff_0xffffffffffffffff:12" for line in fired)


def test_level_keyword_and_id_filter_exactly(service: ServiceProcess, tmp_path: Path) -> None:
    out = tmp_path / "probe.json"
    program = f'etw:{GUID}:0x03_0x0000000000000001:12 {{ printf("%d %s", *(uint32_t *)(arg0 + sizeof(struct nt`_EVENT_HEADER)), probefunc); }}'
    report = tmp_path / "written.json"
    result = probe("-q", "-f", "json", "-o", str(out), "-n", program,
                   "-c", producer_command("--wait-enabled", "--base", "100", "--report", str(report)))  # fmt: skip
    assert result.returncode == 0, result.stderr
    events = written(report.read_text())
    # Admitted as a session enabled with level 3 and keyword 1 admits: level 0 or <= 3, keyword 0 or sharing bit 0.
    expected = [e["seq"] for e in events if e["id"] == 12 and e["level"] <= 3 and (e["keyword"] == 0 or e["keyword"] & 1)]
    assert expected  # (12, 0, 0) and (12, 2, 0x5), twice
    seen = [json.loads(line)["data"] for line in out.read_text().splitlines() if '"printf"' in line]
    assert [int(text.split()[0]) for text in seen] == expected
    assert {text.split()[1] for text in seen} == {"0x03_0x0000000000000001"}


def test_p_traces_only_that_process(service: ServiceProcess, tmp_path: Path) -> None:
    ready, go = tmp_path / "ready", tmp_path / "go"
    other_report, target_report = tmp_path / "other.json", tmp_path / "target.json"
    env = dict(os.environ)
    with other_report.open("w") as other_out, target_report.open("w") as target_out:
        # The other process writes as soon as the target is enabled, before the target writes.
        other = subprocess.Popen([sys.executable, str(PRODUCER), "--await", str(ready), "--touch", str(go), "--base", "1000"], stdout=other_out, env=env)
        target = subprocess.Popen([sys.executable, str(PRODUCER), "--wait-enabled", "--touch", str(ready), "--await", str(go)], stdout=target_out, env=env)
        try:
            out = tmp_path / "probe.json"
            program = f'etw:{GUID}::generic_event {{ printf("%d %d", pid == $target, *(uint32_t *)(arg0 + 80)); }}'
            result = probe("-q", "-f", "json", "-o", str(out), "-p", str(target.pid), "-n", program)
            assert result.returncode == 0, result.stderr
        finally:
            for process in (other, target):
                if process.poll() is None:
                    process.kill()
                process.wait()
    seen = [json.loads(line)["data"].split() for line in out.read_text().splitlines() if '"printf"' in line]
    target_seqs = [e["seq"] for e in written(target_report.read_text())]
    assert written(other_report.read_text())  # the other process did write while the probe ran
    assert [int(seq) for _, seq in seen] == target_seqs
    assert {flag for flag, _ in seen} == {"1"}


def test_c_exits_with_the_commands_status(service: ServiceProcess, tmp_path: Path) -> None:
    result = probe("-q", "-n", f"{SEED} {{ }}", "-c", "/bin/sh -c 'exit 7'")
    assert result.returncode == 7, result.stderr
    result = probe("-q", "-n", f'{SEED} {{ }} END {{ printf("%d", $target > 0); }}', "-c", "true")
    assert result.returncode == 0 and result.stdout.strip() == "1", result.stderr


def test_live_etw_probes_name_their_provider(service: ServiceProcess) -> None:
    result = probe("-n", "etw:*::12 { }", "-c", "true")
    assert result.returncode == 2
    assert "names its provider" in result.stderr


def test_destructive_actions_need_w(service: ServiceProcess, tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    program = f'{SEED} {{ }} END {{ system("touch {mark}"); }}'
    refused = probe("-q", "-n", program, "-c", "true")
    assert refused.returncode == 2 and "-w" in refused.stderr and not mark.exists()
    allowed = probe("-q", "-w", "-n", program, "-c", "true")
    assert allowed.returncode == 0, allowed.stderr
    assert mark.exists()


MANIFEST = Path(__file__).with_name("data") / "probe-test-memory.man"


def test_args_name_the_fields_a_manifest_declares(service: ServiceProcess, tmp_path: Path) -> None:
    out, report = tmp_path / "probe.json", tmp_path / "written.json"
    program = f'etw:{GUID}::Allocation {{ printf("%d %s", args->Seq, probefunc); }}'
    result = probe("-q", "-f", "json", "-o", str(out), "--manifest", str(MANIFEST), "-n", program,
                   "-c", producer_command("--wait-enabled", "--base", "500", "--report", str(report)))  # fmt: skip
    assert result.returncode == 0, result.stderr
    seen = [json.loads(line)["data"].split()[0] for line in out.read_text().splitlines() if '"printf"' in line]
    assert [int(seq) for seq in seen] == [e["seq"] for e in written(report.read_text()) if e["id"] == 12]
    # A field the manifest does not declare is a compile error naming the ones it does.
    wrong = probe("-q", "--manifest", str(MANIFEST), "-n", f"etw:{GUID}::Allocation {{ trace(args->Size); }}", "-c", "true")
    assert wrong.returncode == 2 and "has no field 'Size' (fields: Seq)" in wrong.stderr
    unknown = probe("-q", "-n", f"etw:{GUID}::12 {{ trace(args->Seq); }}", "-c", "true")
    assert unknown.returncode == 2 and "no event these probes match has a known schema" in unknown.stderr


def test_l_lists_the_live_probes_manifests_declare() -> None:
    listed = probe("-l", "--manifest", str(MANIFEST), "-f", "json", "-n", f"etw:{GUID}::")
    assert listed.returncode == 0, listed.stderr
    rows = [json.loads(line) for line in listed.stdout.splitlines()]
    assert [(r["name"], r["event_name"], r["fields"], r["events"]) for r in rows] == [
        ("12", "Allocation", ["Seq:uint32_t"], 0), ("13", "Release", ["Seq:uint32_t"], 0)]


def test_a_run_whose_service_dies_says_so_and_fails(tmp_path: Path, monkeypatch: Any) -> None:
    from tests.service.harness import start_service

    socket_path = tmp_path / "control.sock"
    monkeypatch.setenv("OPENETW_SOCKET", str(socket_path))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")
    running = start_service(socket_path)
    probe_process = subprocess.Popen([sys.executable, "-m", "openetw", "probe", "-n", f"{SEED} {{ }}"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert probe_process.stderr is not None
        assert "tracing" in probe_process.stderr.readline()
        running.process.kill()  # SIGKILL: the service goes away mid-run
        _out, err = probe_process.communicate(timeout=60)
    finally:
        if probe_process.poll() is None:
            probe_process.kill()
        running.kill()
    assert probe_process.returncode == 1
    assert "real-time stream ended before the run did: the trace service stopped or went away" in err


def test_a_killed_probe_leaves_no_session_behind(service: ServiceProcess) -> None:
    import signal
    import time

    from openetw.controller import list_sessions

    probe_process = subprocess.Popen([sys.executable, "-m", "openetw", "probe", "-n", f"{SEED} {{ }}"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert probe_process.stderr is not None
        assert "tracing" in probe_process.stderr.readline()
        assert any(info["name"].startswith("openetw-probe-") for info in list_sessions(socket=service.socket))
        probe_process.send_signal(signal.SIGKILL)
        probe_process.wait(timeout=10)
        deadline = time.monotonic() + 20
        while list_sessions(socket=service.socket) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list_sessions(socket=service.socket) == []
    finally:
        if probe_process.poll() is None:
            probe_process.kill()
