"""Stub of the compiled delivery loop (``_dispatch.c``): the first branch of
``consumer/_engine/plan.py``'s loop, over a run of rows of one buffer."""

from typing import Any

import numpy as np

def deliver(
    lanes: list[tuple[Any, int, int, type]],
    entries: list[Any],
    lane: np.ndarray,
    offset: np.ndarray,
    size: np.ndarray,
    user_data_offset: np.ndarray,
    start: int,
    stop: int,
    data: bytes | bytearray,
    cpu: int,
    record_context: Any,
    buffer: int,
    context: Any,
    dispatcher: Any,
    callback_failed: Any,
    generation: int,
    reuse: bool,
    spare: Any,
    progress: np.ndarray,
) -> tuple[int, Any]: ...
