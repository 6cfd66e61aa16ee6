"""The transform stage: collected spans to versioned, pre-tokenized SFT datasets.

``transform(wh, TransformConfig(name=...))`` writes ``NAME@vN`` from the silver
tables that ``collect`` built for the chosen collections.
"""

from tracebank.transform.builder import TransformResult, transform
from tracebank.transform.config import TransformConfig

__all__ = ["TransformConfig", "TransformResult", "transform"]
