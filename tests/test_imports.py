"""Imports that match the job: a program pays at import for what it uses, nothing more.

Each check runs in a fresh interpreter and lists the ``openetw`` modules it loaded (counted,
never timed).
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# Layers a program that only writes events has no use for.
NOT_FOR_WRITERS = ("manifest", "tdh", "consumer", "report", "store")  # ("store": the old path of manifest/store)

WRITE_EVENTS = """
import openetw
tl = openetw.TraceLoggingProvider("Demo.Imports")
tl.write("Started", port=80, host="example", ratio=0.5, ok=True)
manifest = openetw.Provider("{3d6fa8d1-fe05-11d0-9dda-00c04fd7ba7c}")
event = manifest.event((1, 0, 0, 4, 0, 0, 0), [("x", 8), ("name", 1)])
manifest.write(event, 5, "x")
handler = openetw.EtwLoggingHandler("Demo.Imports.Logging")
"""


def loaded_after(code: str) -> list[str]:
    script = code + "\nimport sys, json\nprint(json.dumps(sorted(m for m in sys.modules if m == 'openetw' or m.startswith('openetw.'))))\n"
    # No trace service on this socket: the providers stay disabled, as without a service.
    env = {"OPENETW_SOCKET": "/nonexistent/openetw-test.sock", "PATH": "/usr/bin:/bin", "PYTHONPATH": ":".join(sys.path)}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, env=env, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def layers(modules: list[str]) -> set[str]:
    return {module.split(".")[1] for module in modules if module.count(".") >= 1}


def test_writing_events_loads_no_decoding_or_consuming_layer() -> None:
    modules = loaded_after(WRITE_EVENTS)
    assert "openetw.provider.runtime" in modules  # the writes really happened through a provider
    unwanted = [module for module in modules if module.split(".")[1:2] and module.split(".")[1] in NOT_FOR_WRITERS]
    assert not unwanted, f"writing events loaded {unwanted}"


def test_import_openetw_loads_only_the_errors_and_guids() -> None:
    assert layers(loaded_after("import openetw")) <= {"errors", "guids"}


@pytest.mark.parametrize(
    ("command", "allowed"),
    [
        ("mc", {"cli", "errors", "guids", "provider_names"}),
        # (``_native``: the compiled twin of etl's read side, which comes with ``etl``)
        ("manifest", {"cli", "errors", "guids", "provider_names", "manifest", "etl", "_native", "session", "safeio", "hostinfo"}),
        ("kernel", {"cli", "errors", "guids", "provider_names"}),
    ],
)
def test_a_subcommand_loads_its_own_modules_only(command: str, allowed: set[str]) -> None:
    code = f"from openetw.cli.main import cli\nimport click\ncli.get_command(click.Context(cli), {command!r})\n"
    loaded = layers(loaded_after(code))
    assert loaded <= allowed, f"openetw {command} loaded {sorted(loaded - allowed)}"
    assert not loaded & {"consumer", "report", "tdh"}
