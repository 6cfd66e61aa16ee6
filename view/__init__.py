"""The view stage: read-only looks at the warehouse.

``show(wh, ShowConfig(...))`` renders rollouts or dataset rows as conversations,
``report(wh, ReportConfig(...))`` writes one self-contained HTML report, and
``export(wh, ExportConfig(...))`` writes a dataset version in chat formats trainers take, and
``inspect(wh, InspectConfig(...))`` decodes a dataset row: what it trains on, and histograms.
"""

from tracebank.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "tracebank.view.config": (
            "ExportConfig",
            "InspectConfig",
            "ReportConfig",
            "ShowConfig",
        ),
        "tracebank.view.export": (
            "ExportResult",
            "export",
        ),
        "tracebank.view.inspection": ("inspect",),
        "tracebank.view.report": (
            "ReportResult",
            "report",
        ),
        "tracebank.view.show": ("show",),
    },
)
