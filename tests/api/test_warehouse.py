"""`tracebank.open()` and the Warehouse's methods: what they write, what they refuse, and that each
gives what its CLI command gives for the same flags (issue 28)."""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

import pytest
from tracebank.core import events as ev
from tracebank.core.errors import TracebankError, UsageError, WarehouseError
from tracebank.warehouse import layout
from tracebank.warehouse.storage import Storage

import tracebank
from tests.api.warehouses import build_base, copy_of, run_cli

SCORERS = '''
def shorter(rollout):
    """Prefers shorter final answers."""
    return -float(len(rollout.final_response or ""))
'''


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> Path:
    """A committed warehouse (SFT collection c1, same-task collection for pairs), silver built."""
    return build_base(tmp_path_factory.mktemp("base") / "warehouse")


@pytest.fixture(scope="module")
def base_no_silver(tmp_path_factory) -> Path:
    """The same collections with no silver tables built yet."""
    return build_base(tmp_path_factory.mktemp("bare") / "warehouse", silver=False)


@pytest.fixture
def pair(base, tmp_path) -> tuple[Path, Path]:
    """Two copies of ``base``: one for the library, one for the CLI."""
    return copy_of(base, tmp_path / "lib"), copy_of(base, tmp_path / "cli")


def _one_line(exc: BaseException) -> str:
    assert isinstance(exc, TracebankError)
    line = exc.one_line()
    assert "\n" not in line
    return line


# -- 1. tracebank.open ---------------------------------------------------------------------------


def test_open_writes_nothing_and_a_read_of_a_missing_warehouse_is_one_line(tmp_path):
    where = tmp_path / "nowhere" / "warehouse"
    wh = tracebank.open(where)
    assert not where.parent.exists()
    with pytest.raises(WarehouseError) as raised:
        wh.sql("SELECT 1").rows()
    assert _one_line(raised.value).startswith(f"no warehouse at {where}")
    for read in (wh.datasets, wh.runs, wh.verify, lambda: wh.dataset("x"), lambda: wh.show("r0")):
        with pytest.raises(WarehouseError):
            read()
    assert not where.parent.exists()
    assert repr(wh) == f"tracebank.Warehouse({str(where)!r})"


def test_a_newer_format_is_refused_at_open(base, tmp_path):
    root = copy_of(base, tmp_path / "wh")
    (root / layout.FORMAT).write_text(json.dumps({"format": layout.FORMAT_NAME, "version": 999}))
    with pytest.raises(WarehouseError) as raised:
        tracebank.open(root)
    assert "newer than this tracebank" in _one_line(raised.value)


def test_a_symlinked_top_level_folder_is_refused_at_open(base, tmp_path):
    root = copy_of(base, tmp_path / "wh")
    elsewhere = tmp_path / "elsewhere"
    (root / layout.DATASETS).rename(elsewhere)
    (root / layout.DATASETS).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(WarehouseError):
        tracebank.open(root)


def test_the_format_is_read_once_per_handle(base, tmp_path, monkeypatch):
    from tracebank.warehouse.location import Warehouse as Plain

    root = copy_of(base, tmp_path / "wh")
    reads = []
    real = Plain._format
    monkeypatch.setattr(Plain, "_format", lambda self: reads.append(1) or real(self))
    wh = tracebank.open(root)
    wh.sql("SELECT 1").rows()
    wh.datasets()
    wh.runs()
    wh.sql("SELECT count(*) FROM llm_calls").rows()
    assert len(reads) == 1


def test_a_warehouse_on_s3_works_like_a_folder(s3_bucket, base):
    wh = tracebank.open(f"s3://{s3_bucket}/team")
    with pytest.raises(WarehouseError, match="no warehouse at s3://"):
        wh.sql("SELECT 1").rows()
    from tests.api.warehouses import sft_spans
    from tests.fixtures.bronze import commit_collection

    commit_collection(wh.writable(), sft_spans(), collection_id="c1")
    version = wh.transform("sft")
    again = tracebank.open(f"s3://{s3_bucket}/team")
    assert again.dataset("sft").hash == version.hash and version.rows == 6
    assert again.sql("SELECT count(*) FROM llm_calls").rows() == [(9,)]


# -- 2. the library and the CLI give the same ---------------------------------------------------


