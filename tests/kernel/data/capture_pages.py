"""Captures real tracefs ring-buffer pages from this machine as test data (run as root).

    python tests/kernel/data/capture_pages.py tests/kernel/data/captured

writes header_page, header_event, the format file of each enabled event, and
cpu<N>-<k>.page (one raw sub-buffer per file, as read from per_cpu/cpu<N>/trace_pipe_raw)
while a small load (fork/exec/exit, writes, loopback TCP) runs.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

TRACEFS = Path("/sys/kernel/tracing")
EVENTS = [
    "sched/sched_process_fork", "sched/sched_process_exec", "sched/sched_process_exit",
    "sched/sched_switch", "task/task_newtask", "syscalls/sys_enter_exit_group",
    "block/block_rq_issue", "block/block_rq_complete", "sock/inet_sock_set_state",
    "sock/sock_send_length", "sock/sock_recv_length", "raw_syscalls/sys_exit",
]


def load() -> None:
    for code in range(3):
        subprocess.run(["/bin/sh", "-c", f"echo capture >/dev/null; exit {code}"], check=False)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    client.sendall(b"x" * 1000)
    peer.recv(4096)
    for s in (client, peer, server):
        s.close()
    with open("/tmp/openetw-capture.bin", "wb") as f:
        f.write(os.urandom(1 << 16))
        os.fsync(f.fileno())
    os.unlink("/tmp/openetw-capture.bin")


def main(out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    instance = TRACEFS / "instances" / "openetw_capture"
    if instance.exists():
        instance.rmdir()
    instance.mkdir()
    try:
        (instance / "trace_clock").write_text("mono")
        (instance / "buffer_size_kb").write_text("256")
        (out / "header_page").write_bytes((TRACEFS / "events/header_page").read_bytes())
        (out / "header_event").write_bytes((TRACEFS / "events/header_event").read_bytes())
        for event in EVENTS:
            (instance / "events" / event / "enable").write_text("1")
            name = event.replace("/", "__")
            (out / f"{name}.format").write_bytes((TRACEFS / "events" / event / "format").read_bytes())
        load()
        time.sleep(0.2)
        (instance / "tracing_on").write_text("0")
        for cpu in range(os.cpu_count() or 1):
            fd = os.open(instance / f"per_cpu/cpu{cpu}/trace_pipe_raw", os.O_RDONLY | os.O_NONBLOCK)
            try:
                for index in range(6):
                    try:
                        page = os.read(fd, 4096)
                    except BlockingIOError:
                        break
                    if not page:
                        break
                    (out / f"cpu{cpu}-{index}.page").write_bytes(page)
            finally:
                os.close(fd)
    finally:
        instance.rmdir()


if __name__ == "__main__":
    main(Path(sys.argv[1] if len(sys.argv) > 1 else "captured"))
