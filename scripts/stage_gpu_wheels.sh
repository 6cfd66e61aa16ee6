#!/usr/bin/env bash
# Stage, in .whl/, every wheel scripts/gpu_check.sh needs on the GPU machine and cannot download
# there: tracebank itself (built here; the packages only import as tracebank.* once installed),
# duckdb (the warehouse's query engine, imported with the train stage), and trl / datasets / dill /
# multiprocess, which that image lacks. The GPU image runs CPython 3.12 on x86_64; duckdb's wheel
# is manylinux_2_28. The folder must stay under 64 MiB (what a device call carries); .gitignore
# keeps it out of commits.
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PY:-.venv/bin/python}"
LIMIT=$((64 * 1024 * 1024))

rm -rf .whl
mkdir -p .whl

"$PY" -m pip wheel -q --no-deps -w .whl .
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
    -d .whl trl==1.15.0 datasets==4.8.5 dill==0.4.1 multiprocess==0.70.19 duckdb==2.0.1

size=$(du -sb .whl | cut -f1)
ls -1 .whl
echo "staged $(ls .whl | wc -l) wheels, $((size / 1024 / 1024)) MiB"
if ((size > LIMIT)); then
    echo "over the 64 MiB a device call carries" >&2
    exit 1
fi
rm -rf build  # pip wheel leaves its build tree in the checkout
