"""`tracebank receive`: the OpenTelemetry SDK's own OTLP/HTTP exporter sends GenAI chat spans to a
running receiver, and `sql` finds the calls; hostile requests get their status and the server
keeps running; stopping commits what is held."""

from __future__ import annotations

import gzip
import http.client
import json
import threading
import time

import pytest

import tracebank
from tests.collect.helpers import receive_cli, wait_for

TOKEN = "s3cret-token"
INPUTS = [{"role": "user", "parts": [{"type": "text", "content": "What is 2+2?"}]}]
OUTPUTS = [{"role": "assistant", "parts": [{"type": "text", "content": "4"}], "finish_reason": "stop"}]


class Running:
    """A receiver serving in a thread of this process until ``stop()``."""

    def __init__(self, root, **options):
        self.wh = tracebank.open(root)
        self.stop_event = threading.Event()
        self.ready = threading.Event()
        self.url = ""
        self.result = None

        def ready(url):
            self.url = url
            self.ready.set()

        def run():
            self.result = self.wh.receive(stop=self.stop_event, on_ready=ready, port=0, **options)

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()
        assert self.ready.wait(30)
        self.port = int(self.url.rsplit(":", 1)[1].split("/")[0])

    def stop(self):
        self.stop_event.set()
        self.thread.join(60)
        return self.result


def _export(url, headers=None):
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "agent"}))
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(endpoint=url, headers=headers)))
    tracer = provider.get_tracer("test-agent")
    with tracer.start_as_current_span("invoke_agent") as agent:
        agent.set_attribute("tracebank.reward", 1.0)
        for turn in range(2):
            with tracer.start_as_current_span("chat m") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.request.model", "tiny")
                span.set_attribute("gen_ai.input.messages", json.dumps(INPUTS))
                span.set_attribute("gen_ai.output.messages", json.dumps(OUTPUTS))
                span.set_attribute("gen_ai.usage.input_tokens", 7 + turn)
        trace_id = format(agent.get_span_context().trace_id, "032x")
    provider.shutdown()
    return trace_id


def _calls(wh):
    """llm_calls rows so far (0 before the first commit made the warehouse)."""
    from tracebank.core.errors import WarehouseError

    try:
        return wh.sql("SELECT count(*) FROM llm_calls").rows()[0][0]
    except WarehouseError:
        return 0


def _post(port, body, content_type="application/json", path="/v1/traces", headers=None):
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    conn.request("POST", path, body=body, headers={"Content-Type": content_type, **(headers or {})})
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.status


def test_the_sdk_exporter_sends_chat_spans_that_sql_finds(tmp_path):
    running = Running(tmp_path / "wh", batch_seconds=0.2)
    trace_id = _export(running.url)
    assert wait_for(lambda: _calls(running.wh) == 2, 60, interval=0.1)
    result = running.stop()
    assert (result.spans, result.conversations, result.bad) == (3, 1, 0)
    rows = running.wh.sql("SELECT rollout_id FROM llm_calls").rows()
    assert {r[0] for r in rows} == {trace_id}
    roles = running.wh.sql("SELECT role, content FROM messages ORDER BY role").rows()
    assert ("user", "What is 2+2?") in roles and ("assistant", "4") in roles
    assert running.wh.sql("SELECT value FROM rewards").rows() == [(1.0,)]
    _rows_through_the_chat_template(running.wh, tmp_path)


def _rows_through_the_chat_template(wh, tmp_path):
    """The received text calls become one row with ``--tokenizer``: the oracle is transformers'
    rendering of the conversation (the last call's request + its answer) and its assistant mask."""
    import pyarrow.parquet as pq
    from transformers import AutoTokenizer

    from tests.fixtures.text_calls import build_chat_tokenizer

    folder = build_chat_tokenizer(tmp_path / "tokenizer")
    version = wh.transform("otel", tokenizer=str(folder), val_fraction=0.0)
    (row,) = [
        r for f in version.manifest["files"] for r in pq.read_table(version.folder / f["path"]).to_pylist()
    ]
    messages = [{"role": "user", "content": "What is 2+2?"}, {"role": "assistant", "content": "4"}]
    rendered = AutoTokenizer.from_pretrained(str(folder)).apply_chat_template(
        messages, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
    )
    assert row["input_ids"] == list(rendered["input_ids"])
    assert row["labels"] == [
        t if m else -100 for t, m in zip(rendered["input_ids"], rendered["assistant_masks"], strict=True)
    ]
    assert version.manifest["counts"]["token_source"] == {"engine": 0, "text": 1}


