"""FileIo, UdpIp and PageFault records from a real kernel for a known workload (root and tracefs)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from openetw.kernel import KernelSession
from openetw.kernel.classes import file_key
from openetw.kernel.procfs import ProcSource

from .test_live import _decode

WORKLOAD = textwrap.dedent(
    """
    import ctypes, json, mmap, os, socket, sys, time
    path = sys.argv[1]
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    time.sleep(1.0)  # the reader names the file from /proc/<pid>/fd while it is open
    for chunk in (1000, 2000, 3000):
        os.write(fd, b"x" * chunk)
    os.pwrite(fd, b"y" * 500, 10000)
    os.fsync(fd)
    os.close(fd)
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    sender = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sender.sendto(b"z" * 777, receiver.getsockname())
    data = receiver.recv(4096)
    area = mmap.mmap(-1, 16 * 4096)
    base = ctypes.addressof(ctypes.c_char.from_buffer(area))
    for page in range(16):
        area[page * 4096] = 1
    print(json.dumps({"pid": os.getpid(), "fd": fd, "received": len(data), "base": base}))
    """
)


def test_file_udp_and_page_fault_facts_of_a_known_workload(tracefs_root, tmp_path):
    output = tmp_path / "io.etl"
    target = tmp_path / "written.bin"
    proc = ProcSource()
    session = KernelSession(flags={"file_io", "network", "page_fault"}, output=output, name="t_io", proc=proc, rundown=False,
                            flush_interval=0.05)
    session.start()
    try:
        done = subprocess.run([sys.executable, "-c", WORKLOAD, str(target)], check=True, capture_output=True, text=True)
    finally:
        stats = session.stop()
    facts = json.loads(done.stdout)
    pid, fd, base = facts["pid"], facts["fd"], facts["base"]
    assert facts["received"] == 777
    key = file_key(pid, fd)
    files, udp, faults = [], [], []
    for name, record, values in _decode(output):
        if record.pid != pid:
            continue
        values = dict(values)
        if name.startswith("FileIO/") and values.get("FileObject") == key:
            files.append((name, values))
        elif name.startswith("UdpIp/"):
            udp.append((name, values))
        elif name.startswith("Memory/") and base <= values["VirtualAddress"] < base + 16 * 4096:
            faults.append((name, values))
    print(f"stats: {stats}; file events {len(files)}, udp {udp}, faults {len(faults)}")
    # Python's start-up reads its modules through the same descriptor number: take the
    # descriptor's last life, which begins with the O_CREAT|O_TRUNC open (disposition 5).
    start = max(i for i, (n, v) in enumerate(files) if n == "FileIO/Create" and v["CreateOptions"] == 5 << 24)
    files = files[start:]
    names = [n for n, _ in files]
    assert names == ["FileIO/Create", "FileIO/Write", "FileIO/Write", "FileIO/Write", "FileIO/Write",
                     "FileIO/Flush", "FileIO/Cleanup", "FileIO/Close"]  # fmt: skip
    create = files[0][1]
    assert create["FileName"] == str(target)
    writes = [(v["Offset"], v["IoSize"]) for n, v in files if n == "FileIO/Write"]
    assert writes == [(0, 1000), (1000, 2000), (3000, 3000), (10000, 500)]
    assert [(n, v["size"], v["PID"]) for n, v in udp] == [("UdpIp/Send", 777, pid), ("UdpIp/Recv", 777, pid)]
    touched = {v["VirtualAddress"] & ~0xFFF for n, v in faults if n == "Memory/DemandZeroFault"}
    assert touched == {base + page * 4096 for page in range(16)}
