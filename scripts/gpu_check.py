"""The train stage on a CUDA GPU, end to end, in a few minutes (run by scripts/gpu_check.sh).

1. environment: torch / CUDA / bf16 / Triton / library versions, whether unsloth imports;
2. correctness: the tiny local model memorises the QA set through `train.train` with the
   TRL+PEFT backend on CUDA in bf16 (Triton fused loss when TRL can use it), the merged
   16-bit output loads on the GPU and answers; tokens/s printed;
3. throughput: a ~100M-parameter model of the same family on 1,024-token rows, tokens/s;
4. the Unsloth backend on the same QA set, when unsloth imports;
5. torchrun: the tiny model with ``--nproc-per-node 1`` started under torchrun on CUDA (NCCL);
6. resume: a run SIGKILLed after its second checkpoint, resumed, against an uninterrupted one;
7. packing on flash-attention (flash_attention_2 when flash_attn imports, else sdpa), its losses
   against the unpacked run's;
8. tokens/s of a Qwen2.5-0.5B-shaped model (built here, random weights) with TRL and Unsloth.
Results go to OUT/gpu_check.json; the exit code is non-zero when step 2 or 3 fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
# Only for tests.fixtures: tracebank itself comes installed (the staged wheel), and the checkout's
# tracebank/ folder (the CLI alone) must not shadow it, so the checkout goes last.
sys.path.append(str(ROOT))


def environment() -> dict[str, Any]:
    from importlib import metadata
    from importlib.util import find_spec

    import torch

    info: dict[str, Any] = {
        "python": sys.version.split()[0],
        "torch": torch.__version__,
        "cuda": torch.cuda.is_available(),
    }
    if info["cuda"]:
        info["device"] = torch.cuda.get_device_name(0)
        info["bf16"] = torch.cuda.is_bf16_supported()
    for name in (
        "transformers",
        "trl",
        "peft",
        "datasets",
        "accelerate",
        "triton",
        "bitsandbytes",
        "unsloth",
        "pyarrow",
    ):
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = None
    info["unsloth_importable"] = False
    if find_spec("unsloth") is not None:
        try:
            import subprocess

            # Import in a throwaway process: unsloth patches libraries on import.
            proc = subprocess.run([sys.executable, "-c", "import unsloth"], capture_output=True, timeout=180)
            info["unsloth_importable"] = proc.returncode == 0
            if proc.returncode:
                info["unsloth_error"] = proc.stderr.decode(errors="replace").strip().splitlines()[-1:]
        except Exception as exc:  # report, never abort the check
            info["unsloth_error"] = repr(exc)
    return info


def printer(prefix: str):
    def on_event(event: Any) -> None:
        data = event.to_dict() if hasattr(event, "to_dict") else dict(event)  # typed progress events
        kind = data.get("event")
        if kind == "loaded":
            print(
                f"[{prefix}] loaded: {data.get('resolved')} trainable {data.get('trainable_params')}",
                flush=True,
            )
        elif kind == "metric" and (data.get("split") == "eval" or (data.get("step") or 0) % 10 == 0):
            print(
                f"[{prefix}] {data.get('split')} step {data.get('step')} loss {data.get('loss')} "
                f"tokens {data.get('tokens')} t {data.get('time')}",
                flush=True,
            )
        elif kind in ("error", "finished"):
            print(f"[{prefix}] {kind}: {data}", flush=True)

    return on_event


def memorise(work: Path, backend: str) -> dict[str, Any]:
    """Train the tiny model on the QA set, then load the merged output on the GPU and ask it."""
    import torch
    from tracebank.train import TrainConfig, train
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.fixtures.datasets import QA_PAIRS, SYSTEM

    wh, model_dir = _qa_warehouse(work, backend)
    out = work / f"merged-{backend}"
    started = time.perf_counter()
    record = train(
        wh,
        TrainConfig(
            dataset="qa",
            base_model=str(model_dir),
            output=str(out),
            backend=backend,
            learning_rate=1e-2,
            epochs=6,
            batch_size=4,
            grad_accum=1,
            warmup_steps=2,
            timeout=400,
        ),
        on_event=printer(f"memorise/{backend}"),
    )
    result: dict[str, Any] = {
        "run_id": record.run_id,
        "status": record.status,
        "resolved": record.resolved,
        "summary": record.summary,
        "wall_s": round(time.perf_counter() - started, 1),
    }
    device = "cuda" if torch.cuda.is_available() else "cpu"  # cpu only in a --allow-cpu dry run
    model = AutoModelForCausalLM.from_pretrained(out, dtype=torch.bfloat16).to(device)
    tokenizer = AutoTokenizer.from_pretrained(out)
    answers = {}
    for question, answer in QA_PAIRS[:4]:
        prompt = tokenizer.apply_chat_template(
            [{"role": "system", "content": SYSTEM}, {"role": "user", "content": question}],
            tokenize=True,
            add_generation_prompt=True,
        )["input_ids"]
        with torch.no_grad():
            generated = model.generate(
                torch.tensor([prompt], device=device), max_new_tokens=4, do_sample=False
            )
        answers[question] = (
            tokenizer.decode(generated[0, len(prompt) :], skip_special_tokens=True).strip(),
            answer,
        )
    result["answers"] = answers
    result["answers_right"] = sum(got == want for got, want in answers.values())
    result["saved_dtype"] = json.loads((out / "config.json").read_text()).get("dtype")
    return result


def throughput(work: Path, rows: int, length: int, hidden: int, layers: int, steps: int) -> dict[str, Any]:
    """Tokens/s of the TRL+PEFT path on a bigger model of the same family (random weights and tokens)."""
    from tracebank.train.tiny_model import build_tiny_model

    model_dir = build_tiny_model(
        work / f"model-{hidden}x{layers}", seed=0, hidden_size=hidden, num_layers=layers
    )
    return throughput_on(work, model_dir, "trl", rows, length, steps, "speed")


def throughput_on(
    work: Path, model_dir: Path, backend: str, rows: int, length: int, steps: int, name: str
) -> dict[str, Any]:
    """Tokens/s of LoRA training of ``model_dir`` with ``backend`` on random rows of ``length`` tokens."""
    import numpy as np
    from tracebank.train import TrainConfig, train
    from tracebank.warehouse.contract import IGNORE_INDEX
    from tracebank.warehouse.location import Warehouse

    from tests.fixtures.datasets import write_dataset

    rng = np.random.default_rng(0)
    data = []
    for i in range(rows):
        ids = rng.integers(3, 384, length).tolist()
        cut = int(length * 0.7)
        data.append(
            {
                "input_ids": ids,
                "attention_mask": [1] * length,
                "labels": [IGNORE_INDEX] * cut + ids[cut:],
                "reward": 1.0,
                "rollout_id": f"r{i}",
                "attempt_id": f"a{i}",
                "span_id": f"s{i}",
            }
        )
    wh = Warehouse(work / f"wh-{name}").init()
    write_dataset(wh, "speed", data)
    record = train(
        wh,
        TrainConfig(
            dataset="speed",
            base_model=str(model_dir),
            output=str(work / f"{name}-lora"),
            backend=backend,
            save="lora",
            max_steps=steps,
            batch_size=8,
            grad_accum=1,
            warmup_steps=2,
            eval_strategy="no",
            logging_steps=5,
            timeout=400,
        ),
        on_event=printer(name),
    )
    return {
        "run_id": record.run_id,
        "status": record.status,
        "resolved": record.resolved,
        "model": record.model,
        "summary": record.summary,
        "rows": rows,
        "length": length,
    }


def _qa_warehouse(work: Path, name: str) -> tuple[Any, Path]:
    """A warehouse holding qa@v1 (the QA pairs twice, plus validation) and the tiny model."""
    from tracebank.train.tiny_model import build_tiny_model
    from tracebank.warehouse.location import Warehouse

    from tests.fixtures.datasets import QA_PAIRS, load_tokenizer, qa_rows, write_dataset

    model_dir = work / "tiny"
    if not model_dir.exists():
        build_tiny_model(model_dir, seed=0, initializer_range=0.2)
    wh = Warehouse(work / f"wh-{name}").init()
    tok = load_tokenizer(model_dir)
    write_dataset(wh, "qa", qa_rows(tok, QA_PAIRS, repeat=2), validation=qa_rows(tok, QA_PAIRS))
    return wh, model_dir


#: The tiny model's short recipe for the torchrun, resume and packing checks.
SHORT = {"learning_rate": 1e-2, "batch_size": 4, "grad_accum": 1, "warmup_steps": 0, "seed": 0}


def torchrun_one(work: Path) -> dict[str, Any]:
    """``--nproc-per-node 1`` under torchrun (NCCL on the GPU), as a multi-GPU run starts each rank."""
    from tracebank.train import TrainConfig, train
    from tracebank.train.supervisor import LAUNCHER_VARIABLE

    wh, model_dir = _qa_warehouse(work, "torchrun")
    os.environ[LAUNCHER_VARIABLE] = "torchrun"
    try:
        record = train(
            wh,
            TrainConfig(
                dataset="qa@v1",
                base_model=str(model_dir),
                output=str(work / "torchrun-lora"),
                save="lora",
                max_steps=12,
                eval_strategy="no",
                nproc_per_node=1,
                timeout=300,
                **SHORT,
            ),  # fmt: skip
            on_event=printer("torchrun"),
        )
    finally:
        os.environ.pop(LAUNCHER_VARIABLE, None)
    return {"status": record.status, "resolved": record.resolved, "summary": record.summary}


def fsdp_full(work: Path) -> dict[str, Any]:
    """``--finetune full --fsdp`` on one GPU under torchrun: accelerate wraps the model with FSDP2,
    trains every weight, gathers the shards to rank 0 and writes the whole model, which loads."""
    import torch
    from tracebank.train import TrainConfig, train
    from transformers import AutoModelForCausalLM

    wh, model_dir = _qa_warehouse(work, "fsdp")
    out = work / "fsdp-full"
    record = train(
        wh,
        TrainConfig(
            dataset="qa@v1",
            base_model=str(model_dir),
            output=str(out),
            finetune="full",
            fsdp=True,
            max_steps=12,
            eval_strategy="no",
            timeout=300,
            **{**SHORT, "learning_rate": 1e-3},
        ),  # fmt: skip
        on_event=printer("fsdp"),
    )
    result: dict[str, Any] = {"status": record.status, "resolved": record.resolved, "summary": record.summary}
    if record.status == "succeeded":
        base = AutoModelForCausalLM.from_pretrained(model_dir).state_dict()
        trained = AutoModelForCausalLM.from_pretrained(out).state_dict()
        result["weights_changed"] = sum(not torch.equal(base[k].float(), trained[k].float()) for k in base)
        result["weights"] = len(base)
    elif record.log_file and Path(record.log_file).exists():
        result["log_tail"] = Path(record.log_file).read_text(errors="replace")[-3000:]
    return result


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (read from /proc; psutil may not be installed here)."""
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents[int(stat.parent.name)] = int(fields[1])
        except (OSError, IndexError, ValueError):
            continue
    found, frontier = [], [pid]
    while frontier:
        children = [child for child, parent in parents.items() if parent in frontier]
        found += children
        frontier = children
    return found


