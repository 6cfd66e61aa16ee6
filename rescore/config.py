"""Options of one rescore run (recorded in the reward layer's manifest)."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field

from tracebank.rescore.errors import RescoreUsageError
from tracebank.rescore.rubric import parse_scale
from tracebank.warehouse.layout import validate_name


@dataclass(frozen=True)
class JudgeConfig:
    """An LLM judge as the scorer: a model, a rubric, the scale and the sampling settings."""

    judge: str | None = None
    """The judge model: a local model folder, run in-process with transformers; with --judge-url, the
    model name the endpoint serves."""

    rubric: str | None = None
    """The rubric, a local text file naming {task}, {conversation}, {answer} (and, with --group,
    {candidates} and {index}) and ending where the judge writes its score."""

    scale: str = "1-5"
    """The scale the rubric asks for, LO-HI in single digits (each value one token)."""

    samples: int = 0
    """Judgments sampled per rollout at --temperature besides the weighted score (kept with their
    mean and standard deviation); 0 samples none."""

    temperature: float = 1.0
    """Temperature of the --samples judgments."""

    seed: int = 0
    """Seed of the --samples judgments."""

    group: bool = False
    """Judge each task's rollouts together: every prompt shows all the task's answers ({candidates})
    and scores one of them ({index}), relative to the others."""

    judge_url: str | None = None
    """An OpenAI-compatible endpoint (http://HOST:PORT/v1) serving --judge; its key is read from
    $TRACEBANK_JUDGE_KEY and never stored."""

    judge_timeout_s: float = 60.0
    """Seconds one request to --judge-url may take; past it that rollout fails, not the layer."""


@dataclass(frozen=True)
class RescoreConfig:
    """Which scorer scores which archived rollouts into which reward layer."""

    scorer: str = ""
    """The scoring function, MODULE:FUNCTION or path/to/file.py:FUNCTION; it gets a ScoredRollout and
    returns a float or None (or use --judge)."""

    name: str = ""
    """Reward layer name; the run writes its next version NAME@vN (nothing when identical)."""

    collections: tuple[str, ...] = ()
    """Collection ids whose rollouts are scored; empty means every committed collection."""

    workers: int = max(1, min(4, os.cpu_count() or 1))
    """Processes that run the scorer in parallel."""

    force: bool = False
    """Write a new version even when the scores would be identical to an existing one."""

    judging: JudgeConfig = field(default_factory=JudgeConfig)
    """The LLM judge, when the scores come from one rather than from a function."""

    def validate(self) -> RescoreConfig:
        """Raise RescoreUsageError on a bad value; return self."""
        validate_name(self.name, "reward layer name")
        for cid in self.collections:
            validate_name(cid, "collection id")
        if self.workers < 1:
            raise RescoreUsageError(f"--workers must be at least 1, got {self.workers}")
        if bool(self.scorer) == bool(self.judging.judge):
            raise RescoreUsageError(
                "rescore takes exactly one of --scorer and --judge",
                "--scorer my_scorers:shorter_is_better, or --judge MODEL --rubric FILE",
            )
        if self.judging.judge:
            return self._validate_judge()
        module, _, function = self.scorer.rpartition(":")
        if not module or not function.isidentifier():
            raise RescoreUsageError(
                f"--scorer must be MODULE:FUNCTION or FILE.py:FUNCTION, got {self.scorer!r}",
                "for example --scorer my_scorers:shorter_is_better",
            )
        return self

    def _validate_judge(self) -> RescoreConfig:
        j = self.judging
        if not j.rubric:
            raise RescoreUsageError("--judge needs --rubric FILE", "a text file ending where the score goes")
        parse_scale(j.scale)
        if j.samples < 0 or j.samples > 100:
            raise RescoreUsageError(f"--samples must be between 0 and 100, got {j.samples}")
        if not (math.isfinite(j.temperature) and j.temperature > 0):
            raise RescoreUsageError(f"--temperature must be above 0, got {j.temperature}")
        if not (math.isfinite(j.judge_timeout_s) and j.judge_timeout_s > 0):
            raise RescoreUsageError(f"--judge-timeout must be above 0 seconds, got {j.judge_timeout_s}")
        return self
