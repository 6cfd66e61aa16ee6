"""End to end: a real `agl store`, a real LLMProxy (serve.proxy) and the CPU server as a subprocess.

The proxy must record every chat call into the store with the token ids the
model server returned. Both library breakages (LiteLLM's master-key refusal and
the OTLP exporter that ignores the store endpoint from otel 1.44 on) are shown
on the stock path and must stay fixed on tracebank's.
"""

from __future__ import annotations

import ast
import asyncio
import json
import time
from typing import Any

import httpx
import pytest
from tracebank.serve.config import ProxyConfig
from tracebank.serve.process import free_port
from tracebank.serve.proxy import (
    generate_api_key,
    model_list,
    otlp_exporter_binds_endpoint_at_init,
    start_llm_proxy,
)
from tracebank.warehouse.contract import LLM_SPAN_NAMES

from tests.serve.conftest import MODEL_NAME

MESSAGES = [
    {"role": "system", "content": "Answer with a number."},
    {"role": "user", "content": "What is 6*7?"},
]
CALL_SPANS = set(LLM_SPAN_NAMES)


async def _start_attempt(store_url: str) -> Any:
    from agentlightning import LightningStoreClient

    client = LightningStoreClient(store_url)
    try:
        return await client.start_rollout(input={"q": "6*7"}, mode="train")
    finally:
        await client.close()


async def _spans(store_url: str, rollout_id: str, attempt_id: str, want: set[str], timeout: float) -> list:
    """The attempt's spans once every name in ``want`` is there, or whatever is there at ``timeout``."""
    from agentlightning import LightningStoreClient

    client = LightningStoreClient(store_url)
    deadline = time.monotonic() + timeout
    try:
        while True:
            spans = list(await client.query_spans(rollout_id, attempt_id))
            if want <= {s.name for s in spans} or time.monotonic() > deadline:
                return spans
            await asyncio.sleep(0.2)
    finally:
        await client.close()


def _one(spans: list, name: str) -> Any:
    found = [s for s in spans if s.name == name]
    assert len(found) == 1, [s.name for s in spans]
    return found[0]


def _direct(cpu_server, **fields) -> dict:
    """What the model server itself answers (greedy, so the proxied call got the same)."""
    body = {"model": MODEL_NAME, "messages": MESSAGES, "temperature": 0, "return_token_ids": True, **fields}
    resp = httpx.post(f"{cpu_server.base_url}/chat/completions", json=body, timeout=60)
    assert resp.status_code == 200, resp.text
    return resp.json()


@pytest.fixture(scope="module")
def proxy(store_url, cpu_server):
    config = ProxyConfig(backend_url=cpu_server.base_url, backend_model=MODEL_NAME)
    started = asyncio.run(start_llm_proxy(store_url, config))
    yield started
    asyncio.run(started.stop())


def test_model_list_and_resource_carry_backend_and_key(proxy, cpu_server):
    assert model_list(ProxyConfig(backend_url="http://h:1/v1", backend_model="m", model_name="agent")) == [
        {"model_name": "agent", "litellm_params": {"model": "hosted_vllm/m", "api_base": "http://h:1/v1"}}
    ]
    llm = proxy.as_resource()
    assert type(llm).__name__ == "ProxyLLM" and llm.model == MODEL_NAME
    assert llm.api_key == proxy.api_key and proxy.api_key.startswith("sk-tracebank-")
    port = proxy.server_launcher_args.port
    assert llm.get_base_url("ro-1", "at-1") == f"http://127.0.0.1:{port}/rollout/ro-1/attempt/at-1"
    assert generate_api_key() != generate_api_key()


