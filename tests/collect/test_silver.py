"""collect builds and rebuilds the silver tables of committed collections."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from tracebank.collect import build_silver
from tracebank.collect.errors import UnknownCollectionError
from tracebank.warehouse.contract import SILVER_VERSION
from tracebank.warehouse.gc import gc
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.query import run_sql
from tracebank.warehouse.storage import Storage

from tests.cli_args import cli_args
from tests.transform.oracle import scenario_warehouse
from tracebank.cli.main import cli


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    return scenario_warehouse(tmp_path_factory.mktemp("silver"), seed=1, n_random=20)


def test_silver_is_cached_and_rebuilt_on_request(wh):
    first = build_silver(wh)[0]
    assert build_silver(wh)[0] == first
    rebuilt = build_silver(wh, force=True)[0]
    assert rebuilt.files != first.files
    assert [f.rows for f in rebuilt.files] == [f.rows for f in first.files]
    folder = wh.silver_collection_dir("c1")
    # The replaced files stay for readers of the old manifest until gc removes them.
    every = [f.path for f in rebuilt.files + first.files] + ["manifest.json"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(every)
    gc(wh, min_age_s=0)
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        [f.path for f in rebuilt.files] + ["manifest.json"]
    )


def test_a_stale_cache_is_rebuilt_without_force(wh):
    manifest_path = wh.silver_collection_dir("c1") / "manifest.json"
    doc = json.loads(manifest_path.read_text())
    doc["silver_version"] = SILVER_VERSION - 1
    manifest_path.write_text(json.dumps(doc))
    assert Storage(wh).current_silver("c1") is None
    (built,) = build_silver(wh, ("c1",))
    assert built.silver_version == SILVER_VERSION and Storage(wh).current_silver("c1") == built


def test_unknown_collections_are_named(wh, tmp_path):
    with pytest.raises(UnknownCollectionError, match="no committed collection 'nope'") as err:
        build_silver(wh, ("c1", "nope"))
    assert err.value.hint == "known collections: c1"
    with pytest.raises(UnknownCollectionError, match="no committed collection in") as err:
        build_silver(Warehouse(tmp_path / "empty").init())
    assert err.value.hint == "run `tracebank collect --store URL` first"


def test_cli_rebuilds_silver_without_a_store(wh, warehouse_position):
    before = Storage(wh).current_silver("c1")
    out = CliRunner().invoke(cli, cli_args(wh.root, warehouse_position, "rebuild-silver"))
    assert out.exit_code == 0, out.output
    after = Storage(wh).current_silver("c1")
    assert after is not None and before is not None and after.files != before.files
    c = after.counts
    assert out.output == (
        f"silver of c1: {c['llm_calls']} llm calls ({c['usable_calls']} with token ids), "
        f"{c['rewards']} rewards, {c['messages']} messages\n"
    )


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["collect"], 2, "Missing option '--store'."),
        (
            ["collect", "--rebuild-silver", "--store", "http://127.0.0.1:1"],
            2,
            "Error: --rebuild-silver is now `tracebank rebuild-silver [--collection ID]`\n",
        ),
        (
            ["collect", "--store", "http://127.0.0.1:1", "--repair-duplicates"],
            2,
            "Error: --repair-duplicates is now `tracebank repair-duplicates`, then collect\n",
        ),
        (
            ["rebuild-silver", "--collection", "nope"],
            1,
            "Error: no committed collection 'nope' in {root} (known collections: c1)\n",
        ),
    ],
)
def test_cli_errors_are_one_line(wh, args, code, message, warehouse_position):
    out = CliRunner().invoke(cli, cli_args(wh.root, warehouse_position, *args))
    assert out.exit_code == code, out.output
    assert message.format(root=wh.root) in out.output


def test_span_calls_come_from_the_engine(wh):
    (built,) = build_silver(wh, ("c1",))
    sources = run_sql(wh, "SELECT DISTINCT token_source FROM llm_calls").column(0).to_pylist()
    assert sources == ["engine"] and built.counts["text_calls"] == 0
