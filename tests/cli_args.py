"""Where CLI tests put the warehouse option."""

from __future__ import annotations


def cli_args(root, position: str, *args: str) -> list[str]:
    """``--warehouse ROOT`` before the subcommand, or ``-w ROOT`` after every other argument."""
    if position == "before":
        return ["--warehouse", str(root), *args]
    return [*args, "-w", str(root)]
