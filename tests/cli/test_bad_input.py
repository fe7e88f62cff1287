"""Every command with bad input: the exit code of the table in `openetw --help`, one message
line on stderr, never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from openetw.cli.main import cli, main
from tests.conftest import corpus_path

ETL = str(corpus_path("etl", "perfview", "primitive-types.etl"))
MANIFEST = str(Path(__file__).resolve().parents[2] / "examples" / "sample_driver" / "evntdrv.xml")

# (argv with {tmp} for a scratch directory, exit code, words the one message line holds)
TABLE: list[tuple[list[str], int, str]] = [
    (["--bogus"], 2, "No such option"),
    (["nosuch"], 2, "No such command"),
    (["info", "{tmp}/missing.etl"], 2, "no such file"),
    (["info", "{tmp}"], 2, "is a directory"),
    (["info", "{tmp}/junk.etl"], 2, "not a readable ETL file"),
    (["dump", "--limit", "x", ETL], 2, "--limit"),
    (["dump", "--manifest", "{tmp}/missing.man", ETL], 2, "does not exist"),
    (["dump", "--mof", "{tmp}/missing.mof", ETL], 2, "does not exist"),
    (["dump", "--tmf", "{tmp}/missing.tmf", ETL], 2, "does not exist"),
    (["dump", "--provider", "Nobody", ETL], 2, "no provider 'Nobody' in"),
    (["dump", "--provider", "{{5eadbeef-0000}}", ETL], 2, "is not a valid GUID"),
    (["dump", "--start", "yesterday", ETL], 2, "neither seconds from the trace start"),
    (["dump", "--start", "5", "--end", "1", ETL], 2, "--start is after --end"),
    (["relog", "-o", "{tmp}/no/dir/x.etl", ETL], 2, "No such file or directory"),
    (["relog", "-o", "{tmp}", ETL], 2, "is a directory"),
    (["relog", "-o", "/dev/full", ETL], 1, "No space left on device"),
    (["relog", "-o", ETL, ETL], 2, "must not be one of the inputs"),
    (["report", "-o", "{tmp}/no/dir/x.csv", ETL], 2, "cannot write"),
    (["stacks", "{tmp}/missing.etl"], 2, "no such file"),
    (["stacks", "--symbols", "{tmp}/none", ETL], 2, "is not a directory"),
    (["report", "-o", "/dev/full", "--format", "csv", ETL], 1, "No space left on device"),
    (["report", "--format", "xml", "--json", ETL], 2, "has no JSON form"),
    (["report", "--end", "-3", ETL], 2, "must be a finite number >= 0"),
    (["report", "{tmp}/junk.etl"], 2, "not a readable ETL file"),
    (["manifest", "install", "{tmp}/missing.man"], 2, "no such file"),
    (["manifest", "uninstall", "Nobody"], 2, "not installed"),
    (["manifest", "list", "--manifest", "{tmp}/missing.man"], 2, "does not exist"),
    (["manifest", "show", "Nobody"], 2, "no provider 'Nobody'"),
    (["manifest", "validate", "{tmp}/bad.man"], 2, "1 of 1 manifest files have errors"),
    (["mc", "{tmp}/bad.man", "-o", "{tmp}/out"], 2, "malformed XML"),
    (["mc", MANIFEST, "-o", "/dev/full"], 2, "cannot write"),
    (["service", "run", "--autologger", "{tmp}/a.toml", "--no-autologger"], 2, "exclude each other"),
    (["service", "status"], 1, "no trace service is running"),
    (["service", "stop"], 1, "no trace service is running"),
    (["session", "start", "S", "-p", "{{zzz}}"], 2, "is not a valid GUID"),
    (["session", "start", "S", "-p", "a:1:loud"], 2, "level"),
    (["session", "start", "S", "-p", "a;bogus"], 2, "unknown option 'bogus'"),
    (["session", "start", "S", "-p", "a", "--pids", "x"], 2, "is not a number"),
    (["session", "start", "S", "-p", "a", "--event-ids", "1", "--exclude-event-ids", "2"], 2, "exclude each other"),
    (["session", "start", "S", "-p", "a", "-o", "{tmp}/no/dir/x.etl"], 2, "No such file or directory"),
    (["session", "start", "S", "-p", "a", "-o", "{tmp}"], 2, "is a directory"),
    (["session", "start", "S", "--mode", "circular", "-o", "{tmp}/c.etl"], 2, "max"),
    (["session", "stop", "S"], 1, "no trace service is running"),
    (["session", "update", "S", "-p", "a;pids="], 2, "is not a comma-separated list"),
    (["session", "update", "S", "-p", "a"], 1, "no trace service is running"),
    (["session", "update", "S", "-p", "{{a}}"], 2, "is not a valid GUID"),
    (["session", "update", "S", "--disable", "{{0000"], 2, "is not a valid GUID"),
    (["session", "flush", "S"], 1, "no trace service is running"),
    (["session", "query", "S"], 1, "no trace service is running"),
    (["session", "snapshot", "S", "{tmp}/s.etl"], 1, "no trace service is running"),
    (["session", "capture-state", "S", "-p", "{{bad"], 2, "is not a valid GUID"),
    (["session", "list", "--bogus"], 2, "No such option"),
    (["providers", "--bogus"], 2, "No such option"),
    (["providers", "secure", "X"], 2, "Missing option '--owner'"),
    (["providers", "secure", "{{zzz}}", "--owner", "root"], 2, "is not a valid GUID"),
    (["providers", "secure", "P", "--owner", "no-such-user-or-group"], 2, "no user or group named"),
    (["providers", "secure", "P", "--owner", "root"], 1, "no trace service is running"),
    (["trace"], 2, "give either --session NAME or at least one -p PROVIDER"),
    (["trace", "-p", "{{x}}"], 2, "is not a valid GUID"),
    (["kernel", "start", "K", "--flags", "bogus"], 2, "unknown kernel flag"),
    (["kernel", "stop", "nosuch"], 1, "no kernel session named 'nosuch'"),
    (["kernel", "query", "nosuch"], 1, "no kernel session named 'nosuch'"),
    (["kernel", "probe", "--bogus"], 2, "No such option"),
    (["probe", "--file", ETL], 2, "no program"),
    (["probe", "--file", "{tmp}/missing.etl", "-n", "BEGIN {{ }}"], 2, "no such file"),
    (["probe", "--file", ETL, "-n", "BEGIN {{ x = ; }}"], 2, "<-n>:1:13: expected an expression"),
    (["probe", "--file", ETL, "-x", "nosuch=1", "-n", "BEGIN {{ }}"], 2, "unknown option 'nosuch'"),
    (["probe", "--file", "{tmp}/junk.etl", "-n", "etw::: {{ }}"], 2, "not a readable ETL file"),
    (["export", "{tmp}/missing.etl", "-o", "{tmp}/out"], 2, "no such file"),
    (["export", "{tmp}/junk.etl", "-o", "{tmp}/out"], 2, "not a readable ETL file"),
    (["export", ETL, "-o", "{tmp}/junk.etl"], 2, "exists and is not a directory"),
    (["export", ETL, "-o", "{tmp}/out", "--to", "xml"], 2, "'xml' is not one of"),
    (["sql", "SELECT 1"], 2, "give a QUERY and at least one FILE.etl or DIR"),
    (["sql", "SELECT nope FROM events", ETL, "--cache-dir", "{tmp}/cache"], 2, "SQL:"),
    (["collect", "nats://127.0.0.1:1", "-o", "{tmp}/out", "--to", "etl,csv"], 2, "unknown output csv"),
    (["fleet", "status", "{tmp}/missing"], 2, "neither nats://HOST:PORT nor a directory"),
    (["log", "list", "--bogus"], 2, "No such option"),
    (["log", "get", "Nosuch"], 1, "no trace service is running"),
    (["log", "set", "Nosuch", "--max-size", "x"], 2, "is not a valid integer"),
    (["log", "query", "Nosuch"], 1, "no trace service is running"),
    (["log", "export", "Nosuch", "{tmp}/x.evtx"], 1, "no trace service is running"),
    (["log", "clear", "Nosuch"], 1, "no trace service is running"),
    (["log", "flush", "--bogus"], 2, "No such option"),
    (["log", "import", "{tmp}/missing.evtx"], 2, "Missing option '--log'"),
    (["viewer", "--port", "99999"], 2, "is not in the range"),
]


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("OPENETW_SOCKET", str(tmp_path / "none.sock"))
    monkeypatch.setenv("OPENETW_NO_AUTOSTART", "1")  # a bad input never leaves a service behind
    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path / "data"))
    monkeypatch.setenv("OPENETW_LOGS_DIR", str(tmp_path / "logs"))
    monkeypatch.setenv("OPENETW_KERNEL_DIR", str(tmp_path / "kernel"))
    (tmp_path / "junk.etl").write_bytes(b"not an etl file at all " * 300)
    (tmp_path / "bad.man").write_text("<x>")
    return tmp_path


@pytest.mark.parametrize(("argv", "code", "words"), TABLE, ids=[" ".join(row[0])[:60] for row in TABLE])
def test_bad_input_gives_the_table_s_code_and_one_line(argv: list[str], code: int, words: str, scratch: Path,
                                                       capsys: pytest.CaptureFixture[str]) -> None:  # fmt: skip
    got = main([arg.format(tmp=scratch) for arg in argv])
    err = capsys.readouterr().err
    assert not (scratch / "none.sock").exists(), "a bad input started a trace service"
    lines = err.strip().splitlines()
    assert (got, len(lines)) == (code, 1), err
    assert lines[0].startswith("openetw: error: ") and words in lines[0], err
    assert "Traceback" not in err


def test_the_table_covers_every_command() -> None:
    def commands(group: click.Group, path: tuple[str, ...] = ()) -> set[tuple[str, ...]]:
        found: set[tuple[str, ...]] = set()
        context = click.Context(group)
        for name in group.list_commands(context):  # (the top level loads each command on request)
            command = group.get_command(context, name)
            assert command is not None
            found |= commands(command, (*path, name)) if isinstance(command, click.Group) else {(*path, name)}
        return found

    covered = {tuple(argv[:2]) for argv, _, _ in TABLE} | {tuple(argv[:1]) for argv, _, _ in TABLE}
    assert {path for path in commands(cli) if path not in covered} == set()


@pytest.mark.parametrize("argv", [["dump", ETL], ["info", ETL], ["report", ETL], ["--help"], ["manifest", "validate", MANIFEST]])
def test_a_full_disk_on_stdout_is_one_line_not_a_traceback(argv: list[str], scratch: Path) -> None:
    with open("/dev/full", "w") as full:
        run = subprocess.run([sys.executable, "-m", "openetw", *argv], stdout=full, stderr=subprocess.PIPE, text=True,
                             timeout=120, env=dict(os.environ))  # fmt: skip
    assert (run.returncode, run.stderr) == (1, "openetw: error: No space left on device\n")
