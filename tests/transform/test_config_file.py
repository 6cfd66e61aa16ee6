"""`transform --config FILE.yaml`: a file builds the version its flags build (same content hash),
flags given on the command line win, and a bad file is one line."""

from __future__ import annotations

import json

import pytest
import yaml
from click.testing import CliRunner
from tracebank.warehouse.storage import Storage

from tests.transform.test_cli import filled  # noqa: F401 (fixture)
from tracebank.cli.main import cli

FLAGS = [
    "--collection", "c1", "--top-fraction", "0.5", "--seed", "3", "--select-by", "rollout",
    "--val-fraction", "0.3", "--max-length", "25", "--dedup", "--merge", "trajectory",
]  # fmt: skip
#: The same options as a file, written the way people write YAML; --top-fraction is overridden.
CONFIG = """
dataset: from-file
collection: [c1]
top_fraction: 0.25        # the command line's --top-fraction 0.5 wins
seed: 3
select-by: rollout
val_fraction: 0.3
max-length: 25
dedup: true
merge: trajectory
"""


def _transform(wh, *args):
    result = CliRunner().invoke(cli, ["-w", str(wh.root), "transform", *args])
    assert result.exit_code == 0, result.output
    return result


def _manifest(wh, name):
    [(_, manifest)] = Storage(wh).dataset_versions(name)
    return manifest


def test_a_config_file_builds_what_its_flags_build(filled, tmp_path):  # noqa: F811
    _transform(filled, "--dataset", "from-flags", *FLAGS)
    config = tmp_path / "f.yaml"
    config.write_text(CONFIG)
    _transform(filled, "--config", str(config), "--top-fraction", "0.5")
    by_flags, by_file = _manifest(filled, "from-flags"), _manifest(filled, "from-file")
    assert by_file.content_hash == by_flags.content_hash
    assert {**by_file.params, "name": "x"} == {**by_flags.params, "name": "x"}
    assert by_file.params["top_fraction"] == 0.5 and by_file.params["merge"] == "trajectory"
    # Without the override the file's own value applies: another version, another hash.
    _transform(filled, "--config", str(config), "--dataset", "file-only")
    assert _manifest(filled, "file-only").params["top_fraction"] == 0.25
    assert _manifest(filled, "file-only").content_hash != by_flags.content_hash


@pytest.mark.parametrize(
    "text, message",
    [
        ("dataset: d\ntop-fractoin: 0.5\n", "has unknown option(s) top-fractoin"),
        ("dataset: d\ntop-fraction: most\n", "'most' is not a valid float"),
        ("dataset: d\nmerge: sideways\n", "'sideways' is not one of 'none', 'trajectory'"),
    ],
)
def test_a_bad_config_file_is_one_line(filled, tmp_path, text, message):  # noqa: F811
    config = tmp_path / "bad.yaml"
    config.write_text(text)
    result = CliRunner().invoke(cli, ["-w", str(filled.root), "transform", "--config", str(config)])
    assert result.exit_code == 2
    assert message in result.output
    assert result.output.strip().splitlines() == [result.output.strip().splitlines()[-1]]
    assert result.output.strip().startswith("Error:")


def _show_yaml(wh, ref):
    result = CliRunner().invoke(cli, ["-w", str(wh.root), "datasets", "show", ref, "--format", "yaml"])
    assert result.exit_code == 0, result.output
    return result.stdout


def test_a_version_keeps_its_config_and_shows_a_file_that_rebuilds_it(filled, tmp_path):  # noqa: F811
    config = tmp_path / "f.yaml"
    config.write_text(CONFIG)
    _transform(filled, "--config", str(config), "--top-fraction", "0.5", "--engine", "local")
    built = _manifest(filled, "from-file")
    assert built.config is not None
    assert built.config["top_fraction"] == 0.5 and built.config["collections"] == ["c1"]
    assert built.config["engine"] == "local" and built.config["agl1"]["max_prompt_length"] == 2048

    shown = _show_yaml(filled, "from-file@v1")
    printed = yaml.safe_load(shown)
    assert printed["dataset"] == "from-file" and printed["collection"] == ["c1"]
    assert printed["top-fraction"] == 0.5 and printed["agl1-level"] == "trajectory"
    replay = tmp_path / "replay.yaml"
    replay.write_text(shown)
    again = _transform(filled, "--config", str(replay))
    assert again.output.startswith(f"identical to from-file@v1 (hash {built.content_hash[:8]})")
    _transform(filled, "--config", str(replay), "--force")
    [_, (_, copy)] = Storage(filled).dataset_versions("from-file")
    assert copy.content_hash == built.content_hash and copy.config == {**built.config, "force": True}


def test_a_version_from_before_config_was_recorded_still_reads_and_replays(filled, tmp_path):  # noqa: F811
    _transform(filled, "--dataset", "old", *FLAGS)
    [(folder, built)] = Storage(filled).dataset_versions("old")
    path = folder / "manifest.json"
    old = json.loads(path.read_text())
    del old["config"]
    path.write_text(json.dumps(old))
    [(_, read)] = Storage(filled).dataset_versions("old")
    assert read.config is None and read.params == built.params and "config" not in read.to_json()
    text = CliRunner().invoke(cli, ["-w", str(filled.root), "datasets", "show", "old"])
    assert text.exit_code == 0 and f"hash         {built.content_hash}" in text.stdout
    replay = tmp_path / "replay.yaml"
    replay.write_text(_show_yaml(filled, "old"))
    assert "force" not in yaml.safe_load(replay.read_text())  # params hold what shapes rows only
    _transform(filled, "--config", str(replay), "--force")
    [_, (_, copy)] = Storage(filled).dataset_versions("old")
    assert copy.content_hash == built.content_hash


def test_a_planted_manifest_replayed_connects_nowhere_it_names(filled, tmp_path, monkeypatch):  # noqa: F811
    """A manifest's `config` is outside the content hash: a co-worker wrote `engine: ray`, an
    address where a listener waits, and `force: true`. `datasets show --format yaml` printed them
    and the replay called ray.init there. Now the file holds what shapes the rows only, names what
    it left out in one comment line, and the replay builds locally (identical: nothing written)."""
    import socket

    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    _transform(filled, "--dataset", "d", *FLAGS)
    [(folder, built)] = Storage(filled).dataset_versions("d")
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        port = listener.getsockname()[1]
        path = folder / "manifest.json"
        manifest = json.loads(path.read_text())
        manifest["config"].update(engine="ray", address=f"127.0.0.1:{port}", force=True)
        path.write_text(json.dumps(manifest))

        shown = _show_yaml(filled, "d@v1")
        printed = yaml.safe_load(shown)
        assert not {"engine", "address", "force"} & set(printed)
        assert "# not replayed (a record never decides them): address, engine, force\n" in shown
        replay = tmp_path / "replay.yaml"
        replay.write_text(shown)
        again = _transform(filled, "--config", str(replay))
        assert again.output.startswith(f"identical to d@v1 (hash {built.content_hash[:8]})")
        with pytest.raises(BlockingIOError):
            listener.accept()  # nobody connected
    assert len(Storage(filled).dataset_versions("d")) == 1
