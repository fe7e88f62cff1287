"""Reading and rendering .evtx records to XML: openetw (compiled core's record batches, its
EvtxRecord-per-record path, and the pure-Python path) vs
libevtx-python, the Rust evtx reader (its Python binding, and its ``evtx_dump`` CLI when on PATH)
and python-evtx, same run; and openetw's write rate.

Each reader runs in a fresh process per file set. "cold" is its first pass over the files (imports
excluded, nothing cached); "warm" a second pass in the same process. Rates are records per CPU
second of that pass (on a shared machine, time waiting for a CPU is left out); "process CPU s" is
all the CPU the process used, imports and both passes included. python-evtx renders tens of
records per second: on the generated file it renders the first --python-evtx-limit records only,
and gets no warm pass.
Each number is the median of --repeat fresh processes (python-evtx: one).

A second table reads each record's <System> facts instead (provider name and GUID, event id,
level, keywords, time created, record id, process and thread ids, channel, computer, user SID):
openetw's column path (``RecordBatch.fact`` of ``batches(data=False)``), its ``EvtxRecord.header`` path and the pure one,
against libevtx-python's record getters and the Rust binding's JSON records (``System`` read
back); and ``openetw info`` (the command that reads them), CPU of its processes, per file set.

A third table reads each record's EventData values (names and typed values): openetw's columns
(``RecordBatch.data_columns``: the compiled walk's fields), its ``EvtxRecord.properties()`` path and
the pure one (the tree), against libevtx-python's record strings (``get_string``: values as text,
without names) and the Rust binding's JSON records (``EventData`` read back).

The XML table's "openetw" reads ``batches(system=False, data=False)``: the XML alone, as a reader
of the XML asks for it.
Usage: python benchmarks/bench_evtx.py [--records 1000000] [--python-evtx-limit 2000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import CORPUS, machine_note, table

READERS = ["openetw", "openetw (records)", "openetw (pure)", "libevtx-python", "evtx (Rust)", "python-evtx"]
WARM = {"openetw", "openetw (records)", "openetw (pure)", "libevtx-python", "evtx (Rust)"}


SYSTEM_READERS = ["openetw", "openetw (records)", "openetw (pure)", "libevtx-python", "evtx (Rust)"]
DATA_READERS = SYSTEM_READERS
FACTS = ("provider_name", "provider_guid", "event_id", "level", "keywords", "time_created", "record_id",
         "process_id", "thread_id", "channel", "computer", "user_id")  # fmt: skip


def _system_run(reader: str) -> object:
    """A function reading every record's <System> facts of one file; returns the record count."""
    if reader == "openetw (records)" or reader == "openetw (pure)":
        from openetw.evtx import EvtxReader

        def run(path: str) -> int:
            n = 0
            with open(path, "rb") as handle:
                data = handle.read()
            for record in EvtxReader(data, path=path).records():
                header = record.header
                for name in FACTS:
                    getattr(header, name)
                n += 1
            return n
    elif reader == "openetw":
        from openetw.evtx import EvtxReader

        def run(path: str) -> int:
            n = 0
            with open(path, "rb") as handle:
                data = handle.read()
            for batch in EvtxReader(data, path=path).batches(data=False):
                for name in FACTS:
                    batch.fact(name)
                n += len(batch)
            return n
    elif reader == "libevtx-python":
        import pyevtx

        def touch_libevtx(record: Any) -> None:
            (record.get_source_name(), record.get_provider_identifier(), record.get_event_identifier(),
             record.get_event_level(), record.get_creation_time_as_integer(), record.get_identifier(),
             record.get_computer_name(), record.get_user_security_identifier())  # fmt: skip

        return lambda path: _libevtx_count(pyevtx.file, path, touch_libevtx)
    else:
        from evtx import PyEvtxParser

        def touch_event(event: dict[str, Any]) -> None:
            system = event["System"]
            for name in ("Provider", "EventID", "Level", "Keywords", "TimeCreated", "EventRecordID", "Execution", "Channel", "Computer", "Security"):
                system.get(name)

        return lambda path: _rust_count(PyEvtxParser, path, touch_event)
    return run


