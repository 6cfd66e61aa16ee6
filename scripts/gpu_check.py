"""The train stage on a CUDA GPU, end to end, in a few minutes (run by scripts/gpu_check.sh).

1. environment: torch / CUDA / bf16 / Triton / library versions, whether unsloth imports;
2. correctness: the tiny local model memorises the QA set through `train.train` with the
   TRL+PEFT backend on CUDA in bf16 (Triton fused loss when TRL can use it), the merged
   16-bit output loads on the GPU and answers; tokens/s printed;
3. throughput: a ~100M-parameter model of the same family on 1,024-token rows, tokens/s;
4. the Unsloth backend on the same QA set, when unsloth imports.
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
    def on_event(event: dict[str, Any]) -> None:
        kind = event.get("event")
        if kind == "loaded":
            print(
                f"[{prefix}] loaded: {event['resolved']} trainable {event['trainable_params']:,}", flush=True
            )
        elif kind == "metric" and (event["split"] == "eval" or event["step"] % 10 == 0):
            print(
                f"[{prefix}] {event['split']} step {event['step']} loss {event['loss']:.4f} "
                f"tokens {event.get('tokens')} t {event.get('time')}",
                flush=True,
            )
        elif kind == "error":
            print(f"[{prefix}] child error: {event.get('message')}", flush=True)

    return on_event


def memorise(work: Path, backend: str) -> dict[str, Any]:
    """Train the tiny model on the QA set, then load the merged output on the GPU and ask it."""
    import torch
    from tracebank.train import TrainConfig, train
    from tracebank.train.tiny_model import build_tiny_model
    from tracebank.warehouse.location import Warehouse
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from tests.fixtures.datasets import QA_PAIRS, SYSTEM, load_tokenizer, qa_rows, write_dataset

    model_dir = work / "tiny"
    if not model_dir.exists():
        build_tiny_model(model_dir, seed=0, initializer_range=0.2)
    wh = Warehouse(work / f"wh-{backend}").init()
    tok = load_tokenizer(model_dir)
    write_dataset(wh, "qa", qa_rows(tok, QA_PAIRS, repeat=2), validation=qa_rows(tok, QA_PAIRS))
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
    import numpy as np
    from tracebank.train import TrainConfig, train
    from tracebank.train.tiny_model import build_tiny_model
    from tracebank.warehouse.contract import IGNORE_INDEX
    from tracebank.warehouse.location import Warehouse

    from tests.fixtures.datasets import write_dataset

    model_dir = build_tiny_model(
        work / f"model-{hidden}x{layers}", seed=0, hidden_size=hidden, num_layers=layers
    )
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
    wh = Warehouse(work / "wh-speed").init()
    write_dataset(wh, "speed", data)
    record = train(
        wh,
        TrainConfig(
            dataset="speed",
            base_model=str(model_dir),
            output=str(work / "speed-lora"),
            backend="trl",
            save="lora",
            max_steps=steps,
            batch_size=8,
            grad_accum=1,
            warmup_steps=2,
            eval_strategy="no",
            logging_steps=5,
            timeout=400,
        ),
        on_event=printer("throughput"),
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu-check"))
    parser.add_argument("--work", default="/tmp/gpu-check-work")
    parser.add_argument("--rows", type=int, default=512)
    parser.add_argument("--length", type=int, default=1024)
    parser.add_argument("--hidden", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--steps", type=int, default=30)
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
    if report["environment"]["unsloth_importable"] and not args.skip_unsloth:
        steps.append(("unsloth_memorise", lambda: memorise(work, "unsloth")))
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
            failed = failed or not name.startswith("unsloth")
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
