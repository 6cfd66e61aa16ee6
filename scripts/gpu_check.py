"""The train stage on a CUDA GPU in one run of about five minutes (started by scripts/gpu_check.sh).

A lent GPU machine gives this project one run, so the check is built to never waste it: one global
deadline with per-step budgets taken from it (a step that no longer fits is recorded as skipped),
the cheap steps that say the most first, and ``OUT/gpu_check.json`` written at the start, after
every step and on SIGTERM. Steps, in order (docs/GPU.md says what each proves):

  environment        versions, CUDA, imports; the imported tracebank is the checkout's (else stop);
                     what ``--backend auto`` resolves to on this machine
  kernel_smoke       TRL's fused Triton log-prob kernels against a plain log_softmax, seconds
  memorise_trl       the tiny model memorises the QA set (TRL+PEFT, bf16), merged 16-bit output answers
  speed_05b          tokens/s of a Qwen2.5-0.5B-shaped model (random weights), unpacked and packed
  unsloth_4bit       Unsloth, 4-bit base, 8-bit AdamW, LoRA merged to 16-bit, the output answers
  trl_4bit           TRL+PEFT on a bitsandbytes 4-bit base with 8-bit AdamW (auto's fallback)
  fsdp_full          full fine-tuning sharded with FSDP2; the saved model loads, config dtype = weights'
  torchrun_nproc1    one rank under the multi-rank launcher (NCCL)
  resume_after_kill  the CLI's run SIGKILLed after a checkpoint, resumed through the CLI, same adapter

Every training step names its backend; only ``environment`` looks at what ``auto`` resolves to.
``--allow-cpu`` is the dry run on a machine without CUDA (tests/scripts/test_gpu_check.py).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tracebank.warehouse.storage import Storage

ROOT = Path(__file__).resolve().parents[1]
#: Seconds the report needs after the last step (writing it, ending children).
RESERVE_S = 5.0
#: What a failed step keeps of each training log.
LOG_TAIL_CHARS = 3000


class Fatal(Exception):
    """A failure after which no later step can say anything (a stale install, a missing library)."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (the device call's timeout): the train stage treats it as Ctrl-C and stops its child."""


# ---------------------------------------------------------------------------------------------
# The code under test is the checkout's


def package_folders() -> dict[str, Path]:
    """Each installed package of tracebank -> its folder in the checkout (pyproject's package-dir)."""
    import tomllib

    setup = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapping: dict[str, str] = setup["package-dir"]
    folders = {}
    for package in setup["packages"]:
        parts = package.split(".")
        prefix = next(".".join(parts[:n]) for n in range(len(parts), 0, -1) if ".".join(parts[:n]) in mapping)
        rest = parts[len(prefix.split(".")) :]
        folders[package] = ROOT.joinpath(mapping[prefix], *rest)
    return folders


def source_drift() -> list[str]:
    """Modules of the imported tracebank that differ from the checkout's: the install is stale."""
    drift = []
    for package, folder in package_folders().items():
        spec = importlib.util.find_spec(package)
        if spec is None or not spec.submodule_search_locations:
            drift.append(f"{package} (not installed)")
            continue
        installed = Path(next(iter(spec.submodule_search_locations)))
        names = {p.name for p in folder.glob("*.py")} | {p.name for p in installed.glob("*.py")}
        for name in sorted(names):
            mine, theirs = folder / name, installed / name
            if not (mine.exists() and theirs.exists() and mine.read_bytes() == theirs.read_bytes()):
                drift.append(f"{package}.{name.removesuffix('.py')}")
    return drift


def checkout_fixtures() -> Any:
    """The checkout's tests.fixtures.datasets, whatever else on sys.path is called ``tests``."""
    if "tests" not in sys.modules:
        spec = importlib.util.spec_from_file_location(
            "tests", ROOT / "tests" / "__init__.py", submodule_search_locations=[str(ROOT / "tests")]
        )
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["tests"] = module
        spec.loader.exec_module(module)
    import tests.fixtures.datasets as datasets

    return datasets


# ---------------------------------------------------------------------------------------------
# The report


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class Report:
    """OUT/gpu_check.json, rewritten whole (write, then rename) whenever anything changes."""

    def __init__(self, out: Path, data: dict[str, Any]) -> None:
        self.path = out / "gpu_check.json"
        if self.path.exists():  # a rerun into the same OUT keeps the previous run's report
            self.path.replace(out / "gpu_check.previous.json")
        self.data = data
        self.write()

    def step(self, name: str) -> dict[str, Any]:
        return self.data["steps"][name]

    def write(self) -> None:
        partial = self.path.with_suffix(".json.partial")
        partial.write_text(json.dumps(self.data, indent=1, default=str))
        partial.replace(self.path)


