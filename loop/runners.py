"""agentlightning's own runners for a store URL, and ``module:function`` agent specs.

A round only enqueues work; the agent runs in agentlightning runners connected
to the same store. Usually those are the user's (the recipe's
``sft_rollout_runners.py``: N processes, each a ``LitAgentRunner`` with an
``OtelTracer`` looping over ``runner.iter()``). :class:`LocalRunners` is that
script as a context manager, for ``tracebank round --runners N`` and the tests.
"""

from __future__ import annotations

import asyncio
import importlib
import multiprocessing
import sys
from types import TracebackType
from typing import Any

from tracebank.loop.errors import LoopUsageError


def load_agent(spec: str) -> Any:
    """The agentlightning LitAgent named by ``module:attribute``.

    The attribute may be a LitAgent (e.g. an ``@agl.rollout`` function) or a plain
    ``(task, llm[, rollout])`` function, which is wrapped with ``agl.rollout``.
    """
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise LoopUsageError(f"invalid agent {spec!r}", "use module:function, e.g. my_agents:math_agent")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise LoopUsageError(
            f"cannot import agent module {module_name!r}: {exc}", "is it on PYTHONPATH (run from its folder)?"
        ) from exc
    target: Any = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise LoopUsageError(
                f"agent module {module_name!r} has no {attr!r}",
                "use module:function naming an agentlightning rollout",
            )
        target = getattr(target, part)
    import agentlightning as agl

    if isinstance(target, agl.LitAgent):
        return target
    if callable(target):
        try:
            return agl.rollout(target)
        except (NotImplementedError, ValueError, TypeError) as exc:
            raise LoopUsageError(
                f"{spec} is not an agentlightning rollout: {exc}".splitlines()[0],
                "use a function (task, llm[, rollout]) or an @agl.rollout agent",
            ) from exc
    raise LoopUsageError(
        f"{spec} is a {type(target).__name__}, not an agent",
        "use a function (task, llm[, rollout]) or an @agl.rollout agent",
    )


def _runner_main(store_url: str, agent: Any, worker_id: int, stop: Any, poll_interval: float) -> None:
    """One runner process: the recipe's ``run_rollout``, stopping when ``stop`` is set."""
    import agentlightning as agl

    # The proxy records the LLM calls; the runner's tracer only has to carry the rewards.
    runner = agl.LitAgentRunner(tracer=agl.OtelTracer(), poll_interval=poll_interval)
    store = agl.LightningStoreClient(store_url)
    runner.init(agent=agent)
    runner.init_worker(worker_id, store)
    try:
        asyncio.run(runner.iter(event=stop))
    except KeyboardInterrupt:
        pass
    finally:
        runner.teardown_worker(worker_id)
        runner.teardown()


class LocalRunners:
    """``n`` agentlightning runner processes (LitAgentRunner + OtelTracer) working for ``store_url``.

    ``with LocalRunners(url, agent, n=2):`` starts them and, on exit, asks them to
    stop after their current rollout, then terminates any that linger.
    """

    def __init__(
        self, store_url: str, agent: Any, n: int = 2, poll_interval: float = 0.5, grace_s: float = 10.0
    ) -> None:
        if n < 1:
            raise LoopUsageError(f"--runners must be at least 1, got {n}")
        self.store_url = store_url
        self.agent = agent
        self.n = n
        self.poll_interval = poll_interval
        self.grace_s = grace_s
        # fork: the agent object travels as it is (no pickling), as with agl.Trainer's runners.
        self._ctx: Any = multiprocessing.get_context("fork" if sys.platform != "win32" else "spawn")
        self._stop = self._ctx.Event()
        self.processes: list[Any] = []

    def start(self) -> LocalRunners:
        for worker_id in range(self.n):
            proc = self._ctx.Process(
                target=_runner_main,
                name=f"tracebank-runner-{worker_id}",
                args=(self.store_url, self.agent, worker_id, self._stop, self.poll_interval),
                daemon=True,
            )
            proc.start()
            self.processes.append(proc)
        return self

    def alive(self) -> int:
        """How many runner processes are still running."""
        return sum(p.is_alive() for p in self.processes)

    def stop(self) -> None:
        """Stop cooperatively, then SIGTERM, then SIGKILL whatever is left."""
        self._stop.set()
        for proc in self.processes:
            proc.join(self.grace_s)
        for proc in self.processes:
            if proc.is_alive():
                proc.terminate()
                proc.join(5.0)
            if proc.is_alive():
                proc.kill()
                proc.join()
        self.processes = []

    def __enter__(self) -> LocalRunners:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()
