"""Serving for tracebank rounds: a CPU model server in vLLM's wire format, and the LLMProxy wiring.

Heavy libraries (torch, transformers, agentlightning, LiteLLM) load inside the
functions that need them, so importing this package is cheap. The LLMProxy
subclass is ``serve.proxy.TracebankLLMProxy`` (built on first access).
"""

from tracebank.serve.config import CpuServerConfig, ProxyConfig
from tracebank.serve.errors import ModelLoadError, ProxyError, ServeError, ServerStartError, ServeUsageError
from tracebank.serve.process import (
    ServerProcess,
    cpu_server_command,
    free_port,
    start_cpu_server,
    start_server,
)
from tracebank.serve.proxy import (
    generate_api_key,
    make_llm_proxy,
    model_list,
    otlp_exporter_binds_endpoint_at_init,
    running_llm_proxy,
    start_llm_proxy,
)

__all__ = [
    "CpuServerConfig",
    "ModelLoadError",
    "ProxyConfig",
    "ProxyError",
    "ServeError",
    "ServeUsageError",
    "ServerProcess",
    "ServerStartError",
    "cpu_server_command",
    "free_port",
    "generate_api_key",
    "make_llm_proxy",
    "model_list",
    "otlp_exporter_binds_endpoint_at_init",
    "running_llm_proxy",
    "start_cpu_server",
    "start_llm_proxy",
    "start_server",
]
