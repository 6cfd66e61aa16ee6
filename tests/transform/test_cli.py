"""`tracebank transform` and `tracebank datasets` through click's CliRunner."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tracebank.warehouse.storage import Storage

from tests.api.warehouses import sft_spans
from tests.cli_args import cli_args
from tests.fixtures.bronze import commit_collection
from tests.fixtures.proxy_spans import Call, call_spans, reward_span
from tracebank.cli.main import cli


@pytest.fixture
def filled(wh):
    commit_collection(wh, sft_spans(), collection_id="c1")
    return wh


def _run(position, wh, *args):
    return CliRunner().invoke(cli, cli_args(wh.root, position, *args))


def test_transform_prints_one_summary_line(filled, warehouse_position):
    out = _run(warehouse_position, filled, "transform", "--dataset", "sft")
    assert out.exit_code == 0, out.output
    manifest = Storage(filled).dataset_versions("sft")[0][1].to_json()
    # 3 rewarded rollouts x 2 calls; r3's two calls have no reward
    assert out.output == (
        f"wrote sft@v1: 6 rows (of 8 calls; 2 unrewarded, 1 rejected), 108 tokens, "
        f"hash {manifest['content_hash'][:8]}\n"
    )


def test_an_identical_rerun_says_so_and_writes_nothing(filled, warehouse_position):
    first = _run(warehouse_position, filled, "transform", "--dataset", "sft")
    h = Storage(filled).dataset_versions("sft")[0][1].content_hash[:8]
    again = _run(warehouse_position, filled, "transform", "--dataset", "sft")
    assert again.exit_code == 0, again.output
    assert (
        again.output
        == f"identical to sft@v1 (hash {h}): nothing written (--force writes a new version anyway)\n"
    )
    assert len(Storage(filled).dataset_versions("sft")) == 1
    forced = _run(warehouse_position, filled, "transform", "--dataset", "sft", "--force")
    assert forced.output.startswith("wrote sft@v2: ") and first.output.startswith("wrote sft@v1: ")


def test_options_reach_the_manifest(filled, warehouse_position):
    out = _run(
        warehouse_position,
        filled,
        "transform",
        "--dataset",
        "sft",
        "--top-fraction",
        "0.5",
        "--seed",
        "3",
        "--min-reward",
        "0.3",
        "--select-by",
        "rollout",
        "--per-task",
        "1",
        "--val-fraction",
        "0.5",
        "--max-length",
        "100",
        "--dedup",
        "--merge",
        "trajectory",
        "--collection",
        "c1",
    )
    assert out.exit_code == 0, out.output
    m = Storage(filled).dataset_versions("sft")[0][1].to_json()
    assert m["params"] == {
        "name": "sft",
        "collections": ["c1"],
        "top_fraction": 0.5,
        "seed": 3,
        "min_reward": 0.3,
        "select_by": "rollout",
        "per_task": 1,
        "val_fraction": 0.5,
        "max_length": 100,
        "dedup": True,
        "merge": "trajectory",
    }


def test_datasets_list_and_show(filled, warehouse_position):
    _run(warehouse_position, filled, "transform", "--dataset", "sft")
    _run(warehouse_position, filled, "transform", "--dataset", "sft", "--top-fraction", "0.5")
    versions = [(folder, m.to_json()) for folder, m in Storage(filled).dataset_versions("sft")]
    out = _run(warehouse_position, filled, "datasets", "list")
    assert out.exit_code == 0, out.output
    created = [m["created_at"][:16].replace("T", " ") for _, m in versions]
    hashes = [m["content_hash"][:8] for _, m in versions]
    assert out.output == (
        "name  version  rows  tokens  created           hash\n"
        "----  -------  ----  ------  ----------------  --------\n"
        f"sft   v1       6     108     {created[0]}  {hashes[0]}\n"
        f"sft   v2       3     {versions[1][1]['stats']['tokens']:<6}  {created[1]}  {hashes[1]}\n"
        "(2 rows)\n"
    )
    show = _run(warehouse_position, filled, "datasets", "show", "sft@v1")
    assert show.exit_code == 0, show.output
    lines = show.output.splitlines()
    assert lines[0] == f"sft@v1  ({versions[0][0]})"
    assert f"hash         {versions[0][1]['content_hash']}" in lines
    assert "calls        8 usable, 6 rewarded, 2 unrewarded, 0 duplicates" in lines
    assert "rejected     empty_tokens 1" in lines
    assert any(line.startswith("file         train.parquet  train  6 rows") for line in lines)
    latest = _run(warehouse_position, filled, "datasets", "show", "sft")
    assert latest.output.splitlines()[0].startswith("sft@v2  (")
    as_json = json.loads(
        _run(warehouse_position, filled, "datasets", "show", "sft@v2", "--format", "json").output
    )
    assert as_json == versions[1][1]


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (
            ["transform", "--dataset", "x", "--top-fraction", "0"],
            2,
            "Error: --top-fraction must be in (0, 1], got 0.0\n",
        ),
        (
            ["transform", "--dataset", "x", "--collection", "nope"],
            1,
            "Error: no committed collection 'nope' in {root} (known collections: c1)\n",
        ),
        (
            ["transform", "--dataset", "bad/name"],
            2,
            "Error: invalid dataset name 'bad/name' (use letters, digits, '.', '_' or '-', "
            "starting with a letter or digit)\n",
        ),
        (
            ["datasets", "show", "missing"],
            1,
            "Error: no dataset named 'missing' in {root} (known datasets: none yet; build one with "
            "`tracebank transform --dataset missing`)\n",
        ),
        (
            ["transform", "--dataset", "x", "--min-reward", "5"],
            1,
            "Error: no rows for x: 8 usable calls, 6 rewarded, 1 rejected, 0 kept after the filters "
            '(check the rewards with `tracebank sql "SELECT * FROM rewards"` or relax the options)\n',
        ),
    ],
)
def test_errors_are_one_line(filled, args, code, message, warehouse_position):
    out = _run(warehouse_position, filled, *args)
    assert out.exit_code == code
    assert out.output == message.format(root=filled.root)


def test_help_documents_every_option():
    out = CliRunner().invoke(cli, ["transform", "--help"])
    for option in (
        "--dataset",
        "--collection",
        "--top-fraction",
        "--seed",
        "--min-reward",
        "--select-by",
        "--per-task",
        "--val-fraction",
        "--max-length",
        "--dedup",
        "--merge",
        "--rebuild-silver",
        "--force",
    ):
        assert option in out.output


def test_datasets_list_machine_formats_are_whole(filled, warehouse_position):
    _run(warehouse_position, filled, "transform", "--dataset", "sft")
    manifest = Storage(filled).dataset_versions("sft")[0][1].to_json()
    as_json = _run(warehouse_position, filled, "datasets", "list", "--format", "json")
    assert as_json.exit_code == 0, as_json.output
    [row] = json.loads(as_json.stdout)  # one JSON document
    assert row["hash"] == manifest["content_hash"] and len(row["hash"]) == 64
    as_jsonl = _run(warehouse_position, filled, "datasets", "list", "--format", "jsonl")
    assert [json.loads(line) for line in as_jsonl.stdout.splitlines()] == [row]
    as_csv = _run(warehouse_position, filled, "datasets", "list", "--format", "csv")
    assert as_csv.stdout.splitlines()[1].endswith("," + manifest["content_hash"])


@pytest.mark.parametrize(("fmt", "expected"), [("jsonl", ""), ("json", "[]\n")])
def test_an_empty_listing_prints_no_blank_line(wh, fmt, expected, warehouse_position):
    out = _run(warehouse_position, wh, "datasets", "list", "--format", fmt)
    assert out.exit_code == 0 and out.stdout == expected


def test_old_flag_names_still_work(filled, warehouse_position):
    out = _run(warehouse_position, filled, "transform", "--name", "sft")
    assert out.exit_code == 0 and out.stdout.startswith("wrote sft@v1: ")
    old = _run(warehouse_position, filled, "datasets", "show", "sft", "--json")
    assert json.loads(old.stdout)["name"] == "sft"


def test_transform_without_a_dataset_name_is_a_usage_error(filled, warehouse_position):
    out = _run(warehouse_position, filled, "transform")
    assert out.exit_code == 2 and "Missing option '--dataset'." in out.stderr


def test_the_library_names_the_fix_for_missing_silver(wh):
    from tracebank.transform import TransformConfig, transform
    from tracebank.transform.errors import SilverMissingError

    commit_collection(
        wh, call_spans("r0", "r0-a1", 1, Call([1, 2], [3]), 1.0), collection_id="c9", silver=False
    )
    with pytest.raises(SilverMissingError) as err:
        transform(wh, TransformConfig(name="sft"))
    assert err.value.one_line() == (
        "the silver tables of collection c9 are missing or stale (build them with "
        "`tracebank rebuild-silver --collection c9` (`tracebank transform` builds them itself))"
    )
    assert Storage(wh).dataset_versions("sft") == []


def test_the_cli_builds_missing_and_stale_silver_first(wh, warehouse_position):
    from tracebank.warehouse.storage import Storage

    spans = call_spans("r0", "r0-a1", 1, Call([1, 2], [3]), 1.0) + [reward_span("r0", "r0-a1", 2, 1.0, 2.0)]
    commit_collection(wh, spans, collection_id="c1", silver=False)
    assert Storage(wh).current_silver("c1") is None
    out = _run(warehouse_position, wh, "transform", "--dataset", "sft")
    assert out.exit_code == 0, out.output
    assert out.stdout.startswith("wrote sft@v1: 1 rows")
    # the one progress renderer says on stderr which silver it had to build first
    assert out.stderr.endswith("] silver of c1: 1 llm calls (1 with token ids), 1 rewards, 2 messages\n")
    built = Storage(wh).current_silver("c1")
    assert built is not None
    # A cache of another SILVER_VERSION counts as stale and is rebuilt too.
    manifest_path = wh.silver_collection_dir("c1") / "manifest.json"
    manifest_path.write_text(json.dumps({**json.loads(manifest_path.read_text()), "silver_version": -1}))
    assert _run(warehouse_position, wh, "transform", "--dataset", "sft").exit_code == 0
    rebuilt = Storage(wh).current_silver("c1")
    assert rebuilt is not None and rebuilt.files != built.files
    # A current cache is reused, unless --rebuild-silver asks otherwise.
    assert _run(warehouse_position, wh, "transform", "--dataset", "sft").exit_code == 0
    assert Storage(wh).current_silver("c1") == rebuilt
    assert _run(warehouse_position, wh, "transform", "--dataset", "sft", "--rebuild-silver").exit_code == 0
    forced = Storage(wh).current_silver("c1")
    assert forced is not None and forced.files != rebuilt.files
