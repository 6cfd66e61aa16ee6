"""What a dataset row trains on, marked in its decoded text: the one marker style of every view.

The masked part (label -100: the prompt, no loss) and the trained part (the response) are
marked ``[-masked-]`` and ``{+trained+}`` (as wdiff marks removed and added text) in pipes, logs
and tests; on a terminal that asked for colour the masked text is dimmed and the trained text
highlighted instead. Decoded text is what a model or tool wrote, so its control characters are
made visible: it cannot drive the terminal (issue 18).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tracebank.core.text import visible
from tracebank.warehouse.contract import IGNORE_INDEX

DIM, BOLD_GREEN, RESET = "\x1b[2m", "\x1b[1;32m", "\x1b[0m"


def legend(color: bool = False) -> str:
    """What the marks mean, in the style the text is marked in."""
    if color:
        return f"legend: {DIM}masked (no loss){RESET} {BOLD_GREEN}trained{RESET}"
    return "legend: [-masked (no loss)-] {+trained+}"


def token_runs(input_ids: list[int], labels: list[int]) -> list[tuple[bool, list[int]]]:
    """Consecutive runs of (trained?, token ids)."""
    out: list[tuple[bool, list[int]]] = []
    for token, label in zip(input_ids, labels, strict=True):
        trained = label != IGNORE_INDEX
        if out and out[-1][0] == trained:
            out[-1][1].append(token)
        else:
            out.append((trained, [token]))
    return out


def render_runs(runs: list[tuple[bool, str]], color: bool = False) -> str:
    """Decoded runs of (trained?, text) as one text, each run marked (control characters visible)."""
    parts = []
    for trained, raw in runs:
        text = visible(raw)
        if color:
            parts.append(f"{BOLD_GREEN if trained else DIM}{text}{RESET}")
        else:
            parts.append(f"{{+{text}+}}" if trained else f"[-{text}-]")
    return "".join(parts)


def marked_tokens(
    input_ids: list[int], labels: list[int], decode: Callable[[list[int]], str], color: bool = False
) -> str:
    """A row's text, each run of tokens decoded on its own and marked masked or trained."""
    return render_runs([(trained, decode(ids)) for trained, ids in token_runs(input_ids, labels)], color)


def decoder(tokenizer: Any) -> Callable[[list[int]], str]:
    """Token ids -> text as the model saw it (special tokens kept: they are part of the prompt)."""
    return lambda ids: tokenizer.decode(ids, skip_special_tokens=False)
