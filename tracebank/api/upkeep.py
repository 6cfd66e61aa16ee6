"""Warehouse methods that keep it sound: verify every committed file, remove what crashes left."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracebank.api.base import Handle
from tracebank.warehouse.layout import DEFAULT_MIN_AGE_S

if TYPE_CHECKING:
    from tracebank.warehouse.gc import GcReport
    from tracebank.warehouse.verify import VerifyReport


class UpkeepMethods(Handle):
    def verify(self) -> VerifyReport:
        """Check every committed file against the size and sha256 its manifest records."""
        from tracebank.warehouse.verify import verify

        return verify(self.readable())

    def gc(self, *, min_age_s: float = DEFAULT_MIN_AGE_S, dry_run: bool = False) -> GcReport:
        """Remove scratch, half-saved models and temp files of writers that ended without cleaning
        up (older than ``min_age_s``); mark runs whose process is gone as failed."""
        from tracebank.warehouse.gc import gc

        return gc(self.readable(), min_age_s=min_age_s, dry_run=dry_run)
