"""`transform --config FILE.yaml`: a file builds the version its flags build (same content hash),
flags given on the command line win, and a bad file is one line."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from tracebank.warehouse import catalog

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
    [(_, manifest)] = catalog.dataset_versions(wh, name)
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
