"""Data-parallel training on CPU (gloo): two ranks of one node (started by tracebank's launcher, meeting
in a private FileStore, listening on loopback only), and two "nodes" on loopback through torchrun's c10d
rendezvous, train what one process trains over the same global batch; a rank that dies fails the run and
publishes nothing."""

from __future__ import annotations

import json
import os
import signal
import socket
import stat
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
from tracebank.train import TrainConfig
from tracebank.train.child import STORE_VARIABLE
from tracebank.train.errors import TrainConfigError
from tracebank.warehouse import catalog
from tracebank.warehouse.location import Warehouse
from tracebank.warehouse.storage import Storage

from tests.fixtures.datasets import QA_PAIRS, qa_rows, write_dataset
from tests.train.cli import SINGLE_THREAD

#: Global batch 4 per step: one process of batch 4, or two ranks of batch 2.
RECIPE = [
    "--dataset", "qa@v1", "--lr", "1e-2", "--grad-accum", "1", "--warmup-steps", "0",
    "--seed", "0", "--eval-strategy", "no", "--save", "lora",
]  # fmt: skip
STEPS = ["--max-steps", "3"]


def _command(wh, tiny_model, out, *more):
    return [
        sys.executable, "-m", "tracebank.cli.main", "-w", str(wh.root), "train", "--quiet",
        "--base-model", str(tiny_model), "--output", str(out), *more,
    ]  # fmt: skip


