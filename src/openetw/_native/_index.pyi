"""Stub of the compiled byte planes of the index blocks (``_index.c``)."""

from typing import Any

import numpy as np

def planes_to_rows(planes: bytes, rows: Any, itemsize: int, fields: np.ndarray) -> None: ...
def rows_to_planes(rows: Any, itemsize: int, fields: np.ndarray) -> bytes: ...
