"""The transform stage: collected spans to versioned, pre-tokenized datasets (SFT rows or preference pairs).

``transform(wh, TransformConfig(name=...))`` writes ``NAME@vN`` from the silver tables that
``collect`` built for the chosen collections, with ``config.rules`` (the recipe's rows or
1.0's) on ``config.engine`` (this process, or a Ray cluster at ``config.address``);
``config.kind="preference"`` writes chosen/rejected pairs of same-task rollouts instead.
"""

from tracebank.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "tracebank.transform.config": ("TransformConfig",),
        "tracebank.transform.entry": (
            "check",
            "transform",
        ),
        "tracebank.transform.version": ("TransformResult",),
    },
)
