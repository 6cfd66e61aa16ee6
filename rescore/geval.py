"""A judge's score from its next-token distribution (G-Eval): the probability-weighted mean of the
scale's values, and the fallbacks where an endpoint reports no probabilities."""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Iterable
from dataclasses import dataclass

_NUMBER = re.compile(r"(?<![\d.])-?\d+(?:\.\d+)?")


class JudgeFailed(Exception):
    """One rollout's judgment failed (its first line is what the layer counts)."""


@dataclass(frozen=True)
class Judgment:
    """What the judge said of one rollout."""

    score: float
    """The probability-weighted mean over the scale (or the parsed number, without log-probabilities)."""
    samples: list[float] | None = None
    """The ``--samples`` judgments, each a value of the scale (None without ``--samples``)."""

    @property
    def mean(self) -> float | None:
        return statistics.fmean(self.samples) if self.samples else None

    @property
    def std(self) -> float | None:
        return statistics.pstdev(self.samples) if self.samples else None


def weighted_mean(probs: dict[int, float]) -> float:
    """sum(value * p) / sum(p) over the scale values that have a probability."""
    total = sum(probs.values())
    if not probs or not total > 0 or not math.isfinite(total):
        raise JudgeFailed("the judge gave the scale's tokens no probability")
    return sum(value * p for value, p in probs.items()) / total


def scale_probs(top: Iterable[tuple[str, float]], scale: list[int]) -> dict[int, float]:
    """Probabilities of the scale's values among (token text, logprob) alternatives; tokens that
    are a value with spaces around it (`` 3``) count towards that value."""
    wanted = {str(v): v for v in scale}
    out: dict[int, float] = {}
    for token, logprob in top:
        value = wanted.get(token.strip())
        if value is not None and math.isfinite(logprob):
            out[value] = out.get(value, 0.0) + math.exp(logprob)
    return out


def parse_score(text: str, scale: list[int]) -> float:
    """The first number in ``text``, which must lie on the scale."""
    match = _NUMBER.search(text)
    if match is None:
        raise JudgeFailed("no number in the judge's answer")
    value = float(match.group())
    if not scale[0] <= value <= scale[-1]:
        raise JudgeFailed(f"the judge's number is off the scale {scale[0]}-{scale[-1]}")
    return value
