"""The vLLM command line: the module entry point, memory flags on CPU, LoRA rank from the adapter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from tracebank.serve.errors import ServeUsageError
from tracebank.serve.vllm_server import VllmLaunch, fitting_lora_rank, vllm_command, vllm_environment


def adapter(folder: Path, r: int) -> Path:
    folder.mkdir(parents=True)
    (folder / "adapter_config.json").write_text(json.dumps({"r": r, "peft_type": "LORA"}))
    return folder


def test_cpu_build_runs_the_module_with_small_memory_share(tmp_path):
    cmd = vllm_command(VllmLaunch(python=Path("/env/bin/python"), model=tmp_path, port=8123))
    assert cmd[:4] == ["/env/bin/python", "-P", "-m", "vllm.entrypoints.openai.api_server"]
    assert cmd[cmd.index("--gpu-memory-utilization") + 1] == "0.15"
    assert cmd[cmd.index("--served-model-name") + 1] == str(tmp_path)  # vLLM's default name
    assert cmd[cmd.index("--tool-call-parser") + 1] == "hermes" and "--enable-auto-tool-choice" in cmd
    gpu = vllm_command(VllmLaunch(python=Path("p"), model=tmp_path, port=1, cpu=False, tool_call_parser=None))
    assert "--gpu-memory-utilization" not in gpu and "--enable-auto-tool-choice" not in gpu


def test_lora_rank_fits_the_adapter(tmp_path):
    launch = VllmLaunch(
        python=Path("p"),
        model=tmp_path,
        port=1,
        lora_modules=(("tuned", adapter(tmp_path / "a", 32)), ("other", adapter(tmp_path / "b", 4))),
    )
    cmd = vllm_command(launch)
    assert cmd[cmd.index("--max-lora-rank") + 1] == "32"  # vLLM's default of 16 would refuse r=32
    modules = cmd[cmd.index("--lora-modules") + 1 :][:2]
    assert modules == [f"tuned={tmp_path / 'a'}", f"other={tmp_path / 'b'}"]
    assert "--enable-lora" in cmd
    assert [fitting_lora_rank([r]) for r in (1, 2, 16, 17, 200)] == [1, 8, 16, 32, 256]


def test_lora_rank_errors_are_one_line(tmp_path):
    with pytest.raises(ServeUsageError, match="above vLLM's largest"):
        fitting_lora_rank([600])
    with pytest.raises(ServeUsageError, match="not a LoRA adapter folder"):
        vllm_command(VllmLaunch(python=Path("p"), model=tmp_path, port=1, lora_modules=(("x", tmp_path),)))


def test_cpu_kv_cache_is_set_unless_the_user_set_it(monkeypatch):
    monkeypatch.delenv("VLLM_CPU_KVCACHE_SPACE", raising=False)
    assert vllm_environment(True)["VLLM_CPU_KVCACHE_SPACE"] == "1"
    assert "VLLM_CPU_KVCACHE_SPACE" not in vllm_environment(False)
    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "8")
    assert "VLLM_CPU_KVCACHE_SPACE" not in vllm_environment(True)
