"""``openetw mc``'s file work: read manifests, generate a module per provider, write or check them.

Keeps going past a manifest it cannot read: each failure is reported in the result, the others
are compiled. Modules are written only when their text changes (a rebuild leaves unchanged files
alone), each through a temporary file renamed into place. Two providers that would get the same
module name in one run (the same provider in two manifests) get ``name_2``, ``name_3``... in the
order the manifests were given, and a note says so.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from openetw.errors import ManifestError, OpenEtwError
from openetw.manifest.loader import expand_manifest_paths
from openetw.manifest.parser import parse_manifest
from openetw.manifest.xmlread import MAX_INPUT_BYTES
from openetw.mc.generate import GeneratedModule, generate_module
from openetw.mc.naming import Names, module_name
from openetw.safeio import read_regular_file

__all__ = ["CompiledModule", "McResult", "compile_manifests", "generate_from_file"]


@dataclass(frozen=True)
class CompiledModule:
    module: GeneratedModule
    source: Path  # the manifest
    path: Path  # the module file
    status: str  # "written", "unchanged", "stale" (check: differs or missing), "fresh" (check: same)


@dataclass
class McResult:
    modules: list[CompiledModule] = field(default_factory=list)
    failures: list[OpenEtwError] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def stale(self) -> list[Path]:
        return [item.path for item in self.modules if item.status == "stale"]

    @property
    def ok(self) -> bool:
        return not self.failures and not self.stale


def _expand(paths: Iterable[str | Path], failures: list[OpenEtwError]) -> list[Path]:
    files, errors = expand_manifest_paths(paths)
    failures.extend(errors)
    return files


def generate_from_file(path: Path, modules: Names | None = None) -> tuple[list[GeneratedModule], list[str]]:
    """The modules of every provider of the manifest at ``path``, and notes (renamed modules).

    ``modules`` holds the module names already used in this run. Raises ``ManifestError``.
    """
    taken = modules if modules is not None else Names()
    try:
        data = read_regular_file(path, MAX_INPUT_BYTES)
    except OSError as error:
        raise ManifestError(f"cannot read manifest: {error.strerror or error}", path=str(path)) from None
    manifest = parse_manifest(data, str(path)).manifest
    generated, notes = [], []
    if not manifest.providers:
        notes.append(f"{path}: defines no provider; nothing to generate")
    for index, provider in enumerate(manifest.providers):
        wanted = module_name(provider.name)
        name = taken.take(wanted)
        if name != wanted:
            notes.append(f"{path}: provider {provider.name!r} written as {name}.py ({wanted}.py is another provider's in this run)")
        generated.append(generate_module(manifest, index, data, path.name, name))
    return generated, notes


def compile_manifests(paths: Iterable[str | Path], output_dir: str | Path, *, check: bool = False) -> McResult:
    """Generate (or with ``check``, compare) the module of every provider of every manifest."""
    result = McResult()
    out = Path(output_dir)
    names = Names()
    for source in _expand(paths, result.failures):
        try:
            generated, notes = generate_from_file(source, names)
        except OpenEtwError as error:
            result.failures.append(error)
            continue
        result.notes += notes
        for module in generated:
            target = out / module.file_name
            try:
                status = _compare(target, module.source) if check else _write(target, module.source)
            except OSError as error:
                result.failures.append(OpenEtwError(f"{target}: cannot write: {error.strerror or error}"))
                continue
            result.modules.append(CompiledModule(module, source, target, status))
    return result


def _current(target: Path) -> str | None:
    try:
        return target.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _compare(target: Path, source: str) -> str:
    return "fresh" if _current(target) == source else "stale"


def _write(target: Path, source: str) -> str:
    if _current(target) == source:
        return "unchanged"
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, temporary = tempfile.mkstemp(prefix=f".{target.stem}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as handle:
            handle.write(source)
        os.chmod(temporary, 0o644)
        os.replace(temporary, target)
    except BaseException:
        try:
            os.unlink(temporary)
        except OSError:
            pass
        raise
    return "written"
