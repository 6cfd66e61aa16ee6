"""A warehouse on S3 (a real moto server on loopback) works exactly as a folder (issue 13).

collect -> transform -> sql -> train -> runs through the CLI, once into a folder and once into
``s3://``, from a real `agl store`: the same rows, the same version hash, the same losses, and a
second machine (another mirror) sees everything the first committed. Writers killed in the
middle of a commit leave nothing visible, and writers on two machines never collide.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import subprocess
import sys

import pytest
from click.testing import CliRunner

from tests.collect.helpers import ROOT, client
from tests.fixtures.fill import add_rollout
from tests.fixtures.proxy_spans import random_rollout_spans
from tracebank.cli.main import cli

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

ROLLOUTS = 12


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from tracebank.train.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model"), seed=0, initializer_range=0.2)


def _fill(url: str, n: int, seed: int, vocab: int = 300) -> None:
    rng = random.Random(seed)

    async def run() -> None:
        c = client(url)
        try:
            for _ in range(n):
                spans = lambda r, a: random_rollout_spans(r, a, rng, vocab=vocab, reward=rng.random())  # noqa: E731
                await add_rollout(c, spans)
        finally:
            await c.close()

    asyncio.run(run())


@pytest.fixture
def filled_store(fresh_store_url):
    _fill(fresh_store_url, ROLLOUTS, seed=1)
    return fresh_store_url


@pytest.fixture
def machine(tmp_path, monkeypatch):
    """Switch "machines": each has its own mirror folder (tracebank's cache folder)."""

    def use(name: str) -> None:
        monkeypatch.setenv("TRACEBANK_CACHE_DIR", str(tmp_path / f"cache-{name}"))

    use("a")
    return use


def _tb(location: str, *args: str) -> str:
    out = CliRunner().invoke(cli, ["--warehouse", location, *args])
    assert out.exit_code == 0, f"{args}: {out.output}"
    return out.stdout


def _objects(bucket: str) -> list[str]:
    import boto3

    pages = boto3.client("s3").get_paginator("list_objects_v2").paginate(Bucket=bucket)
    return sorted(o["Key"] for page in pages for o in page.get("Contents", []))


def _split_file_names_its_hash(bucket: str, version: str) -> None:
    """The committed train file on the store carries its version's content hash (issue 11)."""
    import io

    import boto3
    import pyarrow.parquet as pq

    s3 = boto3.client("s3")
    manifest = json.loads(s3.get_object(Bucket=bucket, Key=f"{version}/manifest.json")["Body"].read())
    body = s3.get_object(Bucket=bucket, Key=f"{version}/train.parquet")["Body"].read()
    meta = pq.read_metadata(io.BytesIO(body)).metadata
    assert meta[b"tracebank.content_hash"].decode() == manifest["content_hash"]


def _pipeline(location: str, store: str, model, out_dir) -> dict[str, str]:
    """Every stage through the CLI; what each printed (timestamps and ids stripped)."""
    seen = {"collect": _tb(location, "collect", "--store", store)}
    seen["transform"] = _tb(location, "transform", "--dataset", "sft", "--top-fraction", "0.5", "--seed", "0")
    seen["rows"] = _tb(
        location,
        "sql",
        "SELECT rollout_id, reward, input_ids, labels FROM dataset_rows ORDER BY ALL",
        "--format",
        "json",
    )
    seen["counts"] = _tb(
        location,
        "sql",
        "SELECT (SELECT count(*) FROM attempts) attempts, (SELECT count(*) FROM spans) spans, "
        "(SELECT count(*) FROM llm_calls) calls, (SELECT count(*) FROM rollout_rewards) rewards",
        "--format",
        "json",
    )
    _tb(
        location,
        *("train", "--dataset", "sft", "--base-model", str(model), "--output", str(out_dir)),
        *("--epochs", "2", "--batch-size", "2", "--lr", "1e-2", "--save", "lora"),
    )
    runs = json.loads(_tb(location, "runs", "list", "--format", "json"))
    seen["run"] = json.dumps([(r["status"], r["dataset"], r["steps"], r["train_loss"]) for r in runs])
    seen["losses"] = _tb(
        location,
        "sql",
        "SELECT step, round(loss, 5) loss FROM run_metrics WHERE loss IS NOT NULL ORDER BY step",
    )
    return seen


def test_collect_transform_sql_train_on_s3_exactly_as_on_a_folder(
    filled_store, s3_bucket, tiny_model, tmp_path, machine
):
    folder = _pipeline(str(tmp_path / "wh"), filled_store, tiny_model, tmp_path / "model-local")
    s3 = f"s3://{s3_bucket}/team/wh"
    remote = _pipeline(s3, filled_store, tiny_model, tmp_path / "model-s3")

    for key in ("rows", "counts", "run", "losses"):
        assert remote[key] == folder[key], key
    # The hash also covers the source collections' ids, which two collects name differently.
    assert remote["transform"].split(", hash")[0] == folder["transform"].split(", hash")[0]
    assert json.loads(remote["counts"])[0]["attempts"] == ROLLOUTS
    assert remote["transform"].startswith("wrote sft@v1: ")
    keys = _objects(s3_bucket)
    assert "team/wh/FORMAT.json" in keys and "team/wh/datasets/sft/v0001/manifest.json" in keys
    assert any(k.startswith("team/wh/runs/") and k.endswith("/run.json") for k in keys)
    _split_file_names_its_hash(s3_bucket, "team/wh/datasets/sft/v0001")

    machine("b")  # another machine: an empty mirror, the same store
    assert _tb(s3, "sql", "SELECT count(*) FROM dataset_rows") == _tb(
        str(tmp_path / "wh"), "sql", "SELECT count(*) FROM dataset_rows"
    )
    again = _tb(s3, "transform", "--dataset", "sft", "--top-fraction", "0.5", "--seed", "0")
    assert again.startswith("identical to sft@v1")
    assert _tb(s3, "verify").startswith("verify: ") and "all intact" in _tb(s3, "verify")


def test_credentials_are_never_written_into_the_store(filled_store, s3_bucket, machine, monkeypatch):
    # moto accepts any key pair: distinctive ones can be looked for in every object.
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIATRACEBANKTESTKEY1")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "tracebank-test-secret-5c1f0e9d")
    s3 = f"s3://{s3_bucket}/wh"
    _tb(s3, "collect", "--store", filled_store)
    _tb(s3, "transform", "--dataset", "sft")
    import boto3

    s3c = boto3.client("s3")
    keys = _objects(s3_bucket)
    assert any(k.endswith(".parquet") for k in keys) and any(k.endswith("manifest.json") for k in keys)
    for key in keys:
        body = s3c.get_object(Bucket=s3_bucket, Key=key)["Body"].read()
        for secret in (
            "AKIATRACEBANKTESTKEY1",
            "tracebank-test-secret-5c1f0e9d",
            os.environ["AWS_ENDPOINT_URL_S3"],
        ):
            assert secret.encode() not in body, key


KILL_AT_MANIFEST = """
import os, signal, sys
from tracebank.warehouse import s3store
real = s3store.S3Store.create_exclusive
def create_exclusive(self, path, data):
    if path.endswith("/manifest.json"):
        os.kill(os.getpid(), signal.SIGKILL)  # every data file is up; the manifest never gets there
    return real(self, path, data)
s3store.S3Store.create_exclusive = create_exclusive
from tracebank.cli.main import main
sys.argv = ["tracebank", *sys.argv[1:]]
main()
"""


def _killed(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True"}
    return subprocess.run(
        [sys.executable, "-c", KILL_AT_MANIFEST, *args], capture_output=True, text=True, env=env, cwd=ROOT
    )


def test_writers_killed_mid_commit_leave_nothing_visible(filled_store, s3_bucket, machine):
    s3 = f"s3://{s3_bucket}/wh"
    collect = _killed("--warehouse", s3, "collect", "--store", filled_store)
    assert collect.returncode == -signal.SIGKILL
    assert any(k.endswith(".parquet") for k in _objects(s3_bucket))  # data went up...
    machine("b")
    assert _tb(s3, "sql", "SELECT count(*) n FROM spans", "--format", "csv") == "n\n0\n"  # ...unseen

    _tb(s3, "collect", "--store", filled_store)  # the rerun archives every attempt, once
    counts = "SELECT count(*) n, count(DISTINCT attempt_id) d FROM attempts"
    assert _tb(s3, "sql", counts, "--format", "csv") == f"n,d\n{ROLLOUTS},{ROLLOUTS}\n"

    transform = _killed("--warehouse", s3, "transform", "--dataset", "sft")
    assert transform.returncode == -signal.SIGKILL
    machine("c")
    assert _tb(s3, "datasets", "list", "--format", "csv") == "name,version,rows,tokens,created,hash\n"
    wrote = _tb(s3, "transform", "--dataset", "sft")
    assert wrote.startswith("wrote sft@v2: ")  # v1 stays taken by the dead writer's reservation

    before = set(_objects(s3_bucket))
    freed = _tb(s3, "gc", "--min-age", "0")
    gone = before - set(_objects(s3_bucket))
    assert gone and all(
        "/v0001/" in k or "/collections/" in k or "/silver/" in k or "claims" in k for k in gone
    )
    assert freed.splitlines()[-1].startswith("gc: freed "), freed
    assert "/.pulled" not in freed  # the mirror's bookkeeping is not litter
    assert _tb(s3, "sql", counts, "--format", "csv") == f"n,d\n{ROLLOUTS},{ROLLOUTS}\n"
    assert "all intact" in _tb(s3, "verify")


RACE = """
import sys
from tracebank.cli.main import main
sys.argv = ["tracebank", *sys.argv[1:]]
main()
"""


def _start(cache, *args: str) -> subprocess.Popen[str]:
    env = {**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "TRACEBANK_CACHE_DIR": str(cache)}
    return subprocess.Popen(
        [sys.executable, "-c", RACE, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=ROOT,
    )


def test_two_machines_collect_and_transform_at_once(filled_store, s3_bucket, tmp_path, machine):
    s3 = f"s3://{s3_bucket}/wh"
    collects = [
        _start(tmp_path / f"m{i}", "--warehouse", s3, "collect", "--store", filled_store) for i in (1, 2)
    ]
    for p in collects:
        _, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
    counts = "SELECT count(*) n, count(DISTINCT attempt_id) d FROM attempts"
    assert _tb(s3, "sql", counts, "--format", "csv") == f"n,d\n{ROLLOUTS},{ROLLOUTS}\n"

    transforms = [
        _start(tmp_path / f"m{i}", "--warehouse", s3, "transform", "--dataset", "sft", "--force")
        for i in (1, 2)
    ]
    wrote = sorted(p.communicate(timeout=300)[0].split(":")[0] for p in transforms)
    assert wrote == ["wrote sft@v1", "wrote sft@v2"]
    versions = json.loads(_tb(s3, "datasets", "list", "--format", "json"))
    assert [v["version"] for v in versions] == ["v1", "v2"]
    assert versions[0]["hash"] == versions[1]["hash"]