def test_proxy_records_token_ids_of_a_rollout_call(proxy, store_url, cpu_server, tiny_tokenizer):
    from openai import OpenAI

    attempted = asyncio.run(_start_attempt(store_url))
    rid, aid = attempted.rollout_id, attempted.attempt.attempt_id
    # What a runner does with the published resource: bake the rollout into the endpoint.
    llm = proxy.as_resource().with_attempted_rollout(attempted)
    client = OpenAI(base_url=llm.endpoint, api_key=llm.api_key)
    resp = client.chat.completions.create(model=llm.model, messages=MESSAGES, max_tokens=6, temperature=0)
    served = _direct(cpu_server, max_tokens=6)

    spans = asyncio.run(_spans(store_url, rid, aid, CALL_SPANS, timeout=30))
    raw, request = _one(spans, "raw_gen_ai_request"), _one(spans, "litellm_request")
    attrs = raw.attributes
    assert attrs["llm.hosted_vllm.return_token_ids"] is True  # the proxy's callback asked for them
    prompt_ids = ast.literal_eval(attrs["llm.hosted_vllm.prompt_token_ids"])
    [choice] = ast.literal_eval(attrs["llm.hosted_vllm.choices"])
    assert prompt_ids == served["prompt_token_ids"]
    assert choice["token_ids"] == served["choices"][0]["token_ids"]
    assert len(choice["token_ids"]) == 6
    assert tiny_tokenizer.decode(prompt_ids) == tiny_tokenizer.apply_chat_template(
        MESSAGES, add_generation_prompt=True, tokenize=False
    )
    assert choice["message"]["content"] == resp.choices[0].message.content
    assert attrs["llm.hosted_vllm.id"] == request.attributes["gen_ai.response.id"] == resp.id

    recorded = json.loads(request.attributes["gen_ai.input.messages"])
    assert [(m["role"], "".join(p["content"] for p in m["parts"])) for m in recorded] == [
        (m["role"], m["content"]) for m in MESSAGES
    ]
    [out] = json.loads(request.attributes["gen_ai.output.messages"])
    assert out["parts"][0]["content"] == resp.choices[0].message.content

    # One request is one sequence id, on every span of it, all in this rollout's attempt.
    assert {(s.rollout_id, s.attempt_id, s.sequence_id) for s in spans} == {(rid, aid, 1)}
    # The master key is not written into the store (LiteLLM records a label, not the key).
    assert all(proxy.api_key not in json.dumps(s.attributes, default=str) for s in spans)


def test_streamed_calls_are_recorded_with_token_ids(proxy, store_url, cpu_server):
    from openai import OpenAI

    attempted = asyncio.run(_start_attempt(store_url))
    rid, aid = attempted.rollout_id, attempted.attempt.attempt_id
    llm = proxy.as_resource()
    client = OpenAI(base_url=llm.get_base_url(rid, aid), api_key=llm.api_key)
    for _ in range(2):
        stream = client.chat.completions.create(
            model=llm.model, messages=MESSAGES, max_tokens=4, temperature=0, stream=True
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    served = _direct(cpu_server, max_tokens=4)
    assert text == served["choices"][0]["message"]["content"]

    deadline = time.monotonic() + 30
    while True:
        spans = asyncio.run(_spans(store_url, rid, aid, CALL_SPANS, timeout=30))
        raws = [s for s in spans if s.name == "raw_gen_ai_request"]
        if len(raws) == 2 or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert sorted(s.sequence_id for s in raws) == [1, 2]
    for raw in raws:
        assert raw.attributes["llm.hosted_vllm.stream"] is False  # the proxy's middleware un-streams
        [choice] = ast.literal_eval(raw.attributes["llm.hosted_vllm.choices"])
        assert choice["token_ids"] == served["choices"][0]["token_ids"]


def test_proxy_refuses_calls_without_its_key(proxy):
    url = proxy.as_resource().get_base_url("ro-x", "at-x") + "/chat/completions"
    body = {"model": MODEL_NAME, "messages": MESSAGES, "max_tokens": 2}
    # LiteLLM's refusal status varies (401, or 400/500 from its virtual-key database lookup,
    # which has no database here); what matters is that nothing gets through.
    for headers in ({}, {"Authorization": "Bearer sk-wrong"}):
        refused = httpx.post(url, json=body, timeout=30, headers=headers)
        assert refused.status_code >= 400 and "choices" not in refused.text, refused.text
    ok = httpx.post(url, json=body, timeout=30, headers={"Authorization": f"Bearer {proxy.api_key}"})
    assert ok.status_code == 200 and ok.json()["choices"], ok.text


def test_stock_llm_proxy_refuses_to_start_without_a_master_key(store_url, monkeypatch):
    """Breakage (a): why TracebankLLMProxy sets a key. If this starts failing, LiteLLM relented."""
    import agentlightning as agl

    monkeypatch.delenv("LITELLM_MASTER_KEY", raising=False)
    monkeypatch.delenv("LITELLM_DANGEROUSLY_PERMIT_WEAK_OR_UNSET_MASTER_KEY", raising=False)
    stock = agl.LLMProxy(
        port=free_port(),
        host="127.0.0.1",
        store=agl.LightningStoreClient(store_url),
        model_list=model_list(ProxyConfig(backend_url="http://127.0.0.1:9/v1", backend_model=MODEL_NAME)),
    )
    with pytest.raises(RuntimeError, match="did not start"):
        asyncio.run(stock.start())


def _probe_span(rollout_id: str, attempt_id: str) -> Any:
    """One finished OTel span carrying the resource attributes the proxy's exporter stamps on."""
    from agentlightning.semconv import LightningResourceAttributes as R
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create(
            {R.ROLLOUT_ID.value: rollout_id, R.ATTEMPT_ID.value: attempt_id, R.SPAN_SEQUENCE_ID.value: 1}
        )
    )
    provider.add_span_processor(SimpleSpanProcessor(memory))
    with provider.get_tracer("tracebank-test").start_as_current_span("probe") as span:
        span.set_attribute("probe", True)
    provider.shutdown()
    return memory.get_finished_spans()[0]


