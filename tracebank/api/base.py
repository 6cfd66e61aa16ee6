"""What every method of the Warehouse starts from: the handle, checked once."""

from __future__ import annotations

from tracebank.core.events import Event, OnEvent
from tracebank.warehouse.location import Warehouse


class Handle(Warehouse):
    """A warehouse handle whose format was checked when it was opened (``tracebank.open``).

    Reading methods need a warehouse that exists; writing ones create its layout first.
    """

    def readable(self) -> Handle:
        """Self, once the warehouse exists and this tracebank can read it (else one line); the
        format is read once per handle."""
        if not getattr(self, "_readable", False):
            self.check_format()
            self._readable = True
        return self

    def writable(self) -> Handle:
        """Self, its folder layout created (nothing is written before a method writes)."""
        self.init()
        return self


def emitter(on_event: OnEvent | None) -> OnEvent:
    """``on_event``, or a callback that drops every event."""

    def drop(_event: Event) -> None:
        return None

    return on_event or drop
