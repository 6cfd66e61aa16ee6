"""`Dataset`: a committed version's facts and rows as Arrow, Polars and Hugging Face datasets."""

from __future__ import annotations

import pytest
from tracebank.core.errors import TracebankError, UsageError

import tracebank
from tests.api.warehouses import build_base


@pytest.fixture(scope="module")
def wh(tmp_path_factory):
    wh = tracebank.open(build_base(tmp_path_factory.mktemp("ds") / "warehouse"))
    wh.transform("sft", collections=["c1"], val_fraction=0.5, seed=1)
    return wh


def test_a_version_s_facts(wh):
    ds = wh.dataset("sft")
    assert (ds.name, ds.version, str(ds), ds.ref == wh.dataset("sft@v1").ref) == ("sft", 1, "sft@v1", True)
    assert ds.hash == ds.manifest["content_hash"] and len(ds.hash) == 64
    assert ds.rows == ds.manifest["rows"] == 6 and ds.counts == ds.manifest["counts"]
    assert ds.splits == ["train", "validation"] and not ds.identical


def test_rows_as_arrow_polars_and_hugging_face(wh):
    ds = wh.dataset("sft@v1")
    train, validation = ds.to_arrow(), ds.to_arrow("validation")
    assert train.num_rows + validation.num_rows == ds.rows and train.num_rows and validation.num_rows
    assert ds.to_polars().to_arrow().to_pylist() == train.to_pylist()
    assert ds.to_hf().num_rows == train.num_rows and ds.to_hf()["input_ids"] == train["input_ids"].to_pylist()
    every = ds.to_hf(split=None)
    assert dict(every.num_rows) == {"train": train.num_rows, "validation": validation.num_rows}


def test_an_unknown_split_or_version_is_one_line(wh):
    ds = wh.dataset("sft")
    for read in (ds.to_arrow, ds.to_polars, ds.to_hf, ds.files):
        with pytest.raises(UsageError) as raised:
            read("test")
        assert raised.value.one_line() == "sft@v1 has no split 'test' (it has train, validation)"
    for ref in ("sft@v9", "nothing", "../x"):
        with pytest.raises(TracebankError) as missing:
            wh.dataset(ref)
        assert "\n" not in missing.value.one_line()
