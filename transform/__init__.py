"""The transform stage: collected spans to versioned, pre-tokenized SFT datasets.

``transform(wh, TransformConfig(name=...))`` writes ``NAME@vN`` from the silver tables that
``collect`` built for the chosen collections, with ``config.rules`` (the recipe's rows or
1.0's) on ``config.engine`` (this process, or a Ray cluster at ``config.address``).
"""

from tracebank.transform.config import TransformConfig
from tracebank.transform.entry import check, transform
from tracebank.transform.version import TransformResult

__all__ = ["TransformConfig", "TransformResult", "check", "transform"]
