"""One real round on the CPU: `agl store`, TracebankLLMProxy, the CPU server, agentlightning's runners.

The toy agent logs every chat call it makes (messages sent, answer, response id);
the round must have recorded each of them with token ids, the dataset rows must
be exactly the ids of that chat text (and decode to it, NFC-normalized as Qwen's
tokenizer does), and training must leave a loadable model and
a run record. If the proxy stops recording spans (e.g. the OTLP exporter of a
newer opentelemetry sending them elsewhere), the call counts here stop matching.
"""

from __future__ import annotations

import asyncio
import os
import socket
import time

import pytest
from tracebank.core.events import Event, RolloutProgress, ServerReady
from tracebank.loop import LocalRunners, RoundConfig, RoundTimeoutError, ServerConfig, StagesConfig, run_round
from tracebank.loop.config import train_template
from tracebank.loop.toy_agent import LOG_ENV, make_tasks, read_log, toy_agent
from tracebank.transform.config import TransformConfig
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql

N_TASKS = 6
CPU = ServerConfig(kind="cpu", default_max_tokens=16, threads=1)


@pytest.fixture(scope="module")
def round_run(store_url, model_v0, tmp_path_factory):
    """A round of N_TASKS toy tasks chained to training; yields (result, warehouse, agent log records)."""
    tmp = tmp_path_factory.mktemp("round")
    wh = Warehouse(tmp / "warehouse").init()
    log = tmp / "agent.jsonl"
    old = os.environ.get(LOG_ENV)
    os.environ[LOG_ENV] = str(log)  # the forked runners inherit it
    try:
        config = RoundConfig(
            server=CPU,
            stages=StagesConfig(
                then="train",
                tag="round-test",
                transform=TransformConfig(name="toy", top_fraction=0.5),
                train=train_template(max_steps=2),
            ),
            timeout_s=120,
            poll_interval_s=0.3,
        )
        events: list[Event] = []
        with LocalRunners(store_url, toy_agent(), n=2):
            result = run_round(
                store_url, make_tasks(N_TASKS, seed=1), model_v0, config, wh=wh, on_event=events.append
            )
    finally:
        os.environ.pop(LOG_ENV) if old is None else os.environ.__setitem__(LOG_ENV, old)
    yield result, wh, read_log(log), events


def _calls(records):
    return [call for r in records for call in r["calls"]]


def test_every_rollout_succeeded_and_was_collected_with_its_tag(round_run):
    result, wh, records, events = round_run
    assert result.statuses == {"succeeded": N_TASKS}
    assert sorted(r["rollout_id"] for r in records) == sorted(result.rollout_ids)
    [collection] = run_sql(wh, "SELECT collection_id, tag FROM collections").to_pylist()
    assert collection == {"collection_id": result.collection.collection_id, "tag": "round-test"}
    rollouts = run_sql(wh, "SELECT rollout_id, status, resources_id FROM rollouts").to_pylist()
    assert sorted(r["rollout_id"] for r in rollouts) == sorted(result.rollout_ids)
    assert {(r["status"], r["resources_id"]) for r in rollouts} == {("succeeded", result.resources_id)}
    progress = [e for e in events if isinstance(e, RolloutProgress)]
    assert progress[-1].done == progress[-1].total == N_TASKS


def test_the_proxy_recorded_token_ids_for_every_call_the_agent_made(round_run, model_v0):
    result, wh, records, _ = round_run
    calls = _calls(records)
    assert len(calls) >= N_TASKS  # one or two per rollout
    recorded = run_sql(
        wh,
        """
        SELECT response_id, model, len(prompt_token_ids) AS p, len(response_token_ids) AS r, reject_reason
        FROM llm_calls""",
    ).to_pylist()
    with_ids = [c for c in recorded if c["reject_reason"] is None and c["p"] > 0 and c["r"] > 0]
    assert len(with_ids) == len(calls) == len(recorded)
    assert sorted(c["response_id"] for c in with_ids) == sorted(c["response_id"] for c in calls)
    # Served under its folder path (as vLLM does), so each span names the model that answered.
    assert {c["model"] for c in recorded} == {str(model_v0)}
    rewards = run_sql(wh, "SELECT rollout_id, value FROM rewards ORDER BY rollout_id").to_pylist()
    assert rewards == sorted(
        ({"rollout_id": r["rollout_id"], "value": r["reward"]} for r in records),
        key=lambda x: x["rollout_id"],
    )


