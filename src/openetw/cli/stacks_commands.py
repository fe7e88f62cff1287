"""``openetw stacks``: PerfView's CPU Stacks views (By Name, Caller-Callee, call tree) of a trace."""

from __future__ import annotations

import io
import json
import os
import sys
from typing import Any

import click

from openetw.cli.etl_commands import load_registry, manifest_option, no_installed_option, open_readers
from openetw.cli.time_options import TimeSpec, time_window_options

__all__ = ["load_file_profile", "register", "stacks"]

_KALLSYMS = "/proc/kallsyms"
_PERF_MAPS = "/tmp"


def register(cli: click.Group) -> None:
    cli.add_command(stacks)


def _kallsyms_text(path: str | None) -> str | None:
    """The kallsyms text (the machine's own by default: it names kernel frames of a trace of this boot)."""
    path = path if path is not None else _KALLSYMS
    if path == "" or not os.path.isfile(path):
        return None
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return f.read()
    except OSError:
        return None


def load_file_profile(
    files: tuple[str, ...], *, window: TimeSpec, manifests: tuple[str, ...] = (), no_installed: bool = False,
    event: str | None = "SampledProfile", process: str | None = None, thread: int | None = None,
    symbol_dirs: tuple[str, ...] = (), kallsyms: str | None = None,
) -> Any:  # fmt: skip
    """The named stacks of ``files`` merged in time order (``openetw.events.profile.Profile``)."""
    from openetw.events.profile import load_profile
    from openetw.export.source import merged_records

    for directory in symbol_dirs:
        if not os.path.isdir(directory):
            raise click.BadParameter(f"{directory} is not a directory", param_hint="--symbols")
    registry = load_registry(manifests, installed=not no_installed)
    fast = event == "SampledProfile" and (process is None or process.isdigit())
    if fast and len(files) == 1 and files[0].lower().endswith(".etl") and not window.given and os.path.isfile(files[0]):
        # one ETL file's CPU samples: from the file's index, on arrays (events.profile_columns)
        from openetw.events.profile_columns import load_file_profile as load_from_index

        return load_from_index(
            files[0], registry=registry, event=event, process=process, thread=thread,
            symbol_dirs=symbol_dirs, kallsyms=_kallsyms_text(kallsyms), perf_map_dir=_PERF_MAPS,
        )  # fmt: skip
    readers = open_readers(files)
    try:
        span = window.resolve(readers) if window.given else None
        return load_profile(
            merged_records(readers), registry=registry, event=None if event in (None, "*", "all") else event,
            process=process, thread=thread, start=span.start if span is not None else None,
            end=span.end if span is not None else None, symbol_dirs=symbol_dirs, kallsyms=_kallsyms_text(kallsyms),
            perf_map_dir=_PERF_MAPS,
        )  # fmt: skip
    finally:
        for reader in readers:
            reader.close()


@click.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=str))
@click.option("--process", metavar="P", help="Only stacks of this process (a pid or a process name).")
@click.option("--thread", type=int, metavar="T", help="Only stacks of this thread id.")
@click.option("--event", default="SampledProfile", show_default=True, metavar="NAME",
              help="The events whose stacks are counted (SampledProfile, CSwitch, ReadyThread, Provider/Event...; 'all' for every one).")  # fmt: skip
@click.option("--symbols", "symbol_dirs", multiple=True, metavar="DIR",
              help="A directory of PDBs (a symbol store, or flat): native Windows frames named by the PDB's public symbols (repeatable).")  # fmt: skip
@click.option("--kallsyms", metavar="FILE", help="Kernel symbols for a Linux trace that recorded none (default /proc/kallsyms of the same boot; '' for none).")
@click.option("--caller-callee", "focus", metavar="FUNC", help="Callers and callees of FUNC (module!name or name).")
@click.option("--tree", is_flag=True, help="The call tree from each process down.")
@click.option("--group-modules", is_flag=True, help="Name frames by their module alone.")
@click.option("--fold", type=click.FloatRange(0, 100), default=0.0, show_default=True, metavar="PCT",
              help="Fold functions under PCT percent inclusive into their callers.")  # fmt: skip
@click.option("--limit", type=int, default=50, show_default=True, help="By Name: rows shown (0 for all).")
@manifest_option
@no_installed_option
@click.option("--json", "as_json", is_flag=True, help="One JSON document: the view, the samples and how frames were named.")
@time_window_options
def stacks(
    files: tuple[str, ...], process: str | None, thread: int | None, event: str, symbol_dirs: tuple[str, ...],
    kallsyms: str | None, focus: str | None, tree: bool, group_modules: bool, fold: float, limit: int,
    manifests: tuple[str, ...], no_installed: bool, as_json: bool, window: TimeSpec,
) -> None:  # fmt: skip
    """PerfView's CPU Stacks of FILES: functions by exclusive and inclusive samples (By Name).

    \b
    Stacks are the StackWalk records joined to their events (compressed stacks resolved) and
    the extended stack items of user events. Frames are named from the trace: module and
    offset from its image rundown and loads, .NET methods from the runtime's method events,
    Linux frames from the mapped files' ELF symbols (when their build id is the traced one),
    the kernel symbols the trace recorded and perf-PID.map files, native Windows frames from
    the PDBs in --symbols DIR (matched by GUID and age). A frame that cannot be named reads
    module!+0xoffset. The share of frames named is printed last.
    """
    from openetw.report.stacks import (
        by_name,
        call_tree,
        caller_callee,
        render_by_name,
        render_caller_callee,
        render_tree,
    )

    profile = load_file_profile(
        files, window=window, manifests=manifests, no_installed=no_installed, event=event, process=process,
        thread=thread, symbol_dirs=symbol_dirs, kallsyms=kallsyms,
    )  # fmt: skip
    samples, total = profile.samples, profile.total
    document: dict[str, Any] = {"files": list(files), "event": event, **profile.as_json()}
    out = io.StringIO()
    if focus is not None:
        view = caller_callee(samples, focus, group_modules=group_modules, fold=fold)
        document["caller_callee"] = {
            "focus": view.focus.as_json(total), "callers": [row.as_json(total) for row in view.callers],
            "callees": [row.as_json(total) for row in view.callees],
        }  # fmt: skip
        render_caller_callee(view, total, out)
    elif tree:
        root = call_tree(samples, group_modules=group_modules, fold=fold)
        document["tree"] = root.as_json(total, fold)
        render_tree(root, total, out, fold=fold)
    else:
        rows = by_name(samples, group_modules=group_modules, fold=fold)
        document["by_name"] = [row.as_json(total) for row in rows]
        render_by_name(rows, total, out, limit=limit or None)
    if as_json:
        click.echo(json.dumps(document))
        return
    sys.stdout.write(out.getvalue())
    naming = profile.naming
    share = naming.named / naming.frames if naming.frames else 0.0
    in_images = naming.in_images / naming.frames if naming.frames else 0.0
    sources = ", ".join(f"{name} {count}" for name, count in sorted(naming.by_source.items()))
    click.echo(
        f"{total} samples with stacks ({profile.stacks.events_with_stacks} events with stacks in all); "
        f"{naming.frames} distinct frames: {in_images:.1%} in an image, {share:.1%} named ({sources})"
    )
    for error in naming.symbol_errors[:5]:
        click.echo(f"openetw: warning: {error}", err=True)
