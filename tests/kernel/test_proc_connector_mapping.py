"""Proc connector events become Process and Thread records through the kernel mapper (plain data)."""

from __future__ import annotations

from openetw.kernel.classes import KernelEventMapper
from openetw.kernel.classes_proc import install_proc_connector_handlers
from openetw.kernel.procfs import ProcessInfo, ThreadInfo
from openetw.tdh.decode import decode_properties
from openetw.tdh.registry import SchemaRegistry

REGISTRY = SchemaRegistry()


class FakeProc:
    """A ProcLookup with fixed answers."""

    def __init__(self, images=None, command_lines=None, uids=None, thread_groups=None):
        self.images = images or {}
        self.command_lines = command_lines or {}
        self.uids = uids or {}
        self.thread_groups = thread_groups or {}
        self.image_calls: list[int] = []

    def command_line(self, pid):
        return self.command_lines.get(pid)

    def thread_group(self, tid):
        return self.thread_groups.get(tid)

    def image(self, pid):
        self.image_calls.append(pid)
        return self.images.get(pid)

    def status(self, tid):
        return {"Uid": f"{self.uids[tid]}\t{self.uids[tid]}\t0\t0"} if tid in self.uids else {}


def decoded(records):
    out = []
    for record in records:
        schema = REGISTRY.schema_for(record)
        assert schema is not None
        values = dict(decode_properties(schema, record.user_data, record.pointer_size))
        out.append((schema.event_name, record, values))
    return out


def fork(parent, child, parent_tgid=None, child_tgid=None):
    return ("proc_fork", {"parent_pid": parent, "parent_tgid": parent_tgid or parent, "child_pid": child, "child_tgid": child_tgid or child})


def exec_(pid):
    return ("proc_exec", {"pid": pid, "tgid": pid})


def exit_(tid, tgid, code=0, signal=0):
    status = signal if signal else code << 8
    return ("proc_exit", {"pid": tid, "tgid": tgid, "exit_status": status, "exit_signal": 17 if tid == tgid else -1,
                          "parent_pid": 1, "parent_tgid": 1, "exit_code": 128 + signal if signal else code,
                          "signal": signal, "core_dumped": False})


def run(events, flags=("process",), proc=None, rundown=()):
    mapper = KernelEventMapper(flags, proc)
    handlers = install_proc_connector_handlers(mapper)
    records = mapper.rundown(rundown, 1, 0)
    handlers.note_processes(rundown)
    for ts, (name, values) in enumerate(events, start=10):
        records += mapper.map(name, ts, 0, values)
    return mapper, decoded(records)


PARENT = ProcessInfo(100, 1, "python3", "python3 run.py", 0, (ThreadInfo(100, "python3"),))


def test_fork_exec_exit_gives_start_start_end_with_images_command_line_and_code():
    proc = FakeProc(images={200: "true"}, command_lines={200: "true --flag"}, uids={200: 1000})
    _, events = run([fork(100, 200), exec_(200), exit_(200, 200, code=7)], proc=proc, rundown=[PARENT])
    facts = [(n, v["ProcessID"], v["ParentID"], v["ImageFileName"], v["CommandLine"], v["ExitStatus"], r.timestamp)
             for n, r, v in events if n != "Process/DCStart"]
    assert facts == [
        ("Process/Start", 200, 100, "python3", "python3 run.py", 0, 10),
        ("Process/Start", 200, 100, "true", "true --flag", 0, 11),
        ("Process/Stop", 200, 100, "true", "true --flag", 7, 12),
    ]


def test_killed_and_exited_codes():
    _, events = run([fork(100, 201), exit_(201, 201, signal=9), fork(100, 202), exit_(202, 202, code=255)],
                    proc=FakeProc(), rundown=[PARENT])
    assert [(v["ProcessID"], v["ExitStatus"]) for n, _, v in events if n == "Process/Stop"] == [(201, 137), (202, 255)]


def test_unknown_parent_image_comes_from_proc():
    proc = FakeProc(images={300: "bash"})
    _, events = run([fork(300, 301)], proc=proc)
    [(name, _, values)] = events
    assert (name, values["ProcessID"], values["ParentID"], values["ImageFileName"]) == ("Process/Start", 301, 300, "bash")


def test_fork_from_unknown_thread_names_its_process_as_parent():
    # the forking thread 105 of process 100 is gone from /proc: the event's parent_tgid decides
    _, events = run([fork(105, 210, parent_tgid=100)], proc=FakeProc(), rundown=[PARENT])
    [(_, record, values)] = [e for e in events if e[0] == "Process/Start"]
    assert (values["ParentID"], record.pid, record.tid) == (100, 210, 100)


def test_fork_from_known_thread_keeps_the_thread_as_context():
    proc = FakeProc(thread_groups={105: 100})
    _, events = run([fork(105, 211, parent_tgid=100)], proc=proc, rundown=[PARENT])
    [(_, record, values)] = [e for e in events if e[0] == "Process/Start"]
    assert (values["ParentID"], record.tid) == (100, 105)


def test_threads_and_process_end_after_the_last_thread():
    # process 400 (parent 100) starts thread 401; exit_group: the leader exits first
    events_in = [fork(100, 400), fork(1, 401, parent_tgid=1, child_tgid=400), exit_(400, 400, code=3), exit_(401, 400, code=3)]
    _, events = run(events_in, flags=("process", "thread"), proc=FakeProc(), rundown=[PARENT])
    facts = [(n, r.timestamp, v.get("ProcessId", v.get("ProcessID")), v.get("TThreadId"), v.get("ExitStatus")) for n, r, v in events
             if not n.endswith("DCStart")]
    assert facts == [
        ("Process/Start", 10, 400, None, 0),
        ("Thread/Start", 10, 400, 400, None),
        ("Thread/Start", 11, 400, 401, None),
        ("Thread/Stop", 13, 400, 401, None),
        ("Thread/Stop", 13, 400, 400, None),
        ("Process/Stop", 13, 400, None, 3),
    ]


