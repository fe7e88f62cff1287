"""``--to otlp``: against an OTLP/HTTP receiver on loopback that decodes what it gets."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from openetw.cli.main import main
from openetw.export.timeline import export_timeline
from tests.export.timeline_traces import activity_id, activity_trace

logs_service = pytest.importorskip("opentelemetry.proto.collector.logs.v1.logs_service_pb2")
trace_service = pytest.importorskip("opentelemetry.proto.collector.trace.v1.trace_service_pb2")
pytest.importorskip("opentelemetry.exporter.otlp.proto.http")


class Receiver:
    """Decodes OTLP/HTTP protobuf requests; ``answers`` is the status of each next request (then 200)."""

    def __init__(self) -> None:
        self.logs: list = []
        self.spans: list = []
        self.requests = 0
        self.answers: list[int] = []
        self.always: int | None = None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                receiver.requests += 1
                status = receiver.always or (receiver.answers.pop(0) if receiver.answers else 200)
                if status == 200:
                    if self.path == "/v1/logs":
                        request = logs_service.ExportLogsServiceRequest.FromString(body)
                        receiver.logs += [r for rl in request.resource_logs for sl in rl.scope_logs for r in sl.log_records]
                        reply = logs_service.ExportLogsServiceResponse().SerializeToString()
                    else:
                        request = trace_service.ExportTraceServiceRequest.FromString(body)
                        receiver.spans += [s for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]
                        reply = trace_service.ExportTraceServiceResponse().SerializeToString()
                else:
                    reply = b""
                self.send_response(status)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(reply)))
                self.end_headers()
                self.wfile.write(reply)

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    made = Receiver()
    thread = threading.Thread(target=made.server.serve_forever, daemon=True)
    thread.start()
    yield made
    made.server.shutdown()
    made.server.server_close()


def _text_bytes(number: int) -> bytes:
    return uuid.UUID(str(activity_id(number))).bytes


def test_every_event_arrives_once_and_spans_nest_as_activities_say(tmp_path: Path, receiver: Receiver) -> None:
    source = activity_trace(tmp_path / "requests.etl")
    summary = export_timeline([str(source)], "", "otlp", endpoint=receiver.url, otlp_options={"batch_size": 16})
    assert summary.delivery["refused"] == 0 and summary.delivery["exported"] == len(receiver.logs) + len(receiver.spans)
    # every record is a log record or one end of a span
    assert len(receiver.logs) + 2 * len(receiver.spans) == summary.stats.records == 142
    assert len(receiver.spans) == 60
    assert len({(span.trace_id, span.span_id) for span in receiver.spans}) == 60
    progress = [record for record in receiver.logs if record.body.string_value == "Progress"]
    assert len(progress) == 20 and {record.severity_text for record in progress} == {"INFO"}
    fields = {attribute.key: attribute.value for attribute in progress[0].attributes}
    assert fields["etw.provider"].string_value == "Contoso.Requests" and fields["etw.field.step"].string_value == "Progress"
    by_id = {span.span_id: span for span in receiver.spans}
    for number in range(20):
        request = 1 + number * 10
        root = by_id[_text_bytes(request)[:8]]
        assert root.name == "Request" and root.trace_id == _text_bytes(request) and not root.parent_span_id
        for child, name in ((request + 1, "Query"), (request + 2, "Render")):
            span = by_id[_text_bytes(child)[:8]]
            assert span.name == name and span.parent_span_id == root.span_id and span.trace_id == root.trace_id
            assert root.start_time_unix_nano <= span.start_time_unix_nano <= span.end_time_unix_nano <= root.end_time_unix_nano


def test_a_refusing_receiver_is_counted(tmp_path: Path, receiver: Receiver, capsys: pytest.CaptureFixture[str]) -> None:
    source = activity_trace(tmp_path / "requests.etl")
    receiver.always = 400
    assert main(["export", str(source), "--to", "otlp", "--endpoint", receiver.url, "--json", "--quiet"]) == 1
    captured = capsys.readouterr()
    summary = json.loads(captured.out)
    assert summary["exported"] == 0 and summary["refused"] == 22 + 60 and summary["retried"] == 0
    assert "refused" in captured.err and not receiver.logs and receiver.requests == 2


def test_a_busy_receiver_is_retried(tmp_path: Path, receiver: Receiver) -> None:
    source = activity_trace(tmp_path / "requests.etl")
    receiver.answers = [503]
    summary = export_timeline([str(source)], "", "otlp", endpoint=receiver.url)
    assert summary.delivery == {"exported": 82, "refused": 0, "retried": 1, "log_records": 22, "spans": 60}
    assert len(receiver.logs) == 22 and len(receiver.spans) == 60


def test_live_trace_to_otlp(receiver: Receiver, service, producers) -> None:  # type: ignore[no-untyped-def]
    import subprocess
    import sys
    import time

    from openetw.controller import Session

    provider = "Test.Otlp"
    producer = producers()
    producer.register(provider)
    with Session.start("ToCollector", mode="realtime", providers=[provider]) as session:
        viewer = subprocess.Popen(
            [sys.executable, "-m", "openetw", "trace", "--session", "ToCollector", "--otlp", receiver.url],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 10
            while session.info()["realtime_consumers"] == 0 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert producer.wait_enabled(provider)
            producer.write(provider, 3, event="Shown")
            session.flush()
        except BaseException:
            viewer.kill()
            raise
    try:
        _out, err = viewer.communicate(timeout=30)
    finally:
        viewer.kill()
    assert "exported 3, refused 0, retried 0" in err, err
    shown = [record for record in receiver.logs if record.body.string_value == "Shown"]
    assert len(shown) == 3
    fields = {attribute.key: attribute.value for attribute in shown[0].attributes}
    assert fields["etw.provider"].string_value == provider
