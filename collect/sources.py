"""What collect reads from: typed sources that only know how to read.

A source hands every (rollout, attempt) it reads to the run's Batch; the entry
(``collector.collect``) does the rest the same way for all of them: the warehouse's
collect claim, the skip rule, redaction, files, the manifest and the commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Protocol, runtime_checkable

from tracebank.collect.agl1_read import is_agl1_server, read_server, read_spool_folder
from tracebank.collect.batch import Batch, Progress, Records
from tracebank.collect.config import VERSIONS, CollectConfig
from tracebank.collect.errors import CollectUsageError
from tracebank.collect.file_read import FilePlan, plan_files, read_files
from tracebank.collect.source import describe_store
from tracebank.collect.store_read import read_store


@runtime_checkable
class Source(Protocol):
    """Something collect reads rollouts from."""

    records: ClassVar[Records]
    """``spans`` (Agent Lightning 0.3) or ``events`` (1.0): what the collection holds."""

    @property
    def description(self) -> str:
        """What the manifest records as the store (``store_url``)."""
        ...

    async def read(self, batch: Batch, config: CollectConfig, progress: Progress | None) -> None:
        """Hand every (rollout, attempt) that matches ``config``'s filters to ``batch``."""
        ...


@dataclass(frozen=True)
class StoreSource:
    """An Agent Lightning 0.3 store: an ``agl store`` URL, or a LightningStore in this process."""

    store: Any
    """The URL (``http://HOST:PORT``) or the LightningStore object."""
    records: ClassVar[Records] = "spans"

    def __post_init__(self) -> None:
        describe_store(self.store)  # a bad URL or object fails here, in one line

    @property
    def description(self) -> str:
        return describe_store(self.store)

    async def read(self, batch: Batch, config: CollectConfig, progress: Progress | None) -> None:
        await read_store(self.store, batch, config, progress)


@dataclass(frozen=True)
class Agl1ServerSource:
    """A live Agent Lightning 1.0 ``agl-server``, read over REST through the warehouse's spool."""

    url: str
    """The server's URL."""
    key: str = ""
    """Its API key, if it asks for one."""
    records: ClassVar[Records] = "events"

    @property
    def description(self) -> str:
        return self.url

    async def read(self, batch: Batch, config: CollectConfig, progress: Progress | None) -> None:
        await read_server(self.url, self.key, batch, config, progress)


@dataclass(frozen=True)
class SpoolSource:
    """A folder of Agent Lightning 1.0 rollouts that tracebank's trainer hook spooled."""

    folder: Path
    """The spool folder (the trainer's ``TRACEBANK_SPOOL``); emptied of what gets committed."""
    records: ClassVar[Records] = "events"

    @property
    def description(self) -> str:
        return f"spool:{self.folder}"

    async def read(self, batch: Batch, config: CollectConfig, progress: Progress | None) -> None:
        await read_spool_folder(Path(self.folder), batch, config, progress)


@dataclass(frozen=True)
class FileSource:
    """A text or log file, or a folder of them: chat files, OpenAI / vLLM logs, OTLP spans, ATIF."""

    path: Path
    """The file, or the folder whose regular files are read (sorted)."""
    format: str | None = None
    """The format's name (``chat``, ``openai``, ``otlp``, ``atif``); None: sniffed per file."""
    records: ClassVar[Records] = "events"
    plan: FilePlan = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:  # a missing path or unknown format fails here, in one line
        object.__setattr__(self, "plan", plan_files(Path(self.path), self.format))

    @property
    def description(self) -> str:
        return f"{self.plan.format}:{self.path}"

    async def read(self, batch: Batch, config: CollectConfig, progress: Progress | None) -> None:
        await read_files(self.plan, batch, config, progress)


def as_source(source: Any) -> Source:
    """``source`` itself when it is a Source; a store URL or LightningStore as a StoreSource."""
    return source if isinstance(source, Source) else StoreSource(source)


def server_source(url: str, key: str = "", version: str = "auto") -> StoreSource | Agl1ServerSource:
    """The source of a server URL: ``version`` agl03 or agl1, or ``auto`` to ask the server."""
    if version not in VERSIONS:
        raise CollectUsageError(f"invalid source version {version!r}", f"use one of {', '.join(VERSIONS)}")
    if version == "agl1" or (version == "auto" and is_agl1_server(url, key)):
        return Agl1ServerSource(url, key)
    return StoreSource(url)
