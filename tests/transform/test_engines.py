"""Every engine x rule set: built with the local engine's rows, or refused in one line before anything
is written (the Ray engine on a real local Ray cluster)."""

from __future__ import annotations

import dataclasses
import itertools

import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from tracebank.transform import TransformConfig, transform
from tracebank.transform.config import ENGINES, RULES
from tracebank.transform.entry import BUILDERS
from tracebank.transform.errors import TransformUsageError
from tracebank.warehouse.location import Warehouse

from tests.fixtures.bronze import commit_collection, synthetic_rollouts
from tests.transform.oracle import scenario
from tracebank.cli.main import cli

PAIRS = list(itertools.product(ENGINES, RULES))
REFUSED = [pair for pair in PAIRS if pair not in BUILDERS]
#: A column only each rule set's rows have: a version labelled with one rule set holds its rows.
OWN_COLUMN = {"recipe": "calls", "agl1": "turn_index"}


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    wh = Warehouse(tmp_path_factory.mktemp("engines") / "warehouse").init()
    spans, rollouts = synthetic_rollouts(24, seed=5, calls=(2, 4), tasks=5)
    commit_collection(wh, spans, rollouts=rollouts, collection_id="c1", span_file_rows=30)
    sc = scenario(seed=9, n_random=10)
    commit_collection(wh, sc.spans, rollouts=sc.rollouts(), attempts=sc.attempts, collection_id="c2")
    return wh


def _rows(result):
    return [
        (f["split"], row)
        for f in result.manifest["files"]
        if f.get("split")  # the rows' files, not a merged version's merge_diagnostics
        for row in pq.read_table(result.folder / f["path"]).to_pylist()
    ]


def test_the_table_covers_every_engine_and_rule_set():
    assert {engine for engine, _ in BUILDERS} == set(ENGINES)
    assert {rules for _, rules in BUILDERS} == {*RULES, "preference"}  # --kind preference: pairs
    assert all(("local", rules) in BUILDERS for rules in RULES), "the local engine is the reference"


@pytest.mark.parametrize(("engine", "rules"), PAIRS, ids=[f"{e}-{r}" for e, r in PAIRS])
def test_each_pair_builds_the_local_engines_rows_or_is_refused(wh, engine, rules, request):
    address = request.getfixturevalue("ray_address") if engine == "ray" else None
    options = {"val_fraction": 0.25, "top_fraction": 0.8} if rules == "recipe" else {}
    config = TransformConfig(name=f"{engine}-{rules}", rules=rules, seed=3, **options)
    on_engine = dataclasses.replace(config, engine=engine, address=address)
    if (engine, rules) in REFUSED:
        with pytest.raises(TransformUsageError, match=f"^--engine {engine} does not build --rules {rules}"):
            transform(wh, on_engine)
        assert not wh.dataset_dir(config.name).exists()
        return
    built = transform(wh, on_engine)
    local = transform(wh, dataclasses.replace(config, name=f"{engine}-{rules}-local"))
    assert not built.identical and not local.identical
    assert built.manifest["params"].get("rules", "recipe") == rules
    rows = _rows(built)
    assert rows and all(OWN_COLUMN[rules] in row for _, row in rows)
    assert rows == _rows(local)
    assert built.record.content_hash == local.record.content_hash
    assert built.manifest["stats"] == local.manifest["stats"]
    assert built.manifest["counts"] == local.manifest["counts"]


@pytest.mark.parametrize(("engine", "rules"), REFUSED, ids=[f"{e}-{r}" for e, r in REFUSED])
def test_the_cli_refuses_an_unsupported_pair_in_one_line(wh, engine, rules):
    args = ["--warehouse", str(wh.root), "transform", "--dataset", "refused"]
    out = CliRunner().invoke(cli, [*args, "--rules", rules, "--engine", engine])
    assert out.exit_code == 2
    engines = " or ".join(e for e, r in BUILDERS if r == rules)
    assert out.output == f"Error: --engine {engine} does not build --rules {rules} (use --engine {engines})\n"
    assert not wh.dataset_dir("refused").exists()


@pytest.mark.parametrize("rules", RULES)
def test_every_rule_set_skips_an_identical_version(wh, rules):
    """The shared tail: the same rows and options again write nothing, unless forced."""
    config = TransformConfig(name=f"again-{rules}", rules=rules, seed=1)
    first = transform(wh, config)
    again = transform(wh, config)
    assert again.identical and again.ref == first.ref
    assert again.summary().startswith(f"identical to {first.ref} ")
    forced = transform(wh, dataclasses.replace(config, force=True))
    assert forced.ref.version == first.ref.version + 1
    assert forced.record.content_hash == first.record.content_hash
    assert [p.name for p in wh.dataset_dir(config.name).iterdir()] == ["v0001", "v0002"]
