"""`report`: one self-contained HTML file about a warehouse, datasets, collections or runs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tracebank.core.outputs import OutputGuard
from tracebank.view.config import ReportConfig
from tracebank.view.report_data import gather
from tracebank.view.report_html import page
from tracebank.view.tables import READ
from tracebank.view.tokenizer import load_tokenizer
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import connect


@dataclass
class ReportResult:
    output: Path
    bytes: int
    collections: int
    datasets: int
    runs: int

    def summary(self) -> str:
        return (
            f"wrote {self.output} ({self.bytes / 1e6:.1f} MB): {self.collections} collections, "
            f"{self.datasets} dataset versions, {self.runs} runs"
        )


def plotly_js() -> str:
    """plotly's own minified bundle, shipped inside the plotly package (no network)."""
    from plotly.offline import get_plotlyjs

    return str(get_plotlyjs())


def output_guard(wh: Warehouse, config: ReportConfig) -> OutputGuard:
    """The guard of ``report -o``: one file; an earlier report is replaced, nothing else."""
    return OutputGuard(
        config.output,
        kind="file",
        warehouse_root=wh.root,
        command="report",
        overwrite=True,
        option="--output",
        overwrite_flag=None,
    )


def report(wh: Warehouse, config: ReportConfig) -> ReportResult:
    """Write the report ``config`` asks for; see the module docstring."""
    guard = output_guard(wh, config)
    guard.check()  # before any work: a refused path costs nothing
    con = connect(wh, only=set(READ))
    try:
        data = gather(wh, con, config, load_tokenizer)
    finally:
        con.close()
    text = page(data, plotly_js())
    with guard.writing() as tmp:
        tmp.write_text(text, encoding="utf-8")
    out = guard.path
    return ReportResult(
        out, out.stat().st_size, len(data["collections"]), len(data["datasets"]), len(data["runs"])
    )
