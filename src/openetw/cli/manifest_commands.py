"""``openetw manifest``: install, uninstall, list, show and validate instrumentation manifests."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from openetw.cli.failure import ReportedFailure
from openetw.cli.json_time import datetime_iso
from openetw.errors import InvalidArgument, ManifestError
from openetw.guids import format_guid
from openetw.manifest import Diagnostic, Manifest, Provider, validate
from openetw.manifest.loader import manifest_files
from openetw.manifest.store import (
    InstalledProvider,
    ManifestRegistry,
    find_merged,
    merge_manifests,
    provider_view,
    read_manifest,
    read_manifests,
)

_manifest_option = click.option(
    "--manifest",
    "given",
    multiple=True,
    metavar="FILE|DIR",
    type=click.Path(exists=True, path_type=str),
    help="Also use this manifest, or every *.xml / *.man file in this directory, without installing "
    "it (repeatable; later files win over earlier ones and over installed ones).",
)
_json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output.")
_system_option = click.option(
    "--system", is_flag=True, help="Use the system store (/var/lib/openetw/manifests; root only) instead of yours."
)


def register(cli: click.Group) -> None:
    cli.add_command(manifest)


@click.group()
def manifest() -> None:
    """Install, inspect and check instrumentation manifests (what wevtutil im/um/el/gp do).

    Installing keeps a copy of the manifest in a store, so that a provider's events can be
    named and decoded later without being given the file again.
    Your own store is $XDG_DATA_HOME/openetw/manifests (~/.local/share/openetw/manifests), the
    system store /var/lib/openetw/manifests; $OPENETW_DATA_DIR moves both (DIR/manifests and
    DIR/system/manifests). Lookups try your store first.
    """


def _warn(message: object) -> None:
    click.echo(f"openetw: warning: {message}", err=True)


def _load_given(paths: tuple[str, ...]) -> list[tuple[str, Manifest]]:
    """The manifests named on the command line; the ones that fail to load are skipped with a warning."""
    manifests, errors = read_manifests(paths)
    for error in errors:
        _warn(f"skipped {error}")
    return [(item.path or "", item) for item in manifests]


def _installed(registry: ManifestRegistry, guids: set[uuid.UUID]) -> list[tuple[str, Manifest]]:
    errors: list[ManifestError] = []
    sources = registry.sources(errors, guids=guids)
    for error in errors:
        _warn(f"skipped installed {error}")
    return sources


# -- install / uninstall --------------------------------------------------------------------------
@manifest.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(path_type=str))
@_system_option
@_json_option
def install(files: tuple[str, ...], system: bool, as_json: bool) -> None:
    """Validate and install each manifest FILE (or every manifest in a directory).

    The file is copied into the store; later changes to the original are not seen until you
    install it again. A provider already installed (same GUID) is replaced. Errors refuse the
    whole install and are listed; warnings are printed and do not stop it.
    """
    registry = ManifestRegistry()
    installed = registry.install(files, system=system)
    reported: set[str] = set()
    for entry in installed:
        for warning in entry.warnings:
            if str(warning) not in reported:
                reported.add(str(warning))
                click.echo(f"openetw: {warning}", err=True)
        if not as_json:
            click.echo(
                f"installed {entry.name} {{{entry.guid}}}: {entry.events} events from {entry.source} "
                f"into the {entry.store} store ({entry.file})"
            )
    if as_json:
        click.echo(json.dumps([_installed_row(entry) for entry in installed]))
    _tell_event_log(registry, system, {entry.guid for entry in installed})


def _tell_event_log(registry: ManifestRegistry, system: bool, guids: set[uuid.UUID]) -> None:
    """A manifest with a channel that listens from the start (Admin, Operational) keeps its
    store's service running: started if need be (as a controller starts it, unless
    $OPENETW_NO_AUTOSTART), it makes the logs and listens. Uninstalling tells a running one."""
    from openetw.controller.client import ServiceClient
    from openetw.errors import OpenEtwError

    listening = False
    if guids:
        try:
            manifests = registry.store(system).load_all(guids=guids)
        except (OSError, ManifestError):
            manifests = []
        listening = any(
            (channel.type is None or channel.type.value in ("Admin", "Operational") or channel.enabled)
            for manifest in manifests for provider in manifest.providers for channel in provider.channels
        )  # fmt: skip
    try:
        with ServiceClient(autostart=None if listening else False) as client:
            client.call("log_reload")
    except OpenEtwError as exc:
        if listening:
            _warn(f"the Event Log takes the change when the trace service starts ({exc})")


@manifest.command()
@click.argument("providers", nargs=-1, required=True, metavar="PROVIDER|FILE...")
@_system_option
@_json_option
def uninstall(providers: tuple[str, ...], system: bool, as_json: bool) -> None:
    """Remove installed providers, named by GUID, by name, or by a manifest FILE (all it defines).

    A FILE that no longer exists matches the providers installed from that path. --json prints
    one JSON document: the list of the providers removed.
    """
    registry = ManifestRegistry()
    removed = []
    for key in providers:
        for entry in registry.uninstall(key, system=system):
            removed.append(entry)
            if not as_json:
                click.echo(f"uninstalled {entry.name} {{{entry.guid}}} from the {entry.store} store")
    if as_json:
        click.echo(json.dumps([_installed_row(entry) for entry in removed]))
    _tell_event_log(registry, system, set())


# -- list --------------------------------------------------------------------------------------------
@manifest.command("list")
@_json_option
@_manifest_option
def list_command(as_json: bool, given: tuple[str, ...]) -> None:
    """List installed providers: name, GUID, event count, store and the file installed from.

    With --manifest the providers of those files are listed too (store "given"). --json prints
    one JSON document, a list with an object per provider: provider, guid, events, store,
    source, file, installed.
    """
    registry = ManifestRegistry()
    rows = [_installed_row(entry) for entry in registry.list()]
    for source, item in _load_given(given):
        rows.extend(_given_row(source, provider) for provider in item.providers)
    if as_json:
        click.echo(json.dumps(rows))
        return
    if not rows:
        stores = f"{registry.user.directory}, {registry.system.directory}"
        click.echo(f"openetw: no manifests installed (stores: {stores})", err=True)
        return
    _print_table(rows)


def _installed_row(entry: InstalledProvider) -> dict[str, Any]:
    return {
        "provider": entry.name,
        "guid": format_guid(entry.guid),
        "events": entry.events,
        "store": entry.store,
        "source": entry.source,
        "file": str(entry.file),
        "installed": datetime_iso(entry.installed, 0),
    }


def _given_row(source: str, provider: Provider) -> dict[str, Any]:
    return {
        "provider": provider.name,
        "guid": format_guid(provider.guid),
        "events": len(provider.events),
        "store": "given",
        "source": source,
        "file": source,
        "installed": None,
    }


def _print_table(rows: list[dict[str, Any]]) -> None:
    header = {"provider": "PROVIDER", "guid": "GUID", "events": "EVENTS", "store": "STORE", "source": "SOURCE"}
    width = {key: max(len(str(row[key])) for row in [header, *rows]) for key in ("provider", "guid", "events", "store")}
    for row in [header, *rows]:
        guid = row["guid"] if row is header else f"{{{row['guid']}}}" if row["guid"] else ""
        click.echo(
            f"{str(row['provider']).ljust(width['provider'])}  {guid.ljust(width['guid'] + 2)}  "
            f"{str(row['events']).rjust(width['events'])}  {str(row['store']).ljust(width['store'])}  {row['source']}"
        )


# -- show ---------------------------------------------------------------------------------------------
@manifest.command()
@click.argument("provider")
@_json_option
@_manifest_option
@click.option("--no-installed", is_flag=True, help="Ignore installed manifests; use only --manifest files.")
def show(provider: str, as_json: bool, given: tuple[str, ...], no_installed: bool) -> None:
    """Everything a manifest says about PROVIDER (a name or a GUID).

    Each event with id, version, level, opcode, task, keywords, channel, message and template
    fields (in/out types, count, length, map), then the provider's channels, levels, tasks,
    opcodes, keywords and maps. When several manifests define the provider, events merge by
    (id, version): the later file wins (installed system, installed user, then --manifest
    files in the order given); each event says which file its schema came from. --json prints
    one object: provider, guid, sources, events [{id, version, symbol, name, level, opcode,
    task, keywords, channel, message, fields [{name, in_type, out_type, count, length, map}],
    source}], channels, levels, tasks, opcodes, keywords, maps, overridden.
    """
    registry = ManifestRegistry()
    given_sources = _load_given(given)
    origin = {source: "given" for source, _ in given_sources}
    guids = {item.guid for item in find_merged(merge_manifests(given_sources), provider)}
    installed: list[tuple[str, Manifest]] = []
    if not no_installed:
        # Only the installed files that hold this provider are read; a name may hide behind a GUID.
        guids |= {entry.guid for entry in registry.matching(provider)}
        origin.update({str(entry.file): entry.store for entry in registry.list() if entry.guid in guids})
        installed = _installed(registry, guids)
    merged = merge_manifests(installed + given_sources)
    found = [item for guid, item in merged.items() if guid in guids]
    if not found:
        where = "given" if no_installed else "installed or given"
        raise InvalidArgument(f"no provider {provider!r} is {where}")
    if len(found) > 1:
        listed = ", ".join(f"{{{item.guid}}}" for item in found)
        raise InvalidArgument(f"several providers are named {provider!r} ({listed}); name one by GUID")
    view = provider_view(found[0], origin)
    if as_json:
        click.echo(json.dumps(view, indent=2))
    else:
        _print_provider(view)


def _print_provider(view: dict[str, Any]) -> None:
    echo = click.echo
    echo(f"Provider  {view['provider']} {{{view['guid']}}}")
    for label, key in (("Symbol", "symbol"), ("Message", "message"), ("Resources", "resource_file")):
        if view[key]:
            echo(f"{label:<9} {view[key]}")
    for index, source in enumerate(view["sources"]):
        store = f" ({source['store']})" if source["store"] else ""
        echo(f"{'Sources' if index == 0 else '':<9} {source['path']}{store}")
    _print_section("Channels", view["channels"], lambda c: f"{c['value']:>3}  {c['name']}  "
                   f"{c['type'] or ('imported' if c['imported'] else '')}{'  enabled' if c['enabled'] else ''}"
                   f"{'  chid=' + c['chid'] if c['chid'] and c['chid'] != c['name'] else ''}")
    _print_section("Levels", view["levels"], lambda x: f"{x['value']:>3}  {x['name']}{_message(x)}")
    _print_section("Tasks", view["tasks"], lambda x: f"{x['value']:>5}  {x['name']}{_message(x)}")
    _print_section("Opcodes", view["opcodes"], lambda x: f"{x['value']:>3}  {x['name']}"
                   f"{'  (task ' + x['task'] + ')' if x['task'] else ''}{_message(x)}")
    _print_section("Keywords", view["keywords"], lambda x: f"{x['mask']:>18}  {x['name']}{_message(x)}")
    _print_section("Maps", view["maps"], lambda x: f"{x['kind']} {x['name']}: "
                   + ", ".join(f"{e['value']}={e['message']}" for e in x["entries"]))
    echo(f"\nEvents ({len(view['events'])})")
    for event in view["events"]:
        _print_event(event)
    if view["overridden"]:
        echo("\nOverridden definitions")
        for item in view["overridden"]:
            echo(f"  event {item['id']} version {item['version']} from {item['source']} (replaced by {item['by']})")


def _message(item: dict[str, Any]) -> str:
    return f"  \"{item['message']}\"" if item.get("message") else ""


def _print_section(title: str, items: list[dict[str, Any]], line: Callable[[dict[str, Any]], str]) -> None:
    if items:
        click.echo(f"\n{title} ({len(items)})")
        for item in items:
            click.echo(f"  {line(item)}")


def _print_event(event: dict[str, Any]) -> None:
    facts = [
        f"{key} {event[key]}" for key in ("level", "opcode", "task", "channel") if event[key] is not None
    ]
    if event["keywords"]:
        facts.append("keywords " + ",".join(event["keywords"]))
    click.echo(f"  {event['id']} v{event['version']}  {event['name']}  [{', '.join(facts)}]")
    if event["message"] is not None:
        click.echo(f"      message: {event['message']}")
    for item in event["fields"]:
        _print_field(item, "      ")
    click.echo(f"      source: {event['source']}")


def _print_field(item: dict[str, Any], indent: str) -> None:
    types = item["in_type"] + (f" -> {item['out_type']}" if item["out_type"] else "")
    extra = "".join(f"  {key}={item[key]}" for key in ("count", "length", "map") if item[key] is not None)
    click.echo(f"{indent}{item['name']}: {types}{extra}")
    for member in item.get("members", ()):
        _print_field(member, indent + "  ")


# -- validate -------------------------------------------------------------------------------------
@manifest.command("validate")
@click.argument("paths", nargs=-1, required=True, type=click.Path(path_type=str), metavar="FILE|DIR...")
@_json_option
@click.option("--lenient", is_flag=True,
              help="Rule breaks mc.exe rejects but decoders survive (duplicate event id and version, undefined"
                   " strings, duplicate symbols, ...) are warnings instead of errors.")  # fmt: skip
@click.option("--strict", is_flag=True, hidden=True, help="mc.exe's rules (the default).")
@click.option("-v", "--verbose", is_flag=True, help="List warnings too, not only count them.")
def validate_command(paths: tuple[str, ...], as_json: bool, lenient: bool, strict: bool, verbose: bool) -> None:
    """Check manifests as mc.exe would: one line per manifest file, its errors listed beneath.

    mc.exe's rules apply: a duplicate event id and version, an undefined string reference or a
    duplicate symbol is an error; --lenient makes those warnings (decoding, --manifest and
    `manifest install` are always lenient, as real Windows manifests need).
    A directory checks every *.xml / *.man file in it and keeps going past malformed ones.
    --json prints one JSON line per file as it is checked: path, ok, errors and warnings
    (strings naming line and element), providers, diagnostics. Exits 0 when every file is ok,
    2 when any has errors.
    """
    if lenient and strict:
        raise click.UsageError("--lenient and --strict exclude each other")
    strict = not lenient
    targets = _validation_targets(paths)
    failed = 0
    for path, problem in targets:
        result = _validate_file(path, strict, problem)
        failed += not result["ok"]
        if as_json:
            click.echo(json.dumps(result))
        else:
            _print_validation(result, verbose)
    if failed:
        raise ReportedFailure(f"{failed} of {len(targets)} manifest files have errors", 2)


def _validation_targets(paths: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """(file, None) for each manifest to check; (path, why) for a path that yields none."""
    targets: list[tuple[str, str | None]] = []
    for entry in paths:
        path = Path(entry)
        if not path.is_dir():
            targets.append((entry, None))
            continue
        try:
            found = manifest_files(path)
        except OSError as error:
            targets.append((entry, f"cannot list directory: {error.strerror or error}"))
            continue
        targets.extend([(str(item), None) for item in found] or [(entry, "directory holds no *.xml or *.man file")])
    return targets


def _located(line: int | None, element: str | None, message: str) -> str:
    where = [f"line {line}"] if line is not None else []
    if element:
        where.append(f"<{element}>")
    return ": ".join([*where, message])


def _validate_file(path: str, strict: bool, problem: str | None = None) -> dict[str, Any]:
    result: dict[str, Any] = {"path": path, "ok": False, "errors": [], "warnings": [], "providers": [], "diagnostics": []}
    if problem is not None:
        result["errors"].append(problem)
        return result
    try:
        parsed = read_manifest(path)
    except ManifestError as error:
        result["errors"].append(_located(error.line, error.element, error.message))
        result["diagnostics"].append(_diagnostic_row("error", "malformed", error.message, error.line, error.element))
        return result
    diagnostics: list[Diagnostic] = list(parsed.warnings) + validate(parsed.manifest, strict=strict)
    for item in diagnostics:
        text = _located(item.line, item.element, f"{item.message} [{item.code}]")
        result["errors" if item.is_error else "warnings"].append(text)
        result["diagnostics"].append(_diagnostic_row(item.severity.value, item.code, item.message, item.line, item.element))
    result["providers"] = [
        {"provider": p.name, "guid": format_guid(p.guid), "events": len(p.events)} for p in parsed.manifest.providers
    ]
    result["ok"] = not result["errors"]
    return result


def _diagnostic_row(severity: str, code: str, message: str, line: int | None, element: str | None) -> dict[str, Any]:
    return {"severity": severity, "code": code, "message": message, "line": line, "element": element}


def _print_validation(result: dict[str, Any], verbose: bool) -> None:
    errors, warnings = result["errors"], result["warnings"]
    counts = f"{len(warnings)} warning{'s' if len(warnings) != 1 else ''}"
    if result["ok"]:
        events = sum(p["events"] for p in result["providers"])
        providers = len(result["providers"])
        click.echo(f"{result['path']}: ok ({providers} provider{'s' if providers != 1 else ''}, {events} events, {counts})")
    else:
        click.echo(f"{result['path']}: {len(errors)} error{'s' if len(errors) != 1 else ''}, {counts}")
    for text in errors:
        click.echo(f"  error: {text}")
    if verbose:
        for text in warnings:
            click.echo(f"  warning: {text}")


__all__ = ["manifest", "register"]
