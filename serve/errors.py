"""Errors of the serve package (TracebankErrors, so the CLI reports them in one line)."""

from __future__ import annotations

from tracebank.core.errors import TracebankError, UsageError


class ServeError(TracebankError):
    """A model server or LLM proxy that cannot be started or used."""


class ServeUsageError(UsageError):
    """A bad serve option (model folder, port, length limit)."""


class ModelLoadError(ServeError):
    """The model folder cannot be loaded as a causal LM with a chat template."""


class ServerStartError(ServeError):
    """A server process exited, or did not answer its health check in time."""


class ProxyError(ServeError):
    """The LLMProxy cannot be configured or started against the store."""


class VllmEnvError(ServeError):
    """The environment vLLM runs in cannot be found or built."""
