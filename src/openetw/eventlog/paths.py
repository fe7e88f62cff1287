"""Where logs live: the machine service's in ``/var/lib/openetw/logs``, a per-user service's in
``$XDG_DATA_HOME/openetw/logs``; ``$OPENETW_DATA_DIR`` moves both (``<dir>/logs`` and
``<dir>/system/logs``), as it moves the manifest stores. ``$OPENETW_LOGS_DIR`` names the
directory outright (tests, a service run by hand)."""

from __future__ import annotations

import os
from pathlib import Path

from openetw.manifest.store.manifests import default_data_dirs

__all__ = ["LOGS_DIR_ENV", "default_logs_dir"]

LOGS_DIR_ENV = "OPENETW_LOGS_DIR"


def default_logs_dir(system: bool) -> Path:
    override = os.environ.get(LOGS_DIR_ENV)
    if override:
        return Path(override)
    user, machine = default_data_dirs()
    return (machine if system else user) / "logs"