def _data_run(reader: str) -> object:
    """A function reading every record's EventData values of one file; returns the record count."""
    if reader == "openetw (records)" or reader == "openetw (pure)":
        from openetw.evtx import EvtxReader

        def run(path: str) -> int:
            n = 0
            with open(path, "rb") as handle:
                data = handle.read()
            for record in EvtxReader(data, path=path).records():
                try:
                    record.properties()
                except Exception:  # noqa: BLE001 - a record whose values are damaged
                    continue
                n += 1
            return n
    elif reader == "openetw":
        from openetw.evtx import EvtxReader

        def run(path: str) -> int:
            n = 0
            with open(path, "rb") as handle:
                data = handle.read()
            for batch in EvtxReader(data, path=path).batches(system=False):
                try:
                    batch.data_columns()
                except Exception:  # noqa: BLE001 - a batch with a record whose values are damaged
                    continue
                n += len(batch)
            return n
    elif reader == "libevtx-python":
        import pyevtx

        return lambda path: _libevtx_count(pyevtx.file, path, lambda record: [record.get_string(k) for k in range(record.get_number_of_strings())])
    else:
        from evtx import PyEvtxParser

        return lambda path: _rust_count(PyEvtxParser, path, lambda event: event.get("EventData") or event.get("UserData"))
    return run


def _libevtx_count(new_file: Callable[[], Any], path: str, touch: Callable[[Any], object]) -> int:
    """libevtx-python (``pyevtx.file``, imported before the timing) over every record of ``path``,
    ``touch`` given each one it reads; the count."""
    log = new_file()
    log.open(path)
    n = 0
    for index in range(log.number_of_records):
        try:
            touch(log.get_record(index))
        except OSError:
            continue
        n += 1
    log.close()
    return n


def _rust_count(parser: Callable[[str], Any], path: str, touch: Callable[[dict[str, Any]], object]) -> int:
    """The Rust ``evtx`` reader's (``PyEvtxParser``, imported before the timing) JSON of every
    record of ``path``, ``touch`` given each ``Event`` object it reads; the count."""
    n = 0
    iterator = parser(path).records_json()
    while True:
        try:
            record = next(iterator)
        except StopIteration:
            return n
        except Exception:  # noqa: BLE001 - a record it cannot read
            continue
        touch(json.loads(record["data"])["Event"])
        n += 1


def _child(reader: str, paths: list[str], limit: int | None) -> None:
    """In a fresh process: import the reader, then time reading and rendering every record (twice)."""
    if reader.endswith(" system"):
        run = _system_run(reader[: -len(" system")])
    elif reader.endswith(" data"):
        run = _data_run(reader[: -len(" data")])
    elif reader == "openetw (records)":
        from openetw.evtx import EvtxReader

        def run(path: str) -> int:
            n = 0
            with open(path, "rb") as handle:
                data = handle.read()
            for record in EvtxReader(data, path=path).records():
                record.xml()
                n += 1
                if limit and n >= limit:
                    break
            return n
    elif reader.startswith("openetw"):
        from openetw.evtx import EvtxReader

        def run(path: str) -> int:
            n = 0
            with open(path, "rb") as handle:
                data = handle.read()
            for batch in EvtxReader(data, path=path).batches(system=False, data=False):
                for _text in batch.xml_texts():
                    n += 1
                if limit and n >= limit:
                    break
            return n
    elif reader == "libevtx-python":
        import pyevtx

        def run(path: str) -> int:
            log = pyevtx.file()
            log.open(path)
            n = 0
            for index in range(log.number_of_records if not limit else min(limit, log.number_of_records)):
                try:
                    log.get_record(index).get_xml_string()
                except OSError:
                    continue
                n += 1
            log.close()
            return n
    elif reader == "evtx (Rust)":
        from evtx import PyEvtxParser

        def run(path: str) -> int:
            n = 0
            iterator = PyEvtxParser(path).records()
            while True:
                try:
                    next(iterator)
                except StopIteration:
                    return n
                except Exception:  # noqa: BLE001 - a record it cannot read
                    continue
                n += 1
                if limit and n >= limit:
                    return n
    else:
        from Evtx.Evtx import Evtx

        def run(path: str) -> int:
            n = 0
            with Evtx(path) as log:
                for record in log.records():
                    try:
                        record.xml()
                    except Exception:  # noqa: BLE001
                        continue
                    n += 1
                    if limit and n >= limit:
                        break
            return n

    start = time.process_time()
    records = sum(run(path) for path in paths)
    cold = time.process_time() - start
    warm = None
    if reader in WARM or reader.endswith((" system", " data")):
        start = time.process_time()
        sum(run(path) for path in paths)
        warm = time.process_time() - start
    print(json.dumps({"records": records, "cpu": cold, "warm": warm, "process": time.process_time()}))


