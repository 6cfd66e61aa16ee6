"""collect against a real `agl store` filled with LLMProxy-shaped spans."""

from __future__ import annotations

import asyncio
import json
import random
import re
import time
from pathlib import Path

import pytest
from click.testing import CliRunner
from tracebank.collect import CollectConfig, collect
from tracebank.warehouse.bronze import span_dict_from_row
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql
from tracebank.warehouse.storage import Storage

from tests.cli_args import cli_args
from tests.collect.helpers import client, store_spans, stored_span_rows
from tests.fixtures.fill import add_attempt, add_rollout
from tests.fixtures.proxy_spans import SECRET_KEY, random_rollout_spans, reward_span
from tracebank.cli.main import cli

SUMMARY = re.compile(
    r"^collected c\d{8}T\d{6}Z-[0-9a-f]{6}: (\d+) new rollouts, (\d+) spans, (\d+) skipped, "
    r"(\d+) evicted in \d+\.\ds$"
)


class Filled:
    """What the module's store holds, by group."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.groups: dict[str, list[tuple[str, str]]] = {}
        self.first_attempt_of_retried = ""
        self.since = 0.0


async def _fill(url: str) -> Filled:
    rng = random.Random(7)
    out = Filled(url)
    c = client(url)

    def spans(n_calls: int, reward: float | None = 1.0):
        return lambda r, a: random_rollout_spans(r, a, rng, n_calls=n_calls, reward=reward)

    g = out.groups
    g["train_ok"] = [await add_rollout(c, spans(2)) for _ in range(5)]
    g["val_ok"] = [await add_rollout(c, spans(2), mode="val") for _ in range(2)]
    g["failed"] = [await add_rollout(c, spans(2), status="failed") for _ in range(2)]
    await asyncio.sleep(0.05)
    out.since = time.time()
    await asyncio.sleep(0.05)
    rid, aid1 = await add_rollout(c, spans(1, None), status="failed")
    aid2 = await add_attempt(c, rid, spans(2))
    g["retried"] = [(rid, aid2)]
    out.first_attempt_of_retried = aid1
    g["no_llm"] = [await add_rollout(c, lambda r, a: [reward_span(r, a, 1, 0.5, 1_700_000_000.0)])]
    await c.close()
    return out


@pytest.fixture(scope="module")
def filled(store_url) -> Filled:
    return asyncio.run(_fill(store_url))


def _ids(filled: Filled, *groups: str) -> set[str]:
    return {rid for g in groups for rid, _ in filled.groups[g]}


def _collected_rollouts(wh: Warehouse) -> set[str]:
    return {r["rollout_id"] for r in run_sql(wh, "SELECT rollout_id FROM attempts").to_pylist()}


DEFAULT_GROUPS = ("train_ok", "val_ok", "retried", "no_llm")
DEFAULT_SPANS = 5 * 7 + 2 * 7 + 7 + 1


def test_default_collects_latest_attempt_of_succeeded_rollouts(filled, wh):
    result = collect(filled.url, wh, CollectConfig())
    assert result.committed
    assert _collected_rollouts(wh) == _ids(filled, *DEFAULT_GROUPS)
    assert result.counts["spans"] == DEFAULT_SPANS
    assert run_sql(wh, "SELECT count(*) n, count(DISTINCT span_id) d FROM spans").to_pylist() == [
        {"n": DEFAULT_SPANS, "d": DEFAULT_SPANS}
    ]
    attempts = run_sql(wh, "SELECT attempt_id FROM attempts").column("attempt_id").to_pylist()
    assert filled.first_attempt_of_retried not in attempts
    assert filled.groups["retried"][0][1] in attempts


def test_every_span_round_trips_exactly_with_no_redact(filled, wh):
    collect(filled.url, wh, CollectConfig(redact=False, attempts="all", statuses=("succeeded", "failed")))
    rows = stored_span_rows(wh)
    from agentlightning import Span

    archived = {r["span_id"]: Span.model_validate(span_dict_from_row(r)) for r in rows}
    expected = {}
    for a in run_sql(wh, "SELECT rollout_id, attempt_id FROM attempts").to_pylist():
        for span in store_spans(filled.url, a["rollout_id"], a["attempt_id"]):
            expected[span.span_id] = span
    assert len(expected) == len(rows) > DEFAULT_SPANS
    assert archived == expected
    assert (
        run_sql(wh, f"SELECT count(*) n FROM spans WHERE attributes LIKE '%{SECRET_KEY}%'").to_pylist()[0][
            "n"
        ]
        > 0
    )


def test_secrets_are_redacted_and_token_ids_kept(filled, wh):
    result = collect(filled.url, wh, CollectConfig())
    assert result.redaction["enabled"] and result.redaction["values_redacted"] >= 2 * 8
    manifest = Storage(wh).collections()[0][1].to_json()
    assert manifest["redaction"] == result.redaction
    for path in wh.root.rglob("*"):
        if path.is_file():
            assert SECRET_KEY.encode() not in path.read_bytes(), path
    assert run_sql(
        wh, f"SELECT count(*) n FROM spans WHERE attributes LIKE '%{SECRET_KEY[3:20]}%'"
    ).to_pylist() == [{"n": 0}]
    rows = run_sql(wh, "SELECT * FROM spans WHERE name = 'litellm_request'").to_pylist()
    stored = {
        s.span_id: s for rid, aid in filled.groups["train_ok"][:1] for s in store_spans(filled.url, rid, aid)
    }
    checked = 0
    for row in rows:
        if row["span_id"] not in stored:
            continue
        got, want = span_dict_from_row(row)["attributes"], stored[row["span_id"]].attributes
        assert got["llm.api_key"] == "[REDACTED]"
        header = got["metadata.requester_metadata"]
        assert "'authorization': '[REDACTED]'" in header and "'x-rollout-id'" in header
        assert SECRET_KEY not in header
        changed = {k for k in want if got[k] != want[k]}
        assert changed == {"llm.api_key", "metadata.requester_metadata"}
        checked += 1
    assert checked == 2
    raw = run_sql(wh, "SELECT attributes FROM spans WHERE name = 'raw_gen_ai_request' LIMIT 1").to_pylist()[
        0
    ]["attributes"]
    assert json.loads(raw)["llm.hosted_vllm.prompt_token_ids"].startswith("[")


def test_second_collect_adds_nothing(filled, wh):
    first = collect(filled.url, wh, CollectConfig())
    second = collect(filled.url, wh, CollectConfig())
    assert first.committed and not second.committed
    assert second.counts["skipped"] == len(_ids(filled, *DEFAULT_GROUPS))
    assert second.counts["spans"] == 0
    assert len(Storage(wh).collections()) == 1
    assert run_sql(wh, "SELECT count(*) n FROM spans").to_pylist() == [{"n": DEFAULT_SPANS}]


@pytest.mark.parametrize(
    ("config", "groups"),
    [
        (CollectConfig(mode="val"), ("val_ok",)),
        (CollectConfig(statuses=("failed",)), ("failed",)),
        (
            CollectConfig(statuses=("failed", "succeeded"), mode="train"),
            ("train_ok", "failed", "retried", "no_llm"),
        ),
    ],
)
def test_status_and_mode_filters(filled, wh, config, groups):
    collect(filled.url, wh, config)
    assert _collected_rollouts(wh) == _ids(filled, *groups)


def test_rollout_id_and_since_filters(filled, wh):
    picked = sorted(_ids(filled, "train_ok"))[:2]
    collect(filled.url, wh, CollectConfig(rollout_ids=tuple(picked)))
    assert _collected_rollouts(wh) == set(picked)
    wh2 = Warehouse(wh.root.parent / "wh2").init()
    collect(filled.url, wh2, CollectConfig(since=filled.since))
    assert _collected_rollouts(wh2) == _ids(filled, "retried", "no_llm")


def test_incremental_after_a_narrower_collect(filled, wh):
    collect(filled.url, wh, CollectConfig(mode="val", tag="round-1"))
    second = collect(filled.url, wh, CollectConfig(tag="round-2"))
    assert second.counts["skipped"] == 2
    assert second.counts["rollouts"] == len(_ids(filled, *DEFAULT_GROUPS)) - 2
    tags = run_sql(wh, "SELECT tag FROM collections ORDER BY collection_id").column("tag").to_pylist()
    assert tags == ["round-1", "round-2"]


def test_attempts_all_collects_every_attempt(filled, wh):
    rid = filled.groups["retried"][0][0]
    result = collect(filled.url, wh, CollectConfig(attempts="all", rollout_ids=(rid,)))
    attempts = set(run_sql(wh, "SELECT attempt_id FROM attempts").column("attempt_id").to_pylist())
    assert attempts == {filled.first_attempt_of_retried, filled.groups["retried"][0][1]}
    assert result.counts["spans"] == 3 + 7
    # the latest attempt is already there, so a latest-only run on top adds nothing
    assert not collect(filled.url, wh, CollectConfig(rollout_ids=(filled.groups["retried"][0][0],))).committed


def test_manifest_records_the_run(filled, wh):
    result = collect(filled.url, wh, CollectConfig(tag="nightly", mode="train"))
    folder, record = Storage(wh).collections()[0]
    manifest = record.to_json()
    assert folder == result.folder and manifest["collection_id"] == result.collection_id
    assert manifest["store_url"] == filled.url and manifest["tag"] == "nightly"
    assert manifest["filters"]["mode"] == "train" and manifest["filters"]["statuses"] == ["succeeded"]
    assert manifest["counts"] == result.counts
    assert set(manifest["seconds"]) >= {"connect", "fetch", "write", "total"}
    assert manifest["versions"]["agentlightning"].startswith("0.3")
    assert manifest["versions"]["tracebank"]
    assert {e["table"] for e in manifest["files"]} == {"rollouts", "attempts", "spans"}
    assert all(not p.name.count(".tmp-") for p in folder.iterdir())


def test_succeeded_rollouts_without_llm_spans_are_warned_about(filled, wh):
    result = collect(filled.url, wh, CollectConfig())
    assert result.counts["no_llm_spans"] == 1
    assert any("no LLM-call spans" in w and "4318" in w and "1.44" in w for w in result.warnings)
    only_good = collect(filled.url, Warehouse(wh.root.parent / "w2"), CollectConfig(mode="val"))
    assert only_good.warnings == [] and only_good.counts["no_llm_spans"] == 0


def test_progress_reaches_the_total(filled, wh):
    seen: list[tuple[int, int]] = []
    collect(filled.url, wh, CollectConfig(), on_event=lambda e: seen.append((e.done, e.total)))
    n = len(_ids(filled, *DEFAULT_GROUPS))
    assert seen[-1] == (n, n)


def test_cli_summary_lines(filled, wh, warehouse_position):
    runner = CliRunner()
    args = cli_args(wh.root, warehouse_position, "collect", "--store", filled.url)
    first = runner.invoke(cli, args)
    assert first.exit_code == 0, first.output
    summary, silver = first.stdout.splitlines()
    assert SUMMARY.match(summary).groups() == ("9", str(DEFAULT_SPANS), "0", "0")
    assert re.fullmatch(r"silver: \d+ llm calls \(\d+ with token ids\), \d+ rewards, \d+ messages", silver)
    assert run_sql(wh, "SELECT count(*) AS n FROM llm_calls").to_pylist()[0]["n"] > 0
    assert first.stderr.startswith("Warning: 1 of 9 succeeded rollouts have no LLM-call spans")
    second = runner.invoke(cli, args)
    assert second.exit_code == 0
    assert re.fullmatch(
        r"nothing new: 0 new rollouts, 0 spans, 9 skipped, 0 evicted in \d+\.\ds\n", second.stdout
    )


def test_cli_filters_reach_the_library(filled, wh, warehouse_position):
    runner = CliRunner()
    out = runner.invoke(
        cli,
        cli_args(
            wh.root,
            warehouse_position,
            "collect",
            "--store",
            filled.url + "/",
            "--status",
            "failed",
            "--status",
            "succeeded",
            "--mode",
            "val",
            "--since",
            "2000-01-01",
            "--tag",
            "t1",
            "--no-redact",
            "--concurrency",
            "3",
        ),
    )
    assert out.exit_code == 0, out.output
    assert SUMMARY.match(out.stdout.splitlines()[0]).groups()[:2] == ("2", "14")
    manifest = Storage(wh).collections()[0][1].to_json()
    assert manifest["redaction"] == {"enabled": False, "values_redacted": 0}
    assert manifest["concurrency"] == 3 and manifest["filters"]["since"] == 946684800.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (
            ["--since", "yesterday"],
            "Error: invalid --since 'yesterday' (use epoch seconds or an ISO date/time",
        ),
        (["--status", "done"], "Error: invalid --status done (use one or more of queuing"),
        (["--mode", "prod"], "Error: invalid --mode 'prod' (use one of train, val, test)"),
        (["--attempts", "first"], "Error: invalid --attempts 'first' (use latest or all)"),
        (["--concurrency", "0"], "Error: concurrency must be at least 1"),
    ],
)
def test_cli_bad_flags_are_one_line(wh, args, message, warehouse_position):
    out = CliRunner().invoke(
        cli, cli_args(wh.root, warehouse_position, "collect", "--store", "http://127.0.0.1:1", *args)
    )
    assert out.exit_code == 2
    assert out.stderr.startswith(message) and out.stderr.count("\n") == 1


@pytest.mark.parametrize("url", ["127.0.0.1:4747", "ftp://host:1", "http://", "http://h:99999"])
def test_cli_bad_url_is_one_line(wh, url, warehouse_position):
    out = CliRunner().invoke(cli, cli_args(wh.root, warehouse_position, "collect", "--store", url))
    assert out.exit_code == 2
    assert out.stderr.startswith("Error: invalid ") and url in out.stderr
    assert out.stderr.count("\n") == 1


def test_truncated_parquet_is_named_by_sql_and_by_collect(filled, wh, warehouse_position):
    collect(filled.url, wh, CollectConfig(mode="val"))
    folder = Storage(wh).collections()[0][0]
    spans_file = folder / "spans-0000.parquet"
    spans_file.write_bytes(spans_file.read_bytes()[:-100])
    out = CliRunner().invoke(cli, cli_args(wh.root, warehouse_position, "sql", "SELECT count(*) FROM spans"))
    assert out.exit_code != 0
    assert out.stderr.startswith("Error: ") and str(spans_file) in out.stderr
    assert out.stderr.count("\n") == 1
    out = CliRunner().invoke(cli, cli_args(wh.root, warehouse_position, "collect", "--store", filled.url))
    assert out.exit_code != 0 and str(spans_file) in out.stderr and out.stderr.count("\n") == 1


def test_damaged_attempts_file_is_named(filled, wh, warehouse_position):
    collect(filled.url, wh, CollectConfig(mode="val"))
    folder = Storage(wh).collections()[0][0]
    path = folder / "attempts-0000.parquet"
    size = path.stat().st_size
    path.write_bytes(b"\0" * size)  # same size, so only reading it finds the damage
    out = CliRunner().invoke(cli, cli_args(wh.root, warehouse_position, "collect", "--store", filled.url))
    assert out.exit_code == 1
    assert out.stderr.startswith(f"Error: unreadable Parquet file {path}")


def test_rows_per_file_splits_spans(filled, wh):
    result = collect(filled.url, wh, CollectConfig(rows_per_file=10))
    files = [e for e in Storage(wh).collections()[0][1].to_json()["files"] if e["table"] == "spans"]
    # a file closes once it holds 10 rows or more; one attempt's spans (at most 7) never split
    assert all(10 <= e["rows"] < 10 + 7 for e in files[:-1]) and len(files) >= DEFAULT_SPANS // 16
    assert sum(e["rows"] for e in files) == result.counts["spans"] == DEFAULT_SPANS
    assert run_sql(wh, "SELECT count(DISTINCT span_id) d FROM spans").to_pylist() == [{"d": DEFAULT_SPANS}]


def test_collect_creates_the_warehouse(filled, tmp_path: Path):
    wh = Warehouse(tmp_path / "new")
    assert collect(filled.url, wh, CollectConfig(mode="val")).committed
    assert wh.exists()


def test_collect_leaves_the_garbage_collector_as_it_was(filled, wh, tmp_path):
    import gc

    assert gc.get_freeze_count() == 0
    assert collect(filled.url, wh, CollectConfig()).committed
    assert gc.get_freeze_count() == 0  # what the run froze is unfrozen
    kept = [object() for _ in range(10)]  # a caller that froze objects itself keeps them frozen
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        assert collect(filled.url, Warehouse(tmp_path / "wh2"), CollectConfig()).committed
        assert gc.get_freeze_count() > frozen // 2  # (objects freed since leave the count)
    finally:
        gc.unfreeze()
    assert kept


def _silver_contents(wh: Warehouse) -> dict[str, list[dict]]:
    """Each silver table's rows in cache order, the (run-specific) collection id checked and dropped."""
    from tracebank.warehouse.schemas import SILVER
    from tracebank.warehouse.storage import Storage

    (folder, _), *others = Storage(wh).collections()
    assert not others
    storage, out = Storage(wh), {}
    for table in SILVER:
        rows = storage.silver_table(folder.name, table).to_pylist()
        assert {r.pop("collection_id") for r in rows} <= {folder.name}
        out[table] = rows
    return out


