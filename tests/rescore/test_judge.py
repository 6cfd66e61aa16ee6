"""`rescore --judge`: an LLM judge's G-Eval score per rollout, checked against a transformers forward
pass of the same tiny model; samples, groups, endpoints without log-probabilities, down or slow."""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import time

import pytest
from tracebank.rescore import RescoreConfig, rescore
from tracebank.rescore.config import JudgeConfig
from tracebank.rescore.errors import RescoreUsageError
from tracebank.rescore.inputs import collection_rollouts
from tracebank.serve.process import free_port
from tracebank.warehouse.query import run_sql
from tracebank.warehouse.storage import Storage

from tests.fixtures.preference import commit_03, plan
from tests.rescore.judge_endpoints import chat_answer, endpoint

RUBRIC = "Rate the answer to the task from 1 to 5.\nTask: {task}\nAnswer: {answer}\nScore (1-5):"
GROUP_RUBRIC = "Task: {task}\n{candidates}\nHow good is candidate {index}, 0 to 9? Score:"


@pytest.fixture(scope="module")
def judge_model(tmp_path_factory):
    """The tiny model with weights large enough that its next-token distribution is not flat."""
    from tracebank.train.tiny_model import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("judge"), seed=3, initializer_range=0.3)


@pytest.fixture
def rollouts(wh):
    planned = plan(seed=5, tasks=4)
    commit_03(wh, planned)
    return planned


@pytest.fixture
def rubric(tmp_path):
    path = tmp_path / "rubric.txt"
    path.write_text(RUBRIC)
    return path


def judged(wh, name, **judge):
    return rescore(wh, RescoreConfig(name=name, judging=JudgeConfig(**judge)))


def layer(wh, name):
    sql = "SELECT * FROM reward_scores WHERE layer = ? ORDER BY rollout_id"
    return {r["rollout_id"]: r for r in run_sql(wh, sql, [name]).to_pylist()}


