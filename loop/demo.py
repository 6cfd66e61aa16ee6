"""``tracebank demo``: the whole loop on one laptop, nothing external.

A real ``agl store`` on loopback, a tiny model built locally, the CPU model
server behind a real LLM proxy, the toy agent (:mod:`tracebank.loop.toy_agent`) run by
agentlightning's own runners under ``agl.Trainer`` with the warehouse-backed
Algorithm (one iteration by default): serve, roll out, collect, transform,
train on the CPU. Then a summary read back from the warehouse with SQL.

Each demo run starts from the newest ``version_N`` under the work folder and
writes ``version_N+1``, so running it again is another round of the loop.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracebank.core.events import ModelReady, OnEvent, StoreStarted
from tracebank.loop.config import AlgorithmConfig, DemoConfig, RoundConfig, ServerConfig, StagesConfig
from tracebank.loop.local import agl_store
from tracebank.loop.result import RoundResult
from tracebank.warehouse.location import Warehouse

if TYPE_CHECKING:
    import pyarrow as pa

#: The tiny model's weight scale: large enough that a few LoRA steps visibly move the loss.
TINY_INIT_RANGE = 0.2


@dataclass
class DemoResult:
    """What the demo did and where it left it."""

    store_url: str
    """The store it ran (gone once the demo ends; the warehouse keeps the data)."""
    base_model: Path
    """The model the first iteration served."""
    rounds: list[RoundResult]
    """One per iteration."""
    seconds: dict[str, float] = field(default_factory=dict)
    """Wall time: setup, loop, total."""
    counts: dict[str, Any] = field(default_factory=dict)
    """What the warehouse holds for this demo's collections."""
    queries: list[tuple[str, str, pa.Table]] = field(default_factory=list)
    """Example ``tracebank sql`` queries: (title, SQL, result)."""

    @property
    def final_model(self) -> str | None:
        return self.rounds[-1].next_model if self.rounds else None


def latest_model(work_dir: Path) -> Path | None:
    """The highest complete ``version_N`` under ``work_dir`` (training publishes a folder whole)."""
    versions = []
    for path in work_dir.glob("version_*"):
        suffix = path.name.removeprefix("version_")
        if suffix.isdigit() and (path / "config.json").exists():
            versions.append((int(suffix), path))
    return max(versions)[1] if versions else None


def prepare_model(work_dir: Path, seed: int = 0, server: str = "cpu") -> tuple[Path, bool]:
    """The model to start from, building ``version_0`` when there is none; (path, built).

    For vLLM it is the tiny Qwen3 (head_dim 64: vLLM's CPU attention refuses the Qwen2's 16).
    """
    found = latest_model(work_dir)
    if found is not None:
        return found.resolve(), False
    from tracebank.train.tiny_model import build_tiny_model, build_tiny_qwen3_model

    target = work_dir / "version_0"
    if server == "vllm":
        return build_tiny_qwen3_model(target, seed=seed, initializer_range=TINY_INIT_RANGE).resolve(), True
    return Path(build_tiny_model(target, seed=seed, initializer_range=TINY_INIT_RANGE)).resolve(), True


def run_demo(wh: Warehouse, config: DemoConfig | None = None, on_event: OnEvent | None = None) -> DemoResult:
    """Run the demo into ``wh``; see the module docstring. Every process it starts is stopped on exit."""
    config = (config or DemoConfig()).validate()
    emit: OnEvent = on_event or (lambda event: None)
    t0 = time.perf_counter()
    wh.init()
    work = Path(config.work_dir).expanduser().resolve()
    logs = work / "logs"
    model, built = prepare_model(work, config.seed, config.server)
    if config.server == "vllm":
        from tracebank.loop.servers import check_vllm

        check_vllm(model, ServerConfig())  # finds (or builds, once) vLLM before anything starts
    emit(ModelReady(str(model), built))
    with agl_store(logs / "agl-store.log") as url:
        emit(StoreStarted(url))
        setup_s = time.perf_counter() - t0
        algo = _train_with_agentlightning(url, wh, model, config, logs, emit)
    result = DemoResult(store_url=url, base_model=model, rounds=list(algo.results))
    result.seconds = {"setup": setup_s, "loop": time.perf_counter() - t0 - setup_s}
    collections = [
        r.collection.collection_id
        for r in result.rounds
        if r.collection is not None and r.collection.collection_id is not None
    ]
    result.counts = _counts(wh, collections)
    result.queries = example_queries(wh, result)
    result.seconds["total"] = time.perf_counter() - t0
    return result


