"""agentlightning's LLMProxy, started so that it really records spans into a remote store.

The recipe's setup (``agl store`` + ``LightningStoreClient`` + ``LLMProxy`` in
front of vLLM) breaks twice with the library versions tracebank runs on:

1. **LiteLLM >= 1.108 refuses to start without a master key**, and
   agentlightning 0.3's LLMProxy sets none. :class:`TracebankLLMProxy` puts a
   key in the proxy's ``general_settings.master_key`` (the caller's, else
   ``$LITELLM_MASTER_KEY``, else a generated ``sk-tracebank-...``) and puts the
   same key into the ``LLM`` resource it publishes (``as_resource``), so agents
   that build their client from the resource (``api_key=llm.api_key``) are let
   in. The health probe moves to ``/health/liveliness``, which needs no key
   (``/health`` now does, and it also calls the backend).

2. **opentelemetry-exporter-otlp-proto-http >= 1.44 loses every proxy span.**
   The proxy's ``LightningSpanExporter`` builds one ``OTLPSpanExporter()`` (aimed
   at the default ``localhost:4318``) and, at export time, points it at the
   store by assigning ``exporter._endpoint = store.otlp_traces_endpoint()``.
   From 1.44 the exporter hands its endpoint to an HTTP client when it is built
   (``exporter._client._endpoint``), so the assignment changes nothing: spans
   go to localhost:4318 and are dropped, with only a log line. tracebank's
   exporter keeps agentlightning's contract (``_endpoint`` is what the proxy
   sets) and builds one real ``OTLPSpanExporter(endpoint=...)`` per endpoint it
   is pointed at, so it posts where the proxy asks on every otel version, old
   or new, without a pin (FastAPI >= 0.150 needs opentelemetry-api >= 1.44, so
   pinning the exporter below 1.44 fights the rest of the stack).

The hook is agentlightning's own extension point: LLMProxy takes LiteLLM
callback classes, and tracebank passes a ``LightningOpenTelemetry`` subclass
that carries the fixed exporter. The classes touch agentlightning internals
(``LightningSpanExporter._otlp_exporter``) that exist in 0.3.x; they check for
them and fail with a clear ProxyError if a later release moves them.

How a call reaches a rollout: the proxy resource (``ProxyLLM``) is rollout
agnostic; ``llm.get_base_url(rollout_id, attempt_id)`` (or
``ProxyLLM.with_attempted_rollout``, which the runners call) gives
``http://HOST:PORT/rollout/<rid>/attempt/<aid>/v1``. The proxy's middleware
strips that prefix, asks the store for the attempt's next sequence id and adds
``x-rollout-id`` / ``x-attempt-id`` / ``x-sequence-id`` headers; the exporter
reads them back from the spans and stamps them on as resource attributes
before posting to the store's ``/v1/traces``.

The agentlightning classes are built on first use (module ``__getattr__``), so
importing this module stays cheap and the classes still pickle by name.
"""

from __future__ import annotations

import functools
import os
import secrets
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from tracebank.serve.config import ProxyConfig
from tracebank.serve.errors import ProxyError
from tracebank.serve.process import free_port

#: Where LiteLLM answers health probes without a key (``/health`` needs one and calls the backend).
LIVELINESS_PATH = "/health/liveliness"
CLASS_NAMES = (
    "EndpointFollowingOTLPExporter",
    "StoreBoundSpanExporter",
    "StoreBoundOpenTelemetry",
    "TracebankLLMProxy",
)


def generate_api_key() -> str:
    """A fresh local master key for one proxy."""
    return f"sk-tracebank-{secrets.token_hex(16)}"


def otlp_exporter_binds_endpoint_at_init() -> bool:
    """Whether the installed OTLP/HTTP exporter ignores a later ``_endpoint`` assignment.

    True with opentelemetry-exporter-otlp-proto-http >= 1.44: the stock LLMProxy
    then sends every span to localhost:4318 instead of the store. tracebank's
    exporter does not depend on it; this is for diagnostics and tests.
    """
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint="http://127.0.0.1:9/built/v1/traces")
    try:
        exporter._endpoint = "http://127.0.0.1:9/assigned/v1/traces"
        client = getattr(exporter, "_client", None)
        bound = getattr(client, "_endpoint", None)
        return bound is not None and bound != exporter._endpoint
    finally:
        exporter.shutdown()


