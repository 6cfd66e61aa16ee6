"""GPU-path fixes that run here too: LoRA target expansion, 4-bit detection, the child's guards."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

from tracebank.train.backends.targets import linear_module_names, target_modules
from tracebank.train.recipe import is_loaded_in_4bit


def test_all_linear_expands_to_what_peft_targets(tiny_model):
    """Unsloth passes names to peft literally, so the expansion must equal peft's own all-linear."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(str(tiny_model))
    expanded = target_modules(model, ["all-linear"])
    assert expanded == ["down_proj", "gate_proj", "k_proj", "o_proj", "q_proj", "up_proj", "v_proj"]
    assert target_modules(model, ["q_proj"]) == ["q_proj"]
    peft_model = get_peft_model(model, LoraConfig(r=4, target_modules="all-linear", task_type="CAUSAL_LM"))
    targeted = {name.rsplit(".", 1)[-1] for name in peft_model.targeted_module_names}
    assert targeted == set(expanded)
    assert "lm_head" not in linear_module_names(model)


def test_a_16_bit_model_is_not_recorded_as_4_bit(tiny_model):
    from transformers import AutoModelForCausalLM

    assert is_loaded_in_4bit(AutoModelForCausalLM.from_pretrained(str(tiny_model))) is False


def test_training_child_sees_no_vllm_unless_allowed(tmp_path):
    # An importable ``vllm`` package, as on a GPU box where vLLM is installed beside Unsloth.
    (tmp_path / "vllm").mkdir()
    (tmp_path / "vllm" / "__init__.py").write_text("")
    env = {k: v for k, v in os.environ.items() if k != "TRACEBANK_TRAIN_ALLOW_VLLM"}
    env["PYTHONPATH"] = str(tmp_path)

    def probe(code: str, **extra: str) -> subprocess.CompletedProcess[str]:
        setup = "import importlib.util, sys; from tracebank.train.child import hide_vllm; "
        return subprocess.run(
            [sys.executable, "-P", "-c", setup + code], capture_output=True, text=True, env={**env, **extra}
        )

    assert probe("print(importlib.util.find_spec('vllm') is None)").stdout.strip() == "False"
    assert probe("hide_vllm(); print(importlib.util.find_spec('vllm') is None)").stdout.strip() == "True"
    failed = probe("hide_vllm(); import vllm")
    assert failed.returncode != 0 and "ModuleNotFoundError" in failed.stderr
    allowed = probe("hide_vllm(); import vllm", TRACEBANK_TRAIN_ALLOW_VLLM="1")
    assert allowed.returncode == 0, allowed.stderr


def test_child_group_ends_when_its_parent_is_killed(tmp_path):
    """A parent killed outright (SIGKILL, a `timeout`) must not leave training running on the GPU."""
    pid_file = tmp_path / "child.pid"
    child = textwrap.dedent(
        f"""
        import os, subprocess, sys, time
        from tracebank.train.child import end_with_parent
        end_with_parent(os.getppid(), poll_s=0.1)
        helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pid_file)!r}, "w").write(f"{{os.getpid()}} {{helper.pid}}")
        time.sleep(60)
        """
    )
    parent = textwrap.dedent(
        f"""
        import subprocess, sys, time
        subprocess.Popen([sys.executable, "-P", "-c", {child!r}], start_new_session=True)
        time.sleep(60)
        """
    )
    proc = subprocess.Popen([sys.executable, "-P", "-c", parent])
    deadline = time.monotonic() + 60
    while not pid_file.exists() or not pid_file.read_text():
        assert time.monotonic() < deadline, "the child did not start"
        time.sleep(0.1)
    pids = [int(p) for p in pid_file.read_text().split()]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    deadline = time.monotonic() + 20
    while any(_alive(p) for p in pids):
        assert time.monotonic() < deadline, f"still running: {[p for p in pids if _alive(p)]}"
        time.sleep(0.1)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A killed child not yet reaped by init shows as a zombie: it no longer runs.
    with open(f"/proc/{pid}/stat") as fh:
        return fh.read().split(")")[-1].split()[0] != "Z"