def test_endpoint_assignment_reaches_the_store_only_with_tracebanks_exporter(store_url):
    """Breakage (b) in isolation: what LightningSpanExporter does at export time, on both exporters."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExportResult
    from tracebank.serve.proxy import EndpointFollowingOTLPExporter

    endpoint = f"{store_url}/v1/traces"
    closed = f"http://127.0.0.1:{free_port()}/v1/traces"  # stands in for the default localhost:4318
    ours = EndpointFollowingOTLPExporter(closed)
    stock = OTLPSpanExporter(endpoint=closed, timeout=1)
    for exporter, expect_arrival in ((ours, True), (stock, not otlp_exporter_binds_endpoint_at_init())):
        attempted = asyncio.run(_start_attempt(store_url))
        rid, aid = attempted.rollout_id, attempted.attempt.attempt_id
        exporter._endpoint = endpoint  # exactly what the proxy's LightningSpanExporter does
        result = exporter.export([_probe_span(rid, aid)])
        spans = asyncio.run(_spans(store_url, rid, aid, {"probe"}, timeout=3 if expect_arrival else 0))
        assert ([s.name for s in spans] == ["probe"]) is expect_arrival, type(exporter).__name__
        assert (result == SpanExportResult.SUCCESS) is expect_arrival
        exporter.shutdown()


def test_stock_exporter_loses_proxy_spans_on_this_otel(store_url, cpu_server, monkeypatch):
    """Breakage (b) end to end: the same proxy without tracebank's exporter records nothing.

    With otel < 1.44 (endpoint not bound at build time) the stock path works and this
    asserts that instead, so it holds on either side of the change.
    """
    from openai import OpenAI
    from tracebank.serve.proxy import TracebankLLMProxy

    # The forked proxy's exporter gives up on localhost:4318 after 1 s instead of about 6 s.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_TIMEOUT", "1")
    config = ProxyConfig(backend_url=cpu_server.base_url, backend_model=MODEL_NAME)
    stock = TracebankLLMProxy(
        port=free_port(),
        host="127.0.0.1",
        store=_client(store_url),
        model_list=model_list(config),
        fix_otlp_exporter=False,
    )
    asyncio.run(stock.start())
    try:
        attempted = asyncio.run(_start_attempt(store_url))
        rid, aid = attempted.rollout_id, attempted.attempt.attempt_id
        llm = stock.as_resource()
        OpenAI(base_url=llm.get_base_url(rid, aid), api_key=llm.api_key).chat.completions.create(
            model=MODEL_NAME, messages=MESSAGES, max_tokens=2, temperature=0
        )
        lost = otlp_exporter_binds_endpoint_at_init()
        # Lost spans never arrive; wait well past the exporter's 1 s give-up time.
        spans = asyncio.run(
            _spans(store_url, rid, aid, CALL_SPANS if not lost else {"never"}, timeout=4 if lost else 30)
        )
        names = {s.name for s in spans}
        if lost:
            assert names == set(), f"otel binds the endpoint at build time, yet spans arrived: {names}"
        else:
            assert names >= CALL_SPANS
    finally:
        asyncio.run(stock.stop())


def _client(store_url: str) -> Any:
    from agentlightning import LightningStoreClient

    return LightningStoreClient(store_url)
