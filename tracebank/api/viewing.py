"""Warehouse methods that read: SQL, conversations, a row's tokens, exports and the HTML report."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracebank.api.base import Handle
from tracebank.api.options import build_config
from tracebank.api.sql import SqlResult

if TYPE_CHECKING:
    from tracebank.view import ExportResult, ReportResult


class ViewMethods(Handle):
    def sql(self, statement: str, params: Sequence[Any] | Mapping[str, Any] | None = None) -> SqlResult:
        """A read-only statement over the warehouse views (``params`` fill ``?`` / ``$name``);
        read the result with ``.rows()``, ``.arrow()``, ``.pl()`` or ``.df()``."""
        return SqlResult(self.readable(), statement, params)

    def show(self, rollout: str | None = None, **options: Any) -> str:
        """A rollout (or the ``best``/``worst`` N, or ``dataset``'s ``row``) as a conversation."""
        from tracebank.view import ShowConfig, show

        return show(self.readable(), build_config(ShowConfig, {"rollout_id": rollout, **options}, "show"))

    def inspect(
        self, dataset: str, *, tokenizer: str | Path, row: int = 0, split: str = "train", color: bool = False
    ) -> str:
        """A row of ``dataset`` decoded with its masked and trained tokens marked, then length and
        reward histograms."""
        from tracebank.view import InspectConfig
        from tracebank.view import inspect as inspect_row

        config = InspectConfig(dataset, tokenizer, row=row, split=split, color=color)
        return inspect_row(self.readable(), config)

    def export(self, dataset: str, *, to: str = "openai", output: str | Path, **options: Any) -> ExportResult:
        """Write ``dataset`` as chat data: ``to`` openai, trl, hf (or a preference format) at ``output``."""
        from tracebank.view import ExportConfig, export

        values = {"dataset": dataset, "format": to, "output": Path(output), **options}
        return export(self.readable(), build_config(ExportConfig, values, "export"))

    def report(self, *, output: str | Path = "report.html", **options: Any) -> ReportResult:
        """Write one self-contained HTML report (plots and conversations; no network when opened)."""
        from tracebank.view import ReportConfig, report

        values = {"output": Path(output), **options}
        return report(self.readable(), build_config(ReportConfig, values, "report"))