def test_a_json_body_gzip_and_every_refusal_while_the_server_keeps_running(tmp_path, monkeypatch):
    monkeypatch.setenv("OTLP_TOKEN", TOKEN)
    running = Running(tmp_path / "wh", batch_seconds=60, max_body=4096, token_env="OTLP_TOKEN")
    auth = {"Authorization": f"Bearer {TOKEN}"}
    span = {
        "traceId": "ab" * 16, "spanId": "cd" * 8, "startTimeUnixNano": "1000000000",
        "attributes": [
            {"key": "gen_ai.operation.name", "value": {"stringValue": "chat"}},
            {"key": "gen_ai.input.messages", "value": {"stringValue": json.dumps(INPUTS)}},
            {"key": "gen_ai.output.messages", "value": {"stringValue": json.dumps(OUTPUTS)}},
        ],
    }  # fmt: skip
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
    assert _post(running.port, body) == 401
    assert _post(running.port, body, headers={"Authorization": "Bearer wrong"}) == 401
    assert _post(running.port, body, path="/v1/metrics", headers=auth) == 404
    assert _post(running.port, body, content_type="text/plain", headers=auth) == 415
    assert _post(running.port, b"\x0a\xff\xff\xff\x0f", "application/x-protobuf", headers=auth) == 400
    assert _post(running.port, b"[" * 3000, headers=auth) == 400
    bomb = gzip.compress(b" " * 100_000)
    assert _post(running.port, bomb, headers={**auth, "Content-Encoding": "gzip"}) == 413
    conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=30)
    conn.putrequest("POST", "/v1/traces")  # a huge Content-Length: refused before any body is read
    for key, value in {**auth, "Content-Type": "application/json", "Content-Length": str(10**12)}.items():
        conn.putheader(key, value)
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()
    assert _post(running.port, gzip.compress(body), headers={**auth, "Content-Encoding": "gzip"}) == 200
    result = running.stop()  # batch_seconds=60: only the stop commits it
    assert (result.conversations, result.commits) == (1, 1)
    assert running.wh.sql("SELECT rollout_id FROM llm_calls").rows() == [("ab" * 16,)]


def test_a_remote_host_needs_the_flag_and_a_token(tmp_path):
    from tracebank.collect.errors import CollectUsageError

    wh = tracebank.open(tmp_path / "wh")
    with pytest.raises(CollectUsageError, match="not loopback"):
        wh.receive(host="0.0.0.0", port=0)
    with pytest.raises(CollectUsageError, match="token"):
        wh.receive(host="0.0.0.0", port=0, allow_remote=True)


def test_the_cli_commits_what_it_holds_on_sigterm(tmp_path):
    root = tmp_path / "wh"
    trace_id, run = receive_cli(root, _export)
    assert run.returncode == 0, run.stderr
    assert "committed 1 conversations" in run.stdout
    rows = tracebank.open(root).sql("SELECT DISTINCT rollout_id FROM llm_calls").rows()
    assert rows == [(trace_id,)]


def test_ctrl_c_sets_stop_wherever_it_lands_and_a_second_one_interrupts():
    """The finding (make bench): a SIGINT that arrived while a commit ran was swallowed by the
    commit and the receiver served on. Now the signal only sets ``stop``; the commit in flight
    finishes, then the receiver commits the rest and returns."""
    import os
    import signal

    from tracebank.collect.receiver import _restore_signals, _stop_on_signals

    stop = threading.Event()
    before = signal.getsignal(signal.SIGINT)
    previous = _stop_on_signals(stop)
    try:
        os.kill(os.getpid(), signal.SIGINT)
        assert wait_for(stop.is_set, 5, interval=0.01)
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)  # the handler runs between bytecodes of this thread
    finally:
        _restore_signals(previous)
    assert signal.getsignal(signal.SIGINT) is before
