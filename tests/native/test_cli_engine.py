"""Which engine reads is visible: ``openetw --version`` and ``openetw info --json`` ("engine")."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import openetw._native as native
from tests.conftest import corpus_path

# What a child not told to run the pure path runs (this process may be told to).
BUILT = "native" if importlib.util.find_spec("openetw._native._read") is not None else "python"


def _openetw(*args: str, pure: bool = False) -> str:
    env = {**os.environ, native.PURE_VARIABLE: "1" if pure else "0"}
    done = subprocess.run([sys.executable, "-m", "openetw", *args], env=env, capture_output=True, text=True, timeout=120, check=True)
    return done.stdout


def test_version_names_the_engine() -> None:
    assert f"(engine: {BUILT}" in _openetw("--version")
    assert _openetw("--version", pure=True).startswith("openetw, version ")
    assert "(engine: python, OPENETW_PURE=1)" in _openetw("--version", pure=True)


def test_info_json_carries_the_engine_and_the_same_facts_on_both() -> None:
    path = str(corpus_path("etl", "perfview", "net.4.5.2.x64.etl"))
    fast = json.loads(_openetw("info", "--json", "--no-installed", "--quiet", path))
    reference = json.loads(_openetw("info", "--json", "--no-installed", "--quiet", path, pure=True))
    assert fast.pop("engine") == BUILT
    assert reference.pop("engine") == "python"
    assert fast == reference