def measure(reader: str, paths: list[str], limit: int | None = None, repeat: int = 1) -> dict[str, float]:
    """records, cold and warm CPU seconds, and the process's CPU seconds of one reader: the
    median of ``repeat`` fresh processes (each value on its own)."""
    args = [sys.executable, __file__, "--child", reader, *(["--limit", str(limit)] if limit else []), *paths]
    env = {**os.environ, "OPENETW_PURE": "1" if reader.startswith("openetw (pure)") else "0"}
    runs = []
    for _ in range(repeat):
        done = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
        if done.returncode != 0:
            raise SystemExit(f"{reader} failed: {done.stderr[-2000:]}")
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    result: dict[str, float] = {}
    for key in runs[0]:
        values = [run[key] for run in runs]
        result[key] = None if values[0] is None else statistics.median(values)  # type: ignore[assignment]
    return result


def measure_cli(tool: str, paths: list[str]) -> dict[str, float] | None:
    """The Rust reader's CLI (``evtx_dump -o xml``): records and CPU seconds of its processes."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    records = 0
    for path in paths:
        done = subprocess.run([tool, "-o", "xml", path], capture_output=True, check=False)
        records += done.stdout.count(b"<Event ")
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"records": records, "cpu": cpu, "warm": None, "process": cpu}


def measure_info(paths: list[str], python_path: str | None = None) -> dict[str, float]:
    """``openetw info FILE`` per file (fresh processes, imports included): records and the CPU
    seconds of those processes; ``python_path`` runs another openetw tree (a before/after row)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("OPENETW_")}
    if python_path:
        env["PYTHONPATH"] = python_path
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    records = 0
    for path in paths:
        done = subprocess.run([sys.executable, "-m", "openetw", "info", "--json", path], capture_output=True, text=True, check=False, env=env)
        records += json.loads(done.stdout)["records"]
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return {"records": records, "cpu": cpu, "warm": None, "process": cpu}


def generate(path: str, count: int) -> float:
    """Writes ``count`` events with openetw's writer; returns records per CPU second."""
    from openetw.evtx.record import EvtxHeader
    from openetw.evtx.writer import EvtxWriter

    header = EvtxHeader()
    header.provider_name, header.provider_guid = "Bench-Provider", uuid.UUID("8f0d3b8e-6c1a-4f39-9a51-3d2f2f6f4c11")
    header.channel, header.computer, header.user_id = "Application", "bench-host", "S-1-5-18"
    header.level, header.process_id, header.thread_id = 4, 1234, 5678
    header.time_created = 133_000_000_000_000_000
    writer = EvtxWriter()
    start = time.process_time()
    with open(path, "wb") as out:
        out.write(writer.file_header(dirty=True))
        for i in range(count):
            header.event_id = 100 + i % 8
            header.time_created += 1000
            writer.add_event(header, {"Index": i, "Message": f"event number {i}", "Ok": i % 3 == 0})
            if i % 4096 == 0:
                for chunk in writer.take_chunks():
                    out.write(chunk)
        for chunk in writer.finish():
            out.write(chunk)
        out.seek(0)
        out.write(writer.file_header())
    return count / (time.process_time() - start)


