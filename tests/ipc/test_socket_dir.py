"""The control socket's directory: private, and a shared directory is never narrowed."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from openetw.errors import ServiceError
from openetw.ipc.paths import prepare_socket_dir


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_a_new_directory_is_private(tmp_path: Path) -> None:
    socket_path = tmp_path / "run" / "openetw" / "control.sock"
    prepare_socket_dir(socket_path, system=False)
    assert _mode(socket_path.parent) == 0o700


def test_an_own_directory_open_to_others_is_narrowed(tmp_path: Path) -> None:
    directory = tmp_path / "mine"
    directory.mkdir()
    os.chmod(directory, 0o755)
    prepare_socket_dir(directory / "control.sock", system=False)
    assert _mode(directory) == 0o700


@pytest.mark.parametrize("mode", [0o1777, 0o777, 0o1733])
def test_a_shared_directory_is_refused_and_left_as_it_was(tmp_path: Path, mode: int) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, mode)
    with pytest.raises(ServiceError, match="shared directory"):
        prepare_socket_dir(shared / "control.sock", system=False)
    assert _mode(shared) == mode
