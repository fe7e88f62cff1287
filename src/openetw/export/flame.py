"""Stacks as flame graphs: speedscope JSON, pprof ``profile.proto`` (gzip), folded stacks.

Each writer takes the named samples of ``openetw.events.profile`` and a binary file:

* ``speedscope``: speedscope's file format (``https://www.speedscope.app/file-format-schema.json``):
  the frames shared, one *sampled* profile per thread (``Name (pid) thread tid``), each sample a
  list of frame indices from the root to the innermost frame, weight 1 per sample.
* ``pprof``: the ``perftools.profiles.Profile`` message, gzip-compressed, as ``go tool pprof``
  reads it: one ``samples/count`` value per sample, a location per distinct frame (its address
  and mapping), a function per name, one mapping per module; the process and thread as labels.
  Written by hand on ``protowire``; field numbers are profile.proto's (named below).
* ``folded``: Brendan Gregg's collapsed stacks (``flamegraph.pl``'s input): one line per distinct
  stack, ``Process (pid);outermost;...;innermost count``; the counts sum to the sample count.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from typing import IO, Any

from openetw.errors import InvalidArgument
from openetw.events.profile import StackSample
from openetw.events.text import UNIX_EPOCH_FILETIME
from openetw.export.timeline.protowire import bytes_field, string_field, varint, varint_field

__all__ = ["FLAME_FORMATS", "write_flame", "write_folded", "write_pprof", "write_speedscope"]

FLAME_FORMATS = ("speedscope", "pprof", "folded")
_FILETIME_UNIX_TICKS = UNIX_EPOCH_FILETIME

# profile.proto (github.com/google/pprof/proto/profile.proto), the fields written
_PROFILE_SAMPLE_TYPE, _PROFILE_SAMPLE, _PROFILE_MAPPING, _PROFILE_LOCATION = 1, 2, 3, 4
_PROFILE_FUNCTION, _PROFILE_STRING_TABLE, _PROFILE_TIME_NANOS, _PROFILE_DURATION_NANOS = 5, 6, 9, 10
_PROFILE_PERIOD_TYPE, _PROFILE_PERIOD = 11, 12
_VALUE_TYPE_TYPE, _VALUE_TYPE_UNIT = 1, 2
_SAMPLE_LOCATION_ID, _SAMPLE_VALUE, _SAMPLE_LABEL = 1, 2, 3
_LABEL_KEY, _LABEL_STR, _LABEL_NUM = 1, 2, 3
_MAPPING_ID, _MAPPING_FILENAME, _MAPPING_HAS_FUNCTIONS = 1, 5, 7
_LOCATION_ID, _LOCATION_MAPPING_ID, _LOCATION_ADDRESS, _LOCATION_LINE = 1, 2, 3, 4
_LINE_FUNCTION_ID = 1
_FUNCTION_ID, _FUNCTION_NAME, _FUNCTION_SYSTEM_NAME = 1, 2, 3


def _thread_name(sample: StackSample) -> str:
    return f"{sample.process} thread {sample.tid}"


def write_speedscope(samples: Sequence[StackSample], out: IO[bytes], *, name: str = "openetw") -> int:
    """speedscope's JSON: one sampled profile per thread. Returns the number of samples."""
    frames: dict[str, int] = {}
    profiles: dict[tuple[int, int], dict[str, Any]] = {}
    for sample in samples:
        profile = profiles.get((sample.pid, sample.tid))
        if profile is None:
            profile = profiles[(sample.pid, sample.tid)] = {
                "type": "sampled", "name": _thread_name(sample), "unit": "none", "startValue": 0, "endValue": 0,
                "samples": [], "weights": [],
            }  # fmt: skip
        stack = []
        for frame in reversed(sample.frames):
            index = frames.get(frame.label)
            if index is None:
                index = frames[frame.label] = len(frames)
            stack.append(index)
        profile["samples"].append(stack)
        profile["weights"].append(sample.weight)
        profile["endValue"] += sample.weight
    ordered = sorted(profiles.values(), key=lambda profile: -profile["endValue"])
    document = {
        "$schema": "https://www.speedscope.app/file-format-schema.json",
        "shared": {"frames": [{"name": label} for label in frames]},
        "profiles": ordered, "name": name, "activeProfileIndex": 0, "exporter": "openetw",
    }  # fmt: skip
    out.write(json.dumps(document, separators=(",", ":")).encode())
    return len(samples)


def write_folded(samples: Sequence[StackSample], out: IO[bytes]) -> int:
    """Collapsed stacks, one line per distinct stack, heaviest first. Returns the sample count."""
    counts: dict[str, int] = {}
    for sample in samples:
        line = ";".join([sample.process.replace(";", ":"), *(frame.label.replace(";", ":") for frame in reversed(sample.frames))])
        counts[line] = counts.get(line, 0) + sample.weight
    for line, count in sorted(counts.items(), key=lambda item: (-item[1], item[0])):
        out.write(f"{line} {count}\n".encode())
    return sum(counts.values())


