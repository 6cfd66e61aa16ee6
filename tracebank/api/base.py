"""What every method of the Warehouse starts from: the handle, checked once."""

from __future__ import annotations

from typing import TYPE_CHECKING

from tracebank.warehouse.location import Warehouse

if TYPE_CHECKING:  # the events module costs ~12 ms to import: a read such as `sql` never needs it
    from tracebank.core.events import Event, OnEvent


class Handle(Warehouse):
    """A warehouse handle whose format was checked when it was opened (``tracebank.open``).

    Reading methods need a warehouse that exists; writing ones create its layout first.
    """

    def _format(self) -> bytes | None:
        """The format file's bytes, read once per handle: every stage checks the format on entry
        (a library caller may call one directly), and a bucket's would be a request each time."""
        data: bytes | None = self.__dict__.get("_format_bytes")
        if data is None:
            data = super()._format()
            if data is not None:  # a warehouse that does not exist yet is looked for again
                object.__setattr__(self, "_format_bytes", data)
        return data

    def readable(self) -> Handle:
        """Self, once the warehouse exists and this tracebank can read it (else one line)."""
        self.check_format()
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
