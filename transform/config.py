"""Options of one transform run (every one is recorded in the version's manifest)."""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from tracebank.transform.errors import TransformUsageError
from tracebank.warehouse.layout import validate_name

SELECT_BY = ("triplet", "rollout")
MERGE = ("none", "trajectory")
RULES = ("recipe", "agl1")
ENGINES = ("local", "ray")
LEVELS = ("trajectory", "transition")
KINDS = ("sft", "preference")
PAIRINGS = ("best-worst", "all")
UNITS = ("call", "trajectory")
TAG = "tag"
AGENT_KEYS = (TAG, "model", "system", "tools")  # or MODULE:FUNCTION (``transform.agent_key``)


@dataclass(frozen=True)
class PreferenceRules:
    """How a --kind preference version pairs rollouts (recorded in its manifest)."""

    min_margin: float | None = None
    """Keep a pair only when chosen's reward exceeds rejected's by at least this (default: any strict gap)."""

    pairs_per_task: int | None = None
    """Keep the K pairs of each task with the largest reward gaps (default: all)."""

    pairing: str = "best-worst"
    """best-worst: best with worst, second best with second worst, ... (disjoint); all: every two rollouts."""

    unit: str = "call"
    """call: single responses to an identical prompt; trajectory: whole trajectories from an identical first
    prompt, later turns merged as with --merge trajectory (tokens between turns masked)."""

    def problems(self) -> list[str]:
        """What is wrong with these rules (empty when nothing is)."""
        out = []
        if self.min_margin is not None and not (math.isfinite(self.min_margin) and self.min_margin >= 0):
            out.append(f"--min-margin must be a finite number >= 0, got {self.min_margin}")
        if self.pairs_per_task is not None and self.pairs_per_task < 1:
            out.append(f"--pairs-per-task must be at least 1, got {self.pairs_per_task}")
        if self.pairing not in PAIRINGS:
            out.append(f"--pairing must be one of {', '.join(PAIRINGS)}")
        if self.unit not in UNITS:
            out.append(f"--unit must be one of {', '.join(UNITS)}")
        return out


Level = Literal["transition", "trajectory"]


@dataclass(frozen=True)
class Agl1Limits:
    """RolloutAdapter's settings (1.0's ``trace_aggregator`` and ``reward_fillna_value``)."""

    level: Level = "trajectory"
    """With --rules agl1, 1.0's trace_aggregator.level: trajectory (its default) merges calls that extend
    the conversation into one row; transition keeps a row per call."""
    max_prompt_length: int = 2048
    """With --rules agl1: rows whose prompt is longer are left out (1.0's trajectory_max_prompt_length)."""
    max_response_length: int = 8192
    """With --rules agl1: longer responses are cut (1.0's trajectory_max_response_length)."""
    max_total_length: int | None = None
    """With --rules agl1: responses also cut to this minus the prompt length (trajectory_max_total_length)."""
    reward_fillna_value: float = 0.0
    """With --rules agl1: the reward of a rollout without a reward event (1.0's reward_fillna_value)."""


