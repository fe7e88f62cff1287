"""A D program from text to runnable clause functions: parse, check, compile, load.

``compile_script`` is the pure front door: it gives a ``ProbeProgram`` whose clauses say which
probe descriptions they are for; ``ProbeProgram.load(env, output)`` executes the generated
source in a fresh namespace with the record-access functions ``env`` supplies (``_field``,
``_ld``, ``_execname``, ``_ppid``, ``_timestamp``, ``_walltime``, ``_ARG0``) and returns the
clause functions. Generating and loading are separate, so the source can be shown (``-x
codegen``) and checked.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from openetw.probe.lang import aggregate as G
from openetw.probe.lang.checker import AggSpec, FieldsOf, check
from openetw.probe.lang.compiler import CompiledSource, compile_program
from openetw.probe.lang.descriptions import DEFAULT_PROVIDERS, Description, parse_description
from openetw.probe.lang.errors import ProbeCompileError, ProbeRuntimeError
from openetw.probe.lang.output import Output, format_struct
from openetw.probe.lang.parser import parse

__all__ = ["DEFAULT_AGGSIZE", "OPTIONS", "ClauseInfo", "ProbeProgram", "compile_script"]

OPTIONS: dict[str, str] = {
    "strsize": "size", "aggsize": "size", "aggsortkey": "flag", "aggsortrev": "flag", "quiet": "flag",
    "switchrate": "time", "bufsize": "size", "codegen": "flag", "destructive": "flag",
}  # fmt: skip
DEFAULT_AGGSIZE = 1 << 18
"""Most keys an aggregation holds unless ``aggsize`` says otherwise (0: no limit); a key past it
is dropped and counted (``aggregation_drops``), as DTrace drops past its ``aggsize``."""
_DEFAULTS: dict[str, Any] = {"strsize": 256, "aggsize": DEFAULT_AGGSIZE, "aggsortkey": False, "aggsortrev": False, "quiet": False,
                             "switchrate": 0, "bufsize": 4 << 20, "codegen": False, "destructive": False}  # fmt: skip
_SIZE_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
_TIME_UNITS = {"": 10**9 // 1, "hz": 0, "ns": 1, "us": 1000, "ms": 10**6, "s": 10**9, "sec": 10**9}


def parse_option(name: str, value: str) -> Any:
    """An option's value (``strsize=512``, ``bufsize=4m``, ``switchrate=10hz``, ``quiet``)."""
    kind = OPTIONS.get(name)
    if kind is None:
        raise ValueError(f"unknown option {name!r} (options: {', '.join(sorted(OPTIONS))})")
    text = value.strip().lower()
    if kind == "flag":
        if text in ("", "1", "yes", "true", "on"):
            return True
        if text in ("0", "no", "false", "off"):
            return False
        raise ValueError(f"option {name} takes no value or yes/no, not {value!r}")
    digits = text.rstrip("abcdefghijklmnopqrstuvwxyz")
    unit = text[len(digits) :]
    if not digits.isdigit():
        raise ValueError(f"option {name} needs a number, not {value!r}")
    if kind == "size":
        if unit not in _SIZE_UNITS:
            raise ValueError(f"option {name}: unknown size unit {unit!r} (k, m, g)")
        return int(digits) * _SIZE_UNITS[unit]
    if unit not in _TIME_UNITS:
        raise ValueError(f"option {name}: unknown time unit {unit!r} (hz, ns, us, ms, s)")
    return int(digits) if unit == "hz" else int(digits) * _TIME_UNITS[unit]


@dataclass
class ClauseInfo:
    function: str
    descriptions: list[Description]
    line: int


