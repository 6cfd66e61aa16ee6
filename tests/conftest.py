"""Shared fixtures: a real `agl store` server and its client; Agent Lightning 1.0 ones (agl1_*)."""

from __future__ import annotations

import os
import shutil
import uuid

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import pytest  # noqa: E402
from tracebank.warehouse.location import Warehouse  # noqa: E402

from tests.fixtures.agl1_server import agl1_env, agl1_model_server, agl1_round, agl1_server  # noqa: E402, F401
from tests.fixtures.ray_cluster import RayCluster, ray_cluster  # noqa: E402
from tests.fixtures.s3_server import client_env, s3_server  # noqa: E402
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


@pytest.fixture(scope="session")
def ray_address():
    """A real local Ray cluster (head + worker processes) for the whole session; this process
    is connected to it as a driver. Starting one takes ~10-20 s, so it starts once."""
    with ray_cluster() as cluster:
        ray = _connect_driver(cluster)
        try:
            yield cluster.address
        finally:
            ray.shutdown()


def _connect_driver(cluster: RayCluster):
    # Ray reads its auth token when it is first imported: the cluster's token goes in first.
    os.environ.update(cluster.env)
    import ray
    from tracebank.transform.ray_engine import connect

    connect(cluster.address)  # as the product connects: the tests see what a user sees
    return ray


@pytest.fixture(scope="session")
def s3_endpoint(tmp_path_factory):
    """A real S3 server (moto's) on loopback for the whole session, with this process's AWS
    environment (keys, region, endpoint) pointing at it as it would at any S3 store."""
    with s3_server(tmp_path_factory.mktemp("moto-logs")) as endpoint, pytest.MonkeyPatch.context() as mp:
        for key, value in client_env(endpoint).items():
            mp.setenv(key, value)
        yield endpoint


@pytest.fixture
def s3_bucket(s3_endpoint, request):
    """A fresh bucket of this test's own on the session's S3 server; this machine's mirrors of it
    (in the user's cache, where the CLI keeps them) are removed afterwards."""
    from tracebank.warehouse.layout import mirror_folder

    from tests.fixtures.s3_server import make_bucket

    name = "tb-" + uuid.uuid4().hex[:12]
    make_bucket(s3_endpoint, name)
    yield name
    shutil.rmtree(mirror_folder(f"s3://{name}"), ignore_errors=True)
