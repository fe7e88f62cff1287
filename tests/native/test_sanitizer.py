"""The C parses hostile files: the fuzz cases run again against a build of it under AddressSanitizer.

The read side's C (and the ``.evtx`` parser's, ``_evtx.c``, the timeline encoders',
``_timeline.c``, the stacks join, ``_stacks.c``, and the EventPipe row walk's, ``_nettrace.c``) is
compiled with ``-fsanitize=address`` into a temporary directory and loaded,
in a child interpreter with the sanitizer's runtime preloaded, in place of the installed build;
the child then reads every corpus file, mutated copies and generated LZXPRESS streams, through
``EtlReader``, the index pass and ``inflate`` (for ``_evtx.c``: every corpus ``.evtx``, the evtx
fuzz's mutations, BinXml damage and template bombs, through ``EvtxReader``; for ``_timeline.c``:
the generated argument values of ``tests/export/test_timeline_native.py``; for ``_stacks.c``:
damaged copies of a generated whole-stack trace, held to the numpy join; for ``_nettrace.c``: the
generated rows of ``tests/nettrace/test_walk_native.py`` and mutated heads of every corpus trace,
through ``NettraceReader``). Any out-of-bounds
access aborts the child.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

import openetw._native as native

REPO = Path(__file__).resolve().parents[2]
SOURCE = Path(native.__file__).parent / "_read.c"
EVTX_SOURCE = Path(native.__file__).parent / "_evtx.c"
TIMELINE_SOURCE = Path(native.__file__).parent / "_timeline.c"
STACKS_SOURCE = Path(native.__file__).parent / "_stacks.c"
NETTRACE_SOURCE = Path(native.__file__).parent / "_nettrace.c"

CHILD = r"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("openetw._native._read", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["openetw._native._read"] = module
spec.loader.exec_module(module)
import openetw._native as native
assert native.engine() == "native" and native.module("_read") is module
from tests.native import cases
checked = 0
for path in cases.corpus_files():
    data = path.read_bytes()
    for seed in range(3 if len(data) < 2 << 20 else 1):
        damaged = cases.mutated(data, seed, flips=16) if seed else data
        for strict in (True, False):
            cases.read_all(damaged, strict=strict)
        cases.index_of(damaged)
        checked += 1
    for i, (stream, size) in enumerate(cases.compressed_streams(data, limit=8)):
        for variant in (stream, cases.mutated(stream, i, flips=4, keep=0), stream[: len(stream) // 3]):
            cases.outcome(lambda: module.inflate(variant, size))
            checked += 1
for stream, size in cases.generated_streams(seed=11, count=80):
    cases.outcome(lambda: module.inflate(stream, size))
    checked += 1
print("checked", checked)
"""


def _asan_runtime() -> str | None:
    gcc = shutil.which("gcc")
    if gcc is None:
        return None
    found = subprocess.run([gcc, "-print-file-name=libasan.so"], capture_output=True, text=True, check=False).stdout.strip()
    return found if found and os.path.isabs(found) and os.path.exists(found) else None


EVTX_CHILD = r"""
import importlib.util, sys
spec = importlib.util.spec_from_file_location("openetw._native._evtx", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["openetw._native._evtx"] = module
spec.loader.exec_module(module)
import openetw._native as native
assert native.engine() == "native" and native.module("_evtx") is module
from openetw.evtx import reader
assert reader._NATIVE is module
from tests.native import evtx_cases
checked = 0
cases = [(path.name, path.read_bytes()) for path in evtx_cases.corpus_files()]
cases += evtx_cases.mutated_cases(seed=8, per_file=25) + evtx_cases.binxml_cases(seed=9, count=8) + evtx_cases.bomb_cases()
cases += [("varied headers", evtx_cases.varied_headers_file()), ("varied fields", evtx_cases.varied_fields_file())]
cases += evtx_cases.generated_cases(seed=10, count=8)
for label, data in cases:
    evtx_cases.read(data, decode_every=50)
    evtx_cases.headers(data, batches=True)
    evtx_cases.fields(data, batches=True)
    checked += 1
print("checked", checked)
"""


TIMELINE_CHILD = r"""
import importlib.util, io, sys
spec = importlib.util.spec_from_file_location("openetw._native._timeline", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["openetw._native._timeline"] = module
spec.loader.exec_module(module)
from openetw.export.timeline import perfetto
assert perfetto._NATIVE is module
from tests.export import test_timeline_native as cases
assert cases.NATIVE is module
cases.test_perfetto_annotations_are_the_pure_writers()
cases.test_chrome_args_are_the_json_encoders()
cases._LOTS = 2000
native_file, pure_file = io.BytesIO(), io.BytesIO()
perfetto.write_perfetto(cases._items(), native_file)
perfetto._NATIVE = None
perfetto.write_perfetto(cases._items(), pure_file)
assert native_file.getvalue() == pure_file.getvalue()
print("checked", len(cases.VALUES) * 3 + cases._LOTS)
"""

