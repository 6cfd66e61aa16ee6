"""The training child's spec: a JSON round trip, and a hostile spec file refused in one line."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from tracebank.train import TrainConfig, TrainError
from tracebank.train.spec import ChildSpec

SPEC = ChildSpec(
    config=TrainConfig(dataset="qa", base_model="/models/tiny", output="/out", target_modules=("q_proj",)),
    base_model="/models/tiny",
    splits={"train": ["/wh/d/train.parquet"], "validation": ["/wh/d/validation.parquet"]},
    keep_rows={"train": [0, 2]},
    max_length=64,
    truncate=True,
    max_token_id=120,
    staging_dir="/out.staging",
    scratch_dir="/wh/tmp/train-r1",
    events="/wh/tmp/train-r1/events",
    content_hash="abc",
    logging_dir="/wh/runs/r1/tracker-logs",
    resume_from="/wh/tmp/train-r1/checkpoints/checkpoint-4",
)


def test_a_spec_round_trips_through_its_file(tmp_path):
    path = tmp_path / "spec.json"
    SPEC.write(path)
    assert ChildSpec.read(path) == SPEC
    assert path.stat().st_mode & 0o777 == 0o600
    assert json.loads(path.read_text())["config"]["target_modules"] == ["q_proj"]  # plain JSON


def _hostile(**changes):
    data = SPEC.to_json()
    for key, value in changes.items():
        if value is KeyError:
            del data[key]
        else:
            data[key] = value
    return data


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (_hostile(max_length="64"), "max_length should be int, not str"),
        (_hostile(truncate=1), "truncate should be bool, not int"),
        (_hostile(splits={"train": "/etc"}), "splits.train should be a list, not str"),
        (_hostile(keep_rows={"train": [True]}), "keep_rows.train[0] should be int, not bool"),
        (_hostile(pickle="gANjb3MKc3lzdGVtCi4="), "unknown key pickle"),
        (_hostile(events=KeyError), "missing key events"),
        (_hostile(config={**SPEC.config.to_dict(), "lora_r": "32"}), "config.lora_r should be int, not str"),
        (_hostile(config={**SPEC.config.to_dict(), "shell": "rm"}), "unknown training option(s): shell"),
        (_hostile(config={**SPEC.config.to_dict(), "lora_r": 0}), "LoRA rank must be at least 1"),
        ([1, 2], "it holds a list, not an object"),
    ],
)
def test_a_hostile_spec_is_refused_in_one_line(tmp_path, data, says):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(data))
    with pytest.raises(TrainError) as exc:
        ChildSpec.read(path)
    line = exc.value.one_line()
    assert "\n" not in line and f"training spec {path} is not a training spec: {says}" in line


def test_a_spec_that_is_not_json_is_refused_in_one_line(tmp_path):
    path = tmp_path / "spec.json"
    path.write_bytes(b"\x80\x04\x95 a pickle, not JSON")
    with pytest.raises(TrainError) as exc:
        ChildSpec.read(path)
    assert exc.value.one_line().startswith(f"cannot read training spec {path}: ")
    assert "\n" not in exc.value.one_line()


def test_the_child_refuses_a_bad_spec_with_one_line_and_exit_code(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(_hostile(max_token_id=None)))
    done = subprocess.run(
        [sys.executable, "-P", "-m", "tracebank.train.child", str(path)], capture_output=True, text=True
    )
    assert done.returncode == 1
    assert done.stderr == (
        f"training spec {path} is not a training spec: max_token_id should be int, not NoneType "
        "(the training spec is written by tracebank train; start the run again)\n"
    )


def test_writing_a_spec_never_follows_a_link_planted_in_its_place(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    path = tmp_path / "spec.json"
    path.symlink_to(victim)
    SPEC.write(path)
    assert victim.read_text() == "keep me"
    assert not path.is_symlink() and ChildSpec.read(path) == SPEC


def test_reading_a_spec_never_follows_a_link(tmp_path):
    real = tmp_path / "real.json"
    SPEC.write(real)
    link = tmp_path / "spec.json"
    link.symlink_to(real)
    with pytest.raises(TrainError, match="cannot read training spec"):
        ChildSpec.read(link)
