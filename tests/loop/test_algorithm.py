"""The warehouse-backed Algorithm under `agl.Trainer`, two iterations, through the demo's own code path.

`run_demo` starts a real `agl store`, then `agl.Trainer(algorithm=WarehouseSupervisedFinetuning(...),
n_runners=2, llm_proxy=TracebankLLMProxy(...)).fit(toy_agent, tasks)`. The second iteration must
serve the model the first one trained, and every iteration's spans, dataset version and run must
stay in the warehouse.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
from tracebank.core.events import Event, IterationStarted, MetricLogged, Trained
from tracebank.loop import DemoConfig, LoopUsageError
from tracebank.loop.demo import run_demo
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql

ROLLOUTS = 4


@pytest.fixture(scope="module")
def demo_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("demo")
    wh = Warehouse(tmp / "warehouse")
    events: list[Event] = []
    config = DemoConfig(
        work_dir=tmp / "models",
        rollouts=ROLLOUTS,
        runners=2,
        iterations=2,
        train=replace(DemoConfig().train, max_steps=2),
        timeout_s=120,
    )
    result = run_demo(wh, config, on_event=events.append)
    return result, wh, tmp / "models", events


def test_the_second_iteration_serves_the_model_the_first_trained(demo_run):
    result, wh, models, _ = demo_run
    first, second = result.rounds
    v0, v1, v2 = (str((models / f"version_{i}").resolve()) for i in range(3))
    assert (first.model, first.next_model) == (v0, v1)
    assert (second.model, second.next_model) == (v1, v2)
    # The model server was started on version_1, and the proxy forwarded to it ...
    assert second.server_command[second.server_command.index("--model") + 1] == v1
    assert second.proxy_model_list[0]["litellm_params"]["model"] == f"hosted_vllm/{v1}"
    # ... so every call of iteration 1 was answered by version_1 (the name the server answers to).
    per_tag = run_sql(
        wh,
        """
        SELECT c.tag, list(DISTINCT l.model) AS models, count(*) AS calls
        FROM llm_calls l JOIN collections c USING (collection_id) GROUP BY c.tag ORDER BY c.tag""",
    ).to_pylist()
    assert [(r["tag"], r["models"]) for r in per_tag] == [("iter-0", [v0]), ("iter-1", [v1])]
    runs = run_sql(
        wh, "SELECT dataset, base_model, output_dir, status FROM runs ORDER BY started_at"
    ).to_pylist()
    assert runs == [
        {"dataset": "demo@v1", "base_model": v0, "output_dir": v1, "status": "succeeded"},
        {"dataset": "demo@v2", "base_model": v1, "output_dir": v2, "status": "succeeded"},
    ]
    assert result.final_model == v2 and (models / "version_2" / "config.json").exists()


def test_every_iteration_keeps_its_spans_dataset_and_run(demo_run):
    result, wh, _, _ = demo_run
    per_collection = run_sql(
        wh,
        """
        SELECT c.tag, (SELECT count(*) FROM rollouts r WHERE r.collection_id = c.collection_id) AS rollouts,
               (SELECT count(*) FROM llm_calls l WHERE l.collection_id = c.collection_id
                   AND len(l.prompt_token_ids) > 0 AND len(l.response_token_ids) > 0) AS calls
        FROM collections c ORDER BY c.tag""",
    ).to_pylist()
    assert [(r["tag"], r["rollouts"]) for r in per_collection] == [("iter-0", ROLLOUTS), ("iter-1", ROLLOUTS)]
    assert all(r["calls"] >= ROLLOUTS for r in per_collection)
    versions = run_sql(wh, "SELECT name, version, rows FROM datasets ORDER BY version").to_pylist()
    assert [(v["name"], v["version"]) for v in versions] == [("demo", 1), ("demo", 2)]
    # Each version was built from its own iteration's collection only.
    for round_result, version in zip(result.rounds, (1, 2), strict=True):
        manifest = round_result.dataset.manifest
        assert manifest["version"] == version
        assert [s["collection_id"] for s in manifest["sources"]] == [round_result.collection.collection_id]
    assert result.counts["calls"] == result.counts["calls_with_token_ids"] > 0
    assert result.counts["rollouts"] == 2 * ROLLOUTS


def test_the_summary_queries_run_and_return_rows(demo_run):
    result, wh, _, _ = demo_run
    titles = [title for title, _, _ in result.queries]
    assert len(titles) == 3
    rewards, trajectory, curve = (table.to_pylist() for _, _, table in result.queries)
    assert len(rewards) == min(5, ROLLOUTS) and all(0.0 <= r["reward"] <= 1.0 for r in rewards)
    assert [r["role"] for r in trajectory if r["direction"] == "input"][:2] == ["system", "user"]
    assert [r["step"] for r in curve] == [1, 2]
    # Each query is plain SQL the user can rerun against the warehouse.
    for _, sql, table in result.queries:
        assert run_sql(wh, sql).to_pylist() == table.to_pylist()


def test_progress_events_name_their_iteration(demo_run):
    _, _, _, events = demo_run
    starts = [e for e in events if isinstance(e, IterationStarted)]
    assert [e.iteration for e in starts] == [0, 1]
    assert [e.iteration for e in events if isinstance(e, Trained)] == [0, 1]
    # training progress reaches the Algorithm's caller too (demo and round render it)
    steps = [e.metric.step for e in events if isinstance(e, MetricLogged) and e.metric.split == "train"]
    assert steps == [*range(1, len(steps) // 2 + 1)] * 2 and steps


def test_the_algorithm_refuses_to_run_without_tasks():
    import asyncio

    from tracebank.loop.algorithm import WarehouseSupervisedFinetuning

    algo = WarehouseSupervisedFinetuning("unused-warehouse", "unused-model")
    with pytest.raises(LoopUsageError, match="no tasks"):
        asyncio.run(algo.run(train_dataset=[]))
