"""`tracebank report` without a browser: what it covers, what it embeds, and its one-line errors."""

from __future__ import annotations

import json
import re

import pytest
from click.testing import CliRunner
from tracebank.view.report_data import drop_reasons, unmerged_calls
from tracebank.view.report_html import _unmerged_html

from tracebank.cli.main import cli


def _report(wh_root, *args):
    return CliRunner().invoke(cli, ["--warehouse", str(wh_root), "report", *args])


def _refuse(name):
    raise ValueError(f"the page's data holds {name}, which the page script's JSON.parse refuses")


def _embedded(path) -> dict:
    """The page's data, parsed as the page script does: standard JSON only (no NaN or Infinity)."""
    match = re.search(
        r'<script type="application/json" id="report-data">(.*?)</script>', path.read_text(), re.S
    )
    assert match
    return json.loads(match.group(1).replace("<\\/", "</"), parse_constant=_refuse)


def test_a_dataset_report_covers_that_version_and_its_collections(view_wh, tmp_path):
    out = tmp_path / "qa.html"
    result = _report(view_wh.wh.root, "-o", str(out), "--dataset", "qa@v1", "--conversations", "3")
    assert result.exit_code == 0, result.output
    assert re.fullmatch(
        rf"wrote {re.escape(str(out))} \(\d+\.\d MB\): 1 collections, 1 dataset versions, 0 runs\n",
        result.output,
    )
    data = _embedded(out)
    assert [c["collection_id"] for c in data["collections"]] == [view_wh.qa_collection]
    (ds,) = data["datasets"]
    assert ds["ref"] == "qa@v1" and ds["rows"] == 16 and ds["sources"] == [view_wh.qa_collection]
    assert len(ds["row_rewards"]) == 12  # the train split
    assert ds["cut"] == min(ds["row_rewards"])
    # Best and worst rows by reward, best first; no tokenizer (no run), so no token view.
    rewards = [c["reward"] for c in ds["conversations"]]
    assert len(rewards) == 3 and rewards[0] == 1.0 and rewards[-1] == 0.5
    assert all(c["token_runs"] == [] for c in ds["conversations"])
    assert data["tokenizer"] is None


def test_the_page_holds_no_reference_to_the_network(view_wh, tmp_path):
    out = tmp_path / "all.html"
    assert _report(view_wh.wh.root, "-o", str(out)).exit_code == 0
    page = out.read_text()
    assert "<script src" not in page and "<link " not in page
    assert page.count("<script") == 3  # plotly.js, the data, the page script
    assert "Plotly.newPlot" in page


def test_an_empty_warehouse_has_nothing_to_report(wh, tmp_path):
    result = _report(wh.root, "-o", str(tmp_path / "r.html"))
    assert result.exit_code == 1
    assert (
        result.output
        == f"Error: nothing to report in {wh.root} (collect, transform or train something first)\n"
    )
    assert not (tmp_path / "r.html").exists()


def test_drop_reasons_name_rejected_calls_and_each_filter():
    manifest = {"counts": {"rejected": {"empty response": 2}, "unrewarded": 3, "not_selected": 4, "calls": 9}}
    assert drop_reasons(manifest) == {"rejected: empty response": 2, "unrewarded": 3, "not_selected": 4}


def test_unmerged_calls_per_reason_from_either_rules():
    recipe = {"counts": {"merged": {"diagnostics": {"others_mismatch": 2, "reward_break": 0, "rollouts": 1}}}}
    agl1 = {"counts": {"merge_diagnostics": {"template_mismatch": 0, "others_mismatch": 3, "rollouts": 2}}}
    assert unmerged_calls(recipe) == {"others_mismatch": 2}
    assert unmerged_calls(agl1) == {"others_mismatch": 3}
    assert unmerged_calls({"counts": {"merged": None}}) == {}
    html = _unmerged_html({"<b>x</b>": 1})  # a planted manifest's key is escaped
    assert "<b>" not in html and "&lt;b&gt;x&lt;/b&gt; 1" in html