@dataclass
class ProbeProgram:
    source_name: str
    compiled: CompiledSource
    clauses: list[ClauseInfo]
    aggregations: dict[str, AggSpec]
    options: dict[str, Any] = field(default_factory=dict)
    tree: Any = None
    declared: set[str] = field(default_factory=set)

    def columnar(self) -> Any:
        """The column-wise plan of this program (``openetw.probe.lang.columnar``), or ``None``."""
        from openetw.probe.lang.columnar import columnar_plan

        return columnar_plan(self.tree, self.clauses, self.declared) if self.tree is not None else None

    @property
    def python_source(self) -> str:
        return self.compiled.source

    def load(self, env: dict[str, Any], output: Output) -> tuple[dict[str, Callable[..., Any]], dict[str, Any]]:
        """(clause function by name, the namespace) with the program's state fresh."""
        options = self.options
        output.aggregations = {name: [spec, {}, 1] for name, spec in self.aggregations.items()}
        drops = [0]
        aggsize = options["aggsize"] or (1 << 62)

        def exit_action(code: int) -> None:
            namespace["_EXIT"][0] = code

        def trunc(name: str, keep: int) -> None:
            data = output.aggregations[name][1]
            if keep == 0:
                data.clear()
                return
            spec = output.aggregations[name][0]
            by_value = sorted(data, key=lambda k: _rank(spec.func, data[k], spec.unsigned))
            kept = set(by_value[-keep:] if keep > 0 else by_value[:-keep])
            for key in list(data):
                if key not in kept:
                    del data[key]

        def clear(name: str) -> None:
            spec, data, _ = output.aggregations[name]
            for key in data:
                data[key] = _zero(spec.func)

        def normalize(name: str, factor: int) -> None:
            if factor <= 0:
                raise ProbeRuntimeError(f"normalize() needs a factor above zero, not {factor}")
            output.aggregations[name][2] = factor

        load = env["_ld"]

        def print_struct(rec: Any, address: int, ty: Any) -> list[str]:
            return format_struct(ty, address, lambda a, c, s: load(rec, a, c, s))

        namespace: dict[str, Any] = {
            "__name__": "openetw_probe_program", "_out": output, "_AGGS": output.aggregations, "_DROPS": drops,
            "_AGGSIZE": aggsize, "_EXIT": [None], "_exit": exit_action, "_trunc": trunc, "_clear": clear,
            "_normalize": normalize, "_pstruct": print_struct, "_qb": G.quantize_bucket, "_lqb": G.lquantize_bucket,
            "_llqb": G.llquantize_bucket, "_div": _div, "_mod": _mod, "_substr": _substr, "_strstr": _strstr,
            "_index": _index, "_rindex": _rindex, "_basename": _basename, "_dirname": _dirname,
            "_lltostr": _lltostr, "_strtoll": _strtoll, "_stringof": str,
        }  # fmt: skip
        namespace.update({"_etw_trace": _no_etw_trace, "_system": _no_destructive, "_stop": _no_destructive, "_stack": _no_stack})
        namespace.update(self.compiled.formats)
        namespace.update(self.compiled.types)
        namespace.update(env)
        code = compile(self.compiled.source, f"<probe {self.source_name}>", "exec")
        exec(code, namespace)  # noqa: S102 - the compiler's own output
        return {name: namespace[name] for name in self.compiled.functions}, namespace


def _no_etw_trace(*args: Any) -> None:
    raise ProbeRuntimeError("etw_trace() needs a runner that writes events")


def _no_stack(*args: Any) -> str:
    return ""


def _no_destructive(*args: Any) -> None:
    raise ProbeRuntimeError("this runner takes no destructive actions")


def _rank(func: str, value: Any, unsigned: bool = False) -> Any:
    """What ``trunc`` orders entries by: the value shown, a distribution's total count."""
    if func in ("quantize", "lquantize", "llquantize"):
        return sum(value.values())
    return G.aggregate_value(func, value, 1, unsigned)


def _zero(func: str) -> Any:
    if func == "avg":
        return [0, 0]
    if func == "stddev":
        return [0, 0, 0]
    if func in ("quantize", "lquantize", "llquantize"):
        return {}
    return 0


def _div(a: int, b: int, line: int) -> int:
    if b == 0:
        raise ProbeRuntimeError("division by zero", line=line)
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _mod(a: int, b: int, line: int) -> int:
    if b == 0:
        raise ProbeRuntimeError("modulo by zero", line=line)
    return a - _div(a, b, line) * b


