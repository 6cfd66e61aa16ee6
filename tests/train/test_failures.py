"""Every way a run can fail: one line, a non-zero exit, the run recorded failed, no output written."""

from __future__ import annotations

import os
import shutil
import signal

import pytest
from tracebank.core.errors import CorruptFileError, NotFoundError
from tracebank.core.events import ChildStarted, Event, TrainBegin
from tracebank.train import TrainConfig, TrainError, train
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

from tests.fixtures.datasets import QA_PAIRS, qa_rows, write_dataset
from tests.train.conftest import FAST


@pytest.fixture
def wh(tmp_path, tokenizer):
    wh = Warehouse(tmp_path / "wh").init()
    write_dataset(wh, "qa", qa_rows(tokenizer, QA_PAIRS))
    return wh


def _config(tmp_path, model, **overrides):
    return TrainConfig(
        **{"dataset": "qa", "base_model": str(model), "output": str(tmp_path / "out"), **FAST, **overrides}
    )


def _only_run(wh):
    runs = Storage(wh).runs()
    assert len(runs) == 1
    return runs[0][1].to_json()


def _assert_failed(wh, tmp_path, exc, fragment):
    message = exc.value.one_line()
    assert "\n" not in message and fragment in message
    record = _only_run(wh)
    assert record["status"] == "failed" and fragment in record["error"] and record["finished_at"]
    assert not (tmp_path / "out").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.tmp-")]  # staging removed
    return record


def test_unknown_dataset_starts_no_run(wh, tmp_path, tiny_model):
    with pytest.raises(NotFoundError) as exc:
        train(wh, _config(tmp_path, tiny_model, dataset="nope"))
    assert exc.value.one_line().startswith("no dataset named 'nope'")
    assert Storage(wh).runs() == []


def test_unknown_version_starts_no_run(wh, tmp_path, tiny_model):
    with pytest.raises(NotFoundError, match="qa@v7 does not exist"):
        train(wh, _config(tmp_path, tiny_model, dataset="qa@v7"))
    assert Storage(wh).runs() == []


def test_tampered_file_fails_before_training(wh, tmp_path, tiny_model):
    path = wh.version_dir("qa", 1) / "train.parquet"
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, different content
    path.write_bytes(bytes(data))
    events: list[Event] = []
    with pytest.raises(CorruptFileError) as exc:
        train(wh, _config(tmp_path, tiny_model), on_event=events.append)
    _assert_failed(wh, tmp_path, exc, "does not match its sha256")
    assert not [e for e in events if e.kind in ("started", "checked")]  # no child, no checks


def test_token_id_beyond_vocabulary(tmp_path, tiny_model, tokenizer):
    wh = Warehouse(tmp_path / "wh").init()
    rows = qa_rows(tokenizer, QA_PAIRS)
    rows[3]["input_ids"][5] = 1000  # the tiny vocabulary has 384 entries
    write_dataset(wh, "qa", rows)
    with pytest.raises(TrainError) as exc:
        train(wh, _config(tmp_path, tiny_model))
    _assert_failed(wh, tmp_path, exc, "token id 1000, outside")
    assert "another tokenizer" in exc.value.one_line()


def test_lora_targets_that_match_nothing(wh, tmp_path, tiny_model):
    with pytest.raises(TrainError) as exc:
        train(wh, _config(tmp_path, tiny_model, target_modules=("q_proj", "query_key_value")))
    record = _assert_failed(wh, tmp_path, exc, "LoRA target(s) query_key_value match no module")
    assert "q_proj" in exc.value.hint and record["model"] == {}


def test_rows_longer_than_max_length_are_refused_without_truncate(wh, tmp_path, tiny_model):
    with pytest.raises(TrainError) as exc:
        train(wh, _config(tmp_path, tiny_model, max_length=20))
    _assert_failed(wh, tmp_path, exc, "longer than --max-length 20")
    assert "--truncate" in exc.value.hint


def test_child_dies_loading_corrupt_weights(wh, tmp_path, tiny_model):
    broken = tmp_path / "broken-model"
    shutil.copytree(tiny_model, broken)
    weights = broken / "model.safetensors"
    with open(weights, "r+b") as fh:
        fh.truncate(weights.stat().st_size // 2)  # header intact, tensors cut off
    with pytest.raises(TrainError) as exc:
        train(wh, _config(tmp_path, broken))
    record = _assert_failed(wh, tmp_path, exc, "training process failed: SafetensorError")
    log = open(record["log_file"]).read()
    assert "Traceback" in log


def test_child_killed_by_a_signal(wh, tmp_path, tiny_model):
    """An out-of-memory kill, in effect: the child dies without a word and the parent says so."""
    pid: dict[str, int] = {}

    def on_event(event):
        if isinstance(event, ChildStarted):
            pid["child"] = event.pid
        if isinstance(event, TrainBegin):
            os.kill(pid["child"], signal.SIGKILL)

    with pytest.raises(TrainError) as exc:
        train(wh, _config(tmp_path, tiny_model, max_steps=100_000), on_event=on_event)
    _assert_failed(wh, tmp_path, exc, "killed by SIGKILL")


def test_timeout_kills_the_child(wh, tmp_path, tiny_model):
    pid: dict[str, int] = {}

    def on_event(event):
        if isinstance(event, ChildStarted):
            pid["child"] = event.pid

    with pytest.raises(TrainError) as exc:
        train(wh, _config(tmp_path, tiny_model, max_steps=100_000, timeout=3), on_event=on_event)
    _assert_failed(wh, tmp_path, exc, "timed out after 3s")
    if "child" in pid:
        with pytest.raises(ProcessLookupError):
            os.kill(pid["child"], 0)


def test_bad_config_is_rejected_before_anything(wh, tmp_path, tiny_model):
    from tracebank.train import TrainConfigError

    with pytest.raises(TrainConfigError, match="learning rate must be positive") as exc:
        train(wh, _config(tmp_path, tiny_model, learning_rate=-1.0))
    assert exc.value.exit_code == 2
    assert Storage(wh).runs() == []


def test_non_empty_output_is_not_overwritten(wh, tmp_path, tiny_model):
    from tracebank.core.errors import UsageError

    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    with pytest.raises(UsageError, match="exists and was not written by tracebank train"):
        train(wh, _config(tmp_path, tiny_model))
    assert (tmp_path / "out" / "keep.txt").read_text() == "mine"
