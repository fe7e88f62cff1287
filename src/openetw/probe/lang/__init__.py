"""The D language over events: parser, checker and compiler to Python (pure: no I/O).

``compile_script(text, fields_of=...)`` gives a ``ProbeProgram``: its clauses, the probe
descriptions they are for, and the generated Python source, loaded with ``ProbeProgram.load``.
``openetw.probe.run`` runs programs over trace files; ``docs/probe.md`` describes the language.
"""

from openetw.probe.lang.descriptions import Description, EventIdentity, parse_description
from openetw.probe.lang.errors import ProbeCompileError, ProbeRuntimeError
from openetw.probe.lang.output import Output
from openetw.probe.lang.program import ProbeProgram, compile_script

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
