"""The transform stage: collected spans to versioned, pre-tokenized SFT datasets.

``transform(wh, TransformConfig(name=...))`` writes ``NAME@vN`` from the silver
tables that ``collect`` built for the chosen collections; ``run_transform(...,
engine="ray")`` runs the same transform on a Ray cluster.
"""

from tracebank.transform.builder import TransformResult, run_transform, transform
from tracebank.transform.config import TransformConfig

__all__ = ["TransformConfig", "TransformResult", "run_transform", "transform"]