def test_dataset_rows_decode_to_the_exact_chat_text_the_agent_exchanged(round_run, tokenizer):
    result, wh, records, _ = round_run
    by_response = {c["response_id"]: c for c in _calls(records)}
    rows = run_sql(
        wh,
        """
        SELECT d.input_ids, d.labels, d.reward, c.response_id
        FROM dataset_rows d JOIN llm_calls c USING (span_id)
        WHERE d.dataset = 'toy' AND d.version = 1""",
    ).to_pylist()
    n_calls = len(by_response)
    assert len(rows) == max(1, int(n_calls * 0.5)) == result.dataset.manifest["rows"]
    for row in rows:
        call = by_response[row["response_id"]]
        n_prompt = sum(1 for label in row["labels"] if label == -100)
        prompt, response = row["input_ids"][:n_prompt], row["input_ids"][n_prompt:]
        assert row["labels"][n_prompt:] == response
        template = tokenizer.apply_chat_template(call["messages"], add_generation_prompt=True, tokenize=False)
        assert prompt == tokenizer(template, add_special_tokens=False)["input_ids"]
        # Qwen tokenizers NFC-normalize before BPE (so does vLLM with them): an answer the model
        # spelled decomposed (r + U+0323) comes back composed (U+1E5B) in the next call's prompt.
        template = tokenizer.backend_tokenizer.normalizer.normalize_str(template)
        assert tokenizer.decode(prompt, skip_special_tokens=False) == template
        # As in vLLM, a character whose bytes were still incomplete at the end stays out of the text.
        assert tokenizer.decode(response, skip_special_tokens=True).rstrip("\ufffd") == call["answer"]
        assert tokenizer.decode(row["input_ids"], skip_special_tokens=False) == template + tokenizer.decode(
            response, skip_special_tokens=False
        )
    # Top fraction by reward: no dropped row of the round beats a kept one.
    all_rewards = sorted((r["reward"] for r in records for _ in r["calls"]), reverse=True)
    assert sorted((r["reward"] for r in rows), reverse=True) == all_rewards[: len(rows)]


def test_training_produced_a_loadable_model_and_a_run_record(round_run, model_v0, tokenizer):
    import torch
    from transformers import AutoModelForCausalLM

    result, wh, _, _ = round_run
    assert result.next_model == str(model_v0.parent / "version_1")
    run = result.run
    assert run.status == "succeeded" and run.dataset == "toy@v1" and run.base_model == str(model_v0)
    [row] = run_sql(wh, "SELECT run_id, status, dataset, output_dir FROM runs").to_pylist()
    assert row == {
        "run_id": run.run_id,
        "status": "succeeded",
        "dataset": "toy@v1",
        "output_dir": result.next_model,
    }
    steps = (
        run_sql(
            wh,
            f"SELECT step FROM run_metrics WHERE run_id = '{run.run_id}' AND split = 'train' ORDER BY step",
        )
        .column("step")
        .to_pylist()
    )
    assert steps == [1, 2]
    model = AutoModelForCausalLM.from_pretrained(result.next_model)
    ids = tokenizer.apply_chat_template(
        [{"role": "user", "content": "the cat"}],
        add_generation_prompt=True,
        return_tensors="pt",
        return_dict=True,
    )["input_ids"]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=3, do_sample=False)
    assert out.shape[1] == ids.shape[1] + 3


def _listening(url: str) -> bool:
    host, port = url.split("//")[1].split("/")[0].split(":")
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, int(port))) == 0


def test_a_round_without_runners_times_out_and_stops_its_server(store_url, model_v0):
    config = RoundConfig(server=CPU, timeout_s=1.5, poll_interval_s=0.3)
    events: list[Event] = []
    t0 = time.monotonic()
    with pytest.raises(RoundTimeoutError, match=r"2 of 2 rollouts unfinished after 1.5s"):
        run_round(store_url, [{"text": "a"}, {"text": "b"}], model_v0, config, on_event=events.append)
    assert time.monotonic() - t0 < 60
    [served] = [e for e in events if isinstance(e, ServerReady)]
    assert not _listening(served.url)
    statuses = asyncio.run(_statuses(store_url, "a", "b"))
    assert statuses == ["cancelled", "cancelled"]  # no runner arriving later picks them up


async def _statuses(store_url: str, *texts: str) -> list[str]:
    from agentlightning import LightningStoreClient

    client = LightningStoreClient(store_url)
    try:
        rollouts = await client.query_rollouts()
        return [r.status for r in rollouts if isinstance(r.input, dict) and r.input.get("text") in texts]
    finally:
        await client.close()
