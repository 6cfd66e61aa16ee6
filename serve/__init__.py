"""Serving for tracebank rounds: a CPU model server in vLLM's wire format, and the LLMProxy wiring.

Heavy libraries (torch, transformers, agentlightning, LiteLLM) load inside the
functions that need them, so importing this package is cheap. The LLMProxy
subclass is ``serve.proxy.TracebankLLMProxy`` (built on first access).
"""

from tracebank.core.lazy import lazy_exports

__getattr__, __dir__, __all__ = lazy_exports(
    __name__,
    {
        "tracebank.serve.config": (
            "CpuServerConfig",
            "ProxyConfig",
        ),
        "tracebank.serve.errors": (
            "ModelLoadError",
            "ProxyError",
            "ServeError",
            "ServerStartError",
            "ServeUsageError",
        ),
        "tracebank.serve.process": (
            "ServerProcess",
            "cpu_server_command",
            "free_port",
            "start_cpu_server",
            "start_server",
        ),
        "tracebank.serve.proxy": (
            "generate_api_key",
            "make_llm_proxy",
            "model_list",
            "otlp_exporter_binds_endpoint_at_init",
            "running_llm_proxy",
            "start_llm_proxy",
        ),
    },
)
