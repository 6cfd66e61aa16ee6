"""`tracebank demo` and `tracebank round`: thin wrappers over `loop.run_demo` and `loop.run_round`."""

from __future__ import annotations

import contextlib
import sys
from pathlib import Path
from typing import Any, TextIO

import click

from tracebank.cli.output import render


class Reporter:
    """Turns loop events into progress lines and a rollout progress bar on ``stream``."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.bar: Any = None
        self.task: Any = None

    def line(self, text: str) -> None:
        self._close_bar()
        print(text, file=self.stream, flush=True)

    def _close_bar(self) -> None:
        if self.bar is not None:
            self.bar.stop()
            self.bar = None

    def _progress(self, event: dict[str, Any]) -> None:
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        if self.bar is None:
            self.bar = Progress(
                TextColumn("rollouts"),
                BarColumn(),
                MofNCompleteColumn(),
                TextColumn("{task.fields[detail]}"),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                transient=False,
            )
            self.bar.start()
            self.task = self.bar.add_task("rollouts", total=event["total"], detail="")
        detail = f"{event['succeeded']} ok" + (f", {event['failed']} failed" if event["failed"] else "")
        self.bar.update(self.task, completed=event["done"], detail=detail)
        if event["done"] >= event["total"]:
            self._close_bar()

    def __call__(self, event: dict[str, Any]) -> None:
        kind = event.get("event")
        prefix = f"[iter {event['iteration']}] " if event.get("iteration") is not None else ""
        if kind == "rollouts":
            self._progress(event)
        elif kind == "model":
            self.line(("built the tiny model " if event["built"] else "starting from ") + event["model"])
        elif kind == "store":
            self.line(f"agl store running at {event['url']}")
        elif kind == "iteration":
            self.line(f"{prefix}serve {event['model']} -> train {event['output']}")
        elif kind == "serving":
            log = f" (log {event['log']})" if event.get("log") else ""
            self.line(f"{prefix}starting the {event['server']} model server{log}")
        elif kind == "served":
            self.line(f"{prefix}model server healthy at {event['url']} after {event['seconds']:.1f}s")
        elif kind == "proxy":
            self.line(f"{prefix}LLM proxy at {event['url']}, published as resource {event['resources_id']}")
        elif kind == "rolled_out":
            statuses = ", ".join(f"{n} {s}" for s, n in sorted(event["statuses"].items()))
            self.line(
                f"{prefix}rollouts done in {event['seconds']:.1f}s: {statuses}; {event['spans']} spans "
                "in the store; model server stopped"
            )
        elif kind in ("collected", "transformed"):
            self.line(f"{prefix}{event['summary']}")
        elif kind == "training":
            self.line(f"{prefix}training on {event['dataset']} into {event['output']}")
        elif kind == "trained":
            self.line(f"{prefix}run {event['run_id']} succeeded: {event['output']}")

    def close(self) -> None:
        self._close_bar()


def _loss(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, int | float) else "n/a"


def _run_line(record: Any) -> str:
    s = record.summary
    speed = f"{s['tokens_per_s']:,.0f} tokens/s" if s.get("tokens_per_s") else "n/a tokens/s"
    return (
        f"run {record.run_id} ({record.backend}): loss {_loss(s.get('train_loss_first'))} -> "
        f"{_loss(s.get('train_loss_last'))} in {s.get('steps')} steps, {speed}"
    )


@click.command()
@click.option(
    "--work-dir",
    default="demo-models",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Folder of the demo's models (version_N) and logs.",
)
@click.option(
    "--rollouts", default=32, show_default=True, type=click.IntRange(1), help="Toy tasks to roll out."
)
@click.option(
    "--runners", default=2, show_default=True, type=click.IntRange(1), help="agentlightning runner processes."
)
@click.option(
    "--iterations",
    default=1,
    show_default=True,
    type=click.IntRange(1),
    help="Algorithm iterations (serve, roll out, collect, transform, train).",
)
@click.option(
    "--max-steps",
    default=16,
    show_default=True,
    type=click.IntRange(1),
    help="Optimizer steps per training run.",
)
@click.option("--verbose", is_flag=True, help="Show the libraries' own output instead of logging it.")
@click.pass_obj
def demo(
    wh: Any, work_dir: str, rollouts: int, runners: int, iterations: int, max_steps: int, verbose: bool
) -> None:
    """Run the whole loop locally: store, LLM proxy, agent, collect, transform, train.

    Starts `agl store` on loopback, builds a tiny model, serves it on the CPU behind
    a real LLM proxy, rolls out a toy agent with agentlightning's own runners under
    agl.Trainer and tracebank's Algorithm, then collects, transforms and trains the
    tiny model on the CPU, and prints what the warehouse now holds.
    """
    import time

    from tracebank.loop import DemoConfig
    from tracebank.loop.demo import run_demo
    from tracebank.loop.local import output_to_log

    config = DemoConfig(
        work_dir=Path(work_dir),
        rollouts=rollouts,
        runners=runners,
        iterations=iterations,
        max_steps=max_steps,
    )
    log_path = Path(work_dir).resolve() / "logs" / "demo.log"
    t0 = time.perf_counter()
    quiet = contextlib.nullcontext(sys.stderr) if verbose else output_to_log(log_path)
    with quiet as stream:
        reporter = Reporter(stream)
        if not verbose:
            reporter.line(f"(library output goes to {log_path})")
        try:
            result = run_demo(wh, config, on_event=reporter)
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
            echo(f"  run         {_run_line(r.run)}{it}")
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
@click.option("--model", "model", required=True, type=click.Path(), help="Model folder to serve.")
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
@click.option(
    "--server",
    type=click.Choice(["vllm", "cpu"]),
    default="vllm",
    show_default=True,
    help="vllm serve (GPU), or tracebank's CPU server for small models.",
)
@click.option("--served-model-name", default=None, help="Name the model is served as (default: the folder).")
@click.option(
    "--tool-call-parser",
    default="hermes",
    show_default=True,
    help="vLLM tool-call parser ('none' turns tool calls off).",
)
@click.option("--gpu-memory-utilization", type=float, default=None, help="vLLM GPU memory fraction.")
@click.option("--max-model-len", type=int, default=None, help="Prompt + completion token limit.")
@click.option("--quantization", default=None, help="vLLM quantization, e.g. bitsandbytes.")
@click.option(
    "--server-arg",
    "server_args",
    multiple=True,
    help="Extra argument(s) for the server command line (repeatable, shell-quoted).",
)
@click.option(
    "--startup-timeout",
    type=float,
    default=900.0,
    show_default=True,
    help="Seconds the server may take to become healthy.",
)
@click.option(
    "--timeout", type=float, default=3600.0, show_default=True, help="Seconds to wait for all rollouts."
)
@click.option(
    "--runners",
    type=click.IntRange(0),
    default=0,
    show_default=True,
    help="Also run N agentlightning runners of --agent here (0: your own runners do).",
)
@click.option(
    "--then",
    "then",
    type=click.Choice(["none", "collect", "transform", "train"]),
    default="none",
    show_default=True,
    help="Chain the stages after the rollouts, up to this one.",
)
@click.option("--tag", default=None, help="Tag of the round's collection.")
@click.option("--dataset-name", default="rounds", show_default=True, help="Dataset to write a version of.")
@click.option(
    "--top-fraction", type=float, default=0.5, show_default=True, help="Share of rows kept by reward."
)
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the selection.")
@click.option(
    "--output-model",
    type=click.Path(),
    default=None,
    help="Where --then train writes the next model (default: version_N -> version_N+1).",
)
@click.option(
    "--backend",
    type=click.Choice(["auto", "unsloth", "trl"]),
    default="auto",
    show_default=True,
    help="Training backend.",
)
@click.option("--max-steps", type=int, default=None, help="Optimizer steps (default: one epoch).")
@click.pass_obj
def round_(
    wh: Any,
    model: str,
    agent_spec: str,
    tasks_path: str,
    store_url: str,
    server: str,
    served_model_name: str | None,
    tool_call_parser: str,
    gpu_memory_utilization: float | None,
    max_model_len: int | None,
    quantization: str | None,
    server_args: tuple[str, ...],
    startup_timeout: float,
    timeout: float,
    runners: int,
    then: str,
    tag: str | None,
    dataset_name: str,
    top_fraction: float,
    seed: int,
    output_model: str | None,
    backend: str,
    max_steps: int | None,
) -> None:
    """One serving round: serve --model, proxy it, enqueue --tasks, wait, stop, and optionally train.

    The agent runs in agentlightning runners connected to --store: start your own
    (each a LitAgentRunner looping over runner.iter(), as in the recipe's
    sft_rollout_runners.py) or pass --runners N. With --then train the round ends
    by printing the model the next round serves.
    """
    from tracebank.loop import (
        LocalRunners,
        RoundConfig,
        ServerConfig,
        StagesConfig,
        load_agent,
        load_tasks,
        run_round,
    )

    tasks = load_tasks(tasks_path)
    config = RoundConfig(
        server=ServerConfig(
            kind=server,
            served_model_name=served_model_name,
            tool_call_parser=None if tool_call_parser.lower() == "none" else tool_call_parser,
            gpu_memory_utilization=gpu_memory_utilization,
            max_model_len=max_model_len,
            quantization=quantization,
            extra_args=_split_args(server_args),
            startup_timeout_s=startup_timeout,
        ),
        stages=StagesConfig(
            then=then,
            tag=tag,
            dataset_name=dataset_name,
            top_fraction=top_fraction,
            seed=seed,
            backend=backend,
            max_steps=max_steps,
        ),
        timeout_s=timeout,
    ).validate()
    agent = load_agent(agent_spec)
    reporter = Reporter()
    local = LocalRunners(store_url, agent, n=runners) if runners else contextlib.nullcontext()
    try:
        with local:
            result = run_round(
                store_url,
                tasks,
                model,
                config,
                wh=wh if then != "none" else None,
                output_model=output_model,
                on_event=reporter,
            )
    finally:
        reporter.close()
    statuses = ", ".join(f"{n} {s}" for s, n in sorted(result.statuses.items()))
    click.echo(
        f"round done: {len(result.rollout_ids)} rollouts ({statuses}) in {result.seconds['total']:.0f}s"
    )
    if result.run is not None:
        click.echo(_run_line(result.run))
        click.echo(f"next round's model: {result.next_model}")


COMMANDS = [demo, round_]
