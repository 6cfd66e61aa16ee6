"""`tracebank show`: rollouts and dataset rows as conversations, exact output."""

from __future__ import annotations

from click.testing import CliRunner

from tracebank.cli.main import cli

SYSTEM_LINE = "  system: You are a helpful assistant. Solve the task and reply with the number only."


def _show(view_wh, *args):
    return CliRunner().invoke(cli, ["--warehouse", str(view_wh.wh.root), "show", *args])


def test_a_tool_calling_rollout_reads_as_a_conversation(view_wh):
    result = _show(view_wh, "ro-tool")
    assert result.exit_code == 0, result.output
    assert result.output == "\n".join(
        [
            f"rollout ro-tool · attempt at-tool · collection {view_wh.mixed_collection} · final reward 0.9",
            'task: {"task": "ro-tool"}',
            "── call 1 · seq 1 · tiny-qwen · prompt 15 tok · response 26 tok",
            "  tools: get_weather",
            SYSTEM_LINE,
            "  user: What is the weather in Paris?",
            '  assistant → tool call get_weather({"city": "Paris"}) [call_1]',
            "── call 2 · seq 2 · tiny-qwen · prompt 52 tok · response 16 tok",
            "  (… 3 earlier messages, as above)",
            "  tool [call_1]: sunny, 21 C",
            "  assistant: It is sunny, 21 C.",
            "── reward 0.9 (primary) · seq 3",
            "",
        ]
    )


def test_best_and_worst_rank_rollouts_by_final_reward(view_wh):
    worst = _show(view_wh, "--worst", "2")
    assert worst.exit_code == 0, worst.output
    heads = [line for line in worst.output.splitlines() if line.startswith("rollout ")]
    assert [h.split(" · ")[0] for h in heads] == ["rollout ro-cut", "rollout ro-byte"]
    assert heads[0].endswith("final reward 0.1") and heads[1].endswith("final reward 0.2")
    best = _show(view_wh, "--best", "1")
    assert best.output.splitlines()[0].endswith("final reward 1")


def test_a_dataset_row_with_a_tokenizer_marks_the_trained_tokens(view_wh):
    result = _show(view_wh, "--dataset", "mixed@v1", "--row", "2", "--tokenizer", str(view_wh.model))
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert lines[0].startswith("mixed@v1 row 2 (train) · reward ")
    assert "── tokens (legend: [-masked (no loss)-] {+trained+})" in lines
    tokens = result.output.split("{+trained+})\n", 1)[1]
    # Exactly one trained stretch, the reply, after the masked prompt and generation header: the
    # marks are inspect's (view.tokens), one style for every view of a row's tokens.
    assert tokens.count("{+") == 1 and tokens.count("+}") == 1
    assert tokens.lstrip().startswith("[-<|im_start|>system")
    assert tokens.split("{+")[0].endswith("<|im_start|>assistant\n  -]")  # the block is indented


def test_a_prefix_names_a_rollout_and_unknown_ones_are_one_line(view_wh):
    assert _show(view_wh, "ro-to").output.startswith("rollout ro-tool ·")
    missing = _show(view_wh, "nope")
    assert missing.exit_code == 1
    assert missing.output == (
        "Error: no rollout 'nope' in the warehouse "
        '(list them with `tracebank sql "SELECT rollout_id FROM rollouts"`)\n'
    )


def test_exactly_one_thing_to_show(view_wh):
    result = _show(view_wh)
    assert result.exit_code == 2
    assert result.output == (
        "Error: choose exactly one of a ROLLOUT id, --best N, --worst N or --dataset NAME@vN "
        "(e.g. `tracebank show --best 3`)\n"
    )


def test_a_row_past_the_end_says_how_many_there_are(view_wh):
    result = _show(view_wh, "--dataset", "qa", "--row", "99")
    assert result.exit_code == 1
    assert result.output == "Error: qa@v1 has 16 rows; no row 99 (use --row 0..15)\n"
