"""What a warehouse on object storage costs against the same warehouse in a folder.

A synthetic warehouse of ``TRACEBANK_S3_BENCH_TOKENS`` million tokens (default 20; long
multi-turn trajectories from ``bench.scale_data``) is built in a folder, its silver caches
included, and copied as it is onto a real S3 server (moto's, on loopback: a Python server,
so every request costs more than on S3 itself). Then, each in a fresh process:

- ``sql`` (a count over ``llm_calls``) and a warm ``transform`` on the folder;
- the same on ``s3://`` from an empty mirror (a new machine: every committed file it
  reads is downloaded and checked against its manifest's sha256 first);
- the same again with the mirror filled (only listings and the new version's upload).
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TOKENS_M = int(os.environ.get("TRACEBANK_S3_BENCH_TOKENS", "20"))


def _run(location: str, env: dict[str, str], *args: str) -> float:
    t0 = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-m", "tracebank.cli.main", "--warehouse", location, *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    if done.returncode != 0:
        raise RuntimeError(f"tracebank {' '.join(args)} on {location}: {done.stderr.strip()}")
    return time.perf_counter() - t0


def _upload(folder: Path, bucket: str, endpoint: str) -> int:
    """``aws s3 sync`` of the folder: what moving an existing warehouse onto a store takes."""
    import boto3

    s3 = boto3.client("s3", endpoint_url=endpoint)
    total = 0
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        key = f"wh/{path.relative_to(folder).as_posix()}"
        s3.upload_file(str(path), bucket, key)
        total += path.stat().st_size
    return total


def run() -> str:
    from tracebank.collect import build_silver
    from tracebank.warehouse.location import Warehouse

    from bench.scale_data import build_warehouse
    from tests.fixtures.s3_server import client_env, make_bucket, s3_server

    with tempfile.TemporaryDirectory() as tmp, s3_server() as endpoint:
        folder = Path(tmp) / "wh"
        built = build_warehouse(folder, TOKENS_M * 1_000_000)
        build_silver(Warehouse(folder))
        make_bucket(endpoint, "bench")
        os.environ.update(client_env(endpoint))  # this process is a client of the store too
        t0 = time.perf_counter()
        size = _upload(folder, "bench", endpoint)
        upload_s = time.perf_counter() - t0
        env = {**os.environ, **client_env(endpoint), "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
        env["TRACEBANK_CACHE_DIR"] = str(Path(tmp) / "cache")
        sql = ("sql", "SELECT count(*), sum(prompt_len) FROM llm_calls")
        transform = ("transform", "--dataset", "sft", "--force")
        rows = []
        for label, location in (
            ("folder", str(folder)),
            ("s3, empty mirror", "s3://bench/wh"),
            ("s3, mirror filled", "s3://bench/wh"),
        ):
            rows.append((label, _run(location, env, *sql), _run(location, env, *transform)))
        mirror = sum(p.stat().st_size for p in (Path(tmp) / "cache").rglob("*") if p.is_file())
    lines = [
        "## s3: a warehouse on object storage against a folder",
        "",
        f"{built.tokens / 1e6:.0f} M tokens, {built.rollouts:,} rollouts, {built.calls:,} LLM calls, "
        f"{size / 2**20:.0f} MiB of Parquet (bronze and silver), on moto's S3 server on loopback. "
        f"Copying the folder onto the store (`aws s3 sync`, one file at a time): {upload_s:.1f} s. "
        "Each command in a fresh process; a transform writes a new version (`--force`). "
        "The empty mirror is a new machine: it downloads and checks every file it reads.",
        "",
        "| warehouse | `sql` count over llm_calls | warm `transform` |",
        "|---|---:|---:|",
        *[f"| {label} | {sql_s:.2f} s | {transform_s:.2f} s |" for label, sql_s, transform_s in rows],
        "",
        f"The mirror then held {mirror / 2**20:.0f} MiB: what that machine read, and the versions it wrote.",
    ]
    return "\n".join(lines) + "\n"