def test_report_writes_over_its_own_page_only(view_wh, tmp_path):
    """`report -o` never replaces FORMAT.json, a committed file or a user's file; its own page it does."""
    root = view_wh.wh.root
    before = {p: p.read_bytes() for p in root.rglob("*") if p.is_file()}
    mine = tmp_path / "mine.html"
    mine.write_text("<p>my page</p>")
    committed = next(root.glob("datasets/qa/*/train.parquet"))
    for target, message in (
        (root / "FORMAT.json", f"Error: --output {root / 'FORMAT.json'} is inside the warehouse"),
        (committed, f"Error: --output {committed} is inside the warehouse"),
        (mine, f"Error: {mine} exists and was not written by tracebank report"),
    ):
        result = _report(root, "-o", str(target))
        assert result.exit_code == 2 and result.output.startswith(message), result.output
    assert {p: p.read_bytes() for p in root.rglob("*") if p.is_file()} == before
    assert mine.read_text() == "<p>my page</p>"
    out = tmp_path / "r.html"
    assert _report(root, "-o", str(out), "--dataset", "qa@v1").exit_code == 0
    assert _report(root, "-o", str(out), "--dataset", "mixed@v1").exit_code == 0
    assert [d["ref"] for d in _embedded(out)["datasets"]] == ["mixed@v1"]


HTML_HOSTILE = "<!--<script>alert(1)</script> & </SCRIPT ><script>"


def test_no_string_can_end_or_comment_out_the_page_scripts():
    """`<!--<script>` in a message used to make the page's own `</script>` part of the data."""
    from tracebank.view.report_html import script_json

    data = {"content": HTML_HOSTILE, "nested": [{"tag": "<!-- x -->"}]}
    text = script_json(data)
    assert not any(s in text.lower() for s in ("<!--", "<script", "</script", "<", ">"))
    assert json.loads(text) == data


def _plant_rewards(folder, rewards: list[float]) -> None:
    """Rewrite a committed dataset version's train file with ``rewards`` (as a co-worker with write
    access could), its manifest entry updated so that the sizes and hashes still match."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    from tracebank.warehouse.atomic import sha256_file

    manifest_path = folder / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    entry = next(e for e in manifest["files"] if e.get("split") == "train")
    path = folder / entry["path"]
    table = pq.read_table(path)
    column = [rewards[i % len(rewards)] for i in range(table.num_rows)]
    table = table.set_column(table.schema.get_field_index("reward"), "reward", pa.array(column, pa.float64()))
    pq.write_table(table, path)
    entry.update(bytes=path.stat().st_size, sha256=sha256_file(path))
    manifest_path.write_text(json.dumps(manifest))


EXTREMES = [float("nan"), float("inf"), float("-inf"), 1e308, -1e308, 0.5]


@pytest.mark.filterwarnings("error::RuntimeWarning")
def test_a_report_over_extreme_values_embeds_standard_json(wh, tmp_path):
    """The finding: a manifest or a row holding Infinity or NaN went into the page's data as is;
    the page script's JSON.parse failed on it: no charts, no conversations."""
    from tracebank.transform import TransformConfig, transform
    from tracebank.warehouse.storage import Storage

    from tests.fixtures.preference import commit_03, plan
    from tests.warehouse.test_records import _run

    planned = plan(seed=5)
    for rollout, reward in zip(planned, EXTREMES, strict=False):
        rollout.reward = reward  # collected rewards: collect rejects them, keeping the value seen
    commit_03(wh, planned)
    version = transform(wh, TransformConfig(name="d"))
    _plant_rewards(version.folder, EXTREMES)
    storage = Storage(wh)
    run = storage.start_run(_run(dataset=str(version.ref)))
    (run / "metrics.jsonl").write_text(  # as an older tracebank wrote a diverged run
        '{"step": 1, "split": "train", "loss": 2.5}\n{"step": 2, "split": "train", "loss": NaN}\n'
    )
    out = tmp_path / "extreme.html"
    result = _report(wh.root, "-o", str(out))
    assert result.exit_code == 0, result.output
    data = _embedded(out)
    (dataset,) = data["datasets"]
    shown = dataset["row_rewards"] + [c["reward"] for c in dataset["conversations"]]
    assert None in shown and 1e308 in shown and 0.5 in shown
    (run_data,) = data["runs"]
    assert [c["loss"] for c in run_data["curves"]] == [[2.5]]