class Tee:
    """Everything printed goes to the console and to OUT/gpu_check.log."""

    def __init__(self, *streams: Any) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
            stream.flush()
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def log_tails(work: Path) -> list[dict[str, str]]:
    """The end of every training log under ``work`` (a failed step's reason is rarely its last line)."""
    logs = sorted(work.rglob("train.log"), key=lambda p: p.stat().st_mtime, reverse=True)
    return [{"log": str(log), "tail": log.read_text(errors="replace")[-LOG_TAIL_CHARS:]} for log in logs[:3]]


WARNING = re.compile(r"warn|deprecat", re.IGNORECASE)


def warnings_in(work: Path, limit: int = 15) -> list[str]:
    """Distinct warning lines of the training logs under ``work`` (fallbacks announce themselves so)."""
    seen: dict[str, None] = {}
    for log in sorted(work.rglob("train.log")):
        for line in log.read_text(errors="replace").splitlines():
            if WARNING.search(line):
                seen.setdefault(line.strip()[:300], None)
    return list(seen)[-limit:]


class MemoryWatch:
    """Peak GPU memory in use while a step runs, whichever process (child, rank) holds it."""

    def __init__(self) -> None:
        self.peak: int | None = None
        self.stop = threading.Event()
        self.thread: threading.Thread | None = None

    def __enter__(self) -> MemoryWatch:
        import torch

        if torch.cuda.is_available():
            free, total = torch.cuda.mem_get_info()
            self.baseline, self.peak = total - free, 0
            self.thread = threading.Thread(target=self._poll, args=(torch,), daemon=True)
            self.thread.start()
        return self

    def _poll(self, torch: Any) -> None:
        while not self.stop.wait(0.2):
            free, total = torch.cuda.mem_get_info()
            self.peak = max(self.peak or 0, total - free - self.baseline)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=2)

    def gib(self) -> float | None:
        return None if self.peak is None else round(self.peak / 2**30, 2)


# ---------------------------------------------------------------------------------------------
# Steps, deadline and budgets


@dataclass
class Context:
    """What a step works with: its own folder (fresh every run) and its own time."""

    work: Path
    args: argparse.Namespace
    report: Report
    deadline: float
    cuda: bool

    def left(self) -> float:
        return self.deadline - time.monotonic()

    def timeout(self, share: float = 1.0) -> int:
        """A training timeout: ``share`` of what is left of this step's budget (never below 10 s)."""
        return max(10, int(self.left() * share))

    def environment(self) -> dict[str, Any]:
        return self.report.step("environment").get("result") or {}


@dataclass
class Step:
    name: str
    run: Callable[[Context], dict[str, Any]]
    #: seconds it takes on an H200: it is skipped when less is left
    needs_s: float
    #: the most it may take; its training timeouts come out of this
    cap_s: float
    #: why it cannot run here, asked once the environment is known (None: it can)
    unable: Callable[[Context], str | None] = field(default=lambda ctx: None)


def plan(steps: list[Step], only: list[str], skip: list[str]) -> dict[str, str | None]:
    """Step name -> why it is not run (None: it runs). Unknown names are refused."""
    names = [s.name for s in steps]
    unknown = sorted(set(only + skip) - set(names))
    if unknown:
        raise SystemExit(f"unknown step(s) {', '.join(unknown)}; the steps are {', '.join(names)}")
    return {
        name: "not in --only" if only and name not in only else "in --skip" if name in skip else None
        for name in names
    }


def run_steps(
    steps: list[Step], ctx_for: Callable[[Step, float], Context], report: Report, end: float
) -> int:
    """Run the planned steps inside the global deadline ``end``; return the exit code."""
    failed, fatal = False, None
    for step in steps:
        entry = report.step(step.name)
        if entry["status"] != "pending":
            continue
        left = end - time.monotonic() - RESERVE_S
        ctx = ctx_for(step, time.monotonic() + min(step.cap_s, left))
        why_not = fatal or step.unable(ctx)
        if why_not is None and left < step.needs_s:
            why_not = f"no time left: {left:.0f}s remain of the deadline, it needs about {step.needs_s:.0f}s"
        if why_not is not None:
            entry.update(status="skipped", reason=why_not)
            report.write()
            print(f"== {step.name}: skipped ({why_not})", flush=True)
            continue
        entry.update(status="running", started_at=now_iso(), budget_s=round(min(step.cap_s, left)))
        report.write()
        print(f"== {step.name}: running (budget {entry['budget_s']}s)", flush=True)
        started = time.perf_counter()
        memory = MemoryWatch()
        try:
            with memory:
                result = step.run(ctx)
            problems = result.pop("failures", [])
            entry.update(status="failed" if problems else "passed", result=result)
            if problems:
                entry["error"] = "; ".join(problems)
        except Terminated:
            entry.update(status="failed", error=f"cut by SIGTERM after {time.perf_counter() - started:.0f}s")
            _close(entry, ctx, started, memory)
            raise
        except Exception as exc:
            entry.update(
                status="failed",
                error=f"{type(exc).__name__}: {exc}"[:2000],
                traceback=traceback.format_exc()[-LOG_TAIL_CHARS:],
            )
            if isinstance(exc, Fatal):
                fatal = f"{step.name} failed: {exc}"
        _close(entry, ctx, started, memory)
        failed = failed or entry["status"] == "failed"
        report.write()
        print(
            f"== {step.name}: {entry['status']} in {entry['seconds']}s {entry.get('error', '')}", flush=True
        )
    return 3 if fatal else 1 if failed else 0


