"""Malformed, huge and odd values at every parameter of every API route of a running viewer:
never a 500, never a reset connection (``tests/fuzz/viewer_params.py`` runs the large scale)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.conftest import corpus_path
from tests.fuzz.viewer_params import run

pytest.importorskip("starlette")


def test_odd_parameters_on_every_route_answer_with_a_reason_never_a_500(serve: Any) -> None:
    server = serve(corpus_path("evtx", "system.evtx"), corpus_path("etl", "tx", "HTTP_Server.etl"))
    result = run(server, iterations=400, seed=7)
    assert result["failures"] == []
    assert result["statuses"].get(400, 0) > 50 and result["statuses"].get(200, 0) > 20
    # the viewer still answers as before
    from tests.viewer.test_app import _api

    status, body = _api(server, "/api/sources")
    assert status == 200 and all(source["error"] is None for source in body["sources"] if source["id"] in ("f1", "f2"))
