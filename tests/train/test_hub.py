"""``--base-model ORG/NAME[@REVISION]`` through a Hugging Face cache folder built from the tiny local
model (no network): cached ids train and record their commit, an id not cached is one line."""

from __future__ import annotations

import shutil

import pytest
from click.testing import CliRunner
from tracebank.train import TrainConfig, train
from tracebank.train.hub import resolve_base_model

from tracebank.cli.main import cli

REPO = "tiny-org/tiny-qwen"
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def hf_home(tiny_model, tmp_path, monkeypatch):
    """``$HF_HOME`` holding the tiny model as the hub cache lays out a downloaded snapshot."""
    home = tmp_path / "hf-home"
    repo = home / "hub" / ("models--" + REPO.replace("/", "--"))
    shutil.copytree(tiny_model, repo / "snapshots" / COMMIT)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(COMMIT)
    monkeypatch.setenv("HF_HOME", str(home))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.chdir(tmp_path)  # no local folder named tiny-org/ shadows the id
    return home


@pytest.mark.parametrize("name", [REPO, f"{REPO}@main", f"{REPO}@{COMMIT}"])
def test_a_cached_hub_id_resolves_to_its_snapshot(hf_home, name):
    model = resolve_base_model(name)
    assert model.path == hf_home / "hub" / "models--tiny-org--tiny-qwen" / "snapshots" / COMMIT
    assert (model.revision, model.pinned) == (COMMIT, f"{REPO}@{COMMIT}")


def test_a_local_folder_wins_and_is_not_a_hub_id(tiny_model):
    model = resolve_base_model(str(tiny_model))
    assert model.path == tiny_model.resolve() and model.revision is None


def test_a_run_on_a_hub_id_records_the_resolved_revision(qa_wh, hf_home, tmp_path):
    config = TrainConfig(
        dataset="qa@v1",
        base_model=REPO,
        output=str(tmp_path / "out"),
        save="lora",
        max_steps=1,
        eval_strategy="no",
    )
    record = train(qa_wh, config)
    assert record.status == "succeeded"
    assert (record.base_model, record.base_model_revision) == (f"{REPO}@{COMMIT}", COMMIT)


@pytest.mark.parametrize("name", ["tiny-org/other", f"{REPO}@v2"])
def test_an_id_not_in_the_cache_is_one_line_saying_how_to_fetch_it(qa_wh, hf_home, tmp_path, name):
    args = [
        "-w",
        str(qa_wh.root),
        "train",
        "--dataset",
        "qa",
        "--base-model",
        name,
        "--output",
        str(tmp_path / "o"),
    ]
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"Error: base model {name} is not in the Hugging Face cache"
    )
    assert "hf download " in lines[0] and str(hf_home / "hub") in lines[0]