def _close(entry: dict[str, Any], ctx: Context, started: float, memory: MemoryWatch) -> None:
    """What every step's entry holds when it ends: time, peak memory, tokens/s, warnings, log tails."""
    entry["seconds"] = round(time.perf_counter() - started, 1)
    entry["peak_gpu_memory_gib"] = memory.gib()
    entry["tokens_per_s"] = _tokens_per_s(entry.get("result") or {})
    if ctx.work.exists():
        entry["warnings"] = warnings_in(ctx.work)
        if entry["status"] == "failed":
            entry["train_logs"] = log_tails(ctx.work)


def _tokens_per_s(result: dict[str, Any]) -> Any:
    runs = {k: v for k, v in result.items() if isinstance(v, dict) and "summary" in v}
    if runs:
        return {k: (v["summary"] or {}).get("tokens_per_s") for k, v in runs.items()}
    return (result.get("summary") or {}).get("tokens_per_s")


# ---------------------------------------------------------------------------------------------
# The steps


LIBRARIES = (
    "torch", "transformers", "trl", "peft", "accelerate", "datasets", "triton", "bitsandbytes", "unsloth",
    "unsloth_zoo", "cut_cross_entropy", "flash_attn", "pyarrow", "tokenizers", "safetensors", "tracebank",
)  # fmt: skip
#: What every training step imports; without one of them nothing after the environment can run.
TRAIN_STACK = ("torch", "transformers", "peft", "trl", "datasets", "accelerate", "pyarrow", "tokenizers")


