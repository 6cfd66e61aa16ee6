"""The rescore stage: new rewards for archived rollouts, offline, as a versioned reward layer.

``rescore(wh, RescoreConfig(scorer="module:function", name=...))`` scores every archived
rollout (a :class:`ScoredRollout`) and commits ``rewards/NAME/vN``; ``transform --rewards NAME``
selects with it.
"""

from tracebank.rescore.config import RescoreConfig
from tracebank.rescore.entry import RescoreResult, rescore
from tracebank.rescore.record import ScoredRollout

__all__ = ["RescoreConfig", "RescoreResult", "ScoredRollout", "rescore"]