def oracle(model_dir, prompts: dict[str, str], scale: list[int]) -> dict[str, float]:
    """Softmax over the scale's tokens at the end of each prompt (as one chat user turn)."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(model_dir))
    model = AutoModelForCausalLM.from_pretrained(str(model_dir)).eval()
    ids = [tok.convert_tokens_to_ids(str(v)) for v in scale]
    out = {}
    for key, prompt in prompts.items():
        text = tok.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        with torch.no_grad():
            logits = model(**tok(text, return_tensors="pt", add_special_tokens=False)).logits[0, -1]
        p = torch.softmax(logits[ids].double(), dim=-1).tolist()
        out[key] = sum(v * q for v, q in zip(scale, p, strict=True))
    return out


def archived(wh):
    ((folder, manifest),) = Storage(wh).collections()
    return {r.rollout_id: r for r in collection_rollouts(wh, folder.name, manifest)}


def test_scores_equal_a_transformers_forward_pass_and_the_same_judge_is_identical(
    wh, rollouts, rubric, judge_model
):
    result = judged(wh, "judge", judge=str(judge_model), rubric=str(rubric))
    records = archived(wh)
    prompts = {
        rid: RUBRIC.replace("{task}", json.dumps(r.task)).replace(
            "{answer}", r.final_response or "(no answer)"
        )
        for rid, r in records.items()
    }
    want = oracle(judge_model, prompts, [1, 2, 3, 4, 5])
    rows = layer(wh, "judge")
    assert set(rows) == set(want) and result.record.counts["scored"] == len(rollouts)
    for rid, score in want.items():
        assert rows[rid]["score"] == pytest.approx(score, rel=1e-9, abs=1e-9)
        assert rows[rid]["samples"] is None and rows[rid]["samples_std"] is None
    assert max(want.values()) - min(want.values()) > 1e-3  # the scores depend on the rollout
    judge = result.record.judge
    assert judge["rubric_sha256"] == hashlib.sha256(rubric.read_bytes()).hexdigest()
    assert judge["model_sha256"] and judge["url"] is None and judge["scale"] == "1-5"
    assert result.record.scorer == f"judge:{judge_model.resolve()}"

    again = judged(wh, "judge", judge=str(judge_model), rubric=str(rubric))
    assert again.identical and "identical to judge@v1 (judge" in again.summary()
    rubric.write_text(RUBRIC + " ")
    assert judged(wh, "judge", judge=str(judge_model), rubric=str(rubric)).ref == "judge@v2"
    (judge_model / "extra.txt").write_text("a changed model folder")
    try:
        assert judged(wh, "judge", judge=str(judge_model), rubric=str(rubric)).ref == "judge@v3"
    finally:
        (judge_model / "extra.txt").unlink()


def test_samples_are_kept_with_their_mean_and_spread(wh, rollouts, rubric, judge_model):
    result = judged(wh, "s", judge=str(judge_model), rubric=str(rubric), samples=40, seed=7)
    rows = layer(wh, "s")
    assert result.record.judge["samples"] == 40 and result.record.judge["seed"] == 7
    spreads = []
    for row in rows.values():
        samples = row["samples"]
        assert len(samples) == 40 and set(samples) <= {1.0, 2.0, 3.0, 4.0, 5.0}
        assert row["samples_mean"] == pytest.approx(statistics.fmean(samples))
        assert row["samples_std"] == pytest.approx(statistics.pstdev(samples))
        assert abs(row["samples_mean"] - row["score"]) < 1.5  # 40 draws of the distribution score weights
        spreads.append(row["samples_std"])
    assert max(spreads) > 0
    forced = rescore(
        wh,
        RescoreConfig(
            name="s", force=True, judging=JudgeConfig(str(judge_model), str(rubric), samples=40, seed=7)
        ),
    )
    assert forced.ref == "s@v2"
    again = run_sql(
        wh, "SELECT rollout_id, samples FROM reward_scores WHERE version = 2 ORDER BY 1"
    ).to_pylist()
    assert {r["rollout_id"]: r["samples"] for r in again} == {k: r["samples"] for k, r in rows.items()}


def test_group_scores_each_rollout_against_its_task_mates(wh, rollouts, tmp_path, judge_model):
    path = tmp_path / "group.txt"
    path.write_text(GROUP_RUBRIC)
    result = judged(wh, "g", judge=str(judge_model), rubric=str(path), scale="0-9", group=True)
    records = archived(wh)
    by_task: dict[str, list[str]] = {}
    for rid in sorted(records):
        by_task.setdefault(json.dumps(records[rid].task), []).append(rid)
    prompts = {}
    for task, rids in by_task.items():
        shown = "\n\n".join(f"Candidate {i}:\n{records[r].final_response}" for i, r in enumerate(rids, 1))
        for i, rid in enumerate(rids, 1):
            prompts[rid] = (
                GROUP_RUBRIC.replace("{task}", task).replace("{candidates}", shown).replace("{index}", str(i))
            )
    want = oracle(judge_model, prompts, list(range(10)))
    rows = layer(wh, "g")
    assert result.record.judge["group"] is True and len(rows) == len(rollouts)
    assert any(len(rids) > 1 for rids in by_task.values())
    for rid, score in want.items():
        assert rows[rid]["score"] == pytest.approx(score, rel=1e-9, abs=1e-9)
    plain = tmp_path / "plain.txt"
    plain.write_text(RUBRIC)
    with pytest.raises(RescoreUsageError, match="--group needs a rubric"):
        judged(wh, "g2", judge=str(judge_model), rubric=str(plain), group=True)


def test_an_endpoint_with_logprobs_is_weighted_and_without_them_its_number_is_parsed(
    wh, rollouts, rubric, monkeypatch
):
    monkeypatch.setenv("TRACEBANK_JUDGE_KEY", "sk-secret-judge-key")
    top = [("4", math.log(0.5)), (" 2", math.log(0.25)), ("x", math.log(0.2)), ("2", math.log(0.05))]
    with endpoint(chat_answer("4", top)) as server:
        weighted = judged(wh, "w", judge="big-judge", rubric=str(rubric), judge_url=server.url + "/?k=sk-q")
    scores = [r["score"] for r in layer(wh, "w").values()]
    assert scores == [pytest.approx((4 * 0.5 + 2 * 0.3) / 0.8)] * len(rollouts)
    request = server.seen[0]
    assert request["authorization"] == "Bearer sk-secret-judge-key"
    assert request["path"] == "/v1/chat/completions?k=sk-q"
    assert request["body"]["model"] == "big-judge" and request["body"]["top_logprobs"] == 20
    assert 'Task: {"task": "t0' in request["body"]["messages"][0]["content"]
    manifest = (Storage(wh).reward_layers("w")[0][0] / "manifest.json").read_text()
    assert "sk-" not in manifest and weighted.record.judge["url"] == server.url

    with endpoint(chat_answer("Score: 3. Fine.")) as server:
        judged(wh, "parsed", judge="m", rubric=str(rubric), judge_url=server.url, samples=2)
    rows = layer(wh, "parsed").values()
    assert all(r["score"] == 3.0 and r["samples"] == [3.0, 3.0] and r["samples_std"] == 0 for r in rows)
    temperatures = sorted(s["body"]["temperature"] for s in server.seen)  # a greedy call and 2 samples each
    assert temperatures == [0.0] * len(rollouts) + [1.0] * 2 * len(rollouts)

    with endpoint(chat_answer("It is very good, 17 of 10")) as server:
        off = judged(wh, "off", judge="m", rubric=str(rubric), judge_url=server.url)
    assert off.record.counts["failures"] == {
        "JudgeFailed: the judge's number is off the scale 1-5": len(rollouts)
    }


def test_a_down_slow_or_redirecting_endpoint_fails_each_rollout_not_the_layer(
    wh, rollouts, rubric, monkeypatch
):
    monkeypatch.setenv("TRACEBANK_JUDGE_KEY", "sk-secret-judge-key")
    down = judged(wh, "down", judge="m", rubric=str(rubric), judge_url=f"http://127.0.0.1:{free_port()}/v1")
    reason = "JudgeFailed: cannot reach the judge endpoint (ConnectionRefusedError)"
    assert down.record.counts["failures"] == {reason: len(rollouts)} and down.record.counts["scored"] == 0
    assert all(r["error"] == reason for r in layer(wh, "down").values())

    with endpoint(chat_answer("5"), sleep=3) as server:
        start = time.monotonic()
        slow = rescore(
            wh,
            RescoreConfig(
                name="slow",
                workers=len(rollouts),
                judging=JudgeConfig("m", str(rubric), judge_url=server.url, judge_timeout_s=0.5),
            ),
        )
        took = time.monotonic() - start
    assert slow.record.counts["failures"] == {
        "JudgeFailed: the judge endpoint gave no answer within 0.5s": len(rollouts)
    }
    assert took < 2.5 and "failed (first: JudgeFailed" in slow.summary()

    with (
        endpoint(chat_answer("5")) as elsewhere,
        endpoint(redirect=elsewhere.url + "/chat/completions") as hop,
    ):
        moved = judged(wh, "moved", judge="m", rubric=str(rubric), judge_url=hop.url)
    assert moved.record.counts["failures"] == {
        "JudgeFailed: the judge endpoint answered HTTP 307": len(rollouts)
    }
    assert elsewhere.seen == []  # the key never follows a redirect


@pytest.mark.parametrize(
    ("judge", "message"),
    [
        ({"scale": "5-1"}, "--scale must be LO-HI"),
        ({"scale": "1-10"}, "--scale must be LO-HI"),
        ({"samples": -1}, "--samples must be between"),
        ({"judge_timeout_s": 0}, "--judge-timeout must be above 0"),
        ({"judge_url": "file:///etc/passwd"}, "--judge-url must be an http"),
        ({"judge_url": "http://user:pw@127.0.0.1/v1"}, "--judge-url holds credentials"),
        ({"rubric": "/nonexistent/rubric.txt"}, "does not exist"),
        ({"judge": "/nonexistent/model"}, "is not a local model folder"),
    ],
)
def test_bad_judge_options_are_one_line(wh, rollouts, rubric, judge, message):
    options = {"judge": "m", "rubric": str(rubric), "judge_url": "http://127.0.0.1:9/v1", **judge}
    if judge.get("judge"):
        options.pop("judge_url")
    with pytest.raises(RescoreUsageError, match=message):
        judged(wh, "bad", **options)


def test_a_folder_that_is_no_model_is_one_line(wh, rollouts, rubric, tmp_path):
    (tmp_path / "empty").mkdir()
    with pytest.raises(RescoreUsageError, match="cannot load judge model .*empty"):
        judged(wh, "x", judge=str(tmp_path / "empty"), rubric=str(rubric))


def test_a_rubric_is_not_a_template_language(wh, rollouts, tmp_path, monkeypatch):
    path = tmp_path / "r.txt"
    path.write_text("{task.__class__} {0} {answer!r} ${HOME} {{answer}} {conversation}\nScore:")
    with endpoint(chat_answer("2")) as server:
        judged(wh, "lit", judge="m", rubric=str(path), judge_url=server.url)
    prompt = server.seen[0]["body"]["messages"][0]["content"]
    assert prompt.startswith("{task.__class__} {0} {answer!r} ${HOME} {") and "USER: solve t0" in prompt
    with pytest.raises(RescoreUsageError, match="names none of"):
        path.write_text("no slot at all")
        judged(wh, "none", judge="m", rubric=str(path), judge_url=server.url)
    with pytest.raises(RescoreUsageError, match="exactly one of --scorer and --judge"):
        rescore(wh, RescoreConfig(name="x", scorer="m:f", judging=JudgeConfig("m", str(path))))


def test_a_served_judge_weighs_the_scale_tokens_among_its_top_logprobs(wh, rollouts, rubric, judge_model):
    """The CPU server (vLLM's wire format) reports 20 alternatives: the score is the forward pass's
    distribution over the scale's tokens among its 20 most likely, renormalised."""
    import torch
    from tracebank.serve.process import start_cpu_server
    from transformers import AutoModelForCausalLM, AutoTokenizer

    with start_cpu_server(judge_model, served_model_name="judge", threads=1) as server:
        result = judged(wh, "served", judge="judge", rubric=str(rubric), judge_url=server.base_url)
    tok = AutoTokenizer.from_pretrained(str(judge_model))
    model = AutoModelForCausalLM.from_pretrained(str(judge_model)).eval()
    rows, compared = layer(wh, "served"), 0
    for rid, r in archived(wh).items():
        prompt = RUBRIC.replace("{task}", json.dumps(r.task)).replace("{answer}", r.final_response or "")
        text = tok.apply_chat_template(
            [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=False
        )
        with torch.no_grad():
            logits = model(**tok(text, return_tensors="pt", add_special_tokens=False)).logits[0, -1]
        top = set(torch.topk(logits, 20).indices.tolist())
        probs = torch.softmax(logits.double(), dim=-1)
        shown = {v: float(probs[tok.convert_tokens_to_ids(str(v))]) for v in range(1, 6)}
        shown = {v: p for v, p in shown.items() if tok.convert_tokens_to_ids(str(v)) in top}
        if shown:
            compared += 1
            want = sum(v * p for v, p in shown.items()) / sum(shown.values())
            assert rows[rid]["score"] == pytest.approx(want, rel=1e-4)
        else:  # no scale token among the 20: the number the judge wrote, or a counted failure
            assert rows[rid]["score"] is not None or rows[rid]["error"].startswith("JudgeFailed: ")
    assert compared > 0 and result.record.judge["url"] == server.base_url