def _imports_in_child(module: str, timeout: float) -> dict[str, Any]:
    """Whether ``module`` imports, in a throwaway process (unsloth patches libraries on import)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-P", "-c", f"import {module}"], capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return {"imports": False, "error": f"import took over {timeout:.0f}s"}
    if proc.returncode == 0:
        return {"imports": True}
    return {"imports": False, "error": proc.stderr.strip()[-LOG_TAIL_CHARS:]}


def environment(ctx: Context) -> dict[str, Any]:
    from importlib import metadata

    info: dict[str, Any] = {"python": sys.version.split()[0], "executable": sys.executable}
    for name in LIBRARIES:
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = None
    missing = []
    for name in (*TRAIN_STACK, "tracebank.train"):
        try:
            importlib.import_module(name)
        except Exception as exc:
            missing.append(f"{name} ({type(exc).__name__}: {exc})")
    if missing:
        raise Fatal("cannot import " + "; ".join(missing) + " (stage them: scripts/stage_gpu_wheels.sh)")
    import torch

    import tracebank

    info["tracebank_location"] = str(Path(tracebank.__file__).parent)
    drift = source_drift()
    if drift:
        info["stale_modules"] = drift
        ctx.report.step("environment")["result"] = info
        raise Fatal(
            f"the installed tracebank is not the checkout's ({len(drift)} modules differ, e.g. "
            f"{', '.join(drift[:3])}): run scripts/stage_gpu_wheels.sh again"
        )
    info["cuda"] = torch.cuda.is_available()
    info["torch_cuda"] = torch.version.cuda
    if info["cuda"]:
        info["device"] = torch.cuda.get_device_name(0)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
        info["bf16"] = torch.cuda.is_bf16_supported()
        info["gpu_memory_gib"] = round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1)
    ctx.report.step("environment")["result"] = info  # on disk before anything slow
    ctx.report.write()
    for module in ("bitsandbytes", "unsloth"):  # unsloth last: its first import compiles, give it the rest
        if importlib.util.find_spec(module) is not None:
            info[f"{module}_import"] = _imports_in_child(module, max(10.0, ctx.left() - RESERVE_S))
    info["auto_resolves_to"] = _auto_resolution(info)
    return info


def _auto_resolution(info: dict[str, Any]) -> dict[str, Any]:
    """What ``--backend auto`` (and the other machine-dependent defaults) resolve to here."""
    from dataclasses import asdict

    from tracebank.train.config import Environment, TrainConfig

    env = Environment(
        cuda=info["cuda"],
        bf16_supported=bool(info.get("bf16")),
        bitsandbytes=bool(info.get("bitsandbytes_import", {}).get("imports")),
        unsloth=bool(info.get("unsloth_import", {}).get("imports")),
    )
    return asdict(TrainConfig(dataset="d", base_model="m", output="o").resolve(env))


def kernel_smoke(ctx: Context) -> dict[str, Any]:
    """TRL's fused log-prob kernels (the SFT loss on CUDA) against a plain log_softmax, forward and
    backward. Without CUDA, TRL's fallback is compared instead and ``fused`` says so."""
    import torch
    from tracebank.train.recipe import fused_loss_available
    from trl.trainer.utils import selective_log_softmax

    device, rows = ("cuda", 512) if ctx.cuda else ("cpu", 32)
    torch.manual_seed(0)
    logits = torch.randn(4, rows, 32000, device=device, dtype=torch.bfloat16) * 3
    index = torch.randint(0, 32000, (4, rows), device=device)
    plain = torch.log_softmax(logits.float(), dim=-1).gather(-1, index.unsqueeze(-1)).squeeze(-1)
    started = time.perf_counter()
    fused = selective_log_softmax(logits, index)
    result: dict[str, Any] = {
        "device": device,
        "fused": fused_loss_available(device),
        # relative to the largest log-prob: bf16 logits carry 8 bits of mantissa
        "selective_log_softmax_max_rel_diff": _relative(fused, plain),
        "first_call_s": round(time.perf_counter() - started, 2),
    }
    failures = []
    if (diff := result["selective_log_softmax_max_rel_diff"]) > 2e-2:
        failures.append(f"selective_log_softmax differs by {diff:.3g}")
    if ctx.cuda:
        result["chunked_logprob"] = _chunked_logprob(torch)
        if result["chunked_logprob"]["max_rel_diff"] > 3e-2:  # fp32 gradients of bf16 tiles
            failures.append(
                f"ChunkedLogProbFunction differs by {result['chunked_logprob']['max_rel_diff']:.3g}"
            )
        if not result["fused"]:
            failures.append("TRL's fused loss is not available on CUDA (training will use the plain loss)")
    result["failures"] = failures
    return result


def _chunked_logprob(torch: Any) -> dict[str, Any]:
    """The kernel the SFT loss runs: log-probs of hidden @ weight.T and their gradient, as plain torch."""
    from trl.kernels import ChunkedLogProbFunction
    from trl.trainer import utils as trl_utils

    chunk = getattr(trl_utils, "_CHUNKED_LOGPROB_CHUNK_SIZE", 4096)  # what the SFT loss passes
    hidden = (torch.randn(2048, 896, device="cuda", dtype=torch.bfloat16) * 0.5).requires_grad_()
    weight = (torch.randn(32000, 896, device="cuda", dtype=torch.bfloat16) * 0.05).requires_grad_()
    targets = torch.randint(0, 32000, (2048,), device="cuda")
    fused = ChunkedLogProbFunction.apply(hidden, weight, None, targets, 1.0, chunk, None, 1.0, ())[0]
    (fused_grad,) = torch.autograd.grad(fused.sum(), hidden)
    plain = torch.log_softmax(hidden.float() @ weight.float().T, -1).gather(-1, targets[:, None])[:, 0]
    (plain_grad,) = torch.autograd.grad(plain.sum(), hidden)
    return {"max_rel_diff": max(_relative(fused, plain), _relative(fused_grad, plain_grad))}


def _relative(got: Any, want: Any) -> float:
    """Largest difference, relative to the largest value wanted."""
    return float((got.float() - want.float()).abs().max() / want.float().abs().max().clamp(min=1e-6))


def printer(prefix: str) -> Callable[[Any], None]:
    def on_event(event: Any) -> None:
        data = event.to_dict() if hasattr(event, "to_dict") else dict(event)
        kind = data.get("event")
        if kind == "loaded":
            print(f"[{prefix}] loaded: {data.get('resolved')}", flush=True)
        elif kind == "metric" and (data.get("step") or 0) % 10 == 0:
            print(f"[{prefix}] step {data.get('step')} loss {data.get('loss')}", flush=True)

    return on_event


