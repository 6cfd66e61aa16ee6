#!/usr/bin/env bash
# GPU check of the train stage, for a session that has a lent CUDA machine (the H200 box).
# Runs in under 10 minutes: TRL+PEFT on CUDA in bf16 on the tiny local model (memorise,
# then load the merged 16-bit output and generate), a tokens/s run on a ~100M-parameter
# model, the Unsloth path when unsloth imports there, then `--nproc-per-node 1` under
# torchrun (NCCL), full fine-tuning sharded with --fsdp (FSDP2 through accelerate), resume after a SIGKILL, packing on flash-attention (sdpa when flash_attn is
# missing), and tokens/s of a Qwen2.5-0.5B-shaped model (random weights) with TRL and Unsloth.
# Results: $OUT/gpu_check.json, rewritten after every step (a timeout keeps what finished).
#
# Prepared, not yet run: no session so far has been lent a GPU machine.
#
# The GPU machine is not this one: its `python3` already holds a CUDA torch (never pip
# install torch there; the project's CPU pin is for CI only), transformers, accelerate,
# peft, pyarrow, numpy, tokenizers, safetensors, pandas... but NOT tracebank, duckdb, trl,
# datasets, dill or multiprocess, and it cannot download anything. Stage those as wheels
# first, here, in the repository root (they travel in the carried .whl folder, < 64 MiB):
#
#   bash scripts/stage_gpu_wheels.sh
#
# then call the device tool with carry [".whl"] and the command
#   bash scripts/gpu_check.sh
# (bitsandbytes and unsloth are not on that image either: without them the run resolves to
# a 16-bit base and adamw_torch, and says so; stage their wheels too to check 4-bit/Unsloth.)
set -euo pipefail

cd "$(dirname "$0")/.."
PY="${PY:-python3}"
OUT_DIR="${OUT:-/tmp/gpu-check}"
SITE="${GPU_CHECK_SITE:-/tmp/site}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export LITELLM_LOCAL_MODEL_COST_MAP=True

if compgen -G ".whl/*.whl" >/dev/null; then
    echo "installing $(ls .whl/*.whl | wc -l) carried wheel(s) into $SITE"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi
# The checkout is NOT put on PYTHONPATH: its stage folders only import as tracebank.* once
# installed (the staged wheel), and its tracebank/ folder alone would shadow the install.

# Fail fast, with the fix, when a library is missing (before any model is built).
"$PY" -P - <<'EOF'
import importlib, sys
missing = []
for name in (
    "torch", "transformers", "peft", "trl", "datasets", "accelerate", "pyarrow", "tokenizers", "duckdb",
    "tracebank.train",
):
    try:
        importlib.import_module(name)
    except Exception as exc:  # ImportError, or a broken install
        missing.append(f"{name} ({type(exc).__name__}: {exc})")
if missing:
    print("missing on this machine: " + "; ".join(missing))
    print("run scripts/stage_gpu_wheels.sh on the development machine, and carry .whl")
    sys.exit(3)
import torch
if not torch.cuda.is_available():
    print("torch sees no CUDA device here; this check is for the GPU machine")
    sys.exit(2)
print(f"torch {torch.__version__} on {torch.cuda.get_device_name(0)}")
EOF

mkdir -p "$OUT_DIR"
# 9 minutes at most, so a 10-minute device call always returns the JSON written so far.
timeout --signal=TERM --kill-after=20 540 "$PY" scripts/gpu_check.py --out "$OUT_DIR" "$@"
