"""The transform stage: collected spans to versioned, pre-tokenized SFT datasets.

``transform(wh, TransformConfig(name=...))`` writes ``NAME@vN``;
``build_silver(wh)`` builds the per-collection silver tables on their own.
"""

from transform.builder import TransformResult, build_silver, transform
from transform.config import TransformConfig

__all__ = ["TransformConfig", "TransformResult", "build_silver", "transform"]
