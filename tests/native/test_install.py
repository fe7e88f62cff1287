"""Installing builds the compiled core where a compiler is, and installs the pure path where none is.

Both build a wheel from a copy of the sources, as ``pip`` does for a user: with ``CC=/bin/false``
the wheel holds no compiled module, says so once, and its engine is ``python``; with gcc it holds
``_read`` and passes ``auditwheel show``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
NOTICE = "openetw: the compiled core was not built"


def _sources(to: Path) -> Path:
    tree = to / "openetw-src"
    tree.mkdir()
    for name in ("setup.py", "pyproject.toml", "README.md", "MANIFEST.in"):
        shutil.copy2(REPO / name, tree / name)
    shutil.copytree(REPO / "src", tree / "src", ignore=shutil.ignore_patterns("*.so", "__pycache__", "*.egg-info"))
    return tree


def _wheel(tree: Path, out: Path, **env: str) -> tuple[Path, str]:
    done = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-v", "-w", str(out), str(tree)],
        env={**os.environ, **env}, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    (wheel,) = out.glob("openetw-*.whl")
    return wheel, done.stdout + done.stderr


def _compiled(wheel: Path) -> list[str]:
    with zipfile.ZipFile(wheel) as z:
        return [name for name in z.namelist() if name.startswith("openetw/_native/") and name.endswith(".so")]


def test_without_a_compiler_the_install_succeeds_on_the_pure_path(tmp_path: Path) -> None:
    wheel, log = _wheel(_sources(tmp_path), tmp_path / "dist", CC="/bin/false", LDSHARED="/bin/false")
    assert _compiled(wheel) == []
    assert log.count(NOTICE) == 1, log[-3000:]
    target = tmp_path / "installed"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target", str(target), str(wheel)], check=True, timeout=300)
    code = "import openetw._native as n, openetw.etl.reader; print(n.engine())"
    env = {**os.environ, "PYTHONPATH": str(target)}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True, cwd=tmp_path)
    assert done.stdout.strip() == "python"


def test_with_gcc_the_wheel_holds_the_compiled_core_and_passes_auditwheel(tmp_path: Path) -> None:
    if shutil.which("gcc") is None and os.environ.get("CI") != "true":
        pytest.skip("no gcc here")
    wheel, log = _wheel(_sources(tmp_path), tmp_path / "dist", OPENETW_REQUIRE_NATIVE="1")
    assert NOTICE not in log
    assert any(Path(name).name.startswith("_read.") for name in _compiled(wheel)), _compiled(wheel)
    auditwheel = Path(sys.executable).parent / "auditwheel"
    done = subprocess.run([str(auditwheel), "show", str(wheel)], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "manylinux" in done.stdout, done.stdout
