"""The view stage: read-only looks at the warehouse.

``show(wh, ShowConfig(...))`` renders rollouts or dataset rows as conversations,
``report(wh, ReportConfig(...))`` writes one self-contained HTML report, and
``export(wh, ExportConfig(...))`` writes a dataset version in chat formats trainers take.
"""

from tracebank.view.config import ExportConfig, ReportConfig, ShowConfig
from tracebank.view.export import ExportResult, export
from tracebank.view.report import ReportResult, report
from tracebank.view.show import show

__all__ = [
    "ExportConfig",
    "ExportResult",
    "ReportConfig",
    "ReportResult",
    "ShowConfig",
    "export",
    "report",
    "show",
]
