"""Damaged manifests: whatever parses compiles into a module that loads; nothing else escapes."""

from __future__ import annotations

import random
import re

from openetw.errors import ManifestError
from openetw.manifest import parse_manifest
from openetw.mc import generate_module, load_module, module_name
from tests.mc.samples import WIDGET_MANIFEST

MUTATIONS = 150
_JUNK = [b"0", b"x", b"-", b'"', b"<", b"\xff", b"999999", b"win:Struct", b"&amp;", b" ", b"", b"0x", b"_", b"3"]
_SAFE_JUNK = [junk for junk in _JUNK if b'"' not in junk and b"<" not in junk and b"\xff" not in junk]
_VALUES = [match.start() + 2 for match in re.finditer(rb'="', WIDGET_MANIFEST)]


def _mutate(data: bytes, rng: random.Random) -> bytes:
    """Mostly attribute values changed (the XML stays well-formed), sometimes anything."""
    buffer = bytearray(data)
    for _ in range(rng.randint(1, 4)):
        if rng.random() < 0.8:
            at = rng.choice(_VALUES) + rng.randint(0, 2)
            buffer[at : at + rng.randint(0, 2)] = rng.choice(_SAFE_JUNK)
        else:
            at = rng.randrange(len(buffer))
            buffer[at : at + rng.randint(0, 3)] = rng.choice(_JUNK)
    return bytes(buffer)


def test_every_mutated_manifest_that_parses_compiles_and_loads() -> None:
    rng = random.Random(20240601)
    parsed = 0
    for number in range(MUTATIONS):
        data = _mutate(WIDGET_MANIFEST, rng)
        try:
            manifest = parse_manifest(data, "mutated.man").manifest
        except ManifestError:
            continue
        parsed += 1
        for index, provider in enumerate(manifest.providers):
            name = module_name(provider.name)
            module = load_module(generate_module(manifest, index, data, "mutated.man", name).source, name)
            assert len(module.provider.EVENTS) == len(provider.events), number
            assert module.MANIFEST_XML == data
    assert parsed > MUTATIONS // 3