def _qa_warehouse(work: Path) -> tuple[Any, Path]:
    """A warehouse holding qa@v1 (the QA pairs twice, plus validation) and the tiny model."""
    from tracebank.train.tiny_model import build_tiny_model
    from tracebank.warehouse.location import Warehouse

    fixtures = checkout_fixtures()
    model_dir = build_tiny_model(work / "tiny", seed=0, initializer_range=0.2)
    wh = Warehouse(work / "warehouse").init()
    tok = fixtures.load_tokenizer(model_dir)
    pairs = fixtures.QA_PAIRS
    wh_rows, validation = fixtures.qa_rows(tok, pairs, repeat=2), fixtures.qa_rows(tok, pairs)
    fixtures.write_dataset(wh, "qa", wh_rows, validation=validation)
    return wh, model_dir


def _record(record: Any) -> dict[str, Any]:
    return {
        "run_id": record.run_id,
        "status": record.status,
        "resolved": record.resolved,
        "summary": record.summary,
    }


def _answers(out: Path, device: str) -> dict[str, Any]:
    """Load a merged output on ``device`` and ask it the first QA questions."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    fixtures = checkout_fixtures()
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).to(device)
    tokenizer = AutoTokenizer.from_pretrained(out)
    answers = {}
    for question, answer in fixtures.QA_PAIRS[:4]:
        chat = [{"role": "system", "content": fixtures.SYSTEM}, {"role": "user", "content": question}]
        prompt = tokenizer.apply_chat_template(chat, tokenize=True, add_generation_prompt=True)["input_ids"]
        with torch.no_grad():
            generated = model.generate(
                torch.tensor([prompt], device=device), max_new_tokens=4, do_sample=False
            )
        got = tokenizer.decode(generated[0, len(prompt) :], skip_special_tokens=True).strip()
        answers[question] = [got, answer]
    return {
        "answers": answers,
        "answers_right": sum(got == want for got, want in answers.values()),
        "saved_dtype": json.loads((out / "config.json").read_text()).get("dtype"),
    }


def memorise(ctx: Context, backend: str, **settings: Any) -> dict[str, Any]:
    """Train the tiny model on the QA set with ``backend``, then load the merged output and ask it."""
    from tracebank.train import TrainConfig, train

    wh, model_dir = _qa_warehouse(ctx.work)
    out = ctx.work / "merged"
    config = TrainConfig(
        dataset="qa", base_model=str(model_dir), output=str(out), backend=backend, learning_rate=1e-2,
        epochs=6, batch_size=4, grad_accum=1, warmup_steps=2, timeout=ctx.timeout(0.85), **settings,
    )  # fmt: skip
    result = _record(train(wh, config, on_event=printer(ctx.work.name)))
    result.update(_answers(out, "cuda" if ctx.cuda else "cpu"))
    failures = []
    if result["answers_right"] < 3:
        failures.append(f"the merged model answered {result['answers_right']} of 4 right")
    if result["saved_dtype"] != "bfloat16" and ctx.cuda:
        failures.append(f"the merged model was saved as {result['saved_dtype']}, not bfloat16")
    result["failures"] = failures
    return result


def memorise_trl(ctx: Context) -> dict[str, Any]:
    return memorise(ctx, "trl")


def unsloth_4bit(ctx: Context) -> dict[str, Any]:
    return memorise(ctx, "unsloth", load_in_4bit=True, optim="adamw_8bit", save="merged_16bit")


def trl_4bit(ctx: Context) -> dict[str, Any]:
    return memorise(ctx, "trl", load_in_4bit=True, optim="adamw_8bit", save="merged_16bit")


#: Qwen2.5-0.5B's shape (random weights here): 24 layers, hidden 896, 14 heads, 2 KV heads.
QWEN_05B = {
    "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768, "rope_theta": 1e6,
    "tie_word_embeddings": True,
}  # fmt: skip
#: The same family, small enough for the CPU dry run.
QWEN_TINY = {
    **QWEN_05B,
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "vocab_size": None,
}  # fmt: skip (None: the tokenizer's)


def build_qwen(out: Path, shape: dict[str, Any], cuda: bool) -> Path:
    """A Qwen2 model of ``shape`` with random weights (bf16) and the tiny tokenizer: no hub needed."""
    import torch
    from tracebank.train.tiny_model import build_tokenizer
    from transformers import Qwen2Config, Qwen2ForCausalLM

    tokenizer = build_tokenizer(out)
    config = Qwen2Config(
        **{**shape, "vocab_size": shape["vocab_size"] or len(tokenizer)},
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(0)
    with torch.device("cuda" if cuda else "cpu"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out))
    del model
    return out


def _speed_rows(rows: int, length: int) -> list[dict[str, Any]]:
    """Random rows of a quarter to all of ``length`` tokens, the last 30% trained on."""
    import numpy as np
    from tracebank.warehouse.contract import IGNORE_INDEX

    rng = np.random.default_rng(0)
    data = []
    for i in range(rows):
        n = int(rng.integers(length // 4, length + 1))
        ids = rng.integers(3, 384, n).tolist()
        cut = int(n * 0.7)
        data.append(
            {
                "input_ids": ids,
                "attention_mask": [1] * n,
                "labels": [IGNORE_INDEX] * cut + ids[cut:],
                "reward": 1.0,
                "rollout_id": f"r{i}",
                "attempt_id": f"a{i}",
                "span_id": f"s{i}",
            }  # fmt: skip
        )
    return data


def speed_05b(ctx: Context) -> dict[str, Any]:
    """Tokens/s of LoRA training (TRL+PEFT) on the 0.5B-shaped model, unpacked then packed."""
    from tracebank.train import TrainConfig, train
    from tracebank.warehouse.location import Warehouse

    args = ctx.args
    shape = QWEN_05B if args.qwen_shape == "0.5b" else QWEN_TINY
    model_dir = build_qwen(ctx.work / "model", shape, ctx.cuda)
    wh = Warehouse(ctx.work / "warehouse").init()
    checkout_fixtures().write_dataset(wh, "speed", _speed_rows(args.rows_05b, args.length_05b))
    packed_kernel = "flash_attention_2" if importlib.util.find_spec("flash_attn") is not None else "sdpa"
    result: dict[str, Any] = {"shape": args.qwen_shape, "packed_kernel": packed_kernel}
    for packing, share in ((False, 0.5), (True, 0.9)):
        config = TrainConfig(
            dataset="speed", base_model=str(model_dir), output=str(ctx.work / f"lora-packing-{packing}"),
            backend="trl", save="lora", max_steps=args.steps_05b, batch_size=8, grad_accum=1,
            warmup_steps=2, eval_strategy="no", logging_steps=5, packing=packing,
            attn_implementation=packed_kernel if packing else "sdpa", timeout=ctx.timeout(share),
        )  # fmt: skip
        record = train(wh, config, on_event=printer(f"speed packing={packing}"))
        result["packed" if packing else "unpacked"] = _record(record)
    return result


def fsdp_full(ctx: Context) -> dict[str, Any]:
    """``--finetune full --fsdp`` on one GPU: FSDP2 through accelerate, shards gathered and saved."""
    import torch
    from safetensors import safe_open
    from tracebank.train import TrainConfig, train
    from transformers import AutoModelForCausalLM

    wh, model_dir = _qa_warehouse(ctx.work)
    out = ctx.work / "full"
    config = TrainConfig(
        dataset="qa@v1", base_model=str(model_dir), output=str(out), backend="trl", finetune="full",
        fsdp=True, max_steps=12, eval_strategy="no", learning_rate=1e-3, batch_size=4, grad_accum=1,
        warmup_steps=0, seed=0, timeout=ctx.timeout(0.85),
    )  # fmt: skip
    result = _record(train(wh, config, on_event=printer("fsdp")))
    base = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
    trained = AutoModelForCausalLM.from_pretrained(out).state_dict()
    result["weights_changed"] = sum(not torch.equal(base[k].float(), trained[k].float()) for k in base)
    result["weights"] = len(base)
    with safe_open(str(out / "model.safetensors"), "pt") as weights:
        result["weights_dtype"] = sorted({str(weights.get_tensor(k).dtype) for k in weights.keys()})  # noqa: SIM118
    result["config_dtype"] = json.loads((out / "config.json").read_text()).get("dtype")
    failures = []
    if result["weights_changed"] < len(base) // 2:
        failures.append(f"only {result['weights_changed']} of {len(base)} weights changed")
    if [f"torch.{result['config_dtype']}"] != result["weights_dtype"]:
        failures.append(
            f"config.json says {result['config_dtype']}, the weights are {result['weights_dtype']}"
        )
    result["failures"] = failures
    return result


#: The tiny model's short recipe for the torchrun and resume checks.
SHORT = {"learning_rate": 1e-2, "batch_size": 4, "grad_accum": 1, "warmup_steps": 0, "seed": 0}


def torchrun_nproc1(ctx: Context) -> dict[str, Any]:
    """One rank started by the multi-rank launcher (NCCL on the GPU), as each rank of a bigger run."""
    from tracebank.train import TrainConfig, train
    from tracebank.train.supervisor import LAUNCHER_VARIABLE

    wh, model_dir = _qa_warehouse(ctx.work)
    config = TrainConfig(
        dataset="qa@v1", base_model=str(model_dir), output=str(ctx.work / "lora"), backend="trl",
        save="lora", max_steps=12, eval_strategy="no", nproc_per_node=1, timeout=ctx.timeout(0.9), **SHORT,
    )  # fmt: skip
    os.environ[LAUNCHER_VARIABLE] = "torchrun"
    try:
        return _record(train(wh, config, on_event=printer("torchrun")))
    finally:
        os.environ.pop(LAUNCHER_VARIABLE, None)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (read from /proc; psutil may not be installed)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        frontier = [child for child, parent in parents.items() if parent in frontier]
        found += frontier
    return found


def _adapter_diff(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    x, y = load_file(str(a / "adapter_model.safetensors")), load_file(str(b / "adapter_model.safetensors"))
    return max(float((x[k].float() - y[k].float()).abs().max()) for k in x)


def _cli(wh: Any, *arguments: str) -> list[str]:
    """The installed CLI; ``-P`` keeps the checkout's tracebank/ folder (the CLI alone) off sys.path."""
    return [sys.executable, "-P", "-m", "tracebank.cli.main", "-w", str(wh.root), "train", *arguments]