@pytest.mark.parametrize(
    ("options", "flags"),
    [
        ({"top_fraction": 0.5, "collections": ["c1"]}, ["--top-fraction", "0.5", "--collection", "c1"]),
        (
            {"kind": "preference", "min_margin": 0.75, "pairs_per_task": 2},
            ["--kind", "preference", "--min-margin", "0.75", "--pairs-per-task", "2"],
        ),
    ],
    ids=["sft", "preference"],
)
def test_transform_gives_the_cli_s_version(pair, options, flags, capsys):
    lib, cli_root = pair
    version = tracebank.open(lib).transform("ds", **options)
    assert capsys.readouterr() == ("", "")  # the library prints nothing
    out = run_cli(cli_root, "transform", "--dataset", "ds", *flags)
    assert out.exit_code == 0, out.output
    cli_version = tracebank.open(cli_root).dataset("ds@v1")
    assert version.hash == cli_version.hash and version.rows == cli_version.rows > 0
    assert out.output == version.summary() + "\n"
    assert version.manifest["params"] == cli_version.manifest["params"]
    if "min_margin" in options:  # the option changed what was kept: a dropped one would show
        assert version.counts["below_margin"] > 0


def test_a_transform_without_silver_builds_it_in_both(base_no_silver, tmp_path):
    lib = copy_of(base_no_silver, tmp_path / "lib")
    cli_root = copy_of(base_no_silver, tmp_path / "cli")
    events: list[ev.Event] = []
    version = tracebank.open(lib).transform("sft", collections=["c1"], on_event=events.append)
    assert [(type(e), e.collection_id) for e in events] == [(ev.SilverBuilt, "c1")]
    out = run_cli(cli_root, "transform", "--dataset", "sft", "--collection", "c1")
    assert out.exit_code == 0, out.output
    assert tracebank.open(cli_root).dataset("sft").hash == version.hash
    # built once: the next transform has nothing to build
    events.clear()
    tracebank.open(lib).transform("sft", collections=["c1"], on_event=events.append)
    assert events == []


def test_an_unchanged_transform_is_identical_and_says_what_the_cli_says(pair):
    lib, cli_root = pair
    wh = tracebank.open(lib)
    first = wh.transform("sft", collections=["c1"])
    again = wh.transform("sft", collections=["c1"])
    assert not first.identical and again.identical and again.ref == first.ref and again.hash == first.hash
    assert len(Storage(wh).dataset_versions("sft")) == 1
    run_cli(cli_root, "transform", "--dataset", "sft", "--collection", "c1")
    out = run_cli(cli_root, "transform", "--dataset", "sft", "--collection", "c1")
    assert out.output == again.summary() + "\n" and out.output.startswith("identical to sft@v1")


def test_export_show_datasets_runs_and_sql_match_the_cli(pair, tmp_path):
    lib, cli_root = pair
    wh = tracebank.open(lib)
    wh.transform("sft", collections=["c1"])
    assert run_cli(cli_root, "transform", "--dataset", "sft", "--collection", "c1").exit_code == 0

    exported = wh.export("sft@v1", to="openai", output=tmp_path / "lib.jsonl")
    out = run_cli(cli_root, "export", "sft@v1", "--to", "openai", "-o", str(tmp_path / "cli.jsonl"))
    assert out.exit_code == 0, out.output
    assert (tmp_path / "lib.jsonl").read_bytes() == (tmp_path / "cli.jsonl").read_bytes()
    assert exported.rows == 6 and out.output == exported.summary().replace("lib.jsonl", "cli.jsonl") + "\n"

    assert run_cli(cli_root, "show", "r1").output == wh.show("r1") + "\n"
    assert run_cli(cli_root, "show", "--best", "2").output == wh.show(best=2) + "\n"

    listed = json.loads(run_cli(cli_root, "datasets", "list", "--format", "json").output)
    mine = wh.datasets().to_pylist()
    assert [(r["name"], r["version"], r["rows"], r["hash"]) for r in listed] == [
        (r["name"], r["version"], r["rows"], r["content_hash"]) for r in mine
    ]
    assert run_cli(cli_root, "datasets").output == run_cli(cli_root, "datasets", "list").output

    assert wh.runs().to_pylist() == json.loads(run_cli(cli_root, "runs", "list", "--format", "json").output)

    statement = "SELECT rollout_id, count(*) AS n FROM llm_calls WHERE prompt_len > $m GROUP BY 1 ORDER BY 1"
    rows = wh.sql(statement, {"m": 12}).rows()
    printed = json.loads(run_cli(cli_root, "sql", statement, "-p", "m=12", "--format", "json").output)
    assert [tuple(r.values()) for r in printed] == rows and rows


# -- 6. rescore with a function ------------------------------------------------------------------


@pytest.fixture
def scorer_module(tmp_path, monkeypatch):
    folder = tmp_path / "scorers"
    folder.mkdir()
    (folder / "api_test_scorers.py").write_text(SCORERS)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.chdir(folder)  # rescore's workers import a scorer module from the working folder
    import importlib

    module = importlib.import_module("api_test_scorers")
    yield module
    sys.modules.pop("api_test_scorers", None)