def _substr(s: str, index: int, length: int | None) -> str:
    if index < 0:
        index = max(0, len(s) + index)
    if length is None:
        return s[index:]
    if length < 0:
        return s[index : max(index, len(s) + length)]
    return s[index : index + length]


def _strstr(s: str, t: str) -> str:
    at = s.find(t)
    return "" if at < 0 else s[at:]


def _index(s: str, t: str, start: int | None) -> int:
    return s.find(t, start or 0)


def _rindex(s: str, t: str, start: int | None) -> int:
    return s.rfind(t) if start is None else s.rfind(t, 0, start + len(t))


def _split_path(s: str) -> tuple[str, str]:
    """(directory, last part) of a path with ``/`` or ``\\`` separators (trailing ones ignored)."""
    trimmed = s.rstrip("/\\")
    if not trimmed:
        return (s[:1] or ".", s[:1] or ".")
    at = max(trimmed.rfind("/"), trimmed.rfind("\\"))
    if at < 0:
        return ".", trimmed
    return trimmed[:at].rstrip("/\\") or trimmed[at], trimmed[at + 1 :]


def _basename(s: str) -> str:
    return _split_path(s)[1]


def _dirname(s: str) -> str:
    return _split_path(s)[0]


def _lltostr(value: int, base: int) -> str:
    if base == 10:
        return str(value)
    if base == 16:
        return hex(value)
    if base == 8:
        return oct(value).replace("0o", "0")
    if not 2 <= base <= 36:
        raise ProbeRuntimeError(f"lltostr() base must be 2 to 36, not {base}")
    digits = "0123456789abcdefghijklmnopqrstuvwxyz"
    sign, value = ("-", -value) if value < 0 else ("", value)
    out = ""
    while True:
        value, rest = divmod(value, base)
        out = digits[rest] + out
        if not value:
            return sign + out


def _strtoll(text: str, base: int, line: int) -> int:
    try:
        return int(text.strip(), base if base else 0)
    except ValueError:
        return 0


def compile_script(
    text: str, *, name: str = "<program>", macros: list[str] | None = None, fields_of: FieldsOf | None = None,
    options: dict[str, str] | None = None, providers: frozenset[str] | set[str] = DEFAULT_PROVIDERS,
    destructive: bool = False, target: int | None = None,
) -> ProbeProgram:  # fmt: skip
    """Parse, check and compile a D program; ``options`` (``-x``) win over ``#pragma D option``;
    ``providers`` names the probe providers descriptions may use; ``destructive`` allows the
    actions that change the system (``system``, ``stop``: DTrace's ``-w``)."""
    program = parse(text, name=name, macros=macros, target=target)
    settings = dict(_DEFAULTS)
    for option, value, line in program.pragmas:
        try:
            settings[option] = parse_option(option, value)
        except ValueError as error:
            raise ProbeCompileError(str(error), line=line, column=1, source=name) from None
    for option, value in (options or {}).items():
        try:
            settings[option] = parse_option(option, value)
        except ValueError as error:
            raise ProbeCompileError(f"-x {option}: {error}", source=name) from None
    clauses = []
    for clause in program.clauses:
        descriptions = []
        for spec in clause.probes:
            try:
                descriptions.append(parse_description(spec.text, providers))
            except ValueError as error:
                raise ProbeCompileError(str(error), line=spec.line, column=spec.column, source=name) from None
        clauses.append(ClauseInfo(f"_c{clause.number}", descriptions, clause.line))
    checked = check(program, fields_of)
    if checked.destructive and not (destructive or settings["destructive"]):
        action, line, column = checked.destructive[0]
        raise ProbeCompileError(f"{action}() is a destructive action: allow destructive actions with -w", line=line, column=column, source=name)
    compiled = compile_program(checked)
    return ProbeProgram(name, compiled, clauses, checked.aggregations, settings, program, set(checked.globals) | set(checked.arrays))