def test_rundown_threads_delay_the_process_end():
    worker = ProcessInfo(50, 1, "daemon", "daemon -f", 0, (ThreadInfo(50, "daemon"), ThreadInfo(51, "io")))
    mapper, events = run([exit_(50, 50, code=1)], flags=("process", "thread"), proc=FakeProc(), rundown=[worker])
    assert [n for n, _, _ in events] == ["Process/DCStart", "Thread/DCStart", "Thread/DCStart"]
    name, values = exit_(51, 50, code=1)
    later = decoded(mapper.map(name, 20, 0, values))
    assert [(n, v.get("TThreadId"), v.get("ExitStatus"), v.get("ImageFileName")) for n, _, v in later] == [
        ("Thread/Stop", 51, None, None), ("Thread/Stop", 50, None, None), ("Process/Stop", None, 1, "daemon"),
    ]


def test_thread_never_seen_is_ended_in_its_process():
    _, events = run([exit_(61, 60)], flags=("thread",), proc=FakeProc())
    [(name, record, values)] = events
    assert (name, values["ProcessId"], values["TThreadId"], record.pid, record.tid) == ("Thread/Stop", 60, 61, 60, 61)


def test_exec_from_a_thread_cancels_the_old_leaders_exit():
    proc = FakeProc(images={500: "ls"}, command_lines={500: "ls -l"})
    events_in = [fork(100, 500), fork(1, 501, parent_tgid=1, child_tgid=500), exit_(500, 500), exec_(500), exit_(500, 500, code=2)]
    _, events = run(events_in, proc=proc, rundown=[PARENT])
    facts = [(n, v["ImageFileName"], v["ExitStatus"]) for n, _, v in events if n.startswith("Process/") and n != "Process/DCStart"]
    assert facts == [("Process/Start", "python3", 0), ("Process/Start", "ls", 0), ("Process/Stop", "ls", 2)]


def test_unmapped_kinds_make_no_records_and_unknown_is_counted():
    mapper, events = run([
        ("proc_comm", {"pid": 1, "tgid": 1, "comm": "x"}), ("proc_uid", {"pid": 1, "tgid": 1, "ruid": 0, "euid": 0}),
        ("proc_gid", {"pid": 1, "tgid": 1, "rgid": 0, "egid": 0}), ("proc_sid", {"pid": 1, "tgid": 1}),
        ("proc_ptrace", {"pid": 1, "tgid": 1, "tracer_pid": 0, "tracer_tgid": 0}),
        ("proc_coredump", {"pid": 1, "tgid": 1, "parent_pid": 0, "parent_tgid": 0}), ("proc_unknown", {"what": 0x1000}),
    ], flags=("process", "thread"), proc=FakeProc())
    assert events == []
    assert mapper.unmapped == 1


def test_without_process_flag_only_threads():
    _, events = run([fork(100, 600), exec_(600), exit_(600, 600, code=4)], flags=("thread",), proc=FakeProc(), rundown=[PARENT])
    assert [(n, v["TThreadId"]) for n, _, v in events if n != "Thread/DCStart"] == [("Thread/Start", 600), ("Thread/Stop", 600)]


def test_exit_mapped_before_the_rundown_is_noted_is_not_waited_for():
    # the /proc scan listed thread 71, whose exit was mapped before note_processes ran
    mapper = KernelEventMapper({"process", "thread"}, FakeProc())
    handlers = install_proc_connector_handlers(mapper)
    name, values = exit_(71, 70, code=0)
    early = decoded(mapper.map(name, 5, 0, values))
    scanned = [ProcessInfo(70, 1, "srv", "srv", 0, (ThreadInfo(70, "srv"), ThreadInfo(71, "w")))]
    mapper.rundown(scanned, 1, 0)
    handlers.note_processes(scanned)
    name, values = exit_(70, 70, code=6)
    late = decoded(mapper.map(name, 9, 0, values))
    assert [(n, v["TThreadId"]) for n, _, v in early] == [("Thread/Stop", 71)]
    assert [(n, v.get("TThreadId"), v.get("ExitStatus")) for n, _, v in late] == [("Thread/Stop", 70, None), ("Process/Stop", None, 6)]


def test_exits_of_a_process_and_a_thread_never_seen_name_the_parent_and_the_process_from_the_event():
    thread_exit = exit_(601, 600, code=0)
    leader_exit = exit_(600, 600, code=4)
    leader_exit[1]["parent_tgid"] = 77
    # /proc knows neither any more: the mapper has only what the events say
    mapper, events = run([thread_exit, leader_exit], flags=("process", "thread"), proc=FakeProc())
    facts = [(n, v.get("ProcessId", v.get("ProcessID")), v.get("TThreadId"), v.get("ParentID"), v.get("ExitStatus")) for n, _, v in events]
    assert facts == [
        ("Thread/Stop", 600, 601, None, None),
        ("Thread/Stop", 600, 600, None, None),
        ("Process/Stop", 600, None, 77, 4),
    ]
    assert mapper.process_of(601) == 601  # forgotten: a later task with that id starts clean
