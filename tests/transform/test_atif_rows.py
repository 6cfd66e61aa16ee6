"""Issue 29: an ATIF trajectory whose steps carry the engine's ids becomes token-faithful rows: each
agent step's row is its ``prompt_token_ids`` + ``completion_token_ids`` as recorded, the prompt masked,
and the steps' and the trajectory's rewards carried as for any rollout."""

from __future__ import annotations

import json

import pyarrow.parquet as pq

import tracebank
from tests.collect.test_formats_atif import SERVED, trajectory

IGNORE = -100


def test_an_atif_trajectory_with_ids_gives_rows_of_those_very_ids(tmp_path):
    doc = trajectory("run-ids")
    second = {"prompt_token_ids": [7, 8, 9, 10], "completion_token_ids": [11, 12]}
    doc["steps"][3]["metrics"] = second
    del doc["steps"][4]  # a step without ids would be a text call, which needs --tokenizer
    path = tmp_path / "run.json"
    path.write_text(json.dumps(doc))
    wh = tracebank.open(tmp_path / "warehouse")
    assert wh.collect(str(path)).store.startswith("atif:")  # the format is sniffed
    version = wh.transform("atif", top_fraction=1.0, val_fraction=0.0)
    files = [version.folder / f["path"] for f in version.manifest["files"] if f.get("split")]
    rows = sorted((r for p in files for r in pq.read_table(p).to_pylist()), key=lambda r: len(r["input_ids"]))
    first = (SERVED["prompt_token_ids"], SERVED["choices"][0]["token_ids"])
    want = sorted(
        [first, (second["prompt_token_ids"], second["completion_token_ids"])], key=lambda p: len(p[0])
    )
    assert [r["input_ids"] for r in rows] == [p + c for p, c in want]
    assert [r["labels"] for r in rows] == [[IGNORE] * len(p) + c for p, c in want]
    # the step's own reward (0.25) is the first call's; the trajectory's (1.0) reaches the last
    reward = {tuple(r["input_ids"]): r["reward"] for r in rows}
    assert reward[tuple(first[0] + first[1])] == 0.25
    assert reward[tuple(second["prompt_token_ids"] + second["completion_token_ids"])] == 1.0
    assert wh.collect(str(path)).collection_id is None  # re-importing adds nothing
