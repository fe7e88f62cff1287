"""The speedscope viewer's built files, fetched once from the npm registry (its package tarball,
checked against the registry's SHA-512) into a cache outside git, served on loopback."""

from __future__ import annotations

import base64
import hashlib
import io
import json
import os
import shutil
import tarfile
import threading
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

REGISTRY = "https://registry.npmjs.org/speedscope"
CACHE = Path(__file__).resolve().parents[2] / ".venv" / "cache"
LAUNCH_ARGS = ["--no-sandbox", "--headless", "--disable-gpu", "--disable-background-networking",
               "--disable-component-update", "--disable-sync", "--no-first-run"]  # fmt: skip


def speedscope_dir() -> Path:
    """The unpacked ``dist/release`` folder of the latest speedscope (fetched when not cached)."""
    for found in sorted(CACHE.glob("speedscope-*/index.html")):
        return found.parent
    with urllib.request.urlopen(REGISTRY, timeout=60) as answer:
        meta = json.load(answer)
    version = meta["dist-tags"]["latest"]
    dist = meta["versions"][version]["dist"]
    with urllib.request.urlopen(dist["tarball"], timeout=120) as answer:
        data = answer.read()
    algorithm, _, digest = dist["integrity"].partition("-")
    if base64.b64encode(hashlib.new(algorithm, data).digest()).decode() != digest:
        raise RuntimeError(f"speedscope {version}: the tarball does not match the registry's {algorithm}")
    target = CACHE / f"speedscope-{version}"
    partial_dir = target.with_name(target.name + f".partial-{os.getpid()}")
    shutil.rmtree(partial_dir, ignore_errors=True)
    prefix = "package/dist/release/"
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as archive:
        for member in archive.getmembers():
            if member.isfile() and member.name.startswith(prefix) and ".." not in member.name:
                path = partial_dir / member.name[len(prefix) :]
                path.parent.mkdir(parents=True, exist_ok=True)
                extracted = archive.extractfile(member)
                assert extracted is not None
                path.write_bytes(extracted.read())
    if not (partial_dir / "index.html").exists():
        raise RuntimeError(f"speedscope {version}: no dist/release/index.html in the package")
    partial_dir.rename(target)
    return target


@contextmanager
def serve(directory: Path, extra: dict[str, Path]) -> Iterator[str]:
    """Serves ``directory`` (and each ``extra`` URL path → file) on loopback; yields the base URL."""

    class Handler(SimpleHTTPRequestHandler):
        def translate_path(self, path: str) -> str:
            found = extra.get(path.split("?", 1)[0])
            return str(found) if found is not None else super().translate_path(path)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(directory)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