def rewrite_rate(paths: list[str]) -> float:
    """Records read from .evtx files written again (content kept): records per CPU second of the writing."""
    from openetw.evtx import EvtxReader
    from openetw.evtx.writer import EvtxWriter

    records = [r for path in paths for r in EvtxReader(Path(path).read_bytes()).records()]
    for record in records:
        record.tree()
    writer = EvtxWriter()
    start = time.process_time()
    for record in records:
        writer.add_record(record)
    writer.finish()
    return len(records) / (time.process_time() - start)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=1_000_000, help="records in the generated file")
    parser.add_argument("--python-evtx-limit", type=int, default=2000)
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per reader (medians; python-evtx runs once)")
    parser.add_argument("--before", help="the src folder of another openetw tree: its `openetw info` row too")
    parser.add_argument("--system-only", action="store_true", help="only the <System> facts table")
    parser.add_argument("--data-only", action="store_true", help="only the EventData table")
    parser.add_argument("--xml-only", action="store_true", help="only the XML table")
    parser.add_argument("--skip", action="append", default=[], help="leave out this reader (repeatable), e.g. 'openetw (pure)'")
    args = parser.parse_args()
    corpus = sorted(str(p) for p in (CORPUS / "evtx").glob("*.evtx"))
    rows = []
    cli = shutil.which("evtx_dump")
    with tempfile.TemporaryDirectory(prefix="openetw-bench-evtx-") as tmp:
        generated = os.path.join(tmp, "generated.evtx")
        write_rate = generate(generated, args.records)
        sets = (
            (f"corpus ({len(corpus)} files)", corpus, {}),
            (f"generated ({args.records:,})", [generated], {"python-evtx": args.python_evtx_limit}),
        )
        system_rows: list[list[str]] = []
        data_rows: list[list[str]] = []
        for label, paths, _limits in sets if not (args.data_only or args.xml_only) else ():
            rates = {}
            for reader in [name for name in SYSTEM_READERS if name not in args.skip]:
                result = measure(reader + " system", paths, None, args.repeat)
                records, cold, warm = result["records"], result["cpu"], result["warm"]
                rates[reader] = records / cold if cold else 0.0
                warm_rate = f"{records / warm:,.0f}" if warm else "-"
                system_rows.append([label, reader, f"{records:,}", f"{cold:.2f}", f"{rates[reader]:,.0f}", warm_rate, f"{result['process']:.2f}", ""])
            infos = [("openetw info", None)] + ([("openetw info (before)", args.before)] if args.before else [])
            for name, tree in infos:
                result = measure_info(paths, tree)
                rates[name] = result["records"] / result["cpu"]
                system_rows.append([label, name, f"{result['records']:,}", f"{result['cpu']:.2f}", f"{rates[name]:,.0f}", "-", f"{result['cpu']:.2f}", ""])
            count = len([name for name in SYSTEM_READERS if name not in args.skip]) + len(infos)
            for row in system_rows[-count:]:
                base = "openetw info" if row[1].startswith("openetw info") else "openetw"
                row[7] = f"{rates[base] / rates[row[1]]:.2f}" if rates[row[1]] else "-"
        for label, paths, _limits in sets if not (args.system_only or args.xml_only) else ():
            rates = {}
            data_readers = [name for name in DATA_READERS if name not in args.skip]
            for reader in data_readers:
                result = measure(reader + " data", paths, None, args.repeat)
                records, cold, warm = result["records"], result["cpu"], result["warm"]
                rates[reader] = records / cold if cold else 0.0
                warm_rate = f"{records / warm:,.0f}" if warm else "-"
                data_rows.append([label, reader, f"{records:,}", f"{cold:.2f}", f"{rates[reader]:,.0f}", warm_rate, f"{result['process']:.2f}", ""])
            for row in data_rows[-len(data_readers) :]:
                row[7] = f"{rates['openetw'] / rates[row[1]]:.2f}" if rates[row[1]] else "-"
        for label, paths, limits in sets if not (args.system_only or args.data_only) else ():
            rates = {}
            readers = [name for name in READERS if name not in args.skip] + (["evtx_dump (Rust CLI)"] if cli else [])
            for reader in readers:
                repeat = 1 if reader == "python-evtx" else args.repeat
                result = measure_cli(cli, paths) if reader == "evtx_dump (Rust CLI)" and cli else measure(reader, paths, limits.get(reader), repeat)
                assert result is not None
                records, cold, warm = result["records"], result["cpu"], result["warm"]
                rates[reader] = records / cold if cold else 0.0
                warm_rate = f"{records / warm:,.0f}" if warm else "-"
                rows.append([label, reader, f"{records:,}", f"{cold:.2f}", f"{rates[reader]:,.0f}", warm_rate, f"{result['process']:.2f}", ""])
            for row in rows[-len(readers) :]:
                row[7] = f"{rates['openetw'] / rates[row[1]]:.2f}" if rates[row[1]] else "-"
        rewrite = rewrite_rate(corpus) if not (args.system_only or args.data_only or args.xml_only) else 0.0
    headers = ["file set", "reader", "records", "cold CPU s", "cold records/s", "warm records/s", "process CPU s", "openetw / this (cold)"]
    if system_rows:
        print("<System> facts of every record")
        print(table(headers, system_rows))
        print()
    if data_rows:
        print("EventData values of every record")
        print(table(headers, data_rows))
        print()
    if not rows:
        print(f"load average {os.getloadavg()[0]:.1f}; {machine_note()}")
        return
    print("records rendered to XML")
    print(table(headers, rows))
    print()
    if args.xml_only:
        print(f"load average {os.getloadavg()[0]:.1f}; {machine_note()}")
        return
    print(f"write: {write_rate:,.0f} events/s (generated events, EventData from Python values)")
    print(f"write: {rewrite:,.0f} records/s (corpus .evtx records written again, content kept)")
    print(f"load average {os.getloadavg()[0]:.1f}; {machine_note()}")


if __name__ == "__main__":
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        rest = sys.argv[2:]
        reader = rest.pop(0)
        limit = None
        if rest and rest[0] == "--limit":
            limit = int(rest[1])
            rest = rest[2:]
        _child(reader, rest, limit)
    else:
        main()