@dataclass(frozen=True)
class TransformConfig:
    """What to build and how; the defaults reproduce the upstream recipe (design.md rules 1-7)."""

    name: str
    """Dataset name; the run writes its next version NAME@vN."""

    collections: tuple[str, ...] = ()
    """Collection ids to read; empty means every committed collection."""

    top_fraction: float = 1.0
    """Keep the top max(1, int(n*F)) rows (or rollouts, see --select-by) by reward, ties broken by a
    seeded shuffle. 1.0 everywhere (transform and round), so nothing is dropped unless asked; the
    upstream recipe's train_triplet_fraction is 0.5."""

    seed: int = 0
    """Seed of the tie-breaking shuffle, the final shuffle and the validation split."""

    min_reward: float | None = None
    """Drop rows whose reward is below this before selecting (default: keep all)."""

    select_by: str = "triplet"
    """triplet: rank single rows (the recipe); rollout: rank whole rollouts by their final reward."""

    per_task: int | None = None
    """Keep only the best K rollouts of each task input (rejection sampling; default: all)."""

    val_fraction: float = 0.0
    """Fraction of the selected rollouts (never single rows) written to validation.parquet."""

    max_length: int | None = None
    """Drop rows longer than this many tokens (counted, never truncated)."""

    dedup: bool = False
    """Keep one row of identical input_ids + labels (the highest reward)."""

    merge: str = "none"
    """trajectory: calls that extend the previous call's prompt + response become one row; tokens in
    between are masked with -100."""

    force: bool = False
    """Write a new version even when it would be identical (same content hash) to an existing one."""

    rules: str = "recipe"
    """recipe: the 0.3 Unsloth recipe's rows (the options above apply); agl1: exactly the rows Agent
    Lightning 1.0's RolloutAdapter builds (with the --agl1-* limits; selection options stay default)."""

    agl1: Agl1Limits = field(default_factory=Agl1Limits)
    """RolloutAdapter's level and length limits, used with rules agl1."""

    engine: str = "local"
    """local: this process; ray: Ray Data jobs on a cluster (same version, same content hash)."""

    address: str | None = None
    """Ray cluster to join with --engine ray (default: $RAY_ADDRESS, else a local Ray)."""

    kind: str = "sft"
    """sft: token rows to imitate; preference: chosen/rejected pairs of same-task rollouts (for DPO)."""

    preference: PreferenceRules = field(default_factory=PreferenceRules)
    """How --kind preference pairs rollouts (--min-margin, --pairs-per-task, --pairing, --unit)."""

    rewards: str | None = None
    """Reward layer NAME or NAME@vN (from `tracebank rescore`) whose scores replace the collected rewards."""

    agent: str | None = None
    """Keep only calls whose agent matches this Python regular expression (re.search, as Agent Lightning
    0.3's agent_match; calls with no agent are left out); default: every call."""

    agent_key: str = "tag"
    """What names a 1.0 (or imported) call's agent for --agent: tag (silver's agent: the agent's tag, else
    the model), model, system (system: + 8 hex of the system text's sha256), tools (tools: + the sorted
    tool names), or MODULE:FUNCTION (your function of the call's request); 0.3 span calls keep theirs."""

    tokenizer: str | None = None
    """Model (a local folder, or a hub id ORG/NAME[@REV] already in the Hugging Face cache) whose chat
    template renders the calls recorded without token ids (text imports); engine ids are kept as they are."""

    per_turn: bool = False
    """With --tokenizer: a row per assistant turn (each text call's messages + its answer, only the answer
    trained) instead of one row per conversation (every assistant turn trained)."""

    extra: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    """Free-form notes recorded in the manifest (not part of the content hash)."""

    def validate(self) -> TransformConfig:
        """Raise TransformUsageError on a bad value; return self."""
        validate_name(self.name, "dataset name")
        for cid in self.collections:
            validate_name(cid, "collection id")
        if not (0.0 < self.top_fraction <= 1.0) or math.isnan(self.top_fraction):
            raise TransformUsageError(f"--top-fraction must be in (0, 1], got {self.top_fraction}")
        if not (0.0 <= self.val_fraction < 1.0):
            raise TransformUsageError(f"--val-fraction must be in [0, 1), got {self.val_fraction}")
        if self.select_by not in SELECT_BY:
            raise TransformUsageError(f"--select-by must be one of {', '.join(SELECT_BY)}")
        if self.merge not in MERGE:
            raise TransformUsageError(f"--merge must be one of {', '.join(MERGE)}")
        if self.per_task is not None and self.per_task < 1:
            raise TransformUsageError(f"--per-task must be at least 1, got {self.per_task}")
        if self.max_length is not None and self.max_length < 1:
            raise TransformUsageError(f"--max-length must be at least 1, got {self.max_length}")
        if self.min_reward is not None and not math.isfinite(self.min_reward):
            raise TransformUsageError(f"--min-reward must be a finite number, got {self.min_reward}")
        if self.rules not in RULES:
            raise TransformUsageError(f"--rules must be one of {', '.join(RULES)}")
        if self.rules == "agl1":
            self._validate_agl1()
        if self.engine not in ENGINES:
            raise TransformUsageError(f"--engine must be one of {', '.join(ENGINES)}, got {self.engine!r}")
        if self.address is not None and self.engine != "ray":
            raise TransformUsageError("--address only applies to --engine ray")
        self._validate_kind()
        self._validate_agent()
        self._validate_text()
        return self

    def _validate_text(self) -> None:
        if self.per_turn and self.tokenizer is None:
            raise TransformUsageError("--per-turn applies to text calls rendered with --tokenizer")
        if self.tokenizer is None:
            return
        if not self.tokenizer.strip():
            raise TransformUsageError("--tokenizer needs a model folder or hub id")
        if self.rules != "recipe" or self.kind != "sft" or self.engine != "local":
            raise TransformUsageError(
                "--tokenizer builds SFT rows with --rules recipe on --engine local",
                "drop --rules/--kind/--engine, or --tokenizer",
            )

    def _validate_agent(self) -> None:
        ref, _, function = self.agent_key.rpartition(":")
        if self.agent_key not in AGENT_KEYS and not (ref.strip() and function.strip()):
            known = ", ".join(AGENT_KEYS)
            raise TransformUsageError(
                f"--agent-key must be one of {known} or MODULE:FUNCTION, got {self.agent_key!r}"
            )
        if self.agent is None:
            if self.agent_key != TAG:
                raise TransformUsageError("--agent-key names the agents --agent selects", "add --agent REGEX")
            return
        if self.rules == "agl1":
            raise TransformUsageError(
                "--agent does not apply to --rules agl1 (1.0's adapter has no agent_match)"
            )
        try:
            re.compile(self.agent)
        except re.error as exc:
            raise TransformUsageError(f"--agent is not a regular expression: {exc}") from None

    def _validate_kind(self) -> None:
        if self.kind not in KINDS:
            raise TransformUsageError(f"--kind must be one of {', '.join(KINDS)}")
        if self.rewards is not None and self.rules == "agl1":
            raise TransformUsageError(
                "--rewards does not apply to --rules agl1 (1.0's rows keep 1.0's rewards)"
            )
        if self.kind == "sft":
            if self.preference != PreferenceRules():
                raise TransformUsageError(
                    "--min-margin, --pairs-per-task, --pairing and --unit apply to --kind preference"
                )
            return
        problems = self.preference.problems()
        if problems:
            raise TransformUsageError(problems[0])
        sft_only = ("top_fraction", "min_reward", "select_by", "per_task", "val_fraction", "max_length")
        changed = [
            n for n in (*sft_only, "dedup", "merge", "rules") if getattr(self, n) != getattr(_DEFAULTS, n)
        ]
        if changed:
            flags = ", ".join("--" + n.replace("_", "-") for n in changed)
            raise TransformUsageError(
                f"{flags} select SFT rows; --kind preference pairs rollouts",
                "use --min-margin, --pairs-per-task, --pairing and --unit",
            )

    def _validate_agl1(self) -> None:
        recipe_only = ("top_fraction", "min_reward", "select_by", "per_task", "val_fraction", "max_length")
        changed = [n for n in (*recipe_only, "dedup", "merge") if getattr(self, n) != getattr(_DEFAULTS, n)]
        if changed:
            flags = ", ".join("--" + n.replace("_", "-") for n in changed)
            raise TransformUsageError(
                f"--rules agl1 reproduces RolloutAdapter's rows; {flags} would change them",
                "use the --agl1-* limits, or drop --rules agl1",
            )
        limits = self.agl1
        if limits.level not in LEVELS:
            raise TransformUsageError(f"--agl1-level must be one of {', '.join(LEVELS)}")
        for name in ("max_prompt_length", "max_response_length", "max_total_length"):
            value = getattr(limits, name)
            if value is not None and value < 1:
                raise TransformUsageError(f"--agl1-{name.replace('_', '-')} must be at least 1, got {value}")
        if not math.isfinite(limits.reward_fillna_value):
            raise TransformUsageError("--agl1-reward-fillna must be a finite number")

    def settings(self) -> dict[str, Any]:
        """Every option as given, where and how to build included (the manifest's ``config``)."""
        out = asdict(self)
        out.pop("extra")  # recorded as the manifest's notes
        out["collections"] = list(self.collections)
        return out

    def params(self) -> dict[str, Any]:
        """Every option as the manifest records it (collections sorted)."""
        out = asdict(self)
        out.pop("extra")
        for how in ("force", "engine", "address"):  # whether and where to build, not what the rows are
            out.pop(how)
        if self.rules == "recipe":  # so a recipe version's params and content hash stay what they were
            out.pop("rules")
            out.pop("agl1")
        if self.kind == "sft":  # so an SFT version's params and content hash stay what they were
            out.pop("kind")
            out.pop("preference")
        else:  # the SFT selection options do not apply to pairs
            keys = ("name", "collections", "kind", "preference", "rewards", "agent", "agent_key")
            out = {k: out[k] for k in keys}
        for optional in ("rewards", "agent"):  # so versions built without them keep their hashes
            if out[optional] is None:
                out.pop(optional)
        if self.agent_key == TAG:  # the default: versions built before --agent-key keep their hashes
            out.pop("agent_key")
        if self.tokenizer is None:  # so a version of engine ids keeps its params and content hash
            out.pop("tokenizer", None)
            out.pop("per_turn", None)
        out["collections"] = sorted(self.collections)
        return out


_DEFAULTS = TransformConfig(name="defaults")
