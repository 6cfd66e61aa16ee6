"""Peak memory and time against warehouse size: transform (local and Ray engines) at 5 M-200 M tokens.

For each size a synthetic warehouse of long multi-turn trajectories
(``bench.scale_data``: 3-8 calls, 1-3k-token prompts, collections of 2,000
rollouts) is generated once and kept in ``~/.cache/tracebank/bench-scale/``
(keyed by the generator's version and the size). Then each measurement runs in
a fresh process, whose peak RSS (VmHWM) is that run's alone:

- transform, cold: silver caches rebuilt from the bronze spans, then the version;
- transform, warm: silver cached (what a transform after `tracebank collect` costs);
- transform, warm, ``--engine ray``: the same on a local Ray cluster of two nodes
  (a head and a worker, one CPU each) started once for the section; the peak RSS
  is the driver's;
- collect (up to ``TRACEBANK_SCALE_COLLECT_MAX`` M tokens, default 50: the store
  keeps every span in memory) from a real `agl store` filled with the same rollouts.

Every run of a size must give the same content hash. Sizes come from
``TRACEBANK_SCALE_SIZES`` (millions of tokens, default ``5,50,200``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GENERATOR_VERSION = 1
SIZES = [int(s) for s in os.environ.get("TRACEBANK_SCALE_SIZES", "5,50,200").split(",") if s]
# The store holds every span in memory (about 25x their Parquet size); bigger sizes skip collect.
COLLECT_MAX = int(os.environ.get("TRACEBANK_SCALE_COLLECT_MAX", "50"))
CACHE = Path(os.environ.get("TRACEBANK_CACHE", Path.home() / ".cache" / "tracebank")) / "bench-scale"

CHILD = """
import json, sys, time, threading
from tracebank.transform import TransformConfig, run_transform
from tracebank.warehouse.layout import Warehouse
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
wh = Warehouse.resolve(sys.argv[1])
engine, address, rebuild = sys.argv[2], sys.argv[3] or None, sys.argv[4] == "cold"
base = hwm()
t0, c0 = time.perf_counter(), time.process_time()
if rebuild:  # what `tracebank transform --rebuild-silver` does first
    from tracebank.collect import build_silver
    build_silver(wh, (), force=True)
r = run_transform(wh, TransformConfig(name="scale"), engine=engine, address=address)
print(json.dumps({"s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "base": base,
                  "peak": hwm(), "hash": r.manifest["content_hash"], "rows": r.manifest["rows"],
                  "tokens": r.manifest["stats"]["tokens"], "silver": r.manifest["counts"]["silver"]}))
"""


COLLECT_CHILD = """
import json, sys, time
from tracebank.collect import collect
from tracebank.warehouse.layout import Warehouse
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
wh = Warehouse(__import__("pathlib").Path(sys.argv[2])).init()
base = hwm()
t0, c0 = time.perf_counter(), time.process_time()
r = collect(sys.argv[1], wh)
print(json.dumps({"s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "base": base,
                  "peak": hwm(), "spans": r.counts["spans"]}))
"""


async def _fill_store(url: str, root: Path) -> int:
    """Add every rollout of the warehouse at ``root`` to the store at ``url`` (new ids); spans added."""
    import asyncio

    import agentlightning as agl
    import pyarrow.parquet as pq
    from agentlightning.store.client_server import LightningStoreClient
    from tracebank.warehouse.bronze import span_dict_from_row

    from tests.fixtures.fill import add_rollout

    client = LightningStoreClient(url)
    sem = asyncio.Semaphore(8)
    added = 0

    async def one(rows: list[dict]) -> None:
        nonlocal added

        def make(rid: str, aid: str) -> list:
            out = []
            for row in rows:
                d = span_dict_from_row(row)
                d.update(rollout_id=rid, attempt_id=aid)
                out.append(agl.Span.model_validate(d))
            return out

        async with sem:
            await add_rollout(client, make)
        added += len(rows)

    for path in sorted((root / "collections").rglob("spans-*.parquet")):
        by_rollout: dict[str, list[dict]] = {}
        for row in pq.read_table(path).to_pylist():
            by_rollout.setdefault(row["rollout_id"], []).append(row)
        await asyncio.gather(*[one(rows) for rows in by_rollout.values()])
    await client.close()
    return added


def _collect_row(size: int, root: Path) -> str:
    """Fill a fresh store with the warehouse's rollouts, then time `collect` in a fresh process."""
    import asyncio
    import tempfile

    from tests.fixtures.store_server import agl_store_server

    with (
        tempfile.TemporaryDirectory(prefix="tb-scale-collect-") as tmp,
        agl_store_server(Path(tmp)) as (url, _),
    ):
        t0 = time.perf_counter()
        spans = asyncio.run(_fill_store(url, root))
        fill_s = time.perf_counter() - t0
        out = subprocess.run(
            [sys.executable, "-c", COLLECT_CHILD, url, str(Path(tmp) / "wh")],
            cwd=ROOT,
            env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"},
            capture_output=True,
            text=True,
            check=False,
        )
    if out.returncode != 0:
        raise RuntimeError(f"scale collect child failed:\n{out.stderr[-4000:]}")
    r = json.loads(out.stdout.strip().splitlines()[-1])
    if r["spans"] != spans:
        raise AssertionError(f"collect got {r['spans']} spans of {spans}")
    return (
        f"| {size} M | collect | {r['s']:.1f} | {r['cpu_s']:.1f} | {spans / r['s']:,.0f} spans/s | "
        f"{r['peak']:.0f} MiB ({r['base']:.0f}) | {spans:,} spans; store filled in {fill_s:.0f} s |"
    )


