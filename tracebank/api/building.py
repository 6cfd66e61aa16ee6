"""Warehouse methods that derive versions: transform (datasets) and rescore (reward layers)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tracebank.api.base import Handle, emitter
from tracebank.api.dataset import Dataset
from tracebank.api.options import build_config

if TYPE_CHECKING:
    from tracebank.core.events import OnEvent
    from tracebank.rescore import RescoreResult
    from tracebank.warehouse.query import ResultRows


class BuildMethods(Handle):
    def _current_silver(self, collections: tuple[str, ...], force: bool, emit: OnEvent) -> None:
        """Build the silver tables of ``collections`` where missing or stale (all with ``force``)."""
        from tracebank.collect import build_silver, silver_summary
        from tracebank.core.events import SilverBuilt
        from tracebank.warehouse.storage import Storage

        storage = Storage(self)
        before = {cid: storage.current_silver(cid) for cid in collections}
        for manifest in build_silver(self, collections, force=force):
            if force or before.get(manifest.collection_id) is None:
                emit(SilverBuilt(manifest.collection_id, silver_summary(manifest)))

    def transform(
        self, dataset: str, *, rebuild_silver: bool = False, on_event: OnEvent | None = None, **options: Any
    ) -> Dataset:
        """Build the next version of ``dataset`` from collected calls; an identical one writes nothing.

        Keywords are :class:`~tracebank.transform.TransformConfig`'s (``top_fraction``,
        ``collections``, ``kind``, ``rewards``...) and its nested groups' given flat (``level``,
        ``min_margin``...), as ``tracebank transform`` takes them. The chosen collections' silver
        tables are built first where missing or stale (all again with ``rebuild_silver``).
        """
        from tracebank.transform import TransformConfig, check, transform
        from tracebank.transform.inputs import choose_collections

        config = build_config(TransformConfig, {"name": dataset, **options}, "transform")
        self.readable()
        check(config)  # before any silver is built
        chosen = tuple(cid for cid, _ in choose_collections(self, config.collections))
        self._current_silver(chosen, rebuild_silver, emitter(on_event))
        result = transform(self, config)
        return Dataset(result.ref, result.folder, result.record, _storage(self), result.identical)

    def dataset(self, ref: str) -> Dataset:
        """The committed version ``NAME@vN`` (``NAME``: its latest)."""
        return Dataset.open(self.readable(), ref)

    def datasets(self) -> ResultRows:
        """Every committed version: name, version, rows, tokens, created_at, content_hash."""
        from tracebank.warehouse.listings import datasets_table

        return datasets_table(self.readable())

    def rescore(
        self,
        scorer: str | Callable[..., float | None] | None = None,
        *,
        name: str,
        on_event: OnEvent | None = None,
        **options: Any,
    ) -> RescoreResult:
        """Score every archived rollout with ``scorer`` (``"module:function"`` or a function), or with
        an LLM judge (``judge=MODEL, rubric=FILE``), into reward layer ``name``'s next version.

        Keywords: ``collections``, ``workers``, ``force``, and the judge's (``judge``, ``rubric``,
        ``scale``, ``samples``, ``temperature``, ``seed``, ``group``, ``judge_url``, ``judge_timeout_s``).
        """
        from tracebank.rescore import RescoreConfig, rescore
        from tracebank.warehouse.storage import Storage

        spec = "" if scorer is None else scorer if isinstance(scorer, str) else scorer_spec(scorer)
        config = build_config(RescoreConfig, {"scorer": spec, "name": name, **options}, "rescore")
        config = config.validate()
        committed = tuple(folder.name for folder, _ in Storage(self.readable()).collections())
        self._current_silver(config.collections or committed, False, emitter(on_event))
        return rescore(self, config, on_event=on_event)


def scorer_spec(function: Callable[..., Any]) -> str:
    """``module:function`` of a scorer given as a function: the scorer runs in fresh worker
    processes, which import it by that name (and the layer's hash covers its source file)."""
    from tracebank.core.errors import UsageError

    module, qualname = getattr(function, "__module__", None), getattr(function, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname or "." in qualname:
        raise UsageError(
            f"scorer {qualname or function!r} is not importable by name (defined in a notebook, "
            "a script's __main__ or inside a function)",
            "define it at the top of a module (my_scorers.py) and pass it, or 'my_scorers:function'",
        )
    return f"{module}:{qualname}"


def _storage(wh: Handle) -> Any:
    from tracebank.warehouse.storage import Storage

    return Storage(wh)
