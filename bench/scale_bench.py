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
  keeps every span in memory) from a real `agl store` filled with the same rollouts,
  into an empty warehouse and (the largest store) into a copy of the largest warehouse.

Every run of a size must give the same content hash. Sizes come from
``TRACEBANK_SCALE_SIZES`` (millions of tokens, default ``5,50,200,1000``; the 1 B-token
warehouse takes about 10 minutes and 6 GB of disk to generate, once).

Beside each warm run, the ceiling (``CEILING_CHILD``): the same rows read from silver and
written with pyarrow alone; the warm transform's tokens/s is reported as a fraction of it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tracebank.warehouse.layout import cache_dir

ROOT = Path(__file__).resolve().parent.parent
GENERATOR_VERSION = 1
SIZES = [int(s) for s in os.environ.get("TRACEBANK_SCALE_SIZES", "5,50,200,1000").split(",") if s]
# The store holds every span in memory (about 25x their Parquet size); bigger sizes skip collect.
COLLECT_MAX = int(os.environ.get("TRACEBANK_SCALE_COLLECT_MAX", "50"))
CACHE = cache_dir() / "bench-scale"  # $TRACEBANK_CACHE_DIR moves it

CHILD = """
import json, sys, time, threading
from tracebank.transform import TransformConfig, transform
from tracebank.warehouse.backends import open_warehouse
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
wh = open_warehouse(sys.argv[1])
engine, address, rebuild = sys.argv[2], sys.argv[3] or None, sys.argv[4] == "cold"
base = hwm()
t0, c0 = time.perf_counter(), time.process_time()
if rebuild:  # what `tracebank transform --rebuild-silver` does first
    from tracebank.collect import build_silver
    build_silver(wh, (), force=True)
r = transform(wh, TransformConfig(name="scale", engine=engine, address=address))
import resource  # the silver build's worker processes (collect.silver_workers): their CPU and peak
kids = resource.getrusage(resource.RUSAGE_CHILDREN)
print(json.dumps({"s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "base": base,
                  "workers_cpu_s": kids.ru_utime + kids.ru_stime, "workers_peak": kids.ru_maxrss / 1024,
                  "peak": hwm(), "hash": r.manifest["content_hash"], "rows": r.manifest["rows"],
                  "tokens": r.manifest["stats"]["tokens"], "silver": r.manifest["counts"]["silver"]}))
"""


# The ceiling (issue 21): the silver token columns of every call read and the same rows
# (input_ids = prompt + response, attention_mask, labels) written with pyarrow alone: the
# transform's Parquet options and row groups of its piece size, rows in silver order, no
# selection, no shuffle, no digest or file hash, one thread of Python. With the default options
# every call is a row, so this writes the very rows the transform does (in another order).
CEILING_CHILD = """
import json, sys, tempfile, time
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from tracebank.transform.writer import PARQUET_OPTIONS, PIECE_TOKENS
from tracebank.warehouse.backends import open_warehouse
from tracebank.warehouse.storage import Storage
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
def rows(prompts, responses):
    po, ro = prompts.offsets.to_numpy(), responses.offsets.to_numpy()
    pv, rv = prompts.values.to_numpy(), responses.values.to_numpy()
    ignore = np.full(int(np.diff(po).max()), -100, np.int32)
    ids, labels, p, r = [], [], po.tolist(), ro.tolist()
    for i in range(len(p) - 1):
        ids += [pv[p[i]:p[i + 1]], rv[r[i]:r[i + 1]]]
        labels += [ignore[:p[i + 1] - p[i]], rv[r[i]:r[i + 1]]]
    ids, labels = np.concatenate(ids), np.concatenate(labels)
    offsets = pa.array(po - po[0] + ro - ro[0], pa.int32())
    mask = np.ones(len(ids), np.int32)
    return [pa.ListArray.from_arrays(offsets, pa.array(v)) for v in (ids, mask, labels)]
wh = open_warehouse(sys.argv[1])
files = [f for folder, m in Storage(wh).silver_caches() for f in Storage(wh).files_of(folder, m, "llm_calls")]
names = ["input_ids", "attention_mask", "labels"]
schema = pa.schema([pa.field(n, pa.list_(pa.int32())) for n in names])
base = hwm()
t0, c0 = time.perf_counter(), time.process_time()
tokens = 0
tmp = tempfile.TemporaryDirectory(dir=wh.root)
with tmp, pq.ParquetWriter(f"{tmp.name}/rows.parquet", schema, **PARQUET_OPTIONS) as out:
    held, n = [], 0
    def flush():
        table = pa.Table.from_batches(held).combine_chunks()
        out.write_table(table, row_group_size=table.num_rows)
    for path in files:
        parquet = pq.ParquetFile(path)
        for g in range(parquet.num_row_groups):
            part = parquet.read_row_group(g, columns=["prompt_token_ids", "response_token_ids"])
            part = part.combine_chunks()
            arrays = rows(part.column(0).chunk(0), part.column(1).chunk(0))
            batch = pa.RecordBatch.from_arrays(arrays, schema=schema)
            held.append(batch)
            n += len(batch.column(0).values)
            if n >= PIECE_TOKENS:
                flush()
                tokens, held, n = tokens + n, [], 0
    if held:
        flush()
        tokens += n
print(json.dumps({"s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0, "base": base,
                  "peak": hwm(), "tokens": tokens}))
"""


