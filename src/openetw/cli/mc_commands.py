"""``openetw mc``: compile instrumentation manifests into Python modules (mc.exe for Python)."""

from __future__ import annotations

from typing import Any

import click

from openetw.cli.failure import ReportedFailure


def register(cli: click.Group) -> None:
    cli.add_command(mc)


@click.command("mc")
@click.argument("manifests", nargs=-1, required=True, metavar="MANIFEST|DIR...", type=click.Path(path_type=str))
@click.option(
    "-o", "--output", "output_dir", required=True, metavar="DIR", type=click.Path(file_okay=False, path_type=str),
    help="Where the modules go (created if needed).",
)  # fmt: skip
@click.option(
    "--check", is_flag=True,
    help="Write nothing: exit 1 naming each module that is missing or differs from what would be generated.",
)  # fmt: skip
@click.option(
    "--lenient", is_flag=True,
    help="Compile manifests that break mc.exe's rules decoders survive (duplicate event id and version,"
         " undefined strings, duplicate symbols); a writer that must be renamed is named in a note.",
)  # fmt: skip
@click.option("--json", "as_json", is_flag=True, help="One JSON line per module (path, provider, events, status), then notes and failures.")
def mc(manifests: tuple[str, ...], output_dir: str, check: bool, lenient: bool, as_json: bool) -> None:
    """Generate a Python module for each provider of each MANIFEST (or *.xml / *.man file in DIR).

    A module is named after its provider ("Sample Driver" -> sample_driver.py) and holds the
    provider (register / unregister / a with block), per event a flag <event>_enabled and a
    method write_<event>(...) taking the template's fields in order, the manifest's symbols as
    constants, and the manifest itself, so consumers decode the events without installing it.
    Manifests that cannot be read, or that break mc.exe's rules (see `openetw manifest validate`;
    --lenient compiles those), are reported and the others compiled; the exit status is then 2.
    """
    from openetw.mc import compile_manifests

    result = compile_manifests(manifests, output_dir, check=check, lenient=lenient)
    if as_json:
        _print_json(result)
    else:
        _print_text(result, output_dir, check)
    if len(result.failures) == 1:
        raise ReportedFailure(str(result.failures[0]), exit_code=2)
    if result.failures:
        raise ReportedFailure(f"{len(result.failures)} manifest(s) could not be compiled", exit_code=2)
    if result.stale:
        raise ReportedFailure(f"{len(result.stale)} generated module(s) are stale: {', '.join(str(p) for p in result.stale)}", exit_code=1)


def _print_json(result: Any) -> None:
    import json

    for item in result.modules:
        click.echo(json.dumps({
            "path": str(item.path), "source": str(item.source), "provider": item.module.provider_name,
            "events": item.module.events, "status": item.status,
            "unwritable": [list(pair) for pair in item.module.unwritable],
        }))  # fmt: skip
    for note in result.notes:
        click.echo(json.dumps({"note": note}))
    for failure in result.failures:
        click.echo(json.dumps({"error": str(failure)}))


def _print_text(result: Any, output_dir: str, check: bool) -> None:
    for item in result.modules:
        module = item.module
        if item.status == "stale":
            click.echo(f"stale: {item.path} (from {item.source})")
        elif item.status in ("written", "unchanged"):
            click.echo(f"{item.status:<9} {item.path}  {module.provider_name}: {module.events} events")
        if module.unwritable and not check:
            label, reason = module.unwritable[0]
            more = f" (and {len(module.unwritable) - 1} more)" if len(module.unwritable) > 1 else ""
            click.echo(f"          {len(module.unwritable)} cannot be written: {label}: {reason}{more}")
    for note in result.notes:
        click.echo(f"openetw: note: {note}", err=True)
    for failure in result.failures if len(result.failures) > 1 else ():  # a single one ends the run
        click.echo(f"openetw: error: {failure}", err=True)
    if check:
        fresh = sum(1 for item in result.modules if item.status == "fresh")
        click.echo(f"{fresh} of {len(result.modules)} modules in {output_dir} are up to date")