HOSTILE_AGENT = "<script>alert('agent')</script>"


@pytest.fixture
def judged(wh):
    """Multi-agent rollouts (one agent named as an attacker would), a dataset version, a judge layer
    that scored all but one rollout (three samples each) and a scorer function's layer."""
    from tracebank.transform import TransformConfig, transform
    from tracebank.warehouse.query import connect

    from tests.fixtures.agent_spans import recorded_agent_spans
    from tests.fixtures.bronze import commit_collection
    from tests.fixtures.layers import commit_layer

    spans = recorded_agent_spans(n_rollouts=4, seed=3)
    for span in spans:
        if span.attributes.get("agent.name") == "planner":
            span.attributes["agent.name"] = HOSTILE_AGENT
    cid = commit_collection(wh, spans)
    transform(wh, TransformConfig(name="agents", collections=(cid,)))
    con = connect(wh)
    sql = "SELECT rollout_id, attempt_id, reward FROM rollout_rewards ORDER BY 1"
    collected = con.execute(sql).fetchall()
    con.close()
    judged, unscored = collected[:-1], collected[-1]
    scores: dict[str, float | None] = {r: 1.0 - reward for r, _, reward in judged}
    scores[unscored[0]] = None
    attempts = {r: a for r, a, _ in collected}
    stds = {r: 0.1 * (i + 1) for i, (r, _, _) in enumerate(judged)}
    judge = {"model": "tiny", "samples": 3, "temperature": 1.0, "rubric_sha256": "ab" * 32, "scale": [1, 5]}
    commit_layer(wh, "judge", {r: 0.0 for r in scores}, cid, attempts=attempts)  # v1: not shown
    commit_layer(wh, "judge", scores, cid, attempts=attempts, stds=stds, judge=judge)
    commit_layer(wh, "plain", {r: 0.5 for r in scores}, cid, attempts=attempts)  # a scorer, no judge
    expected = [
        {"rollout_id": r, "reward": reward, "score": 1.0 - reward, "std": stds[r]} for r, _, reward in judged
    ]
    return wh, cid, expected


def test_the_report_plots_a_judge_against_collected_rewards_with_its_spread(judged, tmp_path):
    wh, cid, expected = judged
    out = tmp_path / "judge.html"
    result = _report(wh.root, "-o", str(out))
    assert result.exit_code == 0, result.output
    (judge,) = _embedded(out)["judges"]  # the latest version of the judge's layer only
    assert judge["ref"] == "judge@v2" and judge["collections"] == [cid]
    assert sorted(judge["points"], key=lambda p: p["rollout_id"]) == expected
    assert judge["spread"] == [p["std"] for p in expected]
    assert (judge["scored"], judge["unscored"], judge["no_reward"]) == (3, 1, 0)
    assert judge["settings"]["model"] == "tiny" and judge["settings"]["samples"] == 3
    page = out.read_text()
    assert 'id="chart-judge-0"' in page and 'id="chart-spread-0"' in page


def test_the_report_names_each_calls_agent_as_text(judged, tmp_path):
    wh, cid, _ = judged
    out = tmp_path / "agents.html"
    assert _report(wh.root, "-o", str(out), "--conversations", "100").exit_code == 0
    data = _embedded(out)
    (collection,) = data["collections"]
    # Per rollout: planner (renamed) 2 calls, coder 2, reviewer 1, and one call outside any agent.
    assert dict(map(tuple, collection["agents"])) == {HOSTILE_AGENT: 8, "coder": 8, "reviewer": 4, None: 4}
    # every row shown (rollout ids, hence the rows' order, differ between recordings)
    agents = {c["agent"] for c in data["datasets"][0]["conversations"]}
    assert HOSTILE_AGENT in agents
    page = out.read_text()
    assert "alert('agent')" in page  # shown ...
    assert page.count("<script") == 3 and "<script>alert" not in page  # ... as text, never as a script
    assert "agent &lt;script&gt;alert(&#x27;agent&#x27;)&lt;/script&gt; · " in page  # a conversation
    assert "<td>&lt;script&gt;alert(&#x27;agent&#x27;)&lt;/script&gt;</td><td>8</td>" in page  # the table