class _Strings:
    def __init__(self) -> None:
        self.index: dict[str, int] = {"": 0}

    def __call__(self, text: str) -> int:
        found = self.index.get(text)
        if found is None:
            found = self.index[text] = len(self.index)
        return found


def _message(*fields: bytes) -> bytes:
    return b"".join(fields)


def _packed(values: Sequence[int]) -> bytes:
    return b"".join(varint(value) for value in values)


def write_pprof(samples: Sequence[StackSample], out: IO[bytes]) -> int:
    """A gzip-compressed pprof profile. Returns the number of samples."""
    strings = _Strings()
    mappings: dict[str, int] = {}
    functions: dict[str, int] = {}
    locations: dict[tuple[int, int], tuple[int, int, int]] = {}  # (pid, address) → id, mapping, function
    body = bytearray()
    body += bytes_field(_PROFILE_SAMPLE_TYPE, varint_field(_VALUE_TYPE_TYPE, strings("samples")) + varint_field(_VALUE_TYPE_UNIT, strings("count")))
    process_key, thread_key, pid_key = strings("process"), strings("thread"), strings("pid")
    first = min((sample.filetime for sample in samples), default=_FILETIME_UNIX_TICKS)
    last = max((sample.filetime for sample in samples), default=first)
    for sample in samples:
        ids = []
        for frame in sample.frames:
            key = (sample.pid, frame.address)
            found = locations.get(key)
            if found is None:
                mapping = mappings.get(frame.module)
                if mapping is None:
                    mapping = mappings[frame.module] = len(mappings) + 1
                label = frame.label
                function = functions.get(label)
                if function is None:
                    function = functions[label] = len(functions) + 1
                found = locations[key] = (len(locations) + 1, mapping, function)
            ids.append(found[0])
        labels = (
            bytes_field(_SAMPLE_LABEL, varint_field(_LABEL_KEY, process_key) + varint_field(_LABEL_STR, strings(sample.process)))
            + bytes_field(_SAMPLE_LABEL, varint_field(_LABEL_KEY, thread_key) + varint_field(_LABEL_NUM, sample.tid))
            + bytes_field(_SAMPLE_LABEL, varint_field(_LABEL_KEY, pid_key) + varint_field(_LABEL_NUM, sample.pid))
        )
        body += bytes_field(_PROFILE_SAMPLE, bytes_field(_SAMPLE_LOCATION_ID, _packed(ids)) + bytes_field(_SAMPLE_VALUE, _packed([sample.weight])) + labels)
    for module, mapping in mappings.items():
        body += bytes_field(_PROFILE_MAPPING, _message(
            varint_field(_MAPPING_ID, mapping), varint_field(_MAPPING_FILENAME, strings(module)), varint_field(_MAPPING_HAS_FUNCTIONS, 1),
        ))  # fmt: skip
    for (_pid, address), (location, mapping, function) in locations.items():
        body += bytes_field(_PROFILE_LOCATION, _message(
            varint_field(_LOCATION_ID, location), varint_field(_LOCATION_MAPPING_ID, mapping),
            varint_field(_LOCATION_ADDRESS, address), bytes_field(_LOCATION_LINE, varint_field(_LINE_FUNCTION_ID, function)),
        ))  # fmt: skip
    for label, function in functions.items():
        name = strings(label)
        body += bytes_field(_PROFILE_FUNCTION, _message(
            varint_field(_FUNCTION_ID, function), varint_field(_FUNCTION_NAME, name), varint_field(_FUNCTION_SYSTEM_NAME, name),
        ))  # fmt: skip
    for text in strings.index:
        body += string_field(_PROFILE_STRING_TABLE, text)
    body += varint_field(_PROFILE_TIME_NANOS, max(0, (first - _FILETIME_UNIX_TICKS) * 100))
    body += varint_field(_PROFILE_DURATION_NANOS, max(0, (last - first) * 100))
    body += bytes_field(_PROFILE_PERIOD_TYPE, varint_field(_VALUE_TYPE_TYPE, strings("samples")) + varint_field(_VALUE_TYPE_UNIT, strings("count")))
    body += varint_field(_PROFILE_PERIOD, 1)
    out.write(gzip.compress(bytes(body), mtime=0))
    return len(samples)


def write_flame(fmt: str, samples: Sequence[StackSample], out: IO[bytes]) -> int:
    """Write ``samples`` as ``fmt`` (one of ``FLAME_FORMATS``)."""
    if fmt == "speedscope":
        return write_speedscope(samples, out)
    if fmt == "pprof":
        return write_pprof(samples, out)
    if fmt == "folded":
        return write_folded(samples, out)
    raise InvalidArgument(f"not a flame graph format: {fmt}")