def _run(wh, tiny_model, out, *more):
    done = subprocess.run(
        _command(wh, tiny_model, out, *RECIPE, *STEPS, *more),
        env={**os.environ, **SINGLE_THREAD},
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()[1]


def _metrics(wh, run_id):
    folder, _ = catalog.resolve_run(wh, run_id)
    lines = (folder / "metrics.jsonl").read_text().splitlines()
    return [m for m in map(json.loads, lines) if m.get("split") == "train"]


def _adapter(folder):
    from safetensors.torch import load_file

    return load_file(str(folder / "adapter_model.safetensors"))


def _same_training(wh, run_id, out, reference):
    """Same first-step loss and gradient norm (1e-4), same losses after, same adapter."""
    ref_id, ref_out = reference
    got, want = _metrics(wh, run_id), _metrics(wh, ref_id)
    assert got[0]["loss"] == pytest.approx(want[0]["loss"], abs=1e-4)
    assert got[0]["grad_norm"] == pytest.approx(want[0]["grad_norm"], abs=1e-4)
    assert [m["loss"] for m in got] == pytest.approx([m["loss"] for m in want], abs=1e-4)
    ranks, one = _adapter(out), _adapter(ref_out)
    assert ranks.keys() == one.keys()
    assert max(float((ranks[k] - one[k]).abs().max()) for k in one) <= 1e-4


@pytest.fixture(scope="module")
def one_process(qa_wh, tiny_model, tmp_path_factory):
    out = tmp_path_factory.mktemp("one-process") / "adapter"
    return _run(qa_wh, tiny_model, out, "--batch-size", "4"), out


def test_two_ranks_train_what_one_process_trains(qa_wh, tiny_model, tmp_path, one_process):
    out = tmp_path / "adapter"
    run_id = _run(qa_wh, tiny_model, out, "--batch-size", "2", "--nproc-per-node", "2")
    _same_training(qa_wh, run_id, out, one_process)
    _, record = catalog.resolve_run(qa_wh, run_id)
    assert record.backend == "trl" and record.hyperparameters["nproc_per_node"] == 2
    assert record.model["note"].startswith("auto chose TRL+PEFT")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_two_nodes_on_loopback_train_what_one_process_trains(qa_wh, tiny_model, tmp_path, one_process):
    out = tmp_path / "adapter"
    nodes = ["--batch-size", "2", "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}"]
    env = {**os.environ, **SINGLE_THREAD}
    before = {folder.name for folder, _ in Storage(qa_wh).runs()}
    second = subprocess.Popen(
        _command(qa_wh, tiny_model, out, *RECIPE, *STEPS, *nodes, "--node-rank", "1"),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    run_id = _run(qa_wh, tiny_model, out, *nodes, "--node-rank", "0")
    stdout, stderr = second.communicate(timeout=120)
    assert second.returncode == 0, stderr
    assert stdout.startswith("node 1 of 2 finished")
    assert {folder.name for folder, _ in Storage(qa_wh).runs()} - before == {run_id}  # node 0 records alone
    _same_training(qa_wh, run_id, out, one_process)


def _rank_process(root_pid, local_rank):
    for proc in psutil.Process(root_pid).children(recursive=True):
        try:
            if "tracebank.train.child" in proc.cmdline() and proc.environ().get("LOCAL_RANK") == local_rank:
                return proc
        except psutil.NoSuchProcess:
            continue
    return None


def _start_long_run(wh, tiny_model, out, env=None):
    """``train --nproc-per-node 2`` for many steps, started in the background."""
    long = [*RECIPE, "--max-steps", "5000", "--batch-size", "2", "--nproc-per-node", "2"]
    return subprocess.Popen(
        _command(wh, tiny_model, out, *long),
        env={**os.environ, **SINGLE_THREAD, **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_training(wh, proc, before, while_waiting=lambda: None):
    """The new run's folder once its first metric is written (calling ``while_waiting`` meanwhile)."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        while_waiting()
        runs = [f for f, _ in Storage(wh).runs() if f.name not in before]
        # run.json is created a moment before metrics.jsonl: a run folder without it has not started
        metrics = runs[0] / "metrics.jsonl" if runs else None
        if metrics is not None and metrics.is_file() and metrics.stat().st_size > 0:
            return runs[0]
        assert proc.poll() is None, proc.stderr.read()
        time.sleep(0.05)
    raise AssertionError("no metric within 300 s")


def test_a_rank_that_dies_fails_the_run_and_publishes_nothing(qa_wh, tiny_model, tmp_path):
    out = tmp_path / "adapter"
    before = {folder.name for folder, _ in Storage(qa_wh).runs()}
    proc = _start_long_run(qa_wh, tiny_model, out)
    try:
        run = _wait_for_training(qa_wh, proc, before)
        rank = _rank_process(proc.pid, "1")
        assert rank is not None
        os.kill(rank.pid, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:  # a failed check above: no 5000-step run left behind
            os.kill(proc.pid, signal.SIGKILL)
            proc.communicate(timeout=60)
    assert proc.returncode == 1, stderr
    # rank 0 loses its peer in a collective (or the launcher reports the dead rank): one line either way
    assert stderr.startswith("Error: training process") and len(stderr.splitlines()) == 1, stderr
    _, record = catalog.resolve_run(qa_wh, run.name)
    assert record.status == "failed" and record.error.startswith("training process")
    assert not out.exists() and not list(tmp_path.glob(".adapter*"))


def test_nodes_on_different_dataset_versions_stop_before_step_one(qa_wh, tiny_model, tokenizer, tmp_path):
    """Every rank compares the content hash of what it is about to train on: a node whose warehouse
    holds another qa@v1 stops the run before any step, on every node."""
    other = Warehouse(tmp_path / "other-warehouse").init()
    write_dataset(other, "qa", qa_rows(tokenizer, QA_PAIRS), validation=qa_rows(tokenizer, QA_PAIRS))
    out = tmp_path / "adapter"
    nodes = ["--batch-size", "2", "--nnodes", "2", "--rdzv-endpoint", f"127.0.0.1:{_free_port()}"]
    env = {**os.environ, **SINGLE_THREAD}
    before = {folder.name for folder, _ in Storage(qa_wh).runs()}
    started = [
        subprocess.Popen(
            _command(wh, tiny_model, out, *RECIPE, *STEPS, *nodes, "--node-rank", rank),
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for wh, rank in ((qa_wh, "0"), (other, "1"))
    ]
    errors = [proc.communicate(timeout=600)[1] for proc in started]
    for proc, stderr in zip(started, errors, strict=True):
        assert proc.returncode == 1, stderr
        assert len(stderr.splitlines()) == 1 and "holds dataset content hash" in stderr, stderr
    (run_id,) = {folder.name for folder, _ in Storage(qa_wh).runs()} - before
    _, record = catalog.resolve_run(qa_wh, run_id)
    assert record.status == "failed" and _metrics(qa_wh, run_id) == [] and not out.exists()


def _tree(root_pid):
    root = psutil.Process(root_pid)
    return [root, *root.children(recursive=True)]


def _listening(processes):
    """(pid, address) of every TCP socket in LISTEN that one of ``processes`` holds."""
    found = set()
    for proc in processes:
        try:
            sockets = proc.net_connections(kind="inet")
        except psutil.NoSuchProcess:
            continue
        found |= {(proc.pid, s.laddr.ip) for s in sockets if s.status == psutil.CONN_LISTEN}
    return found


def _network_interface():
    """A network interface of this machine with an IPv4 address beyond loopback, or None."""
    for name, addresses in psutil.net_if_addrs().items():
        if any(a.family == socket.AF_INET and not a.address.startswith("127.") for a in addresses):
            return name
    return None


def test_one_node_ranks_meet_privately_listen_on_loopback_only_end_with_train(qa_wh, tiny_model, tmp_path):
    """Issue 27: torchrun --standalone served its c10d store (which unpickles what it is sent) on every
    interface. Sampled from start to the first steps, every socket the ranks listen on is loopback,
    and their store is a file in a folder only this user can open, outside the (shared) warehouse."""
    before = {folder.name for folder, _ in Storage(qa_wh).runs()}
    # Here the hostname resolves to 127.0.0.1; on most machines it names the network address, which
    # gloo then listens on. A user's GLOO_SOCKET_IFNAME naming that interface does the same here.
    network = _network_interface()
    proc = _start_long_run(
        qa_wh, tiny_model, tmp_path / "adapter", {"GLOO_SOCKET_IFNAME": network} if network else None
    )
    listening = set()

    def sample():
        listening.update(_listening(_tree(proc.pid)))

    try:
        _wait_for_training(qa_wh, proc, before, while_waiting=sample)
        for _ in range(20):
            sample()
            time.sleep(0.05)
        ranks = [_rank_process(proc.pid, local_rank) for local_rank in ("0", "1")]
        assert None not in ranks
        (store,) = {Path(rank.environ()[STORE_VARIABLE]) for rank in ranks}
        private = store.parent.stat()
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # as `kill -9` of tracebank train
        proc.communicate(timeout=60)
    assert {address for _, address in listening} <= {"127.0.0.1", "::1"}, listening
    assert stat.S_IMODE(private.st_mode) == 0o700 and private.st_uid == os.getuid()
    assert qa_wh.root not in store.parents
    gone, alive = psutil.wait_procs(ranks, timeout=30)
    assert alive == [], alive
    assert not store.parent.exists()  # the launcher removes the store before it ends the ranks


@pytest.mark.parametrize(
    "endpoint",
    ["node0.cluster:29400", "127.0.0.1:1", "[::1]:65535", "[fd00::1]:29400", "gpu-7:29400", "node0.:29400"],
)
def test_a_well_formed_rdzv_endpoint_is_accepted(endpoint):
    TrainConfig(dataset="qa", base_model="m", output="o", nnodes=2, rdzv_endpoint=endpoint).validate()


@pytest.mark.parametrize(
    ("endpoint", "problem"),
    [
        ("node0", "is not HOST:PORT"),
        (":29400", "is not HOST:PORT"),
        ("node0:", "has no port in 1-65535"),
        ("node0:0", "has no port in 1-65535"),
        ("node0:65536", "has no port in 1-65535"),
        ("node0:99999999999999999999", "has no port in 1-65535"),
        ("node0:+80", "has no port in 1-65535"),
        ("node0:٣٣", "has no port in 1-65535"),
        ("::1:29400", "needs brackets"),
        ("[not-ipv6]:29400", "is not a valid host"),
        ("-node:29400", "is not a valid host"),
        ("no de:29400", "is not a valid host"),
        ("node_0:29400", "is not a valid host"),
        ("999.1.1.1:29400", "is not a valid host"),
        (f"{'a' * 64}:29400", "is not a valid host"),
        ("a@evil:29400", "is not a valid host"),
        ("node0:29400\nINJECTED", "has no port in 1-65535"),
    ],
)
def test_a_bad_rdzv_endpoint_is_one_line_before_anything_starts(endpoint, problem):
    """Issue 27 (low): only a ':' was checked, and a bad value ended as "exited with code 1"."""
    with pytest.raises(TrainConfigError) as err:
        TrainConfig(dataset="qa", base_model="m", output="o", nnodes=2, rdzv_endpoint=endpoint).validate()
    line = err.value.one_line()
    assert line.startswith("--rdzv-endpoint ") and problem in line and "\n" not in line
    assert err.value.exit_code == 2


def test_a_bad_rdzv_endpoint_is_refused_by_the_cli_in_one_line(qa_wh, tiny_model, tmp_path):
    done = subprocess.run(
        _command(qa_wh, tiny_model, tmp_path / "adapter", *RECIPE, "--nnodes", "2", "--rdzv-endpoint", "h:0"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.startswith("Error: --rdzv-endpoint 'h:0' has no port") and done.stderr.count("\n") == 1


def test_a_timeout_stops_every_rank_and_removes_their_store(qa_wh, tiny_model, tmp_path):
    proc = subprocess.Popen(
        _command(qa_wh, tiny_model, tmp_path / "adapter", *RECIPE, "--max-steps", "100000")
        + ["--batch-size", "2", "--nproc-per-node", "2", "--timeout", "30"],
        env={**os.environ, **SINGLE_THREAD},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    ranks: list = [None]
    while None in ranks:  # both started (seconds after the command), long before the timeout
        assert proc.poll() is None, proc.stderr.read()
        ranks = [_rank_process(proc.pid, local_rank) for local_rank in ("0", "1")]
        time.sleep(0.05)
    (store,) = {Path(rank.environ()[STORE_VARIABLE]) for rank in ranks}
    _, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 1 and stderr.startswith("Error: training timed out after 30s"), stderr
    assert psutil.wait_procs(ranks, timeout=10)[1] == []
    assert not store.parent.exists()


def test_only_several_nodes_start_torchrun_and_its_rendezvous(tmp_path, monkeypatch):
    from tracebank.train.supervisor import LAUNCHER_VARIABLE, child_command

    def command(**distributed):
        config = TrainConfig(dataset="qa", base_model="m", output="o", **distributed).validate()
        return child_command(config, tmp_path / "spec.json")

    one_node = command(nproc_per_node=8)
    assert one_node[-4:] == ["tracebank.train.launch", "ranks", "8", str(tmp_path / "spec.json")]
    assert not any("rdzv" in part or "standalone" in part for part in one_node)
    monkeypatch.setenv(LAUNCHER_VARIABLE, "torchrun")  # the GPU check: one process, with a process group
    assert command()[-3:] == ["ranks", "1", str(tmp_path / "spec.json")]
    nodes = command(nproc_per_node=8, nnodes=2, node_rank=1, rdzv_endpoint="[fd00::1]:29400")
    assert nodes[4] == "torchrun" and "--rdzv-backend=c10d" in nodes
    assert "--rdzv-endpoint=[fd00::1]:29400" in nodes and "--node-rank=1" in nodes
