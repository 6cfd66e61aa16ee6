"""`DatasetManifest.summary_lines`: what `tracebank datasets show` prints, exactly, for an SFT and a
preference version (built as tests/transform builds them)."""

from __future__ import annotations

from click.testing import CliRunner
from tracebank.transform import TransformConfig, transform
from tracebank.transform.config import PreferenceRules
from tracebank.warehouse.catalog import resolve_dataset
from tracebank.warehouse.record_text import created_text, short_hash

from tests.fixtures.preference import commit_03, plan
from tests.transform.oracle import scenario_warehouse
from tracebank.cli.main import cli


def _volatile(record, folder):
    """The lines that name this run's folder, time, installed tracebank and hashes."""
    return [
        f"{record.name}@v{record.version}  ({folder})",
        f"created      {created_text(record.created_at)}  tracebank {record.tracebank_version}",
        f"hash         {record.content_hash}",
    ]


def _file_line(entry) -> str:
    return (
        f"file         {entry.path}  {entry.split}  {entry.rows:,} rows  {entry.bytes:,} bytes  "
        f"sha256 {entry.sha256[:12]}"
    )


def _shown(wh, ref: str) -> tuple[list[str], list[str], object]:
    resolved, folder, record = resolve_dataset(wh, ref)
    cli_text = CliRunner().invoke(cli, ["-w", str(wh.root), "datasets", "show", ref]).output
    return record.summary_lines(resolved, folder), cli_text.splitlines(), (record, folder)


def test_an_sft_version_reads_line_by_line(tmp_path):
    wh = scenario_warehouse(tmp_path, seed=1, n_random=20)
    transform(wh, TransformConfig(name="ds", val_fraction=0.2, seed=4))
    lines, cli_lines, (record, folder) = _shown(wh, "ds@v1")
    train, validation = record.files
    assert lines == [
        *_volatile(record, folder),
        "rows         72  train 56  validation 16",
        "tokens       2,142 (359 trained), longest 103, max token id 499",
        "lengths      max 103  mean 29.75  min 9  p50 25  p90 52  p99 90.93",
        "reward       min 0  mean 0.4789  max 1",
        "calls        81 usable, 72 rewarded, 9 unrewarded, 2 duplicates",
        "rejected     empty_tokens 2",
        "dropped      too long 0, below min reward 0, dedup 0, per task 0, not selected 0",
        "params       merge=none  seed=4  select_by=triplet  top_fraction=1  val_fraction=0.2",
        f"source       c1  {record.sources[0]['content_hash'][:12]}",
        _file_line(train),
        _file_line(validation),
    ]
    assert (train.path, validation.path) == ("train.parquet", "validation.parquet")
    assert cli_lines == lines  # what the CLI prints is these lines


def test_a_preference_version_reads_line_by_line(wh):
    commit_03(wh, plan(seed=3))
    rules = PreferenceRules(pairing="all", min_margin=0.5, pairs_per_task=2, unit="trajectory")
    transform(wh, TransformConfig(name="prefs", kind="preference", preference=rules))
    lines, cli_lines, (record, folder) = _shown(wh, "prefs")
    (source,) = record.sources
    assert lines == [
        *_volatile(record, folder),
        "pairs        5 from 3 groups of 18 rollouts in 8 tasks",
        "left out     ties 2, below margin 0, over per task 3, single-rollout tasks 4, differing prompts 5",
        "margin       min 0.5  mean 0.7  max 1",
        "tokens       77, longest pair 19, max token id 290",
        'params       kind=preference  preference={"min_margin": 0.5, "pairing": "all", '
        '"pairs_per_task": 2, "unit": "trajectory"}',
        f"source       {source['collection_id']}  {source['content_hash'][:12]}",
        _file_line(record.files[0]),
    ]
    assert cli_lines == lines


def test_short_hash_and_created_time():
    assert short_hash("0123456789abcdef") == "01234567"
    assert created_text("2026-11-30T12:03:59+00:00") == "2026-11-30 12:03"
    assert created_text("not a time") == "not a time" and created_text(None) == ""
