"""What a D program prints, as text (DTrace's layout) or NDJSON (bpftrace's ``-f json`` shapes).

Pure: everything goes through ``write(text)``. JSON records are one object per line:
``printf`` (text a program printed), ``map`` (count/sum/min/max), ``stats`` (avg/stddev),
``hist`` (quantize/lquantize/llquantize), ``lost`` and ``error``; ``docs/probe.md`` has them.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from openetw.probe.lang.aggregate import aggregate_value, bucket_ranges, wrap64
from openetw.probe.lang.formatting import Format
from openetw.probe.lang.types import ArrayType, IntType, StructType, Type

__all__ = ["Output", "format_struct"]

_HISTOGRAMS = frozenset({"quantize", "lquantize", "llquantize"})
_STATS = frozenset({"avg", "stddev"})


def format_struct(ty: StructType, address: int, load: Callable[[int, str, int], int], indent: int = 0) -> list[str]:
    """``print(*p)`` of a struct in memory: one member a line, integers in hex (0 as ``0``)."""
    pad = "    " * (indent + 1)
    lines = [f"{ty} {{"] if indent == 0 else []
    for name, (member, offset) in ty.members.items():
        where = address + offset
        if isinstance(member, StructType):
            lines.append(f"{pad}{member} {name} = {{")
            lines.extend(format_struct(member, where, load, indent + 1))
            lines.append(f"{pad}}}")
        elif isinstance(member, ArrayType) and isinstance(member.element, IntType):
            element = member.element
            values = [_hex(load(where + i * element.size, element.struct_code, element.size)) for i in range(member.count)]
            lines.append(f"{pad}{element} [{member.count}] {name} = [ {', '.join(values)} ]")
        elif isinstance(member, IntType):
            lines.append(f"{pad}{member} {name} = {_hex(load(where, member.struct_code, member.size))}")
        else:
            lines.append(f"{pad}{member} {name} = 0x{load(where, 'Q', 8):x}")
    if indent == 0:
        lines.append("}")
    return lines


def _hex(value: int) -> str:
    return "0" if value == 0 else f"0x{value:x}" if value > 0 else f"-0x{-value:x}"


def _key_text(key: Any) -> str:
    return key if isinstance(key, str) else str(key)


class Output:
    """The output of one run: ``aggregations`` maps a name to [spec, data dict, normalization]."""

    def __init__(self, write: Callable[[str], Any], *, json_mode: bool = False, quiet: bool = False,
                 sort_by_key: bool = False, sort_reverse: bool = False) -> None:  # fmt: skip
        self.write = write
        self.json = json_mode
        self.quiet = quiet
        self.sort_by_key = sort_by_key
        self.sort_reverse = sort_reverse
        self.aggregations: dict[str, list[Any]] = {}
        self.probe_ids: dict[tuple[str, str, str, str], int] = {}
        self.printed: set[str] = set()  # aggregations printa() showed: the exit dump leaves them out
        self._header_done = False
        self._pending_line = False

    # -- plain output ---------------------------------------------------------------------------
    def printf(self, text: str) -> None:
        if self.json:
            self._record("printf", text)
        else:
            self.write(text)
            self._pending_line = False

    def probe_line(self, cpu: int, probe: tuple[str, str, str, str]) -> None:
        """The ``CPU ID FUNCTION:NAME`` line of a firing (not in quiet mode)."""
        if self.quiet or self.json:
            return
        number = self.probe_ids.get(probe)
        if number is None:
            number = self.probe_ids[probe] = len(self.probe_ids) + 1
        if not self._header_done:
            self.write(f"{'CPU':>3} {'ID':>6} {'FUNCTION:NAME':>32}\n")
            self._header_done = True
        self.write(f"{cpu:>3} {number:>6} {probe[2] + ':' + probe[3]:>32} ")
        self._pending_line = True

    def end_firing(self) -> None:
        if self._pending_line:
            self.write("\n")
            self._pending_line = False

    def trace(self, value: Any) -> None:
        text = str(value)
        if self.json:
            self._record("printf", text)
        else:
            self.write(f"{text}\n" if self.quiet else f" {text}")

    def lines(self, lines: list[str]) -> None:
        text = "\n".join(lines) + "\n"
        if self.json:
            self._record("printf", text)
        else:
            self.write("\n" + text if self._pending_line else text)
            self._pending_line = False

    def _record(self, kind: str, data: Any) -> None:
        self.write(json.dumps({"type": kind, "data": data}, separators=(",", ":")) + "\n")

    def lost(self, counts: dict[str, int], messages: list[str]) -> None:
        """Drops and losses, at exit: a ``lost`` record in JSON, a line each on ``messages`` in text."""
        if self.json:
            self._record("lost", counts)
        else:
            messages.extend(f"{value} {name.replace('_', ' ')}" for name, value in counts.items() if value)

    def error(self, data: dict[str, Any]) -> None:
        self._record("error", data)

    # -- aggregations ---------------------------------------------------------------------------
    def ordered(self, name: str) -> list[tuple[Any, Any]]:
        spec, data, normal = self.aggregations[name]
        items = list(data.items())
        if self.sort_by_key:
            items.sort(key=lambda kv: _sort_key(kv[0]))
        elif spec.func in _HISTOGRAMS:
            items.sort(key=lambda kv: (sum(kv[1].values()), _sort_key(kv[0])))
        else:
            items.sort(key=lambda kv: (aggregate_value(spec.func, kv[1], normal, spec.unsigned), _sort_key(kv[0])))
        if self.sort_reverse:
            items.reverse()
        return items

    def dump(self, name: str) -> None:
        """One aggregation as DTrace prints it at exit (or ``printa(@a)``)."""
        spec, _data, normal = self.aggregations[name]
        items = self.ordered(name)
        if self.json:
            self._json_aggregation(name, spec, items, normal)
            return
        if spec.func in _HISTOGRAMS:
            lines = [""]
            for key, buckets in items:
                if spec.keys:
                    lines.append("  " + "  ".join(_key_text(k) for k in _key_tuple(key, len(spec.keys))))
                lines.extend(_histogram_lines(spec, buckets, normal))
            self.write("\n".join(lines) + "\n\n")
            return
        if not items:
            return
        shown = [str(aggregate_value(spec.func, value, normal, spec.unsigned)) for _, value in items]
        rows = [([_key_text(k) for k in _key_tuple(key, len(spec.keys))], text) for (key, _), text in zip(items, shown, strict=True)]
        widths = [max(len(row[0][i]) for row in rows) for i in range(len(spec.keys))]
        value_width = max(8, max(len(row[1]) for row in rows))
        out = [""]
        for keys, value in rows:
            cells = [text.ljust(w) if isinstance(kind, type(None)) or str(kind) == "string" else text.rjust(w)
                     for text, w, kind in zip(keys, widths, spec.keys, strict=False)]  # fmt: skip
            out.append("  " + "  ".join(cells) + ("  " if cells else "") + value.rjust(value_width))
        self.write("\n".join(out) + "\n\n")

    def _json_aggregation(self, name: str, spec: Any, items: list[tuple[Any, Any]], normal: int) -> None:
        shown = "@" + name
        kind = "hist" if spec.func in _HISTOGRAMS else "stats" if spec.func in _STATS else "map"

        def value_of(value: Any) -> Any:
            if kind == "hist":
                out = []
                for low, high, count in bucket_ranges(spec.func, value, spec.params):
                    entry: dict[str, int] = {}
                    if low is not None:
                        entry["min"] = low
                    if high is not None:
                        entry["max"] = high
                    entry["count"] = count // normal
                    out.append(entry)
                return out
            if kind == "stats":
                count, total = value[0], value[1]
                stats = {"count": count, "average": aggregate_value("avg", value, normal, spec.unsigned), "total": wrap64(total, spec.unsigned)}
                if spec.func == "stddev":
                    stats["stddev"] = aggregate_value("stddev", value, normal)
                return stats
            return aggregate_value(spec.func, value, normal, spec.unsigned)

        if not spec.keys:
            data: Any = value_of(items[0][1]) if items else (0 if kind == "map" else None)
        else:
            data = {",".join(_key_text(k) for k in _key_tuple(key, len(spec.keys))): value_of(value) for key, value in items}
        self._record(kind, {shown: data})

    def printa(self, fmt: Format | None, names: list[str]) -> None:
        self.printed.update(names)
        if fmt is None:
            for name in names:
                self.dump(name)
            return
        first = names[0]
        spec = self.aggregations[first][0]
        texts = []
        for key, _ in self.ordered(first):
            keys = list(_key_tuple(key, len(spec.keys)))
            args: list[Any] = []
            used = 0
            for kind, _piece, conv in fmt.pieces:
                if kind != "conv":
                    continue
                if conv.startswith("@"):
                    agg_spec, data, normal = self.aggregations[names[min(used, len(names) - 1)]]
                    used += 1
                    value = data.get(key)
                    if agg_spec.func in _HISTOGRAMS:
                        args.append("\n" + "\n".join(_histogram_lines(agg_spec, value or {}, normal)) + "\n")
                    else:
                        args.append(aggregate_value(agg_spec.func, value, normal, agg_spec.unsigned) if value is not None else 0)
                else:
                    args.append(keys.pop(0) if keys else "")
            texts.append(fmt.format(args))
        text = "".join(texts)
        if self.json:
            self._record("printf", text)
        else:
            self.write(text)


def _sort_key(key: Any) -> Any:
    if isinstance(key, tuple):
        return tuple((isinstance(k, str), k) for k in key)
    return ((isinstance(key, str), key),)


def _key_tuple(key: Any, arity: int) -> tuple[Any, ...]:
    if arity == 1:
        return (key,)
    return tuple(key)


def _histogram_lines(spec: Any, buckets: dict[int, int], normal: int) -> list[str]:
    ranges = bucket_ranges(spec.func, buckets, spec.params)
    total = sum(count for _, _, count in ranges) or 1
    lines = [f"{'value':>16}  {'-' * 13} Distribution {'-' * 13} count"]
    for low, high, count in ranges:
        label = f"< {high + 1}" if low is None and high is not None else f">= {low}" if high is None else str(low)
        bar = "@" * round(40 * count / total)
        lines.append(f"{label:>16} |{bar:<40} {count // normal}")
    return lines


def describe_type(ty: Type) -> str:
    return str(ty)
