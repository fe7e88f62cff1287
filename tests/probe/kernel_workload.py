"""A known workload for the kernel probe tests, run by ``openetw probe -c``.

``kernel_workload.py DIR``: three opens of a missing file (ENOENT), a 12,345-byte write to the
page cache, a 64 KiB O_DIRECT write and
read of a file in DIR (block I/O issued by this process), 3000 bytes over a loopback TCP
connection, a child that execs ``/bin/sh -c 'exit 3'``, 20 sleeps of 5 ms, then 0.4 s of CPU.
"""

from __future__ import annotations

import mmap
import os
import socket
import sys
import time


def main() -> None:
    directory = sys.argv[1]
    for _ in range(3):
        try:
            os.open(os.path.join(directory, "missing-file"), os.O_RDONLY)
        except FileNotFoundError:
            pass
    with open(os.path.join(directory, "cached.bin"), "wb", buffering=0) as cached:
        cached.write(b"w" * 12345)  # a write that returns without sleeping (the page cache)
    path = os.path.join(directory, "direct.bin")
    block = mmap.mmap(-1, 65536)
    block.write(b"x" * 65536)
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_DIRECT, 0o600)
    os.write(fd, block)
    os.close(fd)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    os.readv(fd, [block])
    os.close(fd)
    server = socket.create_server(("127.0.0.1", 0))
    client = socket.create_connection(server.getsockname())
    peer, _ = server.accept()
    client.sendall(b"y" * 3000)
    got = 0
    while got < 3000:
        got += len(peer.recv(65536))
    for s in (client, peer, server):
        s.close()
    child = os.fork()
    if child == 0:
        os.execv("/bin/sh", ["/bin/sh", "-c", "exit 3"])
    os.waitpid(child, 0)
    for _ in range(20):
        time.sleep(0.005)
    end = time.process_time() + 0.4
    while time.process_time() < end:  # a system call each: checked once per 10,000 turns
        for _ in range(10_000):
            pass


if __name__ == "__main__":
    main()
