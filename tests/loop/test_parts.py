"""The small parts of a round: model paths, task files, the vLLM command line, configs, the proxy check."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest
from tracebank.core.errors import TracebankError
from tracebank.loop import (
    LoopUsageError,
    RoundConfig,
    ServerConfig,
    StagesConfig,
    load_tasks,
    next_model_path,
)
from tracebank.loop.config import train_template
from tracebank.loop.servers import server_command
from tracebank.loop.toy_agent import make_tasks, similarity
from tracebank.transform.config import TransformConfig


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("models/version_0", "models/version_1"),
        ("/m/version_9", "/m/version_10"),
        ("/m/qwen-3", "/m/qwen-4"),
        ("/m/Qwen3-4B-Instruct", "/m/Qwen3-4B-Instruct-r1"),
        ("/m/base-r1", "/m/base-r2"),
    ],
)
def test_next_model_path(model, expected):
    assert next_model_path(model) == Path(expected)


def test_load_tasks_reads_json_lines(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"q": 1}\n\n"plain text task"\n[1, 2]\n')
    assert load_tasks(path) == [{"q": 1}, "plain text task", [1, 2]]
    (tmp_path / "empty.jsonl").write_text("\n")
    with pytest.raises(LoopUsageError, match="has no tasks"):
        load_tasks(tmp_path / "empty.jsonl")


#: Any existing interpreter stands for the vLLM environment's (only the command line is built here).
VLLM_PY = Path(sys.executable)
VLLM_MODULE = [str(VLLM_PY), "-P", "-m", "vllm.entrypoints.openai.api_server"]


def test_vllm_command_carries_the_recipes_flags(monkeypatch):
    monkeypatch.setattr("tracebank.serve.vllm_env.has_cuda", lambda: True)
    config = ServerConfig(
        gpu_memory_utilization=0.7,
        max_model_len=4096,
        quantization="bitsandbytes",
        extra_args=("--seed", "3"),
        vllm_python=VLLM_PY,
    )
    assert server_command(Path("/m/version_1"), 8123, config) == [
        *VLLM_MODULE,
        "--model",
        "/m/version_1",
        "--host",
        "127.0.0.1",
        "--port",
        "8123",
        "--served-model-name",
        "/m/version_1",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "hermes",
        "--gpu-memory-utilization",
        "0.7",
        "--max-model-len",
        "4096",
        "--quantization",
        "bitsandbytes",
        "--seed",
        "3",
    ]
    config = ServerConfig(tool_call_parser=None, served_model_name="policy", vllm_python=VLLM_PY)
    assert server_command(Path("/m/v"), 1, config) == [
        *VLLM_MODULE,
        "--model",
        "/m/v",
        "--host",
        "127.0.0.1",
        "--port",
        "1",
        "--served-model-name",
        "policy",
    ]


def test_vllm_on_cpu_gets_memory_flags_and_eager_mode(monkeypatch, tmp_path):
    monkeypatch.setattr("tracebank.serve.vllm_env.has_cuda", lambda: False)
    cmd = server_command(tmp_path, 1, ServerConfig(vllm_python=VLLM_PY))
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.15" and "--enforce-eager" in cmd
    compiled = ServerConfig(vllm_python=VLLM_PY, enforce_eager=False)
    assert "--enforce-eager" not in server_command(tmp_path, 1, compiled)


def test_an_adapter_folder_is_served_as_a_lora_module_on_its_base(monkeypatch, tmp_path, model_v0):
    import json

    monkeypatch.setattr("tracebank.serve.vllm_env.has_cuda", lambda: True)
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    config = {"r": 32, "base_model_name_or_path": str(model_v0)}
    (adapter / "adapter_config.json").write_text(json.dumps(config))
    cmd = server_command(adapter, 1, ServerConfig(vllm_python=VLLM_PY))
    assert cmd[cmd.index("--model") + 1] == str(model_v0)
    assert cmd[cmd.index("--served-model-name") + 1] == str(model_v0)
    assert cmd[cmd.index("--lora-modules") + 1] == f"{adapter}={adapter}"  # requests name the adapter
    assert cmd[cmd.index("--max-lora-rank") + 1] == "32"


def test_cpu_command_serves_the_same_model_name(tmp_path):
    cmd = server_command(tmp_path, 8124, ServerConfig(kind="cpu", max_model_len=512, default_max_tokens=16))
    assert cmd[1:4] == ["-P", "-m", "tracebank.serve.cpu_server"]
    assert cmd[cmd.index("--served-model-name") + 1] == str(tmp_path)
    assert cmd[cmd.index("--max-model-len") + 1] == "512"


@pytest.mark.parametrize(
    ("config", "message"),
    [
        (RoundConfig(server=ServerConfig(kind="tgi")), "unknown server 'tgi'"),
        (RoundConfig(server=ServerConfig(gpu_memory_utilization=1.5)), "--gpu-memory-utilization must be in"),
        (RoundConfig(stages=StagesConfig(then="deploy")), "unknown --then 'deploy'"),
        (RoundConfig(stages=StagesConfig(train=train_template(max_steps=0))), "max steps must be at least 1"),
        (
            RoundConfig(stages=StagesConfig(transform=TransformConfig(name="x", top_fraction=2.0))),
            "--top-fraction must be in (0, 1], got 2.0",
        ),
        (RoundConfig(timeout_s=0), "timeout must be positive"),
        (RoundConfig(mode="eval"), "unknown rollout mode 'eval'"),
    ],
)
def test_bad_round_configs(config, message):
    # the embedded stage configs raise their own usage errors; the CLI prints any as one line
    with pytest.raises(TracebankError, match=re.escape(message)) as raised:
        config.validate()
    assert raised.value.exit_code == 2


def test_stages_include_the_ones_before():
    assert [
        StagesConfig(then=t).includes("transform") for t in ("none", "collect", "transform", "train")
    ] == [False, False, True, True]


def test_toy_tasks_and_reward():
    tasks = make_tasks(20, seed=3)
    assert tasks == make_tasks(20, seed=3) and tasks != make_tasks(20, seed=4)
    assert all(3 <= len(t["text"].split()) <= 5 for t in tasks)
    assert similarity(" the cat ", "the cat") == 1.0
    assert similarity("", "the cat") == 0.0
    assert 0 < similarity("the bat", "the cat") < 1


def test_a_stock_llm_proxy_is_refused_where_it_would_lose_every_span():
    import agentlightning as agl
    from tracebank.loop.round import _check_proxy
    from tracebank.serve.proxy import TracebankLLMProxy, otlp_exporter_binds_endpoint_at_init

    _check_proxy(TracebankLLMProxy(port=1, host="127.0.0.1"))  # tracebank's own: always accepted
    stock = agl.LLMProxy(port=1, host="127.0.0.1")
    if otlp_exporter_binds_endpoint_at_init():
        with pytest.raises(LoopUsageError, match="would export no span to the store"):
            _check_proxy(stock)
    else:
        _check_proxy(stock)
