"""The whole loop on the real vLLM engine (its CPU build, in the environment `make vllm-env` builds).

`run_demo(server="vllm")`: vLLM serves a tiny Qwen3 -> the real LLMProxy -> agentlightning's
runners -> collect -> transform -> train -> iteration 2 serves the trained model with vLLM
again. A transparent tap between the proxy and vLLM keeps every response vLLM sent, so the
test can check that the token ids archived for each call are the ones vLLM returned, and
that each dataset version holds exactly the rows upstream's `LlmProxyTraceToTriplet` and
the recipe's data step build from the same spans.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
from tracebank.loop import DemoConfig
from tracebank.loop.demo import run_demo
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql

from tests.collect.helpers import stored_span_rows
from tests.transform.oracle import oracle_rows, row_key

ROLLOUTS = 4
#: Headers the tap sets itself (it relays the decoded body whole).
HOP_HEADERS = ("content-length", "transfer-encoding", "connection", "content-encoding")
JSON_COLUMNS = ("status", "attributes", "events", "links", "context", "parent", "resource")


class Tap:
    """An HTTP pass-through to ``upstream`` that keeps each chat-completion response body it relays."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.responses: list[dict[str, Any]] = []
        tap = self

        class Handler(BaseHTTPRequestHandler):
            def _relay(self, method: str) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else None
                skip = ("host", "content-length")
                headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
                with httpx.Client(timeout=600) as client:
                    resp = client.request(method, tap.upstream + self.path, content=body, headers=headers)
                if self.path.endswith("/chat/completions") and resp.status_code == 200:
                    tap.responses.append(resp.json())
                self.send_response(resp.status_code)
                for key, value in resp.headers.items():
                    if key.lower() not in HOP_HEADERS:
                        self.send_header(key, value)
                self.send_header("content-length", str(len(resp.content)))
                self.end_headers()
                self.wfile.write(resp.content)

            def do_GET(self) -> None:  # noqa: N802 (http.server's names)
                self._relay("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._relay("POST")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"


@pytest.fixture(scope="module")
def vllm_demo(tmp_path_factory):
    import tracebank.loop.round as round_module
    from tracebank.serve.vllm_env import ensure_vllm_env

    ensure_vllm_env()  # built by `make vllm-env` (a dependency of `make test`), else here, once
    tmp = tmp_path_factory.mktemp("vllm-demo")
    taps: list[Tap] = []
    real_launch = round_module.launch

    def launch_behind_a_tap(*args: Any, **kwargs: Any) -> Any:
        server = real_launch(*args, **kwargs)
        tap = Tap(server.base_url.removesuffix("/v1"))
        taps.append(tap)
        return dataclasses.replace(server, base_url=f"{tap.url}/v1")

    patch = pytest.MonkeyPatch()
    patch.setattr(round_module, "launch", launch_behind_a_tap)
    try:
        wh = Warehouse(tmp / "warehouse")
        config = DemoConfig(
            work_dir=tmp / "models",
            rollouts=ROLLOUTS,
            runners=2,
            iterations=2,
            train=dataclasses.replace(DemoConfig().train, max_steps=2),
            timeout_s=600,
            server="vllm",
        )
        result = run_demo(wh, config, on_event=lambda event: None)
    finally:
        patch.undo()
        for tap in taps:
            tap.server.shutdown()
    return result, wh, config, taps


def test_both_iterations_were_served_by_vllm_the_second_on_the_trained_model(vllm_demo):
    result, wh, _, taps = vllm_demo
    first, second = result.rounds
    assert len(taps) == 2 and all(tap.responses for tap in taps)
    for r in (first, second):
        assert "vllm.entrypoints.openai.api_server" in r.server_command
    assert second.server_command[second.server_command.index("--model") + 1] == first.next_model
    assert {resp["system_fingerprint"].split("-")[0] for tap in taps for resp in tap.responses} == {"vllm"}
    runs = run_sql(wh, "SELECT base_model, output_dir, status FROM runs ORDER BY started_at").to_pylist()
    assert [(r["base_model"], r["status"]) for r in runs] == [
        (first.model, "succeeded"),
        (second.model, "succeeded"),
    ]


def test_archived_token_ids_are_the_ones_vllm_returned(vllm_demo):
    _, wh, _, taps = vllm_demo
    sent = {
        resp["id"]: (resp["prompt_token_ids"], resp["choices"][0]["token_ids"])
        for tap in taps
        for resp in tap.responses
    }
    assert all(prompt and response for prompt, response in sent.values())
    calls = run_sql(
        wh,
        "SELECT response_id, prompt_token_ids, response_token_ids FROM llm_calls WHERE reject_reason IS NULL",
    ).to_pylist()
    archived = {c["response_id"]: (c["prompt_token_ids"], c["response_token_ids"]) for c in calls}
    assert archived.keys() == sent.keys()  # every call vLLM answered, and nothing else
    assert archived == sent


def bronze_spans(wh: Warehouse, collection_id: str) -> dict[str, list[Any]]:
    """The spans of each rollout's latest attempt, rebuilt as agentlightning Spans from the bronze table."""
    from agentlightning import Span

    latest = {
        r["rollout_id"]: r["attempt_id"]
        for r in run_sql(
            wh,
            "SELECT rollout_id, arg_max(attempt_id, sequence_id) AS attempt_id FROM attempts "
            f"WHERE collection_id = '{collection_id}' GROUP BY rollout_id",
        ).to_pylist()
    }
    # The stored rows (epoch floats, as Span wants them), not the views' UTC timestamps.
    rows = [r for r in stored_span_rows(wh) if r.pop("collection_id") == collection_id]
    spans: dict[str, list[Any]] = {rollout: [] for rollout in latest}
    for row in rows:
        if latest.get(row["rollout_id"]) != row["attempt_id"]:
            continue
        for column in JSON_COLUMNS:
            row[column] = json.loads(row[column]) if row[column] is not None else None
        spans[row["rollout_id"]].append(Span.model_validate(row))
    return spans


def test_dataset_rows_are_upstreams_rows_for_the_same_spans(vllm_demo):
    result, wh, config, _ = vllm_demo
    for version, round_result in enumerate(result.rounds, start=1):
        cid = round_result.collection.collection_id
        ours = run_sql(
            wh,
            "SELECT input_ids, attention_mask, labels, reward FROM dataset_rows "
            f"WHERE dataset = '{config.transform.name}' AND version = {version}",
        ).to_pylist()
        selection = {"triplet_fraction": config.transform.top_fraction, "seed": config.transform.seed}
        expected = oracle_rows(bronze_spans(wh, cid), **selection)
        assert ours and Counter(map(row_key, ours)) == Counter(map(row_key, expected))
