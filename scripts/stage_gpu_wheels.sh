#!/usr/bin/env bash
# Stage in .whl/ every wheel scripts/gpu_check.sh needs on the GPU machine and cannot download
# there (its image: CPython 3.12, x86_64, CUDA 13 torch 2.11, transformers 5.17, triton; see
# docs/GPU.md). What travels with one device call (.whl plus the tracked tree) must stay under
# 64 MiB: this script fails above that. .gitignore keeps .whl/ out of commits.
#
# Staged: tracebank (built from this checkout; gpu_check.py refuses it once the checkout changes),
# trl, datasets (+ dill, multiprocess), peft and accelerate at the pins CI tests, unsloth and
# unsloth_zoo (Unsloth's requirements that import unconditionally: cut_cross_entropy for its fused
# loss; the rest - tyro, msgspec, torchao, xformers, diffusers... - are optional or not imported by
# `import unsloth`), bitsandbytes (4-bit loading, 8-bit AdamW). Not staged: duckdb, polars, orjson,
# agentlightning, plotly: the train path does not import them (the dry run blocks them to prove it).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="$(realpath -s "$(command -v "${PY:-.venv/bin/python}")")"
LIMIT=$((64 * 1024 * 1024))
PINS=(
    trl==1.15.0 datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19 peft==0.21.2 accelerate==1.16.0
    unsloth==2026.10.9 unsloth_zoo==2026.10.9 cut_cross_entropy==25.1.1 bitsandbytes==0.50.2
)

rm -rf .whl build
mkdir -p .whl
"$PY" -m pip wheel -q --no-deps -w .whl . >/dev/null 2>&1 || "$PY" -m pip wheel --no-deps -w .whl .
rm -rf build  # pip wheel leaves its build tree in the checkout
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_24_x86_64 \
    --platform manylinux_2_28_x86_64 -d .whl "${PINS[@]}"

# unsloth's web studio (82 MB unpacked) is not imported by `import unsloth`; bitsandbytes loads
# the one library built for torch's CUDA (13.0 there): the others are 110 MB.
"$PY" scripts/slim_wheel.py .whl/unsloth-*.whl 'studio/*'
"$PY" scripts/slim_wheel.py .whl/bitsandbytes-*.whl 'bitsandbytes/libbitsandbytes_cuda1[12]*.so' \
    'bitsandbytes/libbitsandbytes_rocm*.so' 'bitsandbytes/libbitsandbytes_xpu*.so'

# The tracebank wheel is the checkout's: install it alone, as the GPU machine will, and compare.
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
"$PY" -m pip install -q --no-deps --no-compile --target "$site" .whl/tracebank-*.whl
PYTHONPATH="$site" "$PY" -P scripts/gpu_check.py --verify-source

wheels=$(du -sb .whl | cut -f1)
tree=$(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1)
ls -1s --block-size=K .whl
echo "staged $(ls .whl | wc -l) wheels: $((wheels / 1024 / 1024)) MiB, with the tree $(((wheels + tree) / 1024 / 1024)) MiB"
if ((wheels + tree > LIMIT)); then
    echo "over the 64 MiB a device call carries" >&2
    exit 1
fi
