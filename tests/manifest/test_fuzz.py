"""Mutated manifests only ever raise ManifestError, and whatever parses also validates."""

from __future__ import annotations

import re
from xml.sax.saxutils import escape

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from openetw.errors import ManifestError
from openetw.manifest import format_message, parse_manifest, validate
from tests.manifest.samples import FULL_PROVIDER, FULL_STRINGS, assembly_manifest, full_manifest

SEEDS = [full_manifest().encode("utf-8"), assembly_manifest(FULL_PROVIDER, FULL_STRINGS).encode("utf-8")]
TOKENS = [
    b"<", b">", b'"', b"'", b"&", b"&amp;", b"&#0;", b"]]>", b"<!--", b"-->", b"\x00", b"\xff\xfe", b"\xef\xbb\xbf",
    b'<!DOCTYPE x [<!ENTITY a "b">]>', b"<?pi x?>", b"$(string.", b")", b"0x", b"win:", b"xs:", b":",
    b"<data/>", b"<struct>", b"</struct>", b"<event value='1'/>", b"<provider>", b"</provider>", b"%1", b"{", b"}",
]
ATTRIBUTE = re.compile(rb'="([^"]*)"')
SETTINGS = settings(max_examples=int(__import__("os").environ.get("FUZZ_EXAMPLES", "250")), deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check(data: bytes) -> None:
    try:
        result = parse_manifest(data, "fuzz.man")
    except ManifestError as error:
        assert error.path == "fuzz.man"
        return
    for diagnostic in validate(result.manifest):
        str(diagnostic)
    for provider in result.manifest.providers:
        for event in provider.events:
            provider.template_for(event)
            provider.opcode_for(event)
            provider.task_for(event)
            if event.message:
                format_message(event.message, ["x"] * 3)


mutation = st.one_of(
    st.tuples(st.just("replace"), st.integers(0, 10_000), st.binary(min_size=1, max_size=4)),
    st.tuples(st.just("delete"), st.integers(0, 10_000), st.integers(1, 200)),
    st.tuples(st.just("insert"), st.integers(0, 10_000), st.sampled_from(TOKENS)),
    st.tuples(st.just("truncate"), st.integers(0, 10_000), st.just(0)),
)


@SETTINGS
@given(seed=st.sampled_from(SEEDS), mutations=st.lists(mutation, min_size=1, max_size=6))
def test_byte_mutations(seed, mutations):
    data = bytearray(seed)
    for kind, position, argument in mutations:
        position %= len(data) + 1
        if kind == "replace":
            data[position : position + len(argument)] = argument
        elif kind == "delete":
            del data[position : position + argument]
        elif kind == "insert":
            data[position:position] = argument
        else:
            del data[position:]
        if not data:
            data = bytearray(b"<")
    check(bytes(data))


@SETTINGS
@given(
    seed=st.sampled_from(SEEDS),
    edits=st.lists(
        st.tuples(
            st.integers(0, 10_000),
            st.one_of(
                st.text(max_size=12),
                st.sampled_from(["", "0", "-1", "0x", "0xFFFFFFFFFFFFFFFFFF", "65536", "win:Always", "task_0",
                                 "$(string.Nope)", "{not-a-guid}", "Admin", "win:Struct", "win:29", "Count"]),
            ),
        ),
        min_size=1,
        max_size=5,
    ),
)
def test_attribute_value_mutations(seed, edits):
    data = seed
    for index, value in edits:
        spans = [m.span(1) for m in ATTRIBUTE.finditer(data)]
        start, end = spans[index % len(spans)]
        replacement = escape(value, {'"': "&quot;"}).encode("utf-8", errors="surrogatepass")
        data = data[:start] + replacement + data[end:]
    check(data)