def _adapter_diff(a: Path, b: Path) -> float:
    from safetensors.torch import load_file

    x, y = load_file(str(a / "adapter_model.safetensors")), load_file(str(b / "adapter_model.safetensors"))
    return max(float((x[k].float() - y[k].float()).abs().max()) for k in x)


def resume_after_kill(work: Path) -> dict[str, Any]:
    """A `tracebank train` SIGKILLed (with its child) after its second checkpoint, then resumed."""
    import signal
    import subprocess

    from tracebank.train import resume
    from tracebank.warehouse import catalog

    wh, model_dir = _qa_warehouse(work, "resume")
    flags = [
        "--dataset", "qa@v1", "--base-model", str(model_dir), "--save", "lora", "--lr", "1e-2",
        "--batch-size", "4", "--grad-accum", "1", "--warmup-steps", "0", "--seed", "0",
        "--max-steps", "40", "--save-steps", "2", "--eval-strategy", "no", "--quiet",
    ]  # fmt: skip
    command = [sys.executable, "-m", "tracebank.cli.main", "-w", str(wh.root), "train", *flags]
    reference = subprocess.run(
        [*command, "--output", str(work / "resume-ref")], capture_output=True, text=True
    )
    if reference.returncode:
        return {"status": "error", "error": reference.stderr[-2000:]}
    reference_id = reference.stdout.split()[1]
    proc = subprocess.Popen([*command, "--output", str(work / "resume-out")], stdout=subprocess.PIPE)
    deadline, run_id = time.monotonic() + 240, None
    while time.monotonic() < deadline and run_id is None and proc.poll() is None:
        for folder, record in catalog.runs(wh):
            if folder.name != reference_id and (record.attempts[-1].get("last_checkpoint") or 0) >= 4:
                run_id = folder.name
                for pid in [proc.pid, *_descendants(proc.pid)]:
                    os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
    proc.wait()
    if run_id is None:
        return {"status": "error", "error": "the run ended or never checkpointed before it could be killed"}
    record = resume(wh, run_id, on_event=printer("resume"))
    return {
        "status": record.status,
        "attempts": record.attempts,
        "adapter_max_abs_diff": _adapter_diff(work / "resume-out", work / "resume-ref"),
        "summary": record.summary,
    }


