"""Typed settings of the CPU model server and of the LLMProxy wiring."""

from __future__ import annotations

import argparse
import dataclasses
import typing
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CpuServerConfig:
    """How ``python -m serve.cpu_server`` loads and serves one model (its flags, one to one)."""

    model: Path
    """Local Hugging Face model folder (weights, config, tokenizer with a chat template)."""
    host: str = "127.0.0.1"
    """Address to bind; loopback by default, as the server has no authentication."""
    port: int = 8000
    """TCP port to listen on."""
    served_model_name: str | None = None
    """Model name clients send and ``/v1/models`` lists; the folder path when None (as vLLM does)."""
    max_model_len: int | None = None
    """Prompt plus completion token limit; the model's ``max_position_embeddings`` when None."""
    default_max_tokens: int = 256
    """Completion length when a request sets no ``max_tokens`` (vLLM uses the rest of the context,
    which is far too slow on a CPU for a random-weight model that rarely emits EOS)."""
    threads: int | None = None
    """torch intra-op threads; torch's default when None."""
    tool_call_parser: str | None = None
    """``hermes`` parses tool calls out of responses to requests with ``tools`` (vLLM's
    ``--enable-auto-tool-choice --tool-call-parser hermes``); None leaves the text as it is."""

    @property
    def model_name(self) -> str:
        """The name the server answers to."""
        return self.served_model_name or str(self.model)

    def to_argv(self) -> list[str]:
        """The server's command-line flags for these settings: ``--field-name value``, None left out."""
        argv: list[str] = []
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None:
                argv += [_flag(f.name), str(value)]
        return argv

    @classmethod
    def from_argv(cls, argv: list[str] | None = None, prog: str | None = None) -> CpuServerConfig:
        """Parse the flags ``to_argv`` writes (defaults and types are the fields')."""
        parser = argparse.ArgumentParser(prog=prog, description=cls.__doc__)
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            kind = next((t for t in typing.get_args(hints[f.name]) if t is not type(None)), hints[f.name])
            if f.default is dataclasses.MISSING:
                parser.add_argument(_flag(f.name), type=kind, required=True)
            else:
                parser.add_argument(_flag(f.name), type=kind, default=f.default)
        return cls(**vars(parser.parse_args(argv)))


def _flag(field_name: str) -> str:
    return "--" + field_name.replace("_", "-")


@dataclass(frozen=True)
class ProxyConfig:
    """How tracebank starts agentlightning's LLMProxy in front of a model server."""

    backend_url: str
    """The model server's OpenAI base URL, ending in ``/v1`` (``http://127.0.0.1:8000/v1``)."""
    backend_model: str
    """The model name the backend serves (its ``--served-model-name``)."""
    model_name: str | None = None
    """The model name agents ask the proxy for; ``backend_model`` when None."""
    host: str = "127.0.0.1"
    """Address the proxy binds and advertises."""
    port: int | None = None
    """Proxy port; a free one when None."""
    api_key: str | None = None
    """LiteLLM master key agents must send; ``$LITELLM_MASTER_KEY`` or a generated one when None."""
    launch_mode: str = "mp"
    """agentlightning launch mode: ``mp`` (forked process, the recommended one), ``thread``, ``asyncio``."""
    startup_timeout_s: float = 60.0
    """Seconds the proxy may take to answer its health check."""
    num_retries: int = 0
    """LiteLLM retries of a failed backend call."""
