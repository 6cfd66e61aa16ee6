"""`tracebank verify`: check every committed file against its manifest."""

from __future__ import annotations

from typing import Any

import click

from tracebank.cli.options import pass_warehouse
from tracebank.cli.output import say


@click.command()
@pass_warehouse
def verify(wh: Any) -> None:
    """Check every committed file against the size and sha256 its manifest records (like
    `git fsck`); name each damaged file. Exits 1 when anything is damaged."""
    from tracebank.core.errors import CorruptFileError

    report = wh.verify()
    for path, problem in report.damaged:
        say(f"damaged {path}: {problem}")
    for note in report.notes:
        say(f"note: {note}")
    say(report.summary())
    if report.damaged:
        raise CorruptFileError(
            f"{len(report.damaged)} damaged file(s) in {wh.location}",
            "restore them from a backup; silver caches rebuild with `tracebank rebuild-silver`",
        )


COMMANDS = [verify]