# Where a cold transform's silver build goes (issue 21): one collection's silver computed step by
# step, CPU seconds of each (DuckDB runs one thread, as the build does). The calls query is JSON
# extraction alone; extract_calls runs it again and then parses the token text: the prompts'
# parse is timed on its own (collect.tokens.parse_prompt_lists), the rest of extract_calls less
# the query is the responses' parse.
COLD_PARTS_CHILD = """
import json, sys, time
import duckdb
from tracebank.collect import silver
from tracebank.warehouse.backends import open_warehouse
wh = open_warehouse(sys.argv[1])
cid = sys.argv[2]
con = duckdb.connect(":memory:", config={"threads": silver.SILVER_THREADS})
calls_sql = silver._CALLS_SQL.replace("{valid}", "")
cpu = {}
def timed(name, fn, *args):
    c = time.process_time()
    out = fn(*args)
    cpu[name] = cpu.get(name, 0.0) + time.process_time() - c
    return out
parse_prompts = silver.parse_prompt_lists
silver.parse_prompt_lists = lambda *a: timed("prompt_ids", parse_prompts, *a)
pieces = []
batches = timed("read", lambda: list(silver.span_batches(silver.span_files(wh, cid))))
for spans in batches:
    timed("register", silver.register_spans, con, spans)
    timed("calls_json", lambda: con.sql(calls_sql).to_arrow_table())
    calls = timed("calls_all", silver.extract_calls, con, cid)
    rewards = timed("rewards", silver.extract_rewards, con, cid)
    messages = timed("messages", silver.extract_messages, con, cid)
    pieces.append({"llm_calls": calls, "rewards": rewards, "messages": messages})
timed("write", silver.write_silver, wh, cid, pieces)
tokens = sum(int(p["llm_calls"].column("prompt_len").to_numpy().sum()) for p in pieces)
tokens += sum(int(p["llm_calls"].column("response_len").to_numpy().sum()) for p in pieces)
attrs = sum(b.column("attributes").nbytes for b in batches)
spans = sum(b.num_rows for b in batches)
print(json.dumps({"cpu": cpu, "tokens": tokens, "attr_mib": attrs / 2**20, "spans": spans}))
"""