STACKS_CHILD = r"""
import importlib.util, random, sys, tempfile
from pathlib import Path
spec = importlib.util.spec_from_file_location("openetw._native._stacks", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["openetw._native._stacks"] = module
spec.loader.exec_module(module)
from openetw.consumer.index import EtlIndex
from openetw.errors import OpenEtwError
from openetw.events import profile_columns
from tests.events.test_profile_columns import _generated
folder = Path(tempfile.mkdtemp())
path = folder / "whole.etl"
_generated(path, keys=False)
genuine = path.read_bytes()
rng = random.Random(5)
checked = 0
for number in range(40):
    damaged = bytearray(genuine)
    for _ in range(rng.randrange(0, 40)):
        damaged[rng.randrange(len(damaged))] = rng.randrange(256)
    target = folder / f"{number}.etl"
    target.write_bytes(bytes(damaged))
    outcomes = []
    for engine in (module, None):
        profile_columns._NATIVE = engine
        try:
            found = profile_columns.load_file_profile(target, index=EtlIndex.open(target, save=False))
            outcomes.append([(s.pid, s.tid, s.filetime, s.frames) for s in found.samples])
        except OpenEtwError as error:
            outcomes.append(type(error))
    assert outcomes[0] == outcomes[1], number
    checked += isinstance(outcomes[0], list) and len(outcomes[0])
print("checked", checked)
"""


NETTRACE_CHILD = r"""
import importlib.util, random, sys, zipfile
spec = importlib.util.spec_from_file_location("openetw._native._nettrace", sys.argv[1])
module = importlib.util.module_from_spec(spec)
sys.modules["openetw._native._nettrace"] = module
spec.loader.exec_module(module)
from openetw.nettrace import events
from openetw.testing.fuzz_nettrace import mutate
from tests.conftest import corpus_path
from tests.nettrace import test_walk_native as cases
cases.NATIVE = module
cases.GENERATED = 25
class Patch:
    def setattr(self, target, name, value):
        setattr(target, name, value)
checked = 0
for mode in (events.WALK_V3, events.WALK_V4, events.WALK_V4_COMPRESSED):
    cases.test_compiled_walk_equals_pure_on_generated_rows(mode, Patch())
    checked += cases.GENERATED
rng = random.Random(29)
for name in cases._names():
    with zipfile.ZipFile(corpus_path("nettrace", name + ".zip")) as archive:
        data = archive.read(name)[: 32 << 10]
    assert cases._read(data, True, Patch())[0]
    for _ in range(5):
        damaged = mutate(data, rng)
        assert cases._read(damaged, True, Patch()) == cases._read(damaged, False, Patch())
        checked += 1
print("checked", checked)
"""


def _sanitized_run(tmp_path: Path, source: Path, name: str, child: str) -> str:
    runtime = _asan_runtime()
    if runtime is None:
        if os.environ.get("CI") == "true":
            pytest.fail("gcc with AddressSanitizer (libasan) is needed under CI")
        pytest.skip("gcc with AddressSanitizer (libasan) is not installed")
    if native.engine() != "native" and os.environ.get(native.PURE_VARIABLE) == "1":
        pytest.skip("OPENETW_PURE=1: the pure path is under test")
    built = tmp_path / f"{name}{sysconfig.get_config_var('EXT_SUFFIX')}"
    compile_ = [
        "gcc", "-shared", "-fPIC", "-O1", "-g", "-std=c11", "-fsanitize=address", "-fno-omit-frame-pointer",
        f"-I{sysconfig.get_paths()['include']}", f"-I{source.parent}", str(source), "-o", str(built),
    ]  # fmt: skip
    subprocess.run(compile_, check=True, capture_output=True, text=True, timeout=300)
    env = {
        **os.environ, "LD_PRELOAD": runtime, native.PURE_VARIABLE: "0",
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
        "ASAN_OPTIONS": "detect_leaks=0:abort_on_error=1:halt_on_error=1",
        "PYTHONMALLOC": "malloc",  # so the sanitizer sees Python's allocations too
    }  # fmt: skip
    done = subprocess.run([sys.executable, "-c", child, str(built)], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "AddressSanitizer" not in done.stderr
    return done.stdout


def test_fuzz_cases_under_address_sanitizer(tmp_path: Path) -> None:
    stdout = _sanitized_run(tmp_path, SOURCE, "_read", CHILD)
    assert int(stdout.split()[-1]) > 100


def test_evtx_fuzz_cases_under_address_sanitizer(tmp_path: Path) -> None:
    stdout = _sanitized_run(tmp_path, EVTX_SOURCE, "_evtx", EVTX_CHILD)
    assert int(stdout.split()[-1]) > 100


def test_timeline_encoders_under_address_sanitizer(tmp_path: Path) -> None:
    stdout = _sanitized_run(tmp_path, TIMELINE_SOURCE, "_timeline", TIMELINE_CHILD)
    assert int(stdout.split()[-1]) > 100


def test_stacks_join_under_address_sanitizer(tmp_path: Path) -> None:
    stdout = _sanitized_run(tmp_path, STACKS_SOURCE, "_stacks", STACKS_CHILD)
    assert int(stdout.split()[-1]) > 100


def test_nettrace_walk_under_address_sanitizer(tmp_path: Path) -> None:
    stdout = _sanitized_run(tmp_path, NETTRACE_SOURCE, "_nettrace", NETTRACE_CHILD)
    assert int(stdout.split()[-1]) > 100
