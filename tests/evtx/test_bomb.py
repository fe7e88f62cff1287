"""The template bomb (one record whose template renders its BinXml value four times, fourteen
levels deep: 4^15 expansions) through every reader, each a fresh process whose address space is
limited: one lost record with a located error, the other records kept, the service alive."""

from __future__ import annotations

import json
import os
import resource
import select
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import openetw
from openetw.evtx import EvtxReader
from openetw.evtx.render import MAX_EXPANSION
from tests.evtx.hostile import template_bomb_file

ADDRESS_SPACE = 768 << 20  # the bomb took every reader past 1.8 GB; a bounded one stays far below
SRC = str(Path(openetw.__file__).resolve().parents[1])
ROOT = str(Path(__file__).resolve().parents[2])
BOMB_ERROR = f"record 4, BinXml: the record would render to more than {MAX_EXPANSION} characters"


def _limited() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def _env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("OPENETW_")}
    env.update(PYTHONPATH=SRC + os.pathsep + ROOT, OPENETW_DATA_DIR=str(tmp_path / "data"), OPENETW_LOGS_DIR=str(tmp_path / "logs"),
               OPENETW_NO_AUTOSTART="1", OPENETW_SOCKET=str(tmp_path / "none.sock"))  # fmt: skip
    return env


def _run(tmp_path: Path, *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, env=_env(tmp_path), preexec_fn=_limited, timeout=120, cwd=ROOT, check=False
    )


@pytest.fixture
def bomb(tmp_path: Path) -> Path:
    path = tmp_path / "bomb.evtx"
    data = template_bomb_file(depth=14)
    assert len(data) == 69_632
    path.write_bytes(data)
    return path


def test_the_reader_fails_the_bomb_before_rendering_it(bomb: Path) -> None:
    reader = EvtxReader(bomb.read_bytes(), path=str(bomb))
    assert [r.record_id for r in reader.records()] == [1, 2, 3, 5, 6]
    (loss,) = reader.losses
    assert str(loss).endswith(BOMB_ERROR) and loss.offset is not None and loss.chunk_index == 0
    # The same template a few levels deep is an ordinary record, rendered in full.
    shallow = EvtxReader(template_bomb_file(depth=4))
    (record,) = [r for r in shallow.records() if r.record_id == 4]
    assert record.xml().count("<Bomb>") == (4**6 - 1) // 3 - 4**5


def test_dump_and_info_lose_one_record(bomb: Path, tmp_path: Path) -> None:
    dumped = _run(tmp_path, "-m", "openetw", "dump", str(bomb))
    assert dumped.returncode == 2 and len(dumped.stdout.splitlines()) == 5 and BOMB_ERROR in dumped.stderr
    info = _run(tmp_path, "-m", "openetw", "info", "--json", str(bomb))
    facts = json.loads(info.stdout)
    assert info.returncode == 2 and facts["records"] == 5 and facts["damaged_records"] == 1 and BOMB_ERROR in info.stderr


def test_probe_counts_the_lost_record(bomb: Path, tmp_path: Path) -> None:
    probed = _run(tmp_path, "-m", "openetw", "probe", "--file", str(bomb), "-q", "-n", "etw::: { @ = count(); }")
    assert probed.returncode == 0 and "1 format errors" in probed.stderr, probed.stderr


def test_usertrace_and_the_viewer_keep_the_rest(bomb: Path, tmp_path: Path) -> None:
    script = textwrap.dedent(f"""
        import json
        from openetw.consumer import UserTrace
        from openetw.events.registry import build_registry
        from openetw.viewer.sources import EvtxSource

        seen, errors = [], []
        trace = UserTrace(files=[{str(bomb)!r}], manifests=[])
        trace.set_default_event_callback(lambda record, context: seen.append(record.record_id))
        trace.on_error(lambda error, record: errors.append(str(error)))
        trace.start()
        source = EvtxSource("f1", {str(bomb)!r}, build_registry((), installed=False))
        source.ready.wait(60)
        print(json.dumps({{"seen": seen, "errors": errors, "viewer": len(source._events), "viewer_error": source.error}}))
    """)
    done = _run(tmp_path, "-c", script)
    assert done.returncode == 0, done.stderr
    facts = json.loads(done.stdout)
    assert facts["seen"] == [1, 2, 3, 5, 6] and any(e.endswith(BOMB_ERROR) for e in facts["errors"])
    assert facts["viewer"] == 5 and facts["viewer_error"].endswith(BOMB_ERROR)


def test_log_import_leaves_the_service_alive(bomb: Path, tmp_path: Path) -> None:
    socket_path = tmp_path / "control.sock"
    read_end, write_end = os.pipe()
    with open(tmp_path / "service.log", "ab") as log:
        service = subprocess.Popen(
            [sys.executable, "-m", "openetw", "service", "run", "--socket", str(socket_path), "--ready-fd", str(write_end)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, pass_fds=(write_end,), env=_env(tmp_path), preexec_fn=_limited, cwd=ROOT,
        )  # fmt: skip
    os.close(write_end)
    try:
        ready, _, _ = select.select([read_end], [], [], 30)
        assert ready and os.read(read_end, 16).startswith(b"ready"), (tmp_path / "service.log").read_text()
        imported = _run(tmp_path, "-m", "openetw", "log", "import", str(bomb), "--log", "Bombed", "--socket", str(socket_path), "--json")
        assert imported.returncode == 0, imported.stderr
        assert json.loads(imported.stdout)["imported"] == 5
        again = _run(tmp_path, "-m", "openetw", "log", "import", str(bomb), "--log", "Again", "--socket", str(socket_path), "--json")
        assert json.loads(again.stdout)["imported"] == 5 and service.poll() is None
    finally:
        os.close(read_end)
        service.kill()
        service.wait(timeout=10)
