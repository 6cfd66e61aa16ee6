"""`tracebank demo` and `tracebank round`: thin wrappers over `loop.run_demo` and `loop.run_round`."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any

import click

from tracebank.cli.options import config_file_option, config_option, pass_warehouse
from tracebank.cli.output import render, say
from tracebank.cli.progress import Progress
from tracebank.loop.config import (
    SERVERS,
    THEN,
    DemoConfig,
    RoundConfig,
    ServerConfig,
    StagesConfig,
    train_template,
)
from tracebank.train.config import BACKENDS, TrainConfig
from tracebank.transform.config import TransformConfig


@click.command()
@config_option(DemoConfig, "work_dir", type=click.Path(file_okay=False))
@config_option(DemoConfig, "rollouts")
@config_option(DemoConfig, "runners")
@config_option(DemoConfig, "iterations")
@config_option(TrainConfig, "max_steps", type=click.IntRange(1), default=DemoConfig().train.max_steps)
@config_option(DemoConfig, "server", "--server", type=click.Choice(SERVERS))
@click.option("--verbose", is_flag=True, help="Show the libraries' own output instead of logging it.")
@pass_warehouse
def demo(
    wh: Any,
    work_dir: str,
    rollouts: int,
    runners: int,
    iterations: int,
    max_steps: int,
    server: str,
    verbose: bool,
) -> None:
    """Run the whole loop locally: store, LLM proxy, agent, collect, transform, train.

    Starts `agl store` on loopback, builds a tiny model, serves it with tracebank's CPU
    server (--server vllm: the real vLLM, its CPU build here) behind a real LLM proxy,
    rolls out a toy agent with agentlightning's own runners under agl.Trainer and
    tracebank's Algorithm, then collects, transforms and trains the tiny model on the
    CPU, and prints what the warehouse now holds.
    """
    import time

    from tracebank.loop.local import output_to_log

    settings = {"rollouts": rollouts, "runners": runners, "iterations": iterations, "server": server}
    log_path = Path(work_dir).resolve() / "logs" / "demo.log"
    t0 = time.perf_counter()
    quiet = contextlib.nullcontext(sys.stderr) if verbose else output_to_log(log_path)
    with quiet as stream:
        reporter = Progress(stream)
        if not verbose:
            reporter.line(f"(library output goes to {log_path})")
        try:
            result = wh.demo(work_dir=Path(work_dir), max_steps=max_steps, on_event=reporter, **settings)
        finally:
            reporter.close()
    wall = time.perf_counter() - t0
    c = result.counts
    echo = click.echo
    echo("")
    echo(f"Demo finished in {wall:.0f}s. The warehouse {wh.root} now holds:")
    echo(
        f"  collected   {c['rollouts']} rollouts, {c['spans']} spans, {c['calls']} LLM calls "
        f"({c['calls_with_token_ids']} with token ids), {c['rewards']} rewards "
        f"in [{c['reward_min']}, {c['reward_max']}]"
    )
    for r in result.rounds:
        it = f" (iteration {r.iteration})" if len(result.rounds) > 1 else ""
        if r.dataset is not None:
            echo(f"  dataset     {r.dataset.summary().removeprefix('wrote ')}{it}")
        if r.run is not None:
            echo(f"  run         {r.run.summary_line()}{it}")
    echo(f"  model       {result.base_model} -> {result.final_model}")
    prefix = f"tracebank --warehouse {wh.root}"
    for title, sql, table in result.queries:
        echo("")
        echo(f"{title}:")
        echo(f'  $ {prefix} sql "{sql}"')
        echo(render(table, "table"))
    echo("")
    echo(
        f"Next: `{prefix} datasets list`, `{prefix} runs list`, or run `tracebank demo` again for "
        "another round."
    )


def _split_args(values: tuple[str, ...]) -> tuple[str, ...]:
    import shlex

    return tuple(arg for value in values for arg in shlex.split(value))


@click.command(name="round")
@config_file_option
@click.option("--base-model", type=click.Path(), help="Model folder to serve (and to train from).")
@click.option("--model", "model_alias", type=click.Path(), hidden=True, help="Old name of --base-model.")
@click.option(
    "--agent",
    "agent_spec",
    required=True,
    help="The agentlightning rollout your runners run, as module:function (checked here; run "
    "here too with --runners N).",
)
@click.option(
    "--tasks", "tasks_path", required=True, type=click.Path(), help="JSONL file, one task per line."
)
@click.option("--store", "store_url", required=True, help="Store URL, e.g. http://127.0.0.1:4747.")
@config_option(ServerConfig, "kind", "--server", type=click.Choice(SERVERS))
@config_option(ServerConfig, "served_model_name")
@config_option(ServerConfig, "tool_call_parser", help="vLLM tool-call parser ('none' turns tool calls off).")
@config_option(ServerConfig, "gpu_memory_utilization")
@config_option(ServerConfig, "max_model_len")
@config_option(ServerConfig, "quantization")
@config_option(
    ServerConfig,
    "extra_args",
    "--server-arg",
    multiple=True,
    default=(),
    help="Extra argument(s) for the server command line (repeatable, shell-quoted).",
)
@config_option(ServerConfig, "startup_timeout_s", "--startup-timeout")
@config_option(ServerConfig, "vllm_python", type=click.Path(dir_okay=False, path_type=Path))
@config_option(ServerConfig, "enforce_eager")
@config_option(ServerConfig, "max_lora_rank", type=click.IntRange(1))
@config_option(RoundConfig, "timeout_s", "--timeout")
@click.option(
    "--runners",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Also run N agentlightning runners of --agent here (0: your own runners do).",
)
@config_option(StagesConfig, "then", type=click.Choice(THEN))
@config_option(StagesConfig, "tag")
@config_option(TransformConfig, "name", "--dataset", default=StagesConfig().transform.name)
@click.option("--dataset-name", "dataset_alias", hidden=True, help="Old name of --dataset.")
@config_option(TransformConfig, "top_fraction")
@config_option(TransformConfig, "seed")
@click.option(
    "--output",
    type=click.Path(),
    default=None,
    help="Where --then train writes the next model (default: version_N -> version_N+1).",
)
@click.option("--output-model", "output_alias", type=click.Path(), hidden=True, help="Old name of --output.")
@config_option(TrainConfig, "backend", type=click.Choice(BACKENDS))
@config_option(TrainConfig, "max_steps")
@pass_warehouse
def round_(
    wh: Any,
    base_model: str | None,
    model_alias: str | None,
    agent_spec: str,
    tasks_path: str,
    store_url: str,
    kind: str,
    tool_call_parser: str,
    extra_args: tuple[str, ...],
    runners: int,
    timeout_s: float,
    then: str,
    tag: str | None,
    name: str,
    dataset_alias: str | None,
    top_fraction: float,
    seed: int,
    backend: str,
    max_steps: int | None,
    output: str | None,
    output_alias: str | None,
    **options: Any,
) -> None:
    """One serving round: serve --base-model, proxy it, enqueue --tasks, wait, stop, optionally train.

    The agent runs in agentlightning runners connected to --store: start your own
    (each a LitAgentRunner looping over runner.iter(), as in the recipe's
    sft_rollout_runners.py) or pass --runners N. With --then train the round ends
    by printing the model the next round serves.
    """
    from tracebank.loop import load_agent, load_tasks
    from tracebank.loop.local import stdout_to_stderr

    model = base_model or model_alias
    if not model:
        raise click.UsageError("Missing option '--base-model'.")
    stages = StagesConfig(
        then=then,
        tag=tag,
        transform=TransformConfig(name=dataset_alias or name, top_fraction=top_fraction, seed=seed),
        train=train_template(backend=backend, max_steps=max_steps),
    )
    tasks = load_tasks(tasks_path)
    config = RoundConfig(
        server=ServerConfig(
            kind=kind,
            tool_call_parser=None if tool_call_parser.lower() == "none" else tool_call_parser,
            extra_args=_split_args(extra_args),
            **options,
        ),
        stages=stages,
        timeout_s=timeout_s,
    ).validate()
    agent = load_agent(agent_spec)
    reporter = Progress()
    try:
        with stdout_to_stderr():
            result = wh.round(
                store_url,
                tasks,
                model,
                config,
                output_model=output or output_alias,
                runners=(agent, runners) if runners else None,
                on_event=reporter,
            )
    finally:
        reporter.close()
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(result.statuses.items()))
    say(f"round done: {len(result.rollout_ids)} rollouts ({statuses}) in {result.seconds['total']:.0f}s")
    if result.run is not None:
        say(result.run.summary_line())
        say(f"next round's model: {result.next_model}")


COMMANDS = [demo, round_]
