"""The independent ``.evtx`` readers the tests check openetw against (test-only dependencies).

Each yields ``(record id, XML or None)``: ``None`` when the reader met the record but could not
render it. Under ``CI=true`` a missing reader fails the test instead of skipping it.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest


def need(module: str) -> Any:
    try:
        return __import__(module)
    except ImportError:
        if os.environ.get("CI") == "true":
            pytest.fail(f"test dependency {module!r} is missing under CI (install the 'test' extra)")
        pytest.skip(f"{module} is not installed")


def crate_records(path: str | Path) -> Iterator[tuple[int, str]]:
    """The Rust ``evtx`` reader (pyevtx-rs): records it renders; records it raises on are skipped."""
    parser = need("evtx").PyEvtxParser(str(path))
    iterator = parser.records()
    while True:
        try:
            record = next(iterator)
        except StopIteration:
            return
        except Exception:  # noqa: BLE001 - the reader's own error for a record it cannot read
            continue
        yield record["event_record_id"], record["data"]


def python_evtx_records(path: str | Path, *, xml: bool = True) -> Iterator[tuple[int, str | None]]:
    """python-evtx: every record it yields, rendered unless ``xml=False`` or it cannot."""
    need("Evtx")
    from Evtx.Evtx import Evtx

    with Evtx(str(path)) as log:
        for record in log.records():
            text = None
            if xml:
                try:
                    text = record.xml()
                except Exception:  # noqa: BLE001 - python-evtx fails on damaged content
                    text = None
            yield record.record_num(), text


def python_evtx_xml(path: str | Path, wanted: set[int]) -> dict[int, str]:
    """python-evtx's XML of the records in ``wanted`` only (its rendering is slow)."""
    need("Evtx")
    from Evtx.Evtx import Evtx

    found = {}
    with Evtx(str(path)) as log:
        for record in log.records():
            if record.record_num() in wanted:
                found[record.record_num()] = record.xml()
    return found


def libevtx_records(path: str | Path) -> Iterator[tuple[int, str]]:
    """libevtx-python: the records it lists (recovered ones aside)."""
    pyevtx = need("pyevtx")
    log = pyevtx.file()
    log.open(str(path))
    try:
        for index in range(log.number_of_records):
            record = log.get_record(index)
            yield record.identifier, record.get_xml_string()
    finally:
        log.close()


def python_evtx_canonical_fixups(text: str) -> str:
    """python-evtx prints booleans as ``True``/``False`` and times rounded, not truncated, to microseconds."""
    return re.sub(r">(True|False)<", lambda m: f">{m.group(1).lower()}<", text)
