"""`tracebank report` rendered in real headless Chromium: charts drawn, conversations shown, links resolve.

The demo warehouse is the one `tracebank demo`'s code path writes: a real `agl store`,
two iterations of agentlightning runners against the tiny model, collect, transform and
train each time (two collections, two dataset versions, two runs).
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
from click.testing import CliRunner
from tracebank.loop import DemoConfig
from tracebank.loop.demo import run_demo
from tracebank.warehouse.location import Warehouse

from tests.view.browser import chromium, ensure_chromium, full_page_screenshot, wait_rendered
from tracebank.cli.main import cli

CHARTS = (
    "chart-loss",
    "chart-drops",
    "chart-rewards",
    "chart-lengths",
    "chart-tokens",
    "chart-cut-0",
    "chart-cut-1",
)


@pytest.fixture(scope="module")
def demo_wh(tmp_path_factory) -> Warehouse:
    ensure_chromium()  # first, so a machine without it fails fast
    tmp = tmp_path_factory.mktemp("demo")
    wh = Warehouse(tmp / "warehouse")
    config = DemoConfig(
        work_dir=tmp / "models",
        rollouts=4,
        runners=2,
        iterations=2,
        train=replace(DemoConfig().train, max_steps=2),
        timeout_s=180,
    )
    run_demo(wh, config)
    return wh


def _report(wh: Warehouse, out, *args: str) -> str:
    result = CliRunner().invoke(cli, ["--warehouse", str(wh.root), "report", "-o", str(out), *args])
    assert result.exit_code == 0, result.output
    return result.output


def _plotted_traces(driver, chart_id: str) -> int:
    return driver.execute_script(
        "const el = document.getElementById(arguments[0]);"
        "const drawn = el && el.classList.contains('js-plotly-plot') && el.querySelector('svg.main-svg');"
        "return drawn ? el.data.length : -1;",
        chart_id,
    )


def test_the_demo_warehouse_report_draws_its_charts_and_conversations(demo_wh, tmp_path):
    out = tmp_path / "report.html"
    summary = _report(demo_wh, out)
    assert summary.startswith(f"wrote {out} (") and summary.endswith(
        "2 collections, 2 dataset versions, 2 runs\n"
    )
    page = out.read_text()
    assert "<script src" not in page and "<link " not in page  # everything inlined
    with chromium(tmp_path / "profile") as driver:
        driver.get(out.as_uri())
        wait_rendered(driver)
        traces = {c: _plotted_traces(driver, c) for c in CHARTS}
        full_page_screenshot(driver, tmp_path / "report.png")
        assert all(n >= 1 for n in traces.values()), traces
        assert traces["chart-loss"] == 2  # one train curve per run, overlaid
        assert traces["chart-rewards"] == 2  # one histogram per collection
        conversations = driver.find_elements("css selector", "details.conversation")
        assert len(conversations) >= 2
        first = conversations[0]
        assert first.get_attribute("open") is not None
        roles = [e.text.split(" ")[0] for e in first.find_elements("css selector", ".msg .role")]
        assert roles[:2] == ["system", "user"] and "assistant" in roles
        # The run's base model is on disk, so its tokenizer marks trained and masked tokens.
        assert first.find_elements("css selector", ".tokens .tok.trained")
        assert first.find_elements("css selector", ".tokens .tok.masked")
        missing = driver.execute_script(
            "return [...document.querySelectorAll('a[href^=\"#\"]')]"
            ".map(a => a.getAttribute('href').slice(1)).filter(id => !document.getElementById(id));"
        )
        assert missing == []
        links = driver.execute_script(
            "return [...document.querySelectorAll('a[href^=\"#\"]')].map(a => a.getAttribute('href'));"
        )
        assert any(h.startswith("#ds-demo-v") for h in links)  # run -> dataset
        assert any(h.startswith("#col-") for h in links)  # dataset -> collections
        assert any(h.startswith("#ro-") for h in links)  # collection -> rollouts
    assert (tmp_path / "report.png").stat().st_size > 10_000


def test_tool_calls_show_in_the_conversation_viewer(view_wh, tmp_path):
    out = tmp_path / "mixed.html"
    _report(
        view_wh.wh, out, "--dataset", "mixed@v1", "--tokenizer", str(view_wh.model), "--conversations", "4"
    )
    with chromium(tmp_path / "profile") as driver:
        driver.get(out.as_uri())
        wait_rendered(driver)
        texts = [e.get_attribute("textContent") for e in driver.find_elements("css selector", ".toolcall")]
        full_page_screenshot(driver, tmp_path / "mixed.png")
        assert 'tool call get_weather({"city": "Paris"})' in " ".join(texts)
        assert _plotted_traces(driver, "chart-cut-0") == 2
        assert _plotted_traces(driver, "chart-loss") == -1  # no runs: says so instead of an empty chart
        assert driver.find_element("id", "chart-loss").text == "no data for this chart"


def test_export_finds_the_served_models_tokenizer_by_itself(demo_wh, tmp_path):
    """The demo's calls name the served model by its folder: export checks the round trip with it."""
    out = tmp_path / "demo.jsonl"
    result = CliRunner().invoke(cli, ["--warehouse", str(demo_wh.root), "export", "demo@v1", "-o", str(out)])
    assert result.exit_code == 0, result.output
    rows = len(out.read_text().splitlines())
    first, second = result.output.splitlines()
    assert first == f"exported {rows} rows of demo@v1 as openai to {out}"
    # The tiny random model mostly stops at max_tokens: those replies carry no end-of-turn token.
    match = re.fullmatch(
        rf"(\d+) of {rows} rows round-trip to the stored token ids "
        r"with the chat template of \S+/version_0(: .*)?",
        second,
    )
    assert match, second
    if int(match.group(1)) < rows:
        assert "reply cut before its end-of-turn token (a max-tokens stop)" in second


