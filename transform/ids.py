"""The string ids of the loaded rows as integer codes while a version is planned.

Planning sorts, joins and de-duplicates every loaded call by its ids. On strings
each such step copies the text (polars keeps a 16-byte view per id plus the text
of longer ones), and at 1 B tokens the steps' copies were the transform's peak
memory. A code is the id's rank among all loaded ids of its column in byte order
(the order polars and Python sort strings in), so sorting by codes sorts by ids,
and the selection's seeded shuffles see the very same order: the version, and
its content hash, do not change. The selected rows get their strings back last
(:meth:`IdNames.name`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import polars as pl

#: The id columns that are coded, in whichever loaded frames hold them (one code per id across them).
CODED = ("rollout_id", "attempt_id", "span_id", "response_id")

CODE = pl.UInt32


@dataclass
class IdNames:
    """Each coded column's ids, sorted: code ``k`` of a column is ``ids[column][k]``."""

    ids: dict[str, pl.Series] = field(default_factory=dict)

    @classmethod
    def encode(cls, frames: list[pl.DataFrame]) -> tuple[IdNames, list[pl.DataFrame]]:
        """``frames`` with every :data:`CODED` column they hold as codes (nulls stay null), and the
        names that turn them back; a column's codes are shared by every frame that holds it."""
        names = cls()
        for column in CODED:
            holders = [f.get_column(column) for f in frames if column in f.columns]
            if not holders:
                continue
            ids = pl.concat(holders).drop_nulls().unique().sort()
            del holders  # else they keep the string column alive after its frame is recoded
            names.ids[column] = ids.rename(column)
            frames = [names._coded(f, column) if column in f.columns else f for f in frames]
        return names, frames

    def _coded(self, frame: pl.DataFrame, column: str) -> pl.DataFrame:
        ids = self.ids[column]
        values = frame.get_column(column)
        codes = ids.search_sorted(values).cast(CODE)
        return frame.with_columns(pl.when(values.is_null()).then(None).otherwise(codes).alias(column))

    def code(self, frame: pl.DataFrame, column: str) -> pl.DataFrame:
        """``frame`` (ids from elsewhere, such as a reward layer) with ``column`` as codes, less the
        rows whose id none of the loaded rows has."""
        ids = self.ids.get(column, pl.Series(column, [], pl.String))
        values = frame.get_column(column)
        at = ids.search_sorted(values).cast(CODE)
        known = _found(ids, values, at)
        return frame.with_columns(at.alias(column)).filter(known)

    def name(self, frame: pl.DataFrame) -> pl.DataFrame:
        """``frame`` with its coded columns as the ids again."""
        named = [self.ids[c].gather(frame.get_column(c)).alias(c) for c in CODED if c in frame.columns]
        return frame.with_columns(named) if named else frame


def _found(ids: pl.Series, values: pl.Series, at: pl.Series) -> pl.Series:
    """Whether ``values[i]`` is ``ids[at[i]]`` (``at``: where a binary search would insert it)."""
    if len(ids) == 0:
        return pl.repeat(False, len(values), eager=True)
    nearest = ids.gather(at.clip(upper_bound=len(ids) - 1))
    return (nearest == values).fill_null(False)
