"""Stub of the compiled delivery loop (``_dispatch.c``): the first branch of
``consumer/_engine/plan.py``'s loop, over rows in merged order."""

from collections.abc import Callable
from typing import Any

import numpy as np

def deliver(
    lanes: list[tuple[Any, int, int, type]],
    entries: list[Any],
    lane: np.ndarray,
    offset: np.ndarray,
    size: np.ndarray,
    user_data_offset: np.ndarray,
    place: np.ndarray,
    cpu: np.ndarray,
    start: int,
    stop: int,
    buffer_of: Callable[[int], tuple[bytes | bytearray, Any]],
    context: Any,
    dispatcher: Any,
    callback_failed: Any,
    generation: int,
    reuse: bool,
    spare: Any,
    spare_place: int,
    progress: np.ndarray,
) -> tuple[int, Any, int]: ...
