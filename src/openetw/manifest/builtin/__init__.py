"""Manifests openetw ships: the layouts of the .NET runtime's providers (``DotNETRuntime.man``,
made by ``generate.py`` from the runtime's public manifest), so that .NET traces decode with
nothing installed, as PerfView decodes them.

A schema registry consults these last: an installed manifest or one the user names wins for the
same provider, event and version. A file is scanned for its providers at first need and parsed
only when a record of one of them is looked up.
"""

from __future__ import annotations

import functools
import re
import uuid
from pathlib import Path

from openetw.manifest.model import Manifest

__all__ = ["BUILTIN_FILES", "builtin_manifest", "builtin_providers"]

BUILTIN_FILES = (Path(__file__).with_name("DotNETRuntime.man"),)
_PROVIDER = re.compile(r'<provider\s+name="([^"]+)"\s+guid="\{([0-9A-Fa-f-]{36})\}"')


@functools.cache
def builtin_providers() -> dict[uuid.UUID, tuple[str, Path]]:
    """Provider GUID -> its name and the shipped file that holds it."""
    found: dict[uuid.UUID, tuple[str, Path]] = {}
    for path in BUILTIN_FILES:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError:  # an installation without the data files: nothing is built in
            continue
        for name, guid in _PROVIDER.findall(text):
            found[uuid.UUID(guid)] = (name, path)
    return found


@functools.cache
def builtin_manifest(path: Path) -> Manifest:
    """A shipped manifest, parsed once per process."""
    from openetw.manifest.parser import load_manifest

    return load_manifest(path).manifest
