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
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from openetw.errors import ManifestError, OpenEtwError
from openetw.manifest.loader import expand_manifest_paths
from openetw.manifest.parser import parse_manifest
from openetw.manifest.validate import validate
from openetw.manifest.xmlread import MAX_INPUT_BYTES
from openetw.mc.embed import single_provider_manifests
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


# Each generated module embeds its manifest (its schemas are read from it), so a manifest of many
# providers is embedded once per provider: past these limits mc refuses it rather than write
# (and hold in memory) gigabytes of modules. Split such a manifest into several files.
MAX_PROVIDERS = 1024
MAX_EMBEDDED_BYTES = 256 << 20  # providers x manifest size
# A module is Python that the interpreter compiles on first import, at about 35 KB of memory per
# event (its descriptor, its field literals and its write method): 8,192 events import in about
# 300 MB, where the largest provider of Windows 10's own manifests has 2,380. Past it mc refuses
# the provider before generating anything, and a manifest past MAX_EVENTS before generating any
# module, so mc's own memory stays bounded too.
MAX_EVENTS_PER_MODULE = 8192
MAX_EVENTS = 65536


def check_limits(providers: int, manifest_bytes: int, path: str, events: Sequence[int] = ()) -> None:
    """``ManifestError`` when a manifest of ``providers`` providers and ``manifest_bytes`` bytes,
    whose providers define ``events`` events each, is past what mc generates (``MAX_PROVIDERS``,
    ``MAX_EMBEDDED_BYTES``, ``MAX_EVENTS_PER_MODULE``, ``MAX_EVENTS``)."""
    if providers > MAX_PROVIDERS:
        raise ManifestError(f"defines {providers} providers; mc generates at most {MAX_PROVIDERS} modules from one manifest (split it)", path=path)
    if providers * manifest_bytes > MAX_EMBEDDED_BYTES:
        raise ManifestError(
            f"{providers} providers x {manifest_bytes} bytes: each module embeds the manifest, and together they would pass"
            f" {MAX_EMBEDDED_BYTES >> 20} MB (split the manifest into files of fewer providers)",
            path=path,
        )
    for index, count in enumerate(events):
        if count > MAX_EVENTS_PER_MODULE:
            raise ManifestError(
                f"provider {index + 1} defines {count} events; mc generates at most {MAX_EVENTS_PER_MODULE} events per module"
                " (a module past that takes gigabytes to import): split its events among providers",
                path=path,
            )
    if sum(events) > MAX_EVENTS:
        raise ManifestError(f"defines {sum(events)} events; mc generates at most {MAX_EVENTS} from one manifest (split it)", path=path)


def generate_from_file(
    path: Path, modules: Names | None = None, *, strict: bool = False
) -> tuple[list[GeneratedModule], list[str]]:
    """The modules of every provider of the manifest at ``path``, and notes (renamed modules and
    writers: nothing is renamed without a word).

    ``modules`` holds the module names already used in this run. ``strict``: mc.exe's rules
    (``validate(strict=True)``) refuse the manifest, and so does a writer that would need a new
    name. Raises ``ManifestError``.
    """
    taken = modules if modules is not None else Names()
    try:
        data = read_regular_file(path, MAX_INPUT_BYTES)
    except OSError as error:
        raise ManifestError(f"cannot read manifest: {error.strerror or error}", path=str(path)) from None
    manifest = parse_manifest(data, str(path)).manifest
    check_limits(len(manifest.providers), len(data), str(path), [len(provider.events) for provider in manifest.providers])
    if strict:
        errors = [item for item in validate(manifest, strict=True) if item.is_error]
        if errors:
            first = errors[0]
            more = f" (and {len(errors) - 1} more; `openetw manifest validate` lists them, --lenient compiles anyway)"
            raise ManifestError(f"{first.message} [{first.code}]" + (more if len(errors) > 1 else ""),
                                path=str(path), line=first.line, element=first.element)  # fmt: skip
    generated, notes = [], []
    if not manifest.providers:
        notes.append(f"{path}: defines no provider; nothing to generate")
    embedded = single_provider_manifests(manifest, data, str(path))
    for index, provider in enumerate(manifest.providers):
        wanted = module_name(provider.name)
        name = taken.take(wanted)
        if name != wanted:
            notes.append(f"{path}: provider {provider.name!r} written as {name}.py ({wanted}.py is another provider's in this run)")
        own = embedded[index]
        module = generate_module(manifest, index, own, path.name, name, embedded_index=None if own is data else 0)
        for label, wanted_writer, writer in module.renamed:
            if strict:
                raise ManifestError(
                    f"{label}: its writer {wanted_writer} is another event's; give the events distinct symbols"
                    " (--lenient names it " + writer + ")", path=str(path), element="event",
                )  # fmt: skip
            notes.append(f"{path}: {label} is written by {writer} ({wanted_writer} is another event's)")
        generated.append(module)
    return generated, notes


def compile_manifests(
    paths: Iterable[str | Path], output_dir: str | Path, *, check: bool = False, lenient: bool = False
) -> McResult:
    """Generate (or with ``check``, compare) the module of every provider of every manifest.
    mc.exe's rules refuse a manifest unless ``lenient``."""
    result = McResult()
    out = Path(output_dir)
    names = Names()
    for source in _expand(paths, result.failures):
        try:
            generated, notes = generate_from_file(source, names, strict=not lenient)
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
