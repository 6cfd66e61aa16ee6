"""Transform vs the upstream path (LlmProxyTraceToTriplet + the recipe's data step), same spans.

One committed collection of synthetic LLMProxy rollouts is built first. Then,
each side in its own fresh process (so peak RSS is that side's alone):

- oracle: read the bronze spans, rebuild agentlightning ``Span`` objects of
  each rollout's latest attempt (timed apart), then time
  ``LlmProxyTraceToTriplet().adapt`` per rollout + the recipe's reverse walk,
  shuffle/sort/slice and ``datasets.Dataset.from_list`` (the recipe's data step);
- transform: ``transform()`` from the same collection with no silver cache
  (cold: silver tables built and written, version committed), then again
  with the cache in place (warm: what a re-selection costs).

Both sides' rows are reduced to one digest (sorted per-row hashes) that must
match, so the numbers compare equal work.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
N_ROLLOUTS = int(os.environ.get("TRANSFORM_BENCH_ROLLOUTS", "2000"))

_DIGEST = '''
import hashlib
def digest(rows):
    keys = sorted(hashlib.sha256(repr((list(r["input_ids"]), list(r["labels"]), list(r["attention_mask"]),
                                       float(r["reward"]))).encode()).hexdigest() for r in rows)
    return hashlib.sha256("".join(keys).encode()).hexdigest()
def _status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")
def rss_mib():
    """Peak resident set of this process so far (VmHWM: reset at exec, unlike ru_maxrss)."""
    return _status("VmHWM")
'''

ORACLE = _DIGEST + '''
import json, logging, random, sys, time
import pyarrow.parquet as pq
import agentlightning as agl
from datasets import Dataset
from warehouse.bronze import span_dict_from_row
from warehouse.layout import Warehouse
from warehouse import catalog
from warehouse.commit import committed_files
logging.getLogger("agentlightning").setLevel(logging.ERROR)
wh = Warehouse.resolve(sys.argv[1])
base = rss_mib()
t0 = time.perf_counter()
rows, attempts = [], []
for folder, manifest in catalog.collections(wh):
    for f in committed_files(folder, manifest, "spans"):
        rows += pq.read_table(f).to_pylist()
    for f in committed_files(folder, manifest, "attempts"):
        attempts += pq.read_table(f).to_pylist()
latest = {}
for a in attempts:
    if a["rollout_id"] not in latest or a["sequence_id"] > latest[a["rollout_id"]][0]:
        latest[a["rollout_id"]] = (a["sequence_id"], a["attempt_id"])
by_rollout = {}
for r in rows:
    if latest.get(r["rollout_id"], (0, None))[1] == r["attempt_id"]:
        by_rollout.setdefault(r["rollout_id"], []).append(agl.Span.model_validate(span_dict_from_row(r)))
t1 = time.perf_counter()
random.seed(0)
all_triplets = []
data_adapter = agl.LlmProxyTraceToTriplet()
tokens = 0
for rollout_id in sorted(by_rollout):
    triplets = data_adapter.adapt(by_rollout[rollout_id])
    recent_reward = None
    for triplet in reversed(triplets):
        if triplet.reward is not None:
            recent_reward = triplet.reward
        if recent_reward is None:
            continue
        input_ids = triplet.prompt["token_ids"] + triplet.response["token_ids"]
        labels = [-100] * len(triplet.prompt["token_ids"]) + triplet.response["token_ids"]
        all_triplets.append({"input_ids": input_ids, "attention_mask": [1] * len(input_ids),
                             "labels": labels, "reward": recent_reward})
random.shuffle(all_triplets)
all_triplets.sort(key=lambda x: x["reward"], reverse=True)
sliced_triplets = all_triplets[: max(1, int(len(all_triplets) * 1.0))]
random.shuffle(sliced_triplets)
sft_dataset = Dataset.from_list(sliced_triplets)
t2 = time.perf_counter()
print(json.dumps({"parse_s": t1 - t0, "adapt_s": t2 - t1, "rows": len(sliced_triplets),
                  "tokens": sum(len(r["input_ids"]) for r in sliced_triplets),
                  "spans": sum(len(v) for v in by_rollout.values()),
                  "digest": digest(sliced_triplets), "base_rss_mib": base, "peak_rss_mib": rss_mib()}))
'''

TRANSFORM = _DIGEST + '''
import json, sys, time
import pyarrow.parquet as pq
from transform import TransformConfig, transform
from warehouse.layout import Warehouse
wh = Warehouse.resolve(sys.argv[1])
base = rss_mib()
t0 = time.perf_counter()
cold = transform(wh, TransformConfig(name="bench"))
t1 = time.perf_counter()
warm = transform(wh, TransformConfig(name="bench"))
t2 = time.perf_counter()
peak = rss_mib()
rows = pq.read_table(cold.folder / "train.parquet").to_pylist()
print(json.dumps({"cold_s": t1 - t0, "warm_s": t2 - t1, "rows": cold.manifest["rows"],
                  "tokens": cold.manifest["stats"]["tokens"], "digest": digest(rows),
                  "warm_rows": warm.manifest["rows"], "base_rss_mib": base, "peak_rss_mib": peak,
                  "summary": cold.summary()}))
'''


def _child(code: str, warehouse: Path) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    out = subprocess.run([sys.executable, "-c", code, str(warehouse)], cwd=ROOT, env=env,
                         capture_output=True, text=True, check=False)
    if out.returncode != 0:
        raise RuntimeError(f"benchmark child failed:\n{out.stderr[-4000:]}")
    result = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def build_collection(root: Path, n_rollouts: int = N_ROLLOUTS) -> tuple[int, float]:
    """Commit the synthetic collection; return (spans, seconds)."""
    from tests.fixtures.bronze import commit_collection, synthetic_rollouts
    from warehouse.layout import Warehouse

    start = time.perf_counter()
    wh = Warehouse(root).init()
    spans, rollouts = synthetic_rollouts(n_rollouts, seed=2024)
    commit_collection(wh, spans, rollouts=rollouts)
    return len(spans), time.perf_counter() - start


def run() -> str:
    os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
    with tempfile.TemporaryDirectory(prefix="tracebank-bench-") as tmp:
        root = Path(tmp) / "warehouse"
        n_spans, gen_s = build_collection(root)
        bronze_mib = sum(p.stat().st_size for p in (root / "collections").rglob("*.parquet")) / 2**20
        oracle = _child(ORACLE, root)
        ours = _child(TRANSFORM, root)
    if oracle["digest"] != ours["digest"] or oracle["rows"] != ours["rows"]:
        raise AssertionError(f"transform rows differ from the oracle's: {oracle['rows']} vs {ours['rows']}")
    tokens = ours["tokens"]
    oracle_s = oracle["adapt_s"]
    oracle_total = oracle["parse_s"] + oracle["adapt_s"]
    lines = [
        "## transform",
        "",
        f"Same committed collection for both: {N_ROLLOUTS:,} synthetic LLMProxy rollouts, {n_spans:,} spans "
        f"({bronze_mib:.1f} MiB of bronze Parquet, built in {gen_s:.0f} s), {ours['rows']:,} rows, "
        f"{tokens:,} tokens (prompt + response of every row). Both sides produce the identical multiset "
        "of rows "
        "(checked by digest). Each side ran in its own process; RSS is that process's peak "
        "(and its size after imports).",
        "",
        "| path | seconds | tokens/s | peak RSS (after imports) |",
        "|---|---:|---:|---:|",
        f"| upstream: `LlmProxyTraceToTriplet.adapt` + recipe data step + `Dataset.from_list` "
        f"(Span objects ready) | {oracle_s:.2f} | {tokens / oracle_s / 1e6:.2f} M | "
        f"{oracle['peak_rss_mib']:.0f} MiB ({oracle['base_rss_mib']:.0f}) |",
        f"| upstream incl. reading bronze into Span objects | {oracle_total:.2f} | "
        f"{tokens / oracle_total / 1e6:.2f} M | same process |",
        f"| `transform`, cold (builds + writes silver, commits the version) | {ours['cold_s']:.2f} | "
        f"{tokens / ours['cold_s'] / 1e6:.2f} M | "
        f"{ours['peak_rss_mib']:.0f} MiB ({ours['base_rss_mib']:.0f}) |",
        f"| `transform`, warm (silver cached, same options: a re-selection) | "
        f"{ours['warm_s']:.2f} | {tokens / ours['warm_s'] / 1e6:.2f} M | same process |",
        "",
        f"Speed-up of cold `transform` over the upstream path: **{oracle_s / ours['cold_s']:.1f}x** "
        f"({oracle_total / ours['cold_s']:.1f}x counting the Span parsing); warm: "
        f"**{oracle_s / ours['warm_s']:.1f}x**. Goal: 50x.",
        "",
        f"Transform's own summary: `{ours['summary']}`",
    ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
