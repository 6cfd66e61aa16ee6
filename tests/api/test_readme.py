"""The README's "Python" section runs as written (issue 28): against a real `agl store` filled with
rollouts that carry token ids and rewards, and the tiny model as ``models/v0``; its transform has
the content hash ``tracebank transform`` gives for the same flags."""

from __future__ import annotations

import asyncio
import random
import re
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from tests.collect.helpers import ROOT, client
from tests.fixtures.fill import add_rollout
from tests.fixtures.proxy_spans import random_rollout_spans
from tracebank.cli.main import cli

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")

README_STORE = "http://127.0.0.1:4747"
ROLLOUTS = 16
SCORERS = '''
def shorter(rollout):
    """Prefers shorter final answers."""
    return -float(len(rollout.final_response or ""))
'''


def readme_block() -> str:
    """The first ``python`` block of the README's "## Python" section, as the README holds it."""
    section = (ROOT / "README.md").read_text().split("\n## Python\n", 1)[1].split("\n## ", 1)[0]
    found = re.search(r"```python\n(.*?)\n```", section, re.S)
    assert found, "README.md's Python section has no ```python block"
    return found.group(1)


def fill(url: str, n: int, seed: int) -> None:
    """``n`` succeeded rollouts of two proxied calls each (token ids the tiny model's vocabulary
    holds) and a reward."""
    rng = random.Random(seed)

    async def run() -> None:
        c = client(url)
        try:
            for _ in range(n):
                await add_rollout(
                    c, lambda r, a: random_rollout_spans(r, a, rng, vocab=300, reward=rng.random())
                )
        finally:
            await c.close()

    asyncio.run(run())


def transform_by_cli(location: Path, *flags: str) -> str:
    out = CliRunner().invoke(cli, ["--warehouse", str(location), "transform", *flags])
    assert out.exit_code == 0, out.output
    return out.stdout


def test_the_readme_python_block_runs_and_transforms_as_the_cli_does(fresh_store_url, tmp_path, monkeypatch):
    from tracebank.train.tiny_model import build_tiny_model

    fill(fresh_store_url, ROLLOUTS, seed=3)
    work = tmp_path / "work"
    work.mkdir()
    build_tiny_model(work / "models" / "v0", seed=0, initializer_range=0.2)
    (work / "my_scorers.py").write_text(SCORERS)
    monkeypatch.chdir(work)
    monkeypatch.syspath_prepend(str(work))

    block = readme_block()
    assert README_STORE in block
    # The only substitution: this test's store listens on a free loopback port, not on 4747.
    namespace: dict = {"__name__": "readme"}
    exec(compile(block.replace(README_STORE, fresh_store_url), "README.md", "exec"), namespace)

    v, run = namespace["v"], namespace["run"]
    assert (v.name, v.version, str(v.ref)) == ("gsm", 1, "gsm@v1") and v.rows > 0
    assert run.status == "succeeded" and run.dataset == "gsm@v1"
    assert (work / "models" / "v1").is_dir()
    assert (work / "gsm.jsonl").read_text().count("\n") == v.rows
    assert (work / "report.html").stat().st_size > 0
    scored = namespace["wh"].sql("SELECT count(*) FROM reward_scores WHERE layer = 'short'").rows()
    assert scored == [(ROLLOUTS,)]

    # The CLI on an identical copy of the warehouse: the same flags give the same content hash,
    # so it finds that version again; forced, it writes gsm@v2 with that hash.
    copy = tmp_path / "copy"
    shutil.copytree(work / "warehouse", copy)
    flags = ("--dataset", "gsm", "--top-fraction", "0.5")
    assert transform_by_cli(copy, *flags).startswith("identical to gsm@v1")
    forced = transform_by_cli(copy, *flags, "--force")
    assert forced.startswith("wrote gsm@v2")
    from tracebank import open as open_warehouse

    assert open_warehouse(copy).dataset("gsm@v2").hash == v.hash
