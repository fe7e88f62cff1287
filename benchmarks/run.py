"""Runs every benchmark in this folder, one after the other (``make bench``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent

if __name__ == "__main__":
    scripts = sorted(HERE.glob("bench_*.py"))
    failed = 0
    for script in scripts:
        print(f"== {script.name}", flush=True)
        failed += subprocess.run([sys.executable, str(script), *sys.argv[1:]]).returncode != 0
        print(flush=True)
    sys.exit(1 if failed else 0)
