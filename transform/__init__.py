"""The transform stage: collected spans to versioned, pre-tokenized SFT datasets.

``transform(wh, TransformConfig(name=...))`` writes ``NAME@vN``;
``build_silver(wh)`` builds the per-collection silver tables on their own.
"""

from tracebank.transform.builder import TransformResult, build_silver, transform
from tracebank.transform.config import TransformConfig

__all__ = ["TransformConfig", "TransformResult", "build_silver", "transform"]
