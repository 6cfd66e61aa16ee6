"""``--base-model ORG/NAME[@REVISION]``: a Hugging Face hub id resolved through the local cache.

tracebank never downloads at run time (``core.hub`` resolves it, the same way for every stage). The
run records the snapshot's commit, so ``ORG/NAME@<commit>`` names exactly the weights a run trained.
"""

from __future__ import annotations

from tracebank.core.hub import HUB_ID, hub_cache, resolve_pretrained
from tracebank.core.hub import Pretrained as BaseModel
from tracebank.train.errors import TrainError

__all__ = ["HUB_ID", "BaseModel", "hub_cache", "resolve_base_model"]


def resolve_base_model(name: str) -> BaseModel:
    """A local folder as it is, or a hub id's cached snapshot (one-line error when it is not cached)."""
    return resolve_pretrained(name, "base model", TrainError)
