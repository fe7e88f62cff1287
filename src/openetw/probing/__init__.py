"""Moved to ``openetw.probe.run`` (running D programs over traces): this package and its module
paths (``openetw.probing.runner``, ...) are kept for one release."""

from openetw._moved import keep_old_paths
from openetw.probe.run import ProbeRun, run_probe_program

__all__ = ["ProbeRun", "run_probe_program"]

keep_old_paths(__name__, "openetw.probe.run", (
    "adapter", "etw_writer", "kernel_columns", "kernel_probes", "kernel_symbols", "live", "providers", "runner",
))  # fmt: skip
