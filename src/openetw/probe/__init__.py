"""DTrace's D language over ETW events, and running it.

* ``openetw.probe.lang`` — the language (pure: no I/O): lexer, parser, checker and the compiler
  to Python clauses. ``compile_script(text, fields_of=...)`` gives a ``ProbeProgram``.
* ``openetw.probe.run`` — running a program (the shell): over trace files, live sessions and the
  kernel trace; ``etw_trace`` writing new events.

The language's public names are named here too. ``docs/probe.md`` describes the language. The
language's modules were ``openetw.probe.<module>`` until they moved to ``openetw.probe.lang``:
those paths stay importable for one release.
"""

from openetw._moved import keep_old_paths
from openetw.probe.lang import (
    Description,
    EventIdentity,
    Output,
    ProbeCompileError,
    ProbeProgram,
    ProbeRuntimeError,
    compile_script,
    parse_description,
)

__all__ = [
    "Description",
    "EventIdentity",
    "Output",
    "ProbeCompileError",
    "ProbeProgram",
    "ProbeRuntimeError",
    "compile_script",
    "parse_description",
]

keep_old_paths(__name__, f"{__name__}.lang", (
    "aggregate", "ast", "checker", "columnar", "compiler", "descriptions", "errors", "etw_types", "formatting",
    "lexer", "output", "parser", "program", "schema_types", "types",
))  # fmt: skip