def _train_with_agentlightning(
    url: str, wh: Warehouse, model: Path, config: DemoConfig, logs: Path, emit: OnEvent
) -> Any:
    """``agl.Trainer(algorithm=..., n_runners=N, llm_proxy=TracebankLLMProxy(...)).fit(agent, tasks)``."""
    import agentlightning as agl
    from tracebank.loop.algorithm import WarehouseSupervisedFinetuning
    from tracebank.loop.toy_agent import make_tasks, toy_agent
    from tracebank.serve.process import free_port
    from tracebank.serve.proxy import TracebankLLMProxy

    round_config = RoundConfig(
        server=ServerConfig(kind="cpu", default_max_tokens=16, threads=1)
        if config.server == "cpu"
        else ServerConfig(kind="vllm", max_model_len=1024),
        stages=StagesConfig(
            then="train",
            transform=config.transform,
            train=config.train,
        ),
        timeout_s=config.timeout_s,
        poll_interval_s=0.5,
        log_dir=logs,
    )
    algo = WarehouseSupervisedFinetuning(
        wh,
        model,
        AlgorithmConfig(iterations=config.iterations, models_dir=model.parent, round=round_config),
        on_event=emit,
        close_store=True,
    )
    store = agl.LightningStoreClient(url)
    trainer = agl.Trainer(
        algorithm=algo,
        n_runners=config.runners,
        store=store,
        # The store is the `agl store` above: hand it to the algorithm and the runners as it is.
        strategy=agl.ClientServerExecutionStrategy(
            role="both", n_runners=config.runners, managed_store=False
        ),
        # The proxy records the LLM calls; the runners' tracer only carries the rewards (as in the recipe).
        tracer=agl.OtelTracer(),
        runner=agl.LitAgentRunner(tracer=agl.OtelTracer(), poll_interval=0.5),
        llm_proxy=TracebankLLMProxy(port=free_port(), host="127.0.0.1"),
    )
    trainer.fit(toy_agent(), make_tasks(config.rollouts, config.seed))
    if not algo.completed:
        # agl's execution strategy turns Ctrl-C into a quiet stop; make it an interrupt again.
        raise KeyboardInterrupt
    return algo


def _scalar(wh: Warehouse, sql: str) -> Any:
    from tracebank.warehouse.query import run_sql

    return run_sql(wh, sql).to_pylist()[0]


def _in(ids: list[str]) -> str:
    return "(" + ", ".join(f"'{i}'" for i in ids) + ")" if ids else "(NULL)"


def _counts(wh: Warehouse, collections: list[str]) -> dict[str, Any]:
    where = f"collection_id IN {_in(collections)}"
    row = _scalar(
        wh,
        f"""
        SELECT (SELECT count(*) FROM rollouts WHERE {where}) AS rollouts,
               (SELECT count(*) FROM spans WHERE {where}) AS spans,
               (SELECT count(*) FROM llm_calls WHERE {where}) AS calls,
               (SELECT count(*) FROM llm_calls WHERE {where} AND len(prompt_token_ids) > 0
                   AND len(response_token_ids) > 0) AS calls_with_token_ids,
               (SELECT count(*) FROM rewards WHERE {where}) AS rewards,
               (SELECT min(value) FROM rewards WHERE {where}) AS reward_min,
               (SELECT max(value) FROM rewards WHERE {where}) AS reward_max""",
    )
    # + 0.0 turns a -0.0 into 0.0 for display.
    return {k: round(v, 3) + 0.0 if isinstance(v, float) else v for k, v in row.items()}


def example_queries(wh: Warehouse, result: DemoResult) -> list[tuple[str, str, pa.Table]]:
    """Three queries a user can rerun with ``tracebank sql``: rewards, one trajectory, the loss curve."""
    from tracebank.warehouse.query import run_sql

    last = result.rounds[-1] if result.rounds else None
    cid = last.collection.collection_id if last is not None and last.collection is not None else None
    run_id = last.run.run_id if last is not None and last.run is not None else None
    rewards_sql = (
        "SELECT r.rollout_id, json_extract_string(r.input, '$.text') AS task, "
        "round(w.value, 3) AS reward FROM rollouts r JOIN rewards w USING (collection_id, rollout_id) "
        f"WHERE r.collection_id = '{cid}' ORDER BY reward DESC, r.rollout_id LIMIT 5"
    )
    best = run_sql(wh, rewards_sql).to_pylist()
    rid = best[0]["rollout_id"] if best else None
    queries = [
        ("Rewards per rollout (best first)", rewards_sql),
        (
            "The best trajectory, message by message",
            # A random tiny model answers in arbitrary bytes: control characters are blanked for the terminal.
            "SELECT sequence_id AS call, direction, message_index AS i, role, "
            "regexp_replace(content, '[[:cntrl:]]', ' ', 'g') AS content FROM messages "
            f"WHERE rollout_id = '{rid}' ORDER BY sequence_id, direction, message_index",
        ),
        (
            "The training run's loss curve",
            "SELECT step, round(loss, 4) AS loss, tokens, round(time, 2) AS time_s FROM run_metrics "
            f"WHERE run_id = '{run_id}' AND split = 'train' ORDER BY step",
        ),
    ]
    return [(title, sql, run_sql(wh, sql)) for title, sql in queries]