def _warehouse(millions: int) -> tuple[Path, dict[str, float]]:
    """The cached warehouse of this size (generated when missing), and what generating it cost."""
    from bench.scale_data import build_warehouse

    root = CACHE / f"v{GENERATOR_VERSION}-{millions}M"
    done = root / "BUILT.json"
    if done.exists():
        return root, json.loads(done.read_text())
    shutil.rmtree(root, ignore_errors=True)
    t0 = time.perf_counter()
    built = build_warehouse(root, millions * 1_000_000)
    info = {**built.__dict__, "generate_s": time.perf_counter() - t0}
    info["bronze_mib"] = sum(p.stat().st_size for p in (root / "collections").rglob("*.parquet")) / 2**20
    done.write_text(json.dumps(info))
    return root, info


def _child(root: Path, engine: str, address: str, temperature: str, env: dict[str, str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(root), engine, address, temperature],
        cwd=ROOT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if out.returncode != 0:
        raise RuntimeError(f"scale benchmark child failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def _row(label: str, size: int, r: dict, extra: str = "") -> str:
    return (
        f"| {size} M | {label} | {r['s']:.1f} | {r['cpu_s']:.1f} | {r['tokens'] / r['s'] / 1e6:.1f} M | "
        f"{r['peak']:.0f} MiB ({r['base']:.0f}) | {extra} |"
    )


def run() -> str:
    from tests.fixtures.ray_cluster import ray_cluster

    lines = [
        "## scale: peak memory and time against warehouse size",
        "",
        "Synthetic warehouses of long multi-turn trajectories (3-8 proxied calls per rollout, "
        "1-3k-token prompts, collections of 2,000 rollouts, span files of at most 64 MiB of "
        "attributes), one per size; tokens are the dataset's (prompt + response of every row). "
        "Each run is a fresh process; peak RSS is its VmHWM (in brackets: after imports). "
        "Cold rebuilds every silver cache from the bronze spans; warm reads them. The Ray engine "
        "ran on a local cluster of a head and a worker node (1 CPU each) on this same 2-core "
        "machine, so it cannot be faster here: the numbers show its overhead (start-up of the "
        "Ray Data jobs, spilling tokens per collection, shipping pieces to workers, reading the "
        "written pieces back for the content hash). Its peak RSS is the driver's (ray.init adds "
        "Ray's core worker to the process); the workers' is not measured here.",
        "",
        "| tokens | run | seconds | CPU s (driver) | tokens/s | peak RSS | notes |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    summary: list[tuple[int, float, float]] = []
    collect_rows = []
    with ray_cluster() as cluster:
        for size in SIZES:
            root, info = _warehouse(size)
            shutil.rmtree(root / "datasets", ignore_errors=True)  # versions of earlier runs
            cold = _child(root, "local", "", "cold", {})
            warm = _child(root, "local", "", "warm", {})
            ray_run = _child(root, "ray", cluster.address, "warm", cluster.env)
            hashes = {cold["hash"], warm["hash"], ray_run["hash"]}
            if len(hashes) != 1:
                raise AssertionError(f"{size} M tokens: engines or runs disagree on the content hash")
            note = (
                f"{info['rollouts']:,} rollouts, {info['calls']:,} calls, {info['collections']} collections, "
                f"{info['bronze_mib']:.0f} MiB bronze (generated in {info['generate_s']:.0f} s)"
            )
            lines += [
                _row("transform, cold", size, cold, note),
                _row("transform, warm", size, warm, f"{warm['rows']:,} rows"),
                _row(
                    "transform, warm, --engine ray", size, ray_run, "driver only (Ray's core worker included)"
                ),
            ]
            summary.append((size, cold["peak"], warm["peak"]))
            shutil.rmtree(root / "datasets", ignore_errors=True)  # the cache keeps inputs only
            if size <= COLLECT_MAX:
                collect_rows.append(_collect_row(size, root))
    if len(summary) > 1:
        (s0, c0, w0), (s1, c1, w1) = summary[0], summary[-1]
        lines += [
            "",
            f"From {s0} M to {s1} M tokens ({s1 / s0:.0f}x the data) peak RSS goes from {c0:.0f} to "
            f"{c1:.0f} MiB cold ({(c1 / c0 - 1) * 100:+.0f}%) and from {w0:.0f} to {w1:.0f} MiB warm "
            f"({(w1 / w0 - 1) * 100:+.0f}%); the goal is within 25%.",
        ]
    if collect_rows:
        lines += [
            "",
            "`collect` from a real `agl store` holding the same rollouts (filled through its client; "
            "fresh process; silver not built, that is the cold transform's first step above):",
            "",
            "| tokens | run | seconds | CPU s | rate | peak RSS | notes |",
            "|---:|---|---:|---:|---:|---:|---|",
            *collect_rows,
        ]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(run())
