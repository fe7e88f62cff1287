"""The index file: a JSON head and raw numpy arrays, mapped into memory when read.

Layout: the magic ``OPENETW-INDEX`` and a format byte (16 bytes), the head's length (u64), the
head (UTF-8 JSON: the caller's facts, and each array's dtype, shape and offset), then each
array's bytes at a 64-byte-aligned offset. Reading maps the file and makes each array a view
on it: no copy, no checksum pass, pages read as they are touched.
"""

from __future__ import annotations

import json
import mmap
import os
import struct
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["FORMAT", "read_index_file", "write_index_file"]

FORMAT = 2
_MAGIC = b"OPENETW-INDEX\0\0" + bytes([FORMAT])
_ALIGN = 64


def _descr(dtype: np.dtype) -> Any:
    return dtype.descr if dtype.fields is not None else dtype.str


def _dtype(descr: Any) -> np.dtype:
    if isinstance(descr, str):
        return np.dtype(descr)
    return np.dtype([tuple(item) if not isinstance(item[1], list) else (item[0], _dtype(item[1])) for item in descr])


def write_index_file(target: Path, head: dict[str, Any], arrays: dict[str, np.ndarray]) -> None:
    """Write atomically (a temporary file in the same folder, then a rename)."""
    layout: dict[str, dict[str, Any]] = {}
    offset = 0
    for name, array in arrays.items():
        layout[name] = {"dtype": _descr(array.dtype), "shape": list(array.shape), "offset": offset, "nbytes": int(array.nbytes)}
        offset += -(-array.nbytes // _ALIGN) * _ALIGN
    head_bytes = json.dumps({**head, "arrays": layout}).encode("utf-8")
    start = -(-(len(_MAGIC) + 8 + len(head_bytes)) // _ALIGN) * _ALIGN
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(prefix=".openetw-", suffix=".idx", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(_MAGIC + struct.pack("<Q", len(head_bytes)) + head_bytes)
            out.write(bytes(start - out.tell()))
            for array in arrays.values():
                data = np.ascontiguousarray(array).tobytes()
                out.write(data)
                out.write(bytes(-len(data) % _ALIGN))
        os.replace(temp, target)
    except BaseException:
        if os.path.exists(temp):
            os.unlink(temp)
        raise


def read_index_file(location: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, np.ndarray]] | None:
    """(head, arrays) of an index file, or ``None`` when it is not one (or is damaged)."""
    try:
        with open(location, "rb") as f:
            size = os.fstat(f.fileno()).st_size
            if size < len(_MAGIC) + 8:
                return None
            view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    except (OSError, ValueError):
        return None
    try:
        if view[: len(_MAGIC)] != _MAGIC:
            return None
        (length,) = struct.unpack_from("<Q", view, len(_MAGIC))
        head_end = len(_MAGIC) + 8 + length
        if head_end > size:
            return None
        head = json.loads(view[len(_MAGIC) + 8 : head_end].decode("utf-8"))
        start = -(-head_end // _ALIGN) * _ALIGN
        arrays = {}
        for name, spec in head.pop("arrays").items():
            dtype = _dtype(spec["dtype"])
            count = int(np.prod(spec["shape"])) if spec["shape"] else 1
            begin = start + int(spec["offset"])
            if begin + count * dtype.itemsize > size:
                return None
            arrays[name] = np.frombuffer(view, dtype=dtype, count=count, offset=begin).reshape(spec["shape"])
        return head, arrays
    except (ValueError, KeyError, TypeError, UnicodeDecodeError):
        return None