@functools.cache
def _classes() -> dict[str, type]:
    """Build the agentlightning subclasses (imports agentlightning and LiteLLM: seconds)."""
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    from agentlightning.llm_proxy import LightningOpenTelemetry, LightningSpanExporter, LLMProxy
    from litellm.integrations.opentelemetry import OpenTelemetry, OpenTelemetryConfig
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

    class EndpointFollowingOTLPExporter(SpanExporter):
        """An OTLP/HTTP exporter that posts to whatever ``_endpoint`` holds at export time.

        agentlightning's LightningSpanExporter assigns ``_endpoint`` just before each
        export; this honours it by keeping one real exporter per endpoint.
        """

        def __init__(self, endpoint: str) -> None:
            self._endpoint = endpoint
            self._exporters: dict[str, Any] = {}

        def exporter_for(self, endpoint: str) -> Any:
            if endpoint not in self._exporters:
                self._exporters[endpoint] = OTLPSpanExporter(endpoint=endpoint)
            return self._exporters[endpoint]

        def export(self, spans: Any) -> Any:
            if not spans:
                return SpanExportResult.SUCCESS
            return self.exporter_for(self._endpoint).export(spans)

        def force_flush(self, timeout_millis: int = 30000) -> bool:
            return all(e.force_flush(timeout_millis) for e in self._exporters.values())

        def shutdown(self) -> None:
            for e in self._exporters.values():
                e.shutdown()

    class StoreBoundSpanExporter(LightningSpanExporter):  # type: ignore[misc]
        """LightningSpanExporter whose OTLP exporter really posts to the store's endpoint."""

        def __init__(self, _store: Any = None) -> None:
            super().__init__(_store)
            stock = getattr(self, "_otlp_exporter", None)
            if stock is None or not hasattr(stock, "_endpoint"):
                raise ProxyError(
                    "this agentlightning release has no LightningSpanExporter._otlp_exporter",
                    "tracebank's span-export fix targets agentlightning 0.3.x",
                )
            self._otlp_exporter = EndpointFollowingOTLPExporter(stock._endpoint)
            stock.shutdown()

    class StoreBoundOpenTelemetry(LightningOpenTelemetry):  # type: ignore[misc]
        """The proxy's LiteLLM OpenTelemetry callback, with StoreBoundSpanExporter."""

        def __init__(self) -> None:
            # LightningOpenTelemetry.__init__ only adds its own exporter to the same call.
            OpenTelemetry.__init__(self, config=OpenTelemetryConfig(exporter=StoreBoundSpanExporter()))

    class TracebankLLMProxy(LLMProxy):  # type: ignore[misc]
        """LLMProxy that starts under LiteLLM >= 1.108 and records spans under otel >= 1.44.

        Takes LLMProxy's arguments, plus ``api_key`` (the master key; see the module
        docstring) and ``fix_otlp_exporter`` (False only to show the stock loss in tests).
        """

        def __init__(
            self,
            *args: Any,
            api_key: str | None = None,
            fix_otlp_exporter: bool = True,
            litellm_config: dict[str, Any] | None = None,
            callbacks: Any = None,
            **kwargs: Any,
        ) -> None:
            config = dict(litellm_config or {})
            general = dict(config.get("general_settings") or {})
            key = (
                api_key
                or general.get("master_key")
                or os.environ.get("LITELLM_MASTER_KEY")
                or generate_api_key()
            )
            general["master_key"] = key
            config["general_settings"] = general
            self.api_key: str = key
            callbacks = list(callbacks) if callbacks is not None else ["return_token_ids", "opentelemetry"]
            if fix_otlp_exporter:
                callbacks = [
                    StoreBoundOpenTelemetry if c in ("opentelemetry", LightningOpenTelemetry) else c
                    for c in callbacks
                ]
            super().__init__(*args, litellm_config=config, callbacks=callbacks, **kwargs)
            self.server_launcher_args.healthcheck_url = LIVELINESS_PATH

        def as_resource(self, *args: Any, **kwargs: Any) -> Any:
            """The LLM resource, carrying the master key agents must send."""
            return super().as_resource(*args, **kwargs).model_copy(update={"api_key": self.api_key})

    built: dict[str, type] = {}
    for cls in (
        EndpointFollowingOTLPExporter,
        StoreBoundSpanExporter,
        StoreBoundOpenTelemetry,
        TracebankLLMProxy,
    ):
        cls.__module__, cls.__qualname__ = __name__, cls.__name__
        built[cls.__name__] = cls
    return built


def __getattr__(name: str) -> Any:
    if name in CLASS_NAMES:
        cls = _classes()[name]
        globals()[name] = cls
        return cls
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def model_list(config: ProxyConfig) -> list[dict[str, Any]]:
    """LiteLLM's model_list for one vLLM-format backend (``hosted_vllm/`` turns on token ids)."""
    return [
        {
            "model_name": config.model_name or config.backend_model,
            "litellm_params": {
                "model": f"hosted_vllm/{config.backend_model}",
                "api_base": config.backend_url,
            },
        }
    ]


def make_llm_proxy(store: Any, config: ProxyConfig) -> Any:
    """A TracebankLLMProxy for ``store`` (a LightningStore or a store URL), not yet started."""
    if isinstance(store, str):
        from agentlightning import LightningStoreClient

        store = LightningStoreClient(store)
    cls = _classes()["TracebankLLMProxy"]
    proxy = cls(
        port=config.port or free_port(config.host),
        host=config.host,
        store=store,
        model_list=model_list(config),
        api_key=config.api_key,
        num_retries=config.num_retries,
        launch_mode=config.launch_mode,
    )
    proxy.server_launcher_args.startup_timeout = config.startup_timeout_s
    return proxy


async def start_llm_proxy(store: Any, config: ProxyConfig) -> Any:
    """Start a TracebankLLMProxy in front of ``config.backend_url``; return it running.

    Publish it with ``proxy.as_resource()`` (a ProxyLLM carrying the key); stop it
    with ``await proxy.stop()``.
    """
    proxy = make_llm_proxy(store, config)
    try:
        await proxy.start()
    except Exception as exc:
        raise ProxyError(
            f"the LLM proxy did not start: {exc}".splitlines()[0],
            "see the log lines above; is the port free?",
        ) from exc
    return proxy


@asynccontextmanager
async def running_llm_proxy(store: Any, config: ProxyConfig) -> AsyncIterator[Any]:
    """``async with running_llm_proxy(store, config) as proxy:`` starts it and stops it after."""
    proxy = await start_llm_proxy(store, config)
    try:
        yield proxy
    finally:
        if proxy.is_running():
            await proxy.stop()
