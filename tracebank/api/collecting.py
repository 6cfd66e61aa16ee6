"""Warehouse methods that fill it: collect, rebuild its silver tables, repair duplicates."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from tracebank.api.base import Handle
from tracebank.api.options import build_config

if TYPE_CHECKING:
    import threading
    from collections.abc import Callable

    from tracebank.collect import CollectResult, Source
    from tracebank.collect.receiver import ReceiveResult
    from tracebank.collect.repair import RepairResult
    from tracebank.core.events import OnEvent
    from tracebank.warehouse.records import SilverManifest


def _source(source: str | Path | Source, version: str, agl_key: str, format: str | None) -> Source:
    """A chat or log file (a regular file, or any path with ``format``), a spool folder (a Path,
    or text naming a folder that exists), a store or agl-server URL, or a Source as it is."""
    from tracebank.collect import FileSource, SpoolSource, server_source

    local = isinstance(source, str | Path) and "://" not in str(source)
    if local and (format is not None or Path(str(source)).is_file()):
        return FileSource(Path(source), None if format in (None, "auto") else format)
    if isinstance(source, Path) or (
        isinstance(source, str) and "://" not in source and Path(source).is_dir()
    ):
        return SpoolSource(Path(source))
    if isinstance(source, str):
        return server_source(source, agl_key, version)
    return source


class CollectMethods(Handle):
    def collect(
        self,
        source: str | Path | Source,
        *,
        version: str = "auto",
        agl_key: str = "",
        format: str | None = None,
        on_event: OnEvent | None = None,
        **options: Any,
    ) -> CollectResult:
        """Copy new rollouts from ``source`` into one new collection, then build its silver tables.

        ``source``: an ``agl store`` (0.3) or ``agl-server`` (1.0) URL, a spool folder that
        tracebank's 1.0 trainer hook filled, or a chat / log file (or, with ``format``, a folder
        of them). ``format``: chat, openai, otlp or atif, or auto (sniffed from each file's
        start); None: a regular file is sniffed, a folder is a spool. ``version``: auto, agl03
        or agl1 (of a URL); ``agl_key``: an agl-server's API key. Other keywords are
        :class:`CollectConfig`'s (``tag``, ``statuses``, ``since``...); without ``statuses`` a
        1.0 source takes succeeded and failed rollouts. Attempts already in the warehouse are skipped.
        """
        from tracebank.collect import collect, parse_since
        from tracebank.collect.config import AGL1_STATUSES, CollectConfig, check_tag

        check_tag(options.get("tag"))  # before a server is asked which Agent Lightning it runs
        if isinstance(options.get("since"), str):
            options["since"] = parse_since(options["since"])
        src = _source(source, version, agl_key, format)
        if not options.get("statuses"):  # not chosen: 1.0 trains on failed rollouts too
            options.pop("statuses", None)
            if src.records == "events":
                options["statuses"] = AGL1_STATUSES
        config = build_config(CollectConfig, options, "collect").validate()
        return collect(src, self, config, on_event=on_event)

    def rebuild_silver(self, collections: tuple[str, ...] | list[str] = ()) -> list[SilverManifest]:
        """Build the silver tables (llm_calls, rewards, messages) of ``collections`` (default:
        every committed collection) again from their bronze files."""
        from tracebank.collect import build_silver

        return build_silver(self.readable(), tuple(collections), force=True)

    def repair_duplicates(self, on_event: OnEvent | None = None) -> RepairResult:
        """Keep one copy of every attempt that collects running at once stored twice."""
        from tracebank.collect.batch import new_collection_id
        from tracebank.collect.repair import repair_duplicates

        return repair_duplicates(self.readable(), new_collection_id, on_event=on_event)

    def receive(
        self,
        *,
        stop: threading.Event | None = None,
        on_ready: Callable[[str], None] | None = None,
        **options: Any,
    ) -> ReceiveResult:
        """Receive OTLP/HTTP traces on ``/v1/traces`` and commit their LLM calls until stopped.

        Keywords are :class:`ReceiveConfig`'s (``port``, ``host``, ``batch_seconds``, ``max_body``,
        ``allow_remote``, ``spool``, ``token_env``: an environment variable holding a bearer token
        every request must carry). Each trace (quiet for ``batch_seconds``) becomes one
        conversation committed through ``collect``; ``stop`` set, Ctrl-C or SIGTERM commits what is
        held and returns. ``on_ready`` gets the URL once the socket listens.
        """
        import shutil
        import tempfile

        from tracebank.collect import SpoolSource
        from tracebank.collect.config import ReceiveConfig
        from tracebank.collect.receiver import Receiver, check_host

        config = build_config(ReceiveConfig, options, "receive").validate()
        token = _token(config.token_env)
        check_host(config.host, config.allow_remote, bool(token))
        spool = Path(config.spool) if config.spool else Path(tempfile.mkdtemp(prefix="tracebank-receive-"))
        receiver = Receiver(config, token, spool, lambda: self.collect(SpoolSource(spool)))
        result = receiver.run(stop, on_ready)
        if not config.spool and not any(spool.iterdir()):
            shutil.rmtree(spool, ignore_errors=True)
        elif not config.spool:
            left = f"uncommitted entries left in {spool}: `tracebank collect --spool {spool}`"
            result.warnings.append(left)
        return result


def _token(token_env: str | None) -> str:
    """The bearer token from the variable ``token_env`` names ('' when none is asked for)."""
    import os

    from tracebank.collect.errors import CollectUsageError

    if not token_env:
        return ""
    token = os.environ.get(token_env, "")
    if not token.strip():
        raise CollectUsageError(f"--token-env {token_env}: that variable is not set or empty")
    return token
