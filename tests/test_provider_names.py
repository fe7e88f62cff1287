"""The one provider-name resolver: its order, malformed GUIDs, and enables pending by name."""

from __future__ import annotations

import uuid

import pytest

from openetw.errors import InvalidArgument
from openetw.guids import provider_guid_from_name
from openetw.provider_names import ProviderNameWarning, parse_provider_guid, resolve_provider_name
from openetw.session import SessionTable
from tests.session.helpers import ALICE, config

MANIFEST = uuid.UUID("b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6")
REGISTERED = uuid.UUID("11111111-2222-4333-8444-555555555555")


def lookups(name: str) -> dict:
    return {
        "manifests": lambda n: MANIFEST if n.lower() == name.lower() else None,
        "registered": lambda n: REGISTERED if n.lower() in (name.lower(), "only registered") else None,
    }


@pytest.mark.parametrize(
    ("text", "guid", "source"),
    [
        (str(MANIFEST), MANIFEST, "guid"),
        ("{" + str(MANIFEST).upper() + "}", MANIFEST, "guid"),
        ("  " + str(REGISTERED) + " ", REGISTERED, "guid"),
        ("Sample Driver", MANIFEST, "manifest"),  # the manifest wins over a registration of that name
        ("sample driver", MANIFEST, "manifest"),
        ("Only Registered", REGISTERED, "registered"),
        ("*Sample Driver", provider_guid_from_name("Sample Driver"), "explicit-hash"),
        ("Nobody Knows", provider_guid_from_name("Nobody Knows"), "hash"),
    ],
)
def test_the_documented_order(text: str, guid: uuid.UUID, source: str) -> None:
    resolved = resolve_provider_name(text, **lookups("Sample Driver"))
    assert (resolved.guid, resolved.source) == (guid, source)


@pytest.mark.parametrize(
    "text",
    ["{Sample Driver}", "{b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6", "b5a0bda9-50fe-4d0e-a83d-bae3f58c94d6}",
     "b5a0bda9-50fe-4d0e-a83d-bae3f58c94dZ", "zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz", "{}", "", "  ", "*"],
)
def test_malformed_guids_are_errors_never_names(text: str) -> None:
    with pytest.raises(InvalidArgument):
        resolve_provider_name(text)


def test_names_that_only_look_alike_stay_names() -> None:
    assert parse_provider_guid("My-Company-Web") is None
    assert parse_provider_guid("My{Provider}") is None
    assert parse_provider_guid("b5a0bda950fe4d0ea83dbae3f58c94d6") is None  # 32 digits without dashes: a name


def test_the_hash_is_announced_with_how_to_mean_it() -> None:
    resolved = resolve_provider_name("Sampel Driver")
    assert resolved.hashed
    with pytest.warns(ProviderNameWarning, match=r"'\*Sampel Driver'") as caught:
        resolved.warn()
    assert str(resolved.guid) in str(caught[0].message)


def test_an_enable_by_an_unknown_name_waits_for_a_provider_of_that_name() -> None:
    table = SessionTable()
    session = table.create(config("A"), ALICE)
    table.start("A", now=0.0)
    table.enable("A", "Sample Driver", level=4)
    (rule,) = table.query("A")["providers"]
    assert rule["pending"] and rule["guid"] == str(provider_guid_from_name("Sample Driver"))
    registration, actions = table.register_provider(9, MANIFEST, 4242, "/usr/bin/drv", name="Sample Driver")
    assert registration.enable_state.enabled and registration.enable_state.max_level == 4
    assert [type(a).__name__ for a in actions] == ["OpenPool", "NotifyProvider"]
    (rule,) = table.query("A")["providers"]
    assert (rule["guid"], rule["name"], rule["pending"]) == (str(MANIFEST), "Sample Driver", False)
    # Now registered by name: a later enable by that name finds the registration's GUID.
    other = table.create(config("B"), ALICE)
    table.enable("B", "SAMPLE DRIVER", level=2)
    assert table.query("B")["providers"][0]["guid"] == str(MANIFEST)
    table.disable("A", "Sample Driver")
    assert table.query("A")["providers"] == [] and other.session_id != session.session_id


def test_a_tracelogging_provider_registering_under_the_hash_clears_the_pending_name() -> None:
    table = SessionTable()
    table.create(config("A"), ALICE)
    table.start("A", now=0.0)
    table.enable("A", "My.Provider")
    hashed = provider_guid_from_name("My.Provider")
    registration, _ = table.register_provider(3, hashed, 1, "app", name="My.Provider")
    assert registration.enable_state.enabled
    assert table.query("A")["providers"][0]["pending"] is False


def test_another_user_s_process_cannot_take_an_enable_by_name() -> None:
    from openetw.session.model import Caller

    alice, mallory = ALICE, Caller(ALICE.uid + 1, ALICE.gid + 1)
    table = SessionTable()
    table.create(config("A"), alice)
    table.start("A", now=0.0)
    table.enable("A", "Sample Driver", caller=alice)
    squatter, _ = table.register_provider(5, uuid.uuid4(), 50, "squat", name="Sample Driver", uid=mallory.uid)
    assert not squatter.enable_state.enabled and table.query("A")["providers"][0]["pending"]
    table.enable("A", "Sample Driver", level=3, caller=alice)  # the squatter's registration does not resolve it either
    assert table.query("A")["providers"][0]["guid"] == str(provider_guid_from_name("Sample Driver"))
    driver, _ = table.register_provider(6, MANIFEST, 60, "drv", name="Sample Driver", uid=alice.uid)
    assert driver.enable_state.enabled and table.query("A")["providers"][0]["guid"] == str(MANIFEST)
    rooted, _ = table.register_provider(7, REGISTERED, 70, "sys", name="System Thing", uid=0)
    table.enable("A", "System Thing", caller=alice)  # root's providers name for everyone
    assert rooted.enable_state.enabled


def test_the_consumer_and_the_index_resolve_names_the_same_way(tmp_path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from openetw.consumer import EtlIndex, Provider, UserTrace
    from tests.conftest import corpus_path

    monkeypatch.setenv("OPENETW_DATA_DIR", str(tmp_path / "data"))
    with pytest.raises(InvalidArgument):
        Provider("{not-a-guid}")
    trace = UserTrace(manifests=[])
    trace.enable(Provider("Nobody.Knows"))
    with pytest.warns(ProviderNameWarning, match=r"'\*Nobody\.Knows'"):
        trace.context  # noqa: B018 - resolving happens when the trace is prepared
    quiet = UserTrace(manifests=[])
    quiet.enable(Provider("*solar_system"))
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", ProviderNameWarning)
        quiet.context  # noqa: B018
        index = EtlIndex.build(corpus_path("etl", "perfview", "primitive-types.etl"))
        assert len(index.select(provider="{D3DD3DD4-AAC2-4E2A-8DD4-A8FB61B77615}")) == 5
        assert len(index.select(provider="*solar_system")) == 0  # the name hash, said on purpose: not this provider's GUID
    with pytest.warns(ProviderNameWarning, match="solar_system"):
        assert len(index.select(provider="solar_system")) == 0
