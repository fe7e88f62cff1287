"""The first pass over a trace holds memory to its setting whatever the trace's shape.

Traces of more than 1 GB are made by the test kit (``openetw.testing.large``) from one small
template written here (records with random payloads on two processors): compressed, relogged
(every copy with the same times: many records per timestamp, buffers going back at each copy),
going back in time (each copy before the one before) and damaged (one BufferSize doubled). A fresh process consumes each with a
provider filter and a callback, building the index as it delivers; its peak RSS (``VmHWM``)
stays under the bound. Before the external merge these took 250-500 MB and grew with the file.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import struct
import subprocess
import sys
import uuid
from pathlib import Path

import numpy as np
import pytest

from openetw.consumer._engine.index_build import build_index_data
from openetw.consumer._engine.spill import RowMerge
from openetw.consumer._engine.streaming import StreamingBuild
from openetw.etl import layouts as L
from openetw.etl.build import build_event_record
from openetw.etl.clock import TraceClock
from openetw.etl.writer import EtlWriter, new_logfile_header
from openetw.testing.large import compressed_copy, repeat_buffers
from tests.consumer.helpers import corpus_etl
from tests.consumer.test_large_trace import CONSUME

SIZE = 1024**3 + (1 << 20)
RSS_LIMIT_MB = 120
PROVIDER = uuid.UUID("3a5e4f4c-1b2d-4c6e-9f80-112233445566")
OTHER = uuid.UUID("d43dddd3-c2aa-4a2e-8dd4-a8fb61b77615")
TEMPLATE_RECORDS = 1000
WANTED_PER_COPY = TEMPLATE_RECORDS // 100



def _template(path: Path) -> Path:
    """Records of 200-1,200 random bytes (they do not compress) on two processors, one in a hundred
    from ``PROVIDER``."""
    clock = TraceClock(L.CLOCK_QPC, 133_000_000_000_000_000, 5_000_000, 10_000_000)
    rng = random.Random(7)
    with EtlWriter(path, header=new_logfile_header(clock=clock, number_of_processors=2)) as writer:
        for n in range(TEMPLATE_RECORDS):
            provider = PROVIDER if n % 100 == 0 else OTHER
            payload = rng.randbytes(rng.randrange(200, 1200))
            writer.write(build_event_record(provider_id=provider, id=n % 7, timestamp=5_000_000 + 10 * n, cpu=n % 2, user_data=payload))
    return path


def _consume(path: Path) -> dict[str, float]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPENETW_")}
    done = subprocess.run([sys.executable, "-c", CONSUME, str(path), str(PROVIDER)], capture_output=True, text=True, timeout=600, check=True, env=env)
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _need_disk(where: Path) -> None:
    free = shutil.disk_usage(where).free
    if free < 2 * SIZE:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{free >> 20} MB free under {where}: these tests need {(2 * SIZE) >> 20} MB")
        pytest.skip(f"not enough free disk space for a 1 GB trace and its spill ({free >> 20} MB free)")


@pytest.mark.parametrize("shape", ["compressed", "relogged", "backwards", "damaged"])
def test_the_first_pass_over_a_1gb_trace_stays_bounded(tmp_path: Path, shape: str) -> None:
    _need_disk(tmp_path)
    template = _template(tmp_path / "template.etl")
    if shape == "compressed":
        source, step = tmp_path / "compressed.etl", 0
        compressed_copy(template, source)
    else:
        source, step = template, {"relogged": 0, "backwards": -1, "damaged": 1}[shape]
    path = tmp_path / "large.etl"
    try:
        records = repeat_buffers(source, path, SIZE, time_step=step)
        if shape == "damaged":  # one BufferSize doubled mid-file: the reader frames the file
            with open(path, "r+b") as f:
                size = struct.unpack("<I", f.read(4))[0]
                middle = (path.stat().st_size // 2) // size * size
                f.seek(middle)
                f.write(struct.pack("<I", 2 * size))
        assert path.stat().st_size >= 1024**3
        copies = (records - 1) // TEMPLATE_RECORDS
        first = _consume(path)
        print(f"\n{shape}: {records} records in {path.stat().st_size >> 20} MB, first pass {first}")
        assert first["read"] == records
        assert first["seen"] == WANTED_PER_COPY * copies
        assert first["rss_mb"] < RSS_LIMIT_MB, first
    finally:
        for leftover in tmp_path.iterdir():
            leftover.unlink()


def test_the_merge_spilled_to_disk_gives_the_rows_of_the_merge_in_memory(tmp_path: Path) -> None:
    """A tiny budget makes every shape go through the temporary file (buffers of many processors
    overlap in time): the rows (order, columns, providers, reasons) are those of the index built
    in memory."""
    sources = {
        "compressed": corpus_etl("perfview", "net.4.5.2.x64.etl"),
        "backwards": tmp_path / "backwards.etl",
        "relogged": tmp_path / "relogged.etl",
    }
    diaghub = corpus_etl("perfview", "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.etl")
    repeat_buffers(diaghub, sources["backwards"], 2 * diaghub.stat().st_size, time_step=-1)
    repeat_buffers(diaghub, sources["relogged"], 2 * diaghub.stat().st_size, time_step=0)
    for shape, path in sources.items():
        whole = build_index_data(str(path))
        build = StreamingBuild(str(path), chunk_bytes=1 << 16)
        pieces = list(build.pieces())
        rows = np.concatenate([piece for piece, _ in pieces])
        assert build.spilled_rows > len(rows) // 4, shape
        assert build.providers == whole.providers, shape
        assert rows.tobytes() == whole.records.tobytes(), shape
        assert build.read_stats == whole.read_stats, shape
        assert build.exact_time_order == whole.exact_time_order, shape


def test_buffers_that_start_early_late_in_the_file_hold_no_rows_back() -> None:
    """diaghub.etl's last buffers start near its beginning: taken in file order, most rows would
    wait for them (spilled past the budget); taken in the order of their first times, none wait."""
    path = corpus_etl("perfview", "diaghub-dotnetcore3.1-win-x64-diagsession", "diaghub.etl")
    whole = build_index_data(str(path))
    build = StreamingBuild(str(path), chunk_bytes=4 << 20)
    rows = np.concatenate([piece for piece, _ in build.pieces()])
    assert rows.tobytes() == whole.records.tobytes() and build.providers == whole.providers
    assert build.spilled_rows == 0
    assert np.array_equal(build.buffers(), whole.buffers)


def test_the_row_merge_releases_rows_up_to_each_threshold_in_order() -> None:
    """Rows going back in time inside each piece, released up to a threshold no later row
    comes before, with a budget of 64 rows: the rows come out as one stable sort by time."""
    rng = np.random.default_rng(3)
    dtype = np.dtype([("timestamp", "<i8"), ("n", "<i8")])
    merge = RowMerge(dtype, 64 * (dtype.itemsize + 16))
    out: list[np.ndarray] = []
    every = []
    seq = 0
    for chunk in range(40):
        keys = rng.integers(10 * chunk, 10 * chunk + 200, 300)
        rows = np.zeros(len(keys), dtype=dtype)
        rows["timestamp"], rows["n"] = keys, np.arange(seq, seq + len(keys))
        merge.add(rows, keys, rows["n"].copy())
        seq += len(keys)
        every.append(keys)
        for piece, numbers in merge.release(10 * (chunk + 1) - 1):
            assert np.all(piece["timestamp"] < 10 * (chunk + 1))
            assert np.array_equal(piece["n"], numbers)
            out.append(piece)
    out.extend(piece for piece, _ in merge.release(None))
    assert merge.spilled_rows > seq // 2
    merge.close()
    keys = np.concatenate(every)
    assert np.concatenate(out)["n"].tolist() == np.argsort(keys, kind="stable").tolist()
