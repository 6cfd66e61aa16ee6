"""The rescore stage: new rewards for archived rollouts, offline, as a versioned reward layer.

``rescore(wh, RescoreConfig(scorer="module:function", name=...))`` scores every archived
rollout (a :class:`ScoredRollout`) and commits ``rewards/NAME/vN``; ``transform --rewards NAME``
selects with it. ``RescoreConfig(name=..., judging=JudgeConfig(judge=MODEL, rubric=FILE))``
scores with an LLM judge instead (:mod:`tracebank.rescore.judging`).
"""

from tracebank.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "tracebank.rescore.config": ("JudgeConfig", "RescoreConfig"),
        "tracebank.rescore.entry": ("RescoreResult", "rescore"),
        "tracebank.rescore.record": ("ScoredRollout",),
    },
)