def resume_after_kill(ctx: Context) -> dict[str, Any]:
    """The CLI's run SIGKILLed (with its child) after a checkpoint, resumed through the CLI, against an
    uninterrupted run: the same adapter."""
    from tracebank.warehouse import catalog

    wh, model_dir = _qa_warehouse(ctx.work)
    timeout = ctx.timeout(0.3)
    flags = [
        "--dataset", "qa@v1", "--base-model", str(model_dir), "--backend", "trl", "--save", "lora",
        "--lr", "1e-2", "--batch-size", "4", "--grad-accum", "1", "--warmup-steps", "0", "--seed", "0",
        "--max-steps", "12", "--save-steps", "2", "--eval-strategy", "no", "--quiet",
        "--timeout", str(timeout),
    ]  # fmt: skip
    reference = subprocess.run(
        _cli(wh, *flags, "--output", str(ctx.work / "ref")),
        capture_output=True,
        text=True,
        timeout=timeout + 30,
    )
    if reference.returncode:
        raise RuntimeError(f"the reference run failed: {reference.stderr.strip()[-LOG_TAIL_CHARS:]}")
    reference_id = reference.stdout.split()[1]
    killed = _kill_after_checkpoint(
        wh, catalog, _cli(wh, *flags, "--output", str(ctx.work / "out")), reference_id
    )
    resumed = subprocess.run(
        _cli(wh, "--resume", killed, "--quiet"), capture_output=True, text=True, timeout=ctx.timeout(0.95)
    )
    if resumed.returncode:
        raise RuntimeError(f"the resume failed: {resumed.stderr.strip()[-LOG_TAIL_CHARS:]}")
    _, record = catalog.resolve_run(wh, killed)
    result = {
        **_record(record),
        "attempts": [{k: a.get(k) for k in ("status", "error", "last_checkpoint")} for a in record.attempts],
        "adapter_max_abs_diff": _adapter_diff(ctx.work / "out", ctx.work / "ref"),
    }
    result["failures"] = [] if result["adapter_max_abs_diff"] < 1e-2 else ["the resumed adapter differs"]
    return result