def packing_flash(work: Path) -> dict[str, Any]:
    """Packed against unpacked losses on CUDA, packed on flash-attention's varlen kernels when there."""
    import json as _json
    from importlib.util import find_spec

    from tracebank.train import TrainConfig, train
    from tracebank.warehouse import catalog

    wh, model_dir = _qa_warehouse(work, "packing")
    kernel = "flash_attention_2" if find_spec("flash_attn") is not None else "sdpa"
    losses, speed = {}, {}
    for packing in (False, True):
        record = train(
            wh,
            TrainConfig(
                dataset="qa@v1",
                base_model=str(model_dir),
                output=str(work / f"packing-{packing}"),
                save="lora",
                max_steps=8,
                eval_strategy="no",
                packing=packing,
                attn_implementation=kernel if packing else "sdpa",
                timeout=300,
                **SHORT,
            ),  # fmt: skip
            on_event=printer(f"packing={packing}"),
        )
        folder, _ = catalog.resolve_run(wh, record.run_id)
        lines = (folder / "metrics.jsonl").read_text().splitlines()
        losses[packing] = [m["loss"] for m in map(_json.loads, lines) if m.get("split") == "train"]
        speed[packing] = record.summary.get("tokens_per_s")
    worst = max(abs(a - b) for a, b in zip(losses[True], losses[False], strict=True))
    return {
        "status": "succeeded" if worst < 5e-2 else "differs",
        "packed_kernel": kernel,
        "losses": losses,
        "max_abs_loss_diff": worst,
        "tokens_per_s": speed,
    }