def test_rescore_with_a_module_s_function_is_rescore_with_its_name(pair, scorer_module):
    lib, cli_root = pair
    by_function = tracebank.open(lib).rescore(scorer_module.shorter, name="short", workers=1)
    out = run_cli(
        cli_root, "rescore", "--scorer", "api_test_scorers:shorter", "--name", "short", "--workers", "1"
    )
    assert out.exit_code == 0, out.output
    by_name = tracebank.open(cli_root).rescore("api_test_scorers:shorter", name="short", workers=1)
    assert by_name.identical and by_name.record.content_hash == by_function.record.content_hash
    assert by_function.record.scorer == "api_test_scorers:shorter" and by_function.record.counts["scored"] > 0


def test_rescore_with_an_unimportable_function_is_one_line(base, tmp_path):
    wh = tracebank.open(copy_of(base, tmp_path / "wh"))

    def inner(rollout):
        return 1.0

    main_scorer = type(inner)(inner.__code__, {"__name__": "__main__"}, "main_scorer")
    main_scorer.__module__, main_scorer.__qualname__ = "__main__", "main_scorer"  # as a script's own
    for scorer in (inner, main_scorer, lambda rollout: 1.0):
        with pytest.raises(UsageError) as raised:
            wh.rescore(scorer, name="x")
        assert "define it at the top of a module" in _one_line(raised.value)
    assert not (wh.root / layout.REWARDS).exists() or not any((wh.root / layout.REWARDS).iterdir())


# -- 7. typed events -----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def filled_store(store_url):
    from tests.collect.helpers import fill_url

    fill_url(store_url, 30, seed=3)
    return store_url


def test_collect_reports_progress_to_the_end_and_waits_for_the_claim(filled_store, tmp_path, capsys):
    from tracebank.collect.collector import collect_claim
    from tracebank.warehouse.claims import Owner, release, try_claim

    wh = tracebank.open(tmp_path / "wh")
    claim = collect_claim(wh.writable())
    me = Owner.current()
    other = Owner(me.pid, me.host, me.start, "another collect")
    assert try_claim(claim, other) is None
    events: list[ev.Event] = []

    def on_event(event: ev.Event) -> None:
        events.append(event)
        if isinstance(event, ev.WaitingForWarehouse):
            threading.Timer(0.2, release, (claim, other)).start()

    fallback = threading.Timer(60, release, (claim, other))  # never hang, whatever collect reports
    fallback.start()
    try:
        result = wh.collect(filled_store, tag="round-1", on_event=on_event)
    finally:
        fallback.cancel()
    assert result.counts["rollouts"] == 30
    assert isinstance(events[0], ev.WaitingForWarehouse) and "another collect" in events[0].note
    progress = [e for e in events if isinstance(e, ev.CollectProgress)]
    assert progress and progress[-1].done == progress[-1].total == 30
    assert [e.done for e in progress] == sorted(e.done for e in progress)
    assert capsys.readouterr() == ("", "")
    assert wh.sql("SELECT DISTINCT tag FROM collections").rows() == [("round-1",)]


# -- 8. hostile input through the API ------------------------------------------------------------


@pytest.mark.parametrize("tag", ["a\nb", "a\rb", "\x1b]0;x\x07", "", "   ", "x" * 101, 5])
def test_a_bad_tag_is_refused_in_one_line_before_anything_is_written(tmp_path, tag):
    where = tmp_path / "wh"
    with pytest.raises(UsageError) as raised:
        tracebank.open(where).collect("http://127.0.0.1:9", tag=tag)
    assert "--tag" in _one_line(raised.value) and not where.exists()


def test_export_onto_the_warehouse_or_an_existing_file_is_refused_as_the_cli_refuses(pair, tmp_path):
    lib, cli_root = pair
    wh = tracebank.open(lib)
    wh.transform("sft", collections=["c1"])
    run_cli(cli_root, "transform", "--dataset", "sft", "--collection", "c1")
    existing = tmp_path / "mine.txt"
    existing.write_text("keep me")
    for target, cli_target in (
        (lib, cli_root),
        (lib / layout.DATASETS, cli_root / layout.DATASETS),
        (existing, existing),
    ):
        with pytest.raises(TracebankError) as raised:
            wh.export("sft", to="openai", output=target)
        out = run_cli(cli_root, "export", "sft", "--to", "openai", "-o", str(cli_target))
        assert out.exit_code != 0
        assert out.output == f"Error: {_one_line(raised.value)}\n".replace(str(lib), str(cli_root))
    assert existing.read_text() == "keep me"
    assert wh.verify().damaged == []