COLLECT_CHILD = """
import json, sys, time
from tracebank.collect import collect
from tracebank.warehouse.location import Warehouse
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


def _collect_rows(size: int, root: Path, full: tuple[int, Path] | None) -> list[str]:
    """Fill a fresh store with the warehouse's rollouts, then time `collect` in a fresh process:
    into an empty warehouse and, when ``full`` is given, into a copy of that (bigger) warehouse."""
    import asyncio
    import tempfile

    from tests.fixtures.store_server import agl_store_server

    rows = []
    with (
        tempfile.TemporaryDirectory(prefix="tb-scale-collect-") as tmp,
        agl_store_server(Path(tmp)) as (url, _),
    ):
        t0 = time.perf_counter()
        spans = asyncio.run(_fill_store(url, root))
        fill_s = time.perf_counter() - t0
        targets = [("an empty warehouse", Path(tmp) / "wh")]
        if full is not None:
            held, full_root = full
            copy = Path(tmp) / "full"
            shutil.copytree(full_root, copy, ignore=shutil.ignore_patterns("datasets", "BUILT.json"))
            targets.append((f"a warehouse already holding {held} M tokens", copy))
        for into, target in targets:
            r = _child(COLLECT_CHILD, url, str(target))
            if r["spans"] != spans:
                raise AssertionError(f"collect got {r['spans']} spans of {spans}")
            rows.append(
                f"| {size} M | collect into {into} | {r['s']:.1f} | {r['cpu_s']:.1f} | "
                f"{spans / r['s']:,.0f} spans/s | {r['peak']:.0f} MiB ({r['base']:.0f}) | "
                f"{spans:,} spans; store filled in {fill_s:.0f} s |"
            )
    return rows


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


def _sweep(root: Path) -> None:
    """Remove what the cold run's silver rebuild left behind (the silver files it replaced), so
    the cached warehouse does not grow by a silver cache each run."""
    from tracebank.warehouse.backends import open_warehouse
    from tracebank.warehouse.gc import gc

    gc(open_warehouse(str(root)), min_age_s=0)


def _child(script: str, *args: str, env: dict[str, str] | None = None) -> dict:
    """Run ``script`` in a fresh Python process; the JSON object its last line prints."""
    out = subprocess.run(
        [sys.executable, "-c", script, *args],
        cwd=ROOT,
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", **(env or {})},
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
        "Cold rebuilds every silver cache from the bronze spans (in worker processes, one per "
        "core, when there are several collections: their CPU and peak RSS are in the notes); warm "
        "reads them. The Ray engine "
        "ran on a local cluster of a head and a worker node (1 CPU each) on this same 2-core "
        "machine. It pays for start-up of the Ray Data jobs, spilling tokens per collection, "
        "copying each piece's rows out on the driver for the content hash before the workers "
        "write them with it, and shipping pieces to workers; like the local engine, it encodes "
        "two files at once (the local engine: a file per core, see docs/ARCHITECTURE.md). "
        "Its peak RSS is the driver's (ray.init adds "
        "Ray's core worker to the process); the workers' is not measured here.",
        "",
        f"Machine: {_machine()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; load average "
        f"(1, 5, 15 min) at the start: {_load()}.",
        "",
        "| tokens | run | seconds | CPU s (this process) | tokens/s | peak RSS | notes |",
        "|---:|---|---:|---:|---:|---:|---|",
    ]
    summary: list[tuple[int, float, float, float]] = []
    rates: list[tuple[int, float, float, float]] = []
    collect_rows = []
    with ray_cluster() as cluster:
        for size in SIZES:
            root, info = _warehouse(size)
            shutil.rmtree(root / "datasets", ignore_errors=True)  # versions of earlier runs
            cold = _child(CHILD, str(root), "local", "", "cold")
            warm = _child(CHILD, str(root), "local", "", "warm")
            ceiling = _child(CEILING_CHILD, str(root))
            if ceiling["tokens"] != warm["tokens"]:
                raise AssertionError(f"{size} M tokens: the ceiling wrote {ceiling['tokens']} tokens")
            ray_run = _child(CHILD, str(root), "ray", cluster.address, "warm", env=cluster.env)
            hashes = {cold["hash"], warm["hash"], ray_run["hash"]}
            if len(hashes) != 1:
                raise AssertionError(f"{size} M tokens: engines or runs disagree on the content hash")
            note = (
                f"{info['rollouts']:,} rollouts, {info['calls']:,} calls, "
                f"{info['collections']} collection(s), "
                f"{info['bronze_mib']:.0f} MiB bronze (generated in {info['generate_s']:.0f} s)"
            )
            if cold["workers_cpu_s"]:
                note += (
                    f"; silver built in worker processes: {cold['workers_cpu_s']:.1f} CPU s, "
                    f"the largest's peak {cold['workers_peak']:.0f} MiB"
                )
            lines += [
                _row("transform, cold", size, cold, note),
                _row(
                    "transform, warm",
                    size,
                    warm,
                    f"{warm['rows']:,} rows; {ceiling['s'] / warm['s']:.2f} of the ceiling",
                ),
                _row(
                    "ceiling: pyarrow read + write of the same rows",
                    size,
                    ceiling,
                    "one thread, no selection",
                ),
                _row(
                    "transform, warm, --engine ray", size, ray_run, "driver only (Ray's core worker included)"
                ),
            ]
            summary.append((size, cold["peak"], warm["peak"], ray_run["peak"]))
            rates.append(
                (size, warm["tokens"] / warm["s"], cold["tokens"] / cold["s"], ceiling["s"] / warm["s"])
            )
            shutil.rmtree(root / "datasets", ignore_errors=True)  # the cache keeps inputs only
            _sweep(root)
    collect_sizes = [s for s in SIZES if s <= COLLECT_MAX]
    for size in collect_sizes:
        # The largest store is also collected into the largest warehouse: collect's memory
        # must not grow with what the warehouse already holds.
        full = (
            (SIZES[-1], _warehouse(SIZES[-1])[0]) if size == collect_sizes[-1] and SIZES[-1] > size else None
        )
        collect_rows += _collect_rows(size, _warehouse(size)[0], full)
    if len(summary) > 1:
        (s0, c0, w0, r0), (s1, c1, w1, r1) = summary[0], summary[-1]
        lines += [
            "",
            f"From {s0} M to {s1} M tokens ({s1 / s0:.0f}x the data) peak RSS goes from {c0:.0f} to "
            f"{c1:.0f} MiB cold ({(c1 / c0 - 1) * 100:+.0f}%) and from {w0:.0f} to {w1:.0f} MiB warm "
            f"({(w1 / w0 - 1) * 100:+.0f}%); the goal is within 25%. The Ray driver goes from {r0:.0f} "
            f"to {r1:.0f} MiB ({(r1 / r0 - 1) * 100:+.0f}%): the driver copies each piece's rows "
            "out for the content hash, and holds the jobs (rows and token indices) of 16 pieces at a time.",
        ]
    lines += _linearity(rates)
    lines += _cold_parts(_warehouse(SIZES[-1])[0])
    if collect_rows:
        lines += [
            "",
            "`collect` from a real `agl store` holding the same rollouts (filled through its client; "
            "fresh process; with its silver step, as `tracebank collect` runs). The "
            "store keeps every span in memory (about 25x their Parquet size), so stores above "
            f"{COLLECT_MAX} M tokens are not filled; instead the largest store is also collected "
            "into a copy of the largest warehouse (what could make collect grow with the warehouse):",
            "",
            "| tokens | run | seconds | CPU s | rate | peak RSS | notes |",
            "|---:|---|---:|---:|---:|---:|---|",
            *collect_rows,
        ]
    lines += ["", f"Load average (1, 5, 15 min) when this section ended: {_load()}."]
    return "\n".join(lines) + "\n"


def _cold_parts(root: Path) -> list[str]:
    """Where one collection's silver build (a cold transform's first step) spends its CPU."""
    cid = sorted(p.name for p in (root / "collections").iterdir() if p.is_dir())[0]
    r = _child(COLD_PARTS_CHILD, str(root), cid)
    c = r["cpu"]
    # calls_all is the whole call extraction: its query (JSON extraction, as calls_json), the
    # prompts' parse (prompt_ids), then the responses' and choices' ids.
    prompt_ids = c["prompt_ids"]
    rest_calls = max(c["calls_all"] - c["calls_json"] - prompt_ids, 0.0)
    parts = [
        ("reading the bronze span files (Parquet, zstd)", c["read"] + c["register"]),
        ("JSON: extracting the call spans' attributes (DuckDB)", c["calls_json"]),
        ("token text -> int lists: prompts (what each adds to its rollout's previous one)", prompt_ids),
        ("token text -> int lists: responses, choices (Arrow, polars regex)", rest_calls),
        ("JSON: chat messages and rewards (DuckDB, Python)", c["messages"] + c["rewards"]),
        ("writing the silver Parquet (encode, hash)", c["write"]),
    ]
    total = sum(v for _, v in parts)
    rows = [f"| {name} | {v:.2f} | {100 * v / total:.0f}% |" for name, v in parts]
    return [
        "",
        f"Where a cold transform goes: the silver build of one collection ({r['spans']:,} spans, "
        f"{r['attr_mib']:.0f} MiB of attribute text, {r['tokens'] / 1e6:.1f} M tokens), step by step, "
        f"in one process: {total:.1f} CPU s, {r['tokens'] / total / 1e6:.1f} M tokens per CPU second.",
        "",
        "| step | CPU s | share |",
        "|---|---:|---:|",
        *rows,
    ]


def _linearity(rates: list[tuple[int, float, float, float]]) -> list[str]:
    """Tokens/s of the largest size against 200 M (or the next smaller size), and the ceiling."""
    if len(rates) < 2:
        return []
    big = rates[-1]
    ref = next((r for r in rates if r[0] == 200), rates[-2])
    fractions = ", ".join(f"{size} M {frac:.2f}" for size, _, _, frac in rates)
    return [
        "",
        f"Linearity: warm tokens/s at {big[0]} M is {big[1] / ref[1]:.2f}x that at {ref[0]} M "
        f"(goal: within 10%), cold {big[2] / ref[2]:.2f}x. Warm transform as a fraction of the "
        f"ceiling's tokens/s: {fractions} (goal >= 0.5).",
    ]


def _machine() -> str:
    """Cores and CPU model (the bench runs on shared machines: read it beside the load)."""
    model = "unknown CPU"
    for line in Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []:
        if line.startswith("model name"):
            model = line.split(":", 1)[1].strip()
            break
    return f"{os.cpu_count()} cores, {model}"


def _load() -> str:
    return ", ".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    print(run())
