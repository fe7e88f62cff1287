"""Throws malformed, huge and odd values at every parameter of every viewer API route, over
HTTP on loopback, and checks that each answer is a 2xx, 3xx or 4xx (never a 500) and that no
connection is reset. The CI test (tests/viewer/test_fuzz.py) runs a few hundred requests; run
this file for more:

    PYTHONPATH=src python -m tests.fuzz.viewer_params --iterations 20000 [--seed N] [FILE…]
"""

from __future__ import annotations

import argparse
import http.client
import json
import random
import sys
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

GET_ROUTES = ["/api/sources", "/api/sessions", "/api/logs", "/api/s/{sid}", "/api/s/{sid}/rows", "/api/s/{sid}/facets",
              "/api/s/{sid}/timeline", "/api/s/{sid}/counts", "/api/s/{sid}/event/{row}", "/api/s/{sid}/export", "/api/s/{sid}/tail"]  # fmt: skip
POST_ROUTES = ["/api/open", "/api/attach", "/api/logs/open", "/api/s/{sid}/text-index", "/api/s/{sid}/close"]
PARAMS = ["level", "provider", "event", "task", "opcode", "process", "channel", "user", "keyword", "start", "end", "q", "xpath",
          "offset", "limit", "bins", "by", "format", "cursor"]  # fmt: skip
BODY_KEYS = ["path", "session", "name", "directory"]
ODD = ["", "-1", "0", "1", "-0", "0x10", "1e9", "NaN", "inf", "9" * 30, "-" + "9" * 30, str(2**63), str(2**64), str(2**63 - 1),
       "18446744073709551616", "1,2,,3", ",", "a,b", "\x00", "%00", "%ff%fe", "\u202e", "💥", "' or 1=1 --", "<script>", "../../etc/shadow",
       "/etc/shadow", "/dev/zero", "/proc/self/mem", "*[System[", "*[System[EventID=1]]", "(" * 500, "band(Keywords,", "x" * 9000,
       "0" * 25, " 7 ", "+5", "٣", "1_000", "level", "provider", "xml", "evtx", "etl", "csv", "json", "pdf"]  # fmt: skip
BODIES = [b"", b"{", b"[]", b"null", b"1", b'"x"', b"[" * 5000, b"{}" * 10, b"\xff\xfe", b"{" + b'"a":' * 3000 + b"1" + b"}" * 3000]


def odd_value(rng: random.Random) -> str:
    value = rng.choice(ODD)
    if rng.random() < 0.2:
        value = ",".join(rng.choice(ODD[:20]) for _ in range(rng.randint(1, 6)))
    if rng.random() < 0.1:
        value = "".join(chr(rng.randint(1, 0x2FFF)) for _ in range(rng.randint(1, 40)))
    return value


def requests(rng: random.Random, sources: list[str], iterations: int) -> Iterator[tuple[str, str, bytes | None]]:
    """``iterations`` (method, path with query, body) triples."""
    sids = [*sources, "nope", "f0", "", "%2e%2e", "x" * 300]
    for _ in range(iterations):
        post = rng.random() < 0.25
        template = rng.choice(POST_ROUTES if post else GET_ROUTES)
        row = rng.choice(["0", "1", "99999999999999999999999", "5", str(2**63)])
        path = template.replace("{sid}", quote(rng.choice(sids), safe="%")).replace("{row}", row)
        chosen = rng.sample(PARAMS, rng.randint(0, 5))
        query = "&".join(f"{name}={quote(odd_value(rng), safe='%')}" for name in chosen)
        if rng.random() < 0.05:
            query += "&" + "%" + rng.choice(["", "z", "4", "zz"])  # broken escapes
        target = path + (f"?{query}" if query else "")
        body: bytes | None = None
        if post:
            if rng.random() < 0.3:
                body = rng.choice(BODIES)
            else:
                keys = rng.sample(BODY_KEYS, rng.randint(0, 3))
                body = json.dumps({key: rng.choice([odd_value(rng), None, 1, [], {"a": 1}, 2**70]) for key in keys}).encode()
        yield ("POST" if post else "GET"), target, body


def run(server: Any, iterations: int, seed: int = 0, sources: list[str] | None = None) -> dict[str, Any]:
    """Send ``iterations`` odd requests to a running ``ViewerServer`` (as one of its sessions);
    returns {"requests", "statuses", "failures"}: a failure is a 5xx or a broken connection."""
    rng = random.Random(seed)
    headers = {**server.client_headers(), "Origin": server.base}
    statuses: dict[int, int] = {}
    failures: list[str] = []
    known = sources if sources is not None else list(server.viewer.sources)
    for method, target, body in requests(rng, known, iterations):
        if method == "POST" and target.endswith("/close") and rng.random() < 0.9:
            continue  # keep the sources open for the other requests, mostly
        connection = http.client.HTTPConnection("127.0.0.1", server.port, timeout=60)
        try:
            connection.request(method, target, body=body, headers=headers)
            response = connection.getresponse()
            response.read(1 << 20)
            statuses[response.status] = statuses.get(response.status, 0) + 1
            if response.status >= 500:
                failures.append(f"{method} {target[:200]} -> {response.status}")
        except (OSError, http.client.HTTPException) as error:
            failures.append(f"{method} {target[:200]} -> {type(error).__name__}: {error}")
        finally:
            connection.close()
    return {"requests": sum(statuses.values()), "statuses": statuses, "failures": failures}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Fuzz the viewer's API parameters over loopback.")
    parser.add_argument("files", nargs="*", help=".etl/.evtx files to open first (default: none)")
    parser.add_argument("--iterations", type=int, default=10000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    from openetw.viewer.app import Viewer
    from openetw.viewer.server import ViewerServer

    viewer = Viewer()
    for path in args.files:
        viewer.open(path)
    with ViewerServer(viewer) as server:
        result = run(server, args.iterations, args.seed)
    print(json.dumps({"requests": result["requests"], "statuses": result["statuses"], "failures": len(result["failures"])}))
    for failure in result["failures"][:50]:
        print(failure, file=sys.stderr)
    return 1 if result["failures"] else 0


if __name__ == "__main__":
    raise SystemExit(main())