def _kill_after_checkpoint(wh: Any, catalog: Any, command: list[str], reference_id: str) -> str:
    """Start ``command``, SIGKILL it and its children once its run has a checkpoint at step 4; its run id."""
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        while proc.poll() is None:
            for folder, record in Storage(wh).runs():
                if folder.name != reference_id and (record.attempts[-1].get("last_checkpoint") or 0) >= 4:
                    for pid in [proc.pid, *_descendants(proc.pid)]:
                        os.kill(pid, signal.SIGKILL)
                    proc.wait()
                    return folder.name
            time.sleep(0.02)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    raise RuntimeError("the run ended before it could be killed after a checkpoint")


def _needs_cuda(ctx: Context) -> str | None:
    return None if ctx.cuda else "needs CUDA"


def _needs_unsloth(ctx: Context) -> str | None:
    imported = ctx.environment().get("unsloth_import", {"error": "unsloth is not installed"})
    return _needs_cuda(ctx) or (None if imported.get("imports") else f"unsloth does not import: {imported}")


def _needs_bitsandbytes(ctx: Context) -> str | None:
    imported = ctx.environment().get("bitsandbytes_import", {"error": "bitsandbytes is not installed"})
    return _needs_cuda(ctx) or (
        None if imported.get("imports") else f"bitsandbytes does not import: {imported}"
    )


