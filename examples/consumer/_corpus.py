"""Where the examples find their sample files: the shared corpus beside the repository."""

from __future__ import annotations

import sys
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus"


def corpus_file(*parts: str) -> Path:
    """A file of the shared corpus, or a clear message and exit when it is not there."""
    path = CORPUS.joinpath(*parts)
    if not path.exists():
        print(f"This example reads {Path('..', 'shared', 'corpus', *parts)}, which is not here.")
        print("Point it at any .etl file of your own to try it.")
        sys.exit(0)
    return path
