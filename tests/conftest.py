"""Shared fixtures: a real `agl store` server and its client; Agent Lightning 1.0 ones (agl1_*)."""

from __future__ import annotations

import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402
from tracebank.warehouse.layout import Warehouse  # noqa: E402

from tests.fixtures.agl1_server import agl1_env, agl1_model_server, agl1_round, agl1_server  # noqa: E402, F401
from tests.fixtures.store_server import agl_store_server  # noqa: E402


@pytest.fixture(scope="module")
def store_url(tmp_path_factory: pytest.TempPathFactory):
    """A real `agl store` shared by one test module (starting one takes seconds)."""
    with agl_store_server(tmp_path_factory.mktemp("store-logs")) as (url, _proc):
        yield url


@pytest.fixture
def fresh_store_url(tmp_path):
    """A real `agl store` of this test's own."""
    with agl_store_server(tmp_path) as (url, _proc):
        yield url


@pytest.fixture
def wh(tmp_path) -> Warehouse:
    """An empty, initialised warehouse folder."""
    return Warehouse(tmp_path / "warehouse").init()


@pytest.fixture(params=["before", "after"])
def warehouse_position(request) -> str:
    """Where a CLI test puts the warehouse option: both places must work (issue 8)."""
    return request.param