def test_a_message_with_a_comment_and_a_script_tag_keeps_the_page_working(wh, tmp_path):
    """`<!--<script>` in a message and a collection tag: the charts still draw and the text shows
    as text (an alert would make Selenium fail the page)."""
    from tracebank.transform import TransformConfig, transform

    from tests.fixtures.bronze import commit_collection
    from tests.fixtures.proxy_spans import Call, call_spans, reward_span
    from tests.view.test_report import HTML_HOSTILE

    spans = []
    for i, reward in enumerate((1.0, 0.2)):
        call = Call(prompt_ids=[1, 2, 3 + i], response_ids=[4, 5], reply=f"{HTML_HOSTILE} {i}")
        call.messages = [{"role": "user", "content": HTML_HOSTILE}]
        spans += call_spans(f"ro-html-{i}", "at-1", 1, call, 1_700_000_000.0 + i)
        spans.append(reward_span(f"ro-html-{i}", "at-1", 2, reward, 1_700_000_000.5 + i))
    cid = commit_collection(wh, spans, tag=HTML_HOSTILE)
    transform(wh, TransformConfig(name="html", collections=(cid,)))
    from tests.fixtures.layers import commit_layer

    scores = {f"ro-html-{i}": 0.5 + i for i in range(2)}
    commit_layer(
        wh,
        "judge",
        scores,
        cid,
        attempts=dict.fromkeys(scores, "at-1"),
        stds={"ro-html-0": 0.2},
        judge={"model": HTML_HOSTILE, "samples": 2},
    )
    out = tmp_path / "html.html"
    _report(wh, out)
    with chromium(tmp_path / "profile") as driver:
        driver.get(out.as_uri())
        wait_rendered(driver)
        full_page_screenshot(driver, tmp_path / "html.png")
        assert _plotted_traces(driver, "chart-rewards") >= 1
        assert _plotted_traces(driver, "chart-cut-0") >= 1
        assert _plotted_traces(driver, "chart-judge-0") == 1  # judge score against collected reward
        assert _plotted_traces(driver, "chart-spread-0") == 1
        texts = [e.get_attribute("textContent") for e in driver.find_elements("css selector", ".msg")]
        assert any(HTML_HOSTILE in t for t in texts), texts
        assert driver.execute_script("return document.scripts.length") == 3
