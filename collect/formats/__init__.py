"""Parsers of the text and log formats ``tracebank collect PATH --format NAME`` imports.

Each format is one module here with the same three names, and nothing else is shared
between them but :mod:`tracebank.collect.conversation` (the shape they all produce) and
:mod:`tracebank.collect.formats.lines` (bounded, checked JSON reading):

- ``NAME``: the ``--format`` value;
- ``sniff(head: bytes) -> bool``: whether a file starting with ``head`` (its first
  :data:`~tracebank.collect.formats.lines.SNIFF_BYTES`) is in this format;
- ``parse(path: Path) -> Iterator[Conversation | BadRecord]``: the file's conversations in
  order, with one :class:`~tracebank.collect.conversation.BadRecord` per record left out.

A parser never raises on what a file holds (a bad record is a BadRecord, the rest is
kept) and holds one record at a time, so memory stays flat in the file's size.
"""

from __future__ import annotations

import importlib
from types import ModuleType

FORMATS: tuple[str, ...] = ("chat", "openai", "otlp", "atif")
"""Every format, in the order sniffing tries them."""


def parser(name: str) -> ModuleType:
    """The module of format ``name`` (one of :data:`FORMATS`)."""
    if name not in FORMATS:
        raise ValueError(f"unknown format {name!r}")
    return importlib.import_module(f"tracebank.collect.formats.{name}")
