"""A real producer for `tracebank receive`: the ``openai`` client, instrumented by OpenTelemetry's
``opentelemetry-instrumentation-openai-v2`` and exporting with the SDK's OTLP/HTTP exporter, calls
tracebank's CPU server on a tiny local model; `sql` then finds each call with its messages, model,
usage and ``token_source`` 'text' (spans carry no token ids)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from tracebank.serve.process import start_cpu_server

import tracebank
from tests.collect.helpers import receive_cli
from tests.serve.vllm_parity import MESSAGES, TOOL_HISTORY, TOOLS


@pytest.fixture(scope="module")
def cpu_server(tmp_path_factory):
    from tracebank.train.tiny_model import build_tiny_model

    model = build_tiny_model(tmp_path_factory.mktemp("tiny-model"))
    with start_cpu_server(model, served_model_name="tiny", max_model_len=512, threads=1) as server:
        yield server


@pytest.fixture
def instrumented(monkeypatch):
    """The instrumentor's current content setting: messages as span attributes (``span_only``; a bare
    ``true`` is not a mode this release knows and captures nothing), under the latest GenAI semconv."""
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "span_only")
    instrumentor = OpenAIInstrumentor()

    def instrument(provider):
        instrumentor.instrument(tracer_provider=provider)

    yield instrument
    instrumentor.uninstrument()


def _agent(base_url: str, receiver: str, instrument) -> list[Any]:
    """Two chat calls of an instrumented ``openai.OpenAI`` client, exported to ``receiver``."""
    from openai import OpenAI
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "openai-agent"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=receiver)))
    instrument(provider)
    client: Any = OpenAI(base_url=base_url, api_key="unused")
    ask = {"model": "tiny", "max_tokens": 4, "temperature": 0}
    responses = [
        client.chat.completions.create(messages=MESSAGES, **ask),
        client.chat.completions.create(messages=TOOL_HISTORY, tools=TOOLS, tool_choice="none", **ask),
    ]
    assert provider.force_flush(30)
    provider.shutdown()
    return responses


def test_the_openai_v2_instrumentation_exports_calls_that_sql_finds(cpu_server, instrumented, tmp_path):
    root = tmp_path / "wh"
    responses, run = receive_cli(root, lambda url: _agent(cpu_server.base_url, url, instrumented))
    assert run.returncode == 0, run.stderr
    assert "committed 2 conversations" in run.stdout, run.stdout  # no parent span: a trace per call
    wh = tracebank.open(root)
    calls = wh.sql(
        "SELECT rollout_id, span_id, model, prompt_tokens, completion_tokens, token_source, "
        "prompt_token_ids, finish_reason FROM llm_calls ORDER BY prompt_tokens"
    ).rows()
    assert [c[2:6] for c in calls] == [
        ("tiny", r.usage.prompt_tokens, r.usage.completion_tokens, "text") for r in responses
    ]
    assert [c[6] for c in calls] == [[], []]  # text only: ids come from `transform --tokenizer`
    assert [c[7] for c in calls] == [r.choices[0].finish_reason for r in responses]
    for (rollout_id, span_id, *_), sent, got in zip(calls, (MESSAGES, TOOL_HISTORY), responses, strict=True):
        rows = wh.sql(
            "SELECT role, content, tool_calls, tool_call_id FROM messages "
            f"WHERE rollout_id = '{rollout_id}' AND span_id = '{span_id}' ORDER BY direction, message_index"
        ).rows()
        assert [r[:2] for r in rows[:-1]] == [(m["role"], m["content"]) for m in sent]
        assert rows[-1][:2] == ("assistant", got.choices[0].message.content)
    tool_call, tool_result = rows[2][2], rows[3][1:4]  # the history's assistant call and tool answer
    assert json.loads(tool_call) == TOOL_HISTORY[2]["tool_calls"]
    assert tool_result == ("sunny", None, "call_1")
