from __future__ import annotations

import pytest

from openetw.errors import TraceDataError
from openetw.kernel.tracefs_format import (
    DATA_LOC,
    DYNAMIC_TAIL,
    INT_ARRAY,
    INTEGER,
    REL_LOC,
    STRING,
    parse_event_format,
    parse_header_event,
    parse_header_page,
)

from .pages import DATA

FORK = (DATA / "sched__sched_process_fork.format").read_text()


def test_header_page_from_this_machine():
    hp = parse_header_page((DATA / "header_page").read_text())
    assert (hp.timestamp_offset, hp.commit_offset, hp.commit_size, hp.data_offset, hp.data_size) == (0, 8, 8, 16, 4080)
    assert hp.page_size == 4096


def test_header_event_from_this_machine():
    he = parse_header_event((DATA / "header_event").read_text())
    assert (he.type_len_bits, he.time_delta_bits) == (5, 27)
    assert (he.padding, he.time_extend, he.time_stamp, he.data_max_type_len) == (29, 30, 31, 28)


def test_fork_format_fields():
    fmt = parse_event_format(FORK, system="sched")
    assert (fmt.name, fmt.id, fmt.system) == ("sched_process_fork", 366, "sched")
    assert [f.name for f in fmt.common_fields] == ["common_type", "common_flags", "common_preempt_count", "common_pid"]
    parent_comm = fmt.field("parent_comm")
    assert (parent_comm.kind, parent_comm.offset, parent_comm.size, parent_comm.text) == (DATA_LOC, 8, 4, True)
    child_pid = fmt.field("child_pid")
    assert (child_pid.kind, child_pid.offset, child_pid.signed, child_pid.struct_code) == (INTEGER, 20, True, "i")


def test_arrays_strings_and_syscall_slots():
    sock = parse_event_format((DATA / "sock__inet_sock_set_state.format").read_text())
    assert sock.field("saddr_v6").kind == INT_ARRAY and sock.field("saddr_v6").array_length == 16
    assert sock.field("skaddr").struct_code == "Q"
    switch = parse_event_format((DATA / "sched__sched_switch.format").read_text())
    assert switch.field("prev_comm").kind == STRING and switch.field("prev_comm").size == 16
    exit_group = parse_event_format((DATA / "syscalls__sys_enter_exit_group.format").read_text())
    # declared int, stored in an 8-byte slot
    assert (exit_group.field("error_code").offset, exit_group.field("error_code").size) == (16, 8)


def test_rel_loc_and_dynamic_tail():
    text = (
        "name: demo\nID: 7\nformat:\n"
        "\tfield:unsigned short common_type;\toffset:0;\tsize:2;\tsigned:0;\n"
        "\tfield:int common_pid;\toffset:4;\tsize:4;\tsigned:1;\n\n"
        "\tfield:__rel_loc char[] path;\toffset:8;\tsize:4;\tsigned:0;\n"
        "\tfield:char buf[];\toffset:12;\tsize:0;\tsigned:0;\n\n"
        "print fmt: \"\"\n"
    )
    fmt = parse_event_format(text)
    assert fmt.field("path").kind == REL_LOC
    assert fmt.field("buf").kind == DYNAMIC_TAIL and fmt.field("buf").text


@pytest.mark.parametrize("text", ["", "name: x\n", "name: x\nID: nope\n", "name: x\nID: 3\nformat:\n\tfield:int;\toffset:0;\tsize:4;\n"])
def test_bad_format_text_raises_project_error(text):
    with pytest.raises(TraceDataError):
        parse_event_format(text)


def test_bad_header_page_raises():
    with pytest.raises(TraceDataError):
        parse_header_page("\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n")
