"""Options of show, report and export (typed; the CLI fills them from flags)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tracebank.view.errors import ViewUsageError

EXPORT_FORMATS = ("openai", "trl-messages", "trl-prompt-completion", "hf")
#: The formats of a --kind preference version (chosen and rejected answers to one prompt).
PREFERENCE_FORMATS = ("trl-preference", "openai-preference")


@dataclass(frozen=True)
class ShowConfig:
    """What `show` prints: one rollout, the best/worst N by reward, or one dataset row."""

    rollout_id: str | None = None
    """Show this rollout (its latest attempt); a unique prefix is enough."""

    best: int = 0
    """Show the N rollouts with the highest final reward."""

    worst: int = 0
    """Show the N rollouts with the lowest final reward."""

    dataset: str | None = None
    """``NAME[@vN]``: show a row of this dataset version (with ``row``)."""

    row: int = 0
    """Row number inside the dataset version (train split first, then validation)."""

    tokenizer: str | None = None
    """Tokenizer folder: with a dataset row, mark the tokens the version trains on."""

    max_chars: int = 2000
    """Cut each message's text after this many characters (0: never)."""

    def validate(self) -> ShowConfig:
        chosen = sum(
            x for x in (self.rollout_id is not None, self.best > 0, self.worst > 0, bool(self.dataset))
        )
        if chosen != 1:
            raise ViewUsageError(
                "choose exactly one of a ROLLOUT id, --best N, --worst N or --dataset NAME@vN",
                "e.g. `tracebank show --best 3`",
            )
        if self.best < 0 or self.worst < 0 or self.row < 0 or self.max_chars < 0:
            raise ViewUsageError("--best, --worst, --row and --max-chars take numbers >= 0")
        if self.tokenizer and not self.dataset:
            raise ViewUsageError("--tokenizer marks trained tokens of a dataset row; add --dataset NAME@vN")
        return self


@dataclass(frozen=True)
class InspectConfig:
    """Which dataset row `inspect` decodes, with which tokenizer, and how it marks the tokens."""

    dataset: str
    """``NAME[@vN]`` of an SFT version (latest version when unversioned)."""

    tokenizer: str | Path
    """Tokenizer folder, usually the base model's (nothing is downloaded)."""

    row: int = 0
    """Row index within the split."""

    split: str = "train"
    """Split to read: train or validation."""

    color: bool = False
    """Dim the masked text and highlight the trained text (a terminal) instead of [-…-] and {+…+}."""


@dataclass(frozen=True)
class ReportConfig:
    """What `report` covers and where the HTML file goes."""

    output: Path
    """The HTML file to write (one self-contained file); replaces only a report written before."""

    datasets: tuple[str, ...] = ()
    """``NAME[@vN]`` versions to cover; empty: every version."""

    collections: tuple[str, ...] = ()
    """Collection ids to cover; empty: every collection (or those the datasets read)."""

    runs: tuple[str, ...] = ()
    """Run ids to cover; empty: every run (or those that trained the datasets)."""

    tokenizer: str | None = None
    """Tokenizer folder for token highlighting; default: a covered run's base model if on disk."""

    conversations: int = 6
    """How many dataset rows the conversation viewer shows per version (best and worst halves)."""


@dataclass(frozen=True)
class ExportConfig:
    """Which dataset version to export, in which format, to where."""

    dataset: str
    """``NAME[@vN]`` (latest version when unversioned)."""

    output: Path
    """A ``.jsonl`` file (openai, trl-*) or a folder (hf)."""

    format: str = "openai"
    """openai | trl-messages | trl-prompt-completion | hf; for preference versions trl-preference |
    openai-preference."""

    tokenizer: str | None = None
    """Tokenizer folder with the model's chat template, for the round-trip check."""

    split: str | None = None
    """Export only this split (train or validation); default: every split."""

    force: bool = False
    """Replace an output file or folder that an earlier export wrote (never anything else)."""

    def validate(self) -> ExportConfig:
        if self.format not in EXPORT_FORMATS + PREFERENCE_FORMATS:
            known = ", ".join(EXPORT_FORMATS + PREFERENCE_FORMATS)
            raise ViewUsageError(f"unknown export format {self.format!r}", f"use one of {known}")
        if self.split not in (None, "train", "validation"):
            raise ViewUsageError(f"unknown split {self.split!r}", "use train or validation")
        return self
