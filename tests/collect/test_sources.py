"""The typed sources of the one collect entry, and the CLI that builds them."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from tracebank.collect import (
    Agl1ServerSource,
    CollectConfig,
    Source,
    SpoolSource,
    StoreSource,
    collect,
    server_source,
)
from tracebank.collect.errors import CollectUsageError
from tracebank.collect.sources import as_source
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

from tests.collect.helpers import fill_url
from tracebank.cli.main import cli


@pytest.mark.parametrize("bad", ["ftp://host:1", "http://h:99999", 42])
def test_a_bad_store_fails_when_its_source_is_made(bad):
    with pytest.raises(CollectUsageError) as err:
        StoreSource(bad)
    assert "\n" not in err.value.one_line()


def test_store_urls_and_objects_become_store_sources(tmp_path):
    url = StoreSource("http://127.0.0.1:4747/")
    assert as_source("http://127.0.0.1:4747/") == url and url.description == "http://127.0.0.1:4747"
    spool = SpoolSource(tmp_path)
    assert as_source(spool) is spool and isinstance(spool, Source)
    assert (spool.records, url.records) == ("events", "spans")


def test_a_server_url_is_asked_what_it_is(store_url):
    assert server_source(store_url) == StoreSource(store_url)  # an `agl store` answers like 0.3
    assert server_source(store_url, "k", "agl1") == Agl1ServerSource(store_url, "k")  # told: not asked
    with pytest.raises(CollectUsageError, match="invalid source version 'agl2'"):
        server_source(store_url, version="agl2")


def test_the_cli_defaults_are_the_configs(store_url, wh):
    fill_url(store_url, 5, seed=31)
    args = ["--warehouse", str(wh.root), "collect", "--store", store_url, "--no-silver"]
    out = CliRunner().invoke(cli, args)
    assert out.exit_code == 0, out.output
    ((_, manifest),) = Storage(wh).collections()
    defaults = CollectConfig()
    assert manifest.filters == defaults.filters() and manifest.concurrency == defaults.concurrency
    assert manifest.redaction["enabled"] is defaults.redact


def test_a_store_source_and_its_url_collect_the_same(store_url, tmp_path):
    fill_url(store_url, 4, seed=32)
    by_url = collect(store_url, Warehouse(tmp_path / "a"), CollectConfig(silver=False))
    by_source = collect(StoreSource(store_url), Warehouse(tmp_path / "b"), CollectConfig(silver=False))
    assert by_url.counts == by_source.counts and by_url.store == by_source.store == store_url
