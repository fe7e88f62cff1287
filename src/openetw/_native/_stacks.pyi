"""Stub of the compiled join of CPU samples and their stack records (``_stacks.c``)."""

import numpy as np

def join_gather(
    data: np.ndarray, s_row: np.ndarray, s_time: np.ndarray, s_tid: np.ndarray, s_free: np.ndarray, p_row: np.ndarray,
    p_when: np.ndarray, p_tid: np.ndarray, p_rank: np.ndarray, p_at: np.ndarray, p_count: np.ndarray, p_width: np.ndarray, rows: int,
) -> tuple[bytes, bytes, bytes, bytes, bytes, bytes]: ...
