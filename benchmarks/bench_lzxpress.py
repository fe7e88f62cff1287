"""Inflate every compressed buffer of an .etl file with openetw's LZXPRESS decoder and, in the same
run, with dissect.util's (used only as a black box); print the output rate of each and their ratio.

    .venv/bin/python benchmarks/bench_lzxpress.py [--repeat N] [ETL_FILE]
"""

from __future__ import annotations

import argparse
import struct
import sys
import time
from collections.abc import Callable
from pathlib import Path

from openetw.etl.lzxpress import decompress

CORPUS = Path(__file__).resolve().parents[2] / "shared" / "corpus"
DEFAULT_FILE = CORPUS / "etl" / "perfview" / "net.4.5.2.x64.etl"
HEADER_SIZE = 0x48
BUFFER_FLAG_COMPRESSED = 0x40

Buffers = list[tuple[bytes, int]]


def compressed_buffers(data: bytes) -> Buffers:
    """(compressed payload, inflated size) of each compressed buffer, walking buffers by BufferSize."""
    found = []
    position = 0
    while position + HEADER_SIZE <= len(data):
        buffer_size, data_end = struct.unpack_from("<I44xI", data, position)
        (flags,) = struct.unpack_from("<H", data, position + 0x34)
        if buffer_size < HEADER_SIZE:
            sys.exit(f"BufferSize {buffer_size:#x} at {position:#x}: not a buffer")
        if flags & BUFFER_FLAG_COMPRESSED:
            found.append((data[position + HEADER_SIZE : position + buffer_size], data_end - HEADER_SIZE))
        position += buffer_size
    return found


def best_time(inflate: Callable[[bytes, int], bytes], buffers: Buffers, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        for stream, size in buffers:
            inflate(stream, size)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("etl_file", nargs="?", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--repeat", type=int, default=5, help="runs per decoder; the fastest counts")
    args = parser.parse_args()

    buffers = compressed_buffers(args.etl_file.read_bytes())
    if not buffers:
        sys.exit(f"{args.etl_file}: no compressed buffers")
    inflated = sum(size for _, size in buffers)
    compressed = sum(len(stream) for stream, _ in buffers)

    decoders: dict[str, Callable[[bytes, int], bytes]] = {"openetw": decompress}
    try:
        from dissect.util.compression import lzxpress
    except ImportError:
        print("dissect.util is not installed: timing openetw alone", file=sys.stderr)
    else:
        decoders["dissect.util"] = lambda stream, size: lzxpress.decompress(stream)[:size]

    for name, inflate in decoders.items():  # same output from each, before timing anything
        for index, (stream, size) in enumerate(buffers):
            if inflate(stream, size) != decompress(stream, size):
                sys.exit(f"{name} disagrees with openetw on compressed buffer {index}")

    print(f"{args.etl_file.name}: {len(buffers)} compressed buffers, "
          f"{compressed / 1e6:.2f} MB -> {inflated / 1e6:.2f} MB; best of {args.repeat} runs")
    print(f"{'decoder':<14}{'seconds':>9}{'MB/s out':>10}{'vs dissect':>12}")
    seconds = {name: best_time(inflate, buffers, args.repeat) for name, inflate in decoders.items()}
    for name, elapsed in seconds.items():
        ratio = f"{seconds['dissect.util'] / elapsed:.2f}x" if "dissect.util" in seconds else "-"
        print(f"{name:<14}{elapsed:>9.4f}{inflated / elapsed / 1e6:>10.1f}{ratio:>12}")


if __name__ == "__main__":
    main()