#: Qwen2.5-0.5B's shape (random weights here): 24 layers, hidden 896, 14 heads, 2 KV heads.
QWEN_05B = {
    "hidden_size": 896, "intermediate_size": 4864, "num_hidden_layers": 24, "num_attention_heads": 14,
    "num_key_value_heads": 2, "vocab_size": 151936, "max_position_embeddings": 32768, "rope_theta": 1e6,
    "tie_word_embeddings": True,
}  # fmt: skip


def build_qwen_05b(out: Path) -> Path:
    """A Qwen2.5-0.5B-shaped model with random weights (bf16) and the tiny tokenizer, written to ``out``."""
    import torch
    from tracebank.train.tiny_model import build_tokenizer
    from transformers import Qwen2Config, Qwen2ForCausalLM

    if (out / "config.json").exists():
        return out
    tokenizer = build_tokenizer(out)
    config = Qwen2Config(**QWEN_05B, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    with torch.device("cuda" if torch.cuda.is_available() else "cpu"):
        model = Qwen2ForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(str(out))
    return out


def qwen_05b_speed(work: Path, backend: str, rows: int, steps: int) -> dict[str, Any]:
    """Tokens/s of LoRA training on the 0.5B-shaped model, 1,024-token rows, batch 8."""
    result = throughput_on(
        work, build_qwen_05b(work / "qwen-0.5b"), backend, rows, 1024, steps, f"speed-05b-{backend}"
    )
    result["parameters"] = "Qwen2.5-0.5B shape, random weights"
    return result


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu-check"))
    parser.add_argument("--work", default="/tmp/gpu-check-work")
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--rows-05b", type=int, default=256)
    parser.add_argument("--steps-05b", type=int, default=20)
    parser.add_argument("--skip-unsloth", action="store_true")
    parser.add_argument("--allow-cpu", action="store_true", help="dry run of this script without a GPU")
    args = parser.parse_args()
    out, work = Path(args.out), Path(args.work)
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"environment": environment()}
    print(json.dumps(report["environment"], indent=1), flush=True)
    if not report["environment"]["cuda"] and not args.allow_cpu:
        print("no CUDA device visible: this check is for a GPU machine", flush=True)
        return 2
    failed = False
    steps = [
        ("trl_memorise", lambda: memorise(work, "trl")),
        (
            "trl_throughput",
            lambda: throughput(work, args.rows, args.length, args.hidden, args.layers, args.steps),
        ),
    ]
    unsloth = report["environment"]["unsloth_importable"] and not args.skip_unsloth
    if unsloth:
        steps.append(("unsloth_memorise", lambda: memorise(work, "unsloth")))
    steps += [
        ("torchrun_nproc1", lambda: torchrun_one(work)),
        ("fsdp_full", lambda: fsdp_full(work)),
        ("resume_after_kill", lambda: resume_after_kill(work)),
        ("packing_flash", lambda: packing_flash(work)),
        ("qwen05b_trl", lambda: qwen_05b_speed(work, "trl", args.rows_05b, args.steps_05b)),
    ]
    if unsloth:
        steps.append(
            ("qwen05b_unsloth", lambda: qwen_05b_speed(work, "unsloth", args.rows_05b, args.steps_05b))
        )
    for name, step in steps:
        started = time.perf_counter()
        try:
            report[name] = step()
        except Exception as exc:
            report[name] = {
                "status": "error",
                "error": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc()[-3000:],
            }
            failed = failed or name in ("trl_memorise", "trl_throughput")
        report[name]["check_s"] = round(time.perf_counter() - started, 1)
        (out / "gpu_check.json").write_text(json.dumps(report, indent=1, default=str))
        summary = report[name].get("summary") or {}
        print(
            f"== {name}: {report[name].get('status')} in {report[name]['check_s']}s; "
            f"loss {summary.get('train_loss_first')} -> {summary.get('train_loss_last')}; "
            f"{summary.get('tokens_per_s')} tokens/s; answers right {report[name].get('answers_right')}",
            flush=True,
        )
    memo = report.get("trl_memorise", {})
    if memo.get("status") != "succeeded" or memo.get("answers_right", 0) < 3:
        failed = True
    print("GPU CHECK " + ("FAILED" if failed else "PASSED"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