#: In order: the cheap steps that say most first, the resume last (the first a short run cuts).
STEPS = [
    Step("environment", environment, needs_s=15, cap_s=100),
    Step("kernel_smoke", kernel_smoke, needs_s=10, cap_s=60),
    Step("memorise_trl", memorise_trl, needs_s=35, cap_s=120),
    Step("speed_05b", speed_05b, needs_s=70, cap_s=170),
    Step("unsloth_4bit", unsloth_4bit, needs_s=50, cap_s=140, unable=_needs_unsloth),
    Step("trl_4bit", trl_4bit, needs_s=35, cap_s=100, unable=_needs_bitsandbytes),
    Step("fsdp_full", fsdp_full, needs_s=35, cap_s=110, unable=_needs_cuda),
    Step("torchrun_nproc1", torchrun_nproc1, needs_s=30, cap_s=100),
    Step("resume_after_kill", resume_after_kill, needs_s=45, cap_s=150),
]


# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu-check"), help="report folder")
    parser.add_argument("--work-root", default="/tmp/gpu-check-work", help="a fresh folder per run goes here")
    parser.add_argument("--deadline-s", type=float, default=330.0, help="the whole check ends within this")
    parser.add_argument("--only", default="", help="comma-separated steps to run (environment always runs)")
    parser.add_argument("--skip", default="", help="comma-separated steps not to run")
    parser.add_argument("--qwen-shape", choices=("0.5b", "tiny"), default="0.5b")
    parser.add_argument("--rows-05b", type=int, default=256)
    parser.add_argument("--length-05b", type=int, default=1024)
    parser.add_argument("--steps-05b", type=int, default=20)
    parser.add_argument("--allow-cpu", action="store_true", help="dry run without a GPU")
    parser.add_argument(
        "--verify-source", action="store_true", help="only check the install is the checkout's"
    )
    return parser.parse_args(argv)


def _names(text: str) -> list[str]:
    return [name.strip() for name in text.split(",") if name.strip()]


def main(argv: list[str] | None = None) -> int:
    started = time.monotonic()
    args = parse_args(argv)
    if args.verify_source:
        drift = source_drift()
        print("stale: " + ", ".join(drift) if drift else "the installed tracebank is the checkout's")
        return 3 if drift else 0
    end = started + args.deadline_s
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = Path(args.work_root) / f"run-{datetime.now(UTC):%Y%m%d-%H%M%S}-{os.getpid()}"
    log = open(out / "gpu_check.log", "w", encoding="utf-8")  # noqa: SIM115  (open for the whole run)
    sys.stdout = Tee(sys.__stdout__, log)  # type: ignore[assignment]
    sys.stderr = Tee(sys.__stderr__, log)  # type: ignore[assignment]
    skipped = plan(STEPS, [*_names(args.only), "environment"] if args.only else [], _names(args.skip))
    report = Report(
        out,
        {
            "status": "running", "started_at": now_iso(), "deadline_s": args.deadline_s, "work": str(work),
            "argv": sys.argv[1:], "steps": {
                name: {"status": "skipped", "reason": why} if why else {"status": "pending"}
                for name, why in skipped.items()
            },
        },
    )  # fmt: skip

    def on_sigterm(signum: int, frame: Any) -> None:
        raise Terminated("SIGTERM")

    signal.signal(signal.SIGTERM, on_sigterm)
    import torch

    cuda = torch.cuda.is_available()
    if not cuda and not args.allow_cpu:
        report.data.update(status="failed", error="no CUDA device visible: this check is for a GPU machine")
        report.write()
        print(report.data["error"], flush=True)
        return 2

    def context(step: Step, step_deadline: float) -> Context:
        return Context(work / step.name, args, report, step_deadline, cuda)

    try:
        code = run_steps(STEPS, context, report, end)
        report.data["status"] = {0: "passed", 1: "failed", 3: "stopped"}[code]
    except KeyboardInterrupt as exc:  # SIGTERM (Terminated) or Ctrl-C
        for entry in report.data["steps"].values():
            if entry["status"] == "running":  # stopped between its start and its own handler
                entry.update(status="failed", error=f"cut by {type(exc).__name__}")
            elif entry["status"] == "pending":
                entry.update(status="skipped", reason=f"the check was stopped ({type(exc).__name__})")
        report.data.update(status="interrupted", error=f"stopped by {type(exc).__name__}")
        code = 143
    report.data.update(finished_at=now_iso(), seconds=round(time.monotonic() - started, 1))
    report.write()
    counts = {
        s: sum(e["status"] == s for e in report.data["steps"].values())
        for s in ("passed", "failed", "skipped")
    }
    print(f"GPU CHECK {report.data['status'].upper()}: {counts} in {report.data['seconds']}s", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