def test_python_callers_and_the_cli_leave_the_same_silver(filled, tmp_path, warehouse_position):
    # One span query at a time: with more, spans land in the order the store answers, and
    # span_index (a span's place in its collection) would differ between any two collects.
    by_python = Warehouse(tmp_path / "python")
    result = collect(filled.url, by_python, CollectConfig(concurrency=1))
    assert result.silver is not None and result.silver.collection_id == result.collection_id
    by_cli = Warehouse(tmp_path / "cli")
    args = cli_args(by_cli.root, warehouse_position, "collect", "--store", filled.url, "--concurrency", "1")
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    python_tables, cli_tables = _silver_contents(by_python), _silver_contents(by_cli)
    assert python_tables == cli_tables
    assert all(python_tables.values())  # every table has rows, so the comparison compares something


def test_no_silver_skips_it_in_the_library_and_the_cli(filled, tmp_path, warehouse_position):
    by_python = Warehouse(tmp_path / "python")
    result = collect(filled.url, by_python, CollectConfig(silver=False))
    assert result.committed and result.silver is None and Storage(by_python).silver_caches() == []
    by_cli = Warehouse(tmp_path / "cli")
    args = cli_args(by_cli.root, warehouse_position, "collect", "--store", filled.url, "--no-silver")
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    assert SUMMARY.match(out.stdout) and Storage(by_cli).silver_caches() == []
