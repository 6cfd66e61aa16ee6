#!/usr/bin/env bash
# The GPU check of the train stage, in ONE device call of about six minutes, installs included
# (docs/GPU.md: what each step proves). Here, first:
#
#   bash scripts/stage_gpu_wheels.sh      # .whl/: what the GPU image lacks, < 64 MiB with the tree
#
# then one device call: carry [".whl"], timeout_s 480, command
#
#   bash scripts/gpu_check.sh
#
# Results come back in $OUT: gpu_check.json (written at the start, after every step and on
# SIGTERM), gpu_check.log (everything printed) and install.log. GPU_CHECK_TOTAL_S (default 360)
# is the whole budget; arguments go to scripts/gpu_check.py (--only / --skip STEP,...).
#
# The GPU machine's python3 already holds CUDA torch, transformers, triton, pyarrow, tokenizers...
# (never pip install torch there); it cannot download anything. The check runs the staged
# tracebank wheel and refuses it when its modules differ from this checkout's.
set -euo pipefail

cd "$(dirname "$0")/.."
PY="${PY:-python3}"
OUT_DIR="${OUT:-/tmp/gpu-check}"
SITE="${GPU_CHECK_SITE:-/tmp/gpu-check-site}"
TOTAL_S="${GPU_CHECK_TOTAL_S:-360}"
export PYTHONUNBUFFERED=1 TOKENIZERS_PARALLELISM=false HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
export LITELLM_LOCAL_MODEL_COST_MAP=True
mkdir -p "$OUT_DIR"

if compgen -G ".whl/*.whl" >/dev/null; then
    echo "installing $(ls .whl/*.whl | wc -l) carried wheel(s) into $SITE" | tee "$OUT_DIR/install.log"
    rm -rf "$SITE"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$SITE" .whl/*.whl >>"$OUT_DIR/install.log" 2>&1 || {
        tail -c 3000 "$OUT_DIR/install.log"
        exit 3
    }
    export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
fi

# What the installs took comes out of the check's deadline; `timeout` is the backstop should the
# check's own deadline fail: SIGTERM, which it answers by writing the report, then SIGKILL.
left=$((TOTAL_S - SECONDS))
# -P: the checkout's folders never shadow the installed tracebank.
exec timeout --signal=TERM --kill-after=15 $((left + 20)) \
    "$PY" -P scripts/gpu_check.py --out "$OUT_DIR" --deadline-s "$left" "$@"
