"""`--engine ray --address` where nothing listens fails in seconds with one line, not after minutes."""

from __future__ import annotations

import socket
import time

import pytest
from click.testing import CliRunner
from tracebank.transform import TransformConfig, transform
from tracebank.transform.errors import TransformError
from tracebank.transform.ray_probe import host_port, probe

from tests.fixtures.bronze import commit_collection, synthetic_rollouts
from tracebank.cli.main import cli


@pytest.mark.parametrize(
    ("address", "target"),
    [
        ("127.0.0.1:6379", ("127.0.0.1", 6379)),
        ("ray://head.example:10001", ("head.example", 10001)),
        ("[::1]:6379", ("::1", 6379)),
        ("auto", None),
        ("local", None),
        ("", None),
        ("head-without-port", None),
    ],
)
def test_host_port_of_ray_addresses(address, target):
    assert host_port(address) == target


def test_a_listening_address_passes_the_probe():
    with socket.create_server(("127.0.0.1", 0)) as server:
        probe(f"127.0.0.1:{server.getsockname()[1]}")


def test_a_closed_port_fails_the_probe_naming_the_address():
    with pytest.raises(TransformError, match=r"cannot reach the Ray cluster at 127\.0\.0\.1:1: "):
        probe("127.0.0.1:1")


@pytest.fixture
def one_collection(wh):
    spans, rollouts = synthetic_rollouts(4, seed=2)
    commit_collection(wh, spans, rollouts=rollouts, collection_id="c1")
    return wh


def test_transform_on_a_dead_address_fails_in_seconds(one_collection):
    started = time.monotonic()
    with pytest.raises(TransformError, match="127.0.0.1:1"):
        transform(one_collection, TransformConfig(name="d", engine="ray", address="127.0.0.1:1"))
    assert time.monotonic() - started < 30  # ray.init alone waited past 180 s


def test_cli_on_a_dead_address_is_one_line(one_collection):
    out = CliRunner().invoke(
        cli,
        ["--warehouse", str(one_collection.root), "transform", "--dataset", "d", "--engine", "ray"]
        + ["--address", "127.0.0.1:1"],
    )
    assert out.exit_code == 1 and out.stdout == ""
    (line,) = out.stderr.splitlines()
    assert line.startswith("Error: cannot reach the Ray cluster at 127.0.0.1:1: ") and "ray start" in line
