"""Running D programs (``openetw.probe``) over traces: the I/O shell of the probe language.

``adapter`` is the one place that reads traces (through the consumer API); ``providers`` is the
registry of probe providers (``etw`` over files now); ``runner`` drives a compiled program.
"""

from openetw.probe.run.runner import ProbeRun, run_probe_program

__all__ = ["ProbeRun", "run_probe_program"]
