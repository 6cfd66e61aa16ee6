"""The real vLLM CPU build (its own environment, built by `make vllm-env` or here when missing).

One server serves the tiny Qwen3 and a LoRA adapter on it (r=32, above vLLM's default
maximum rank), with the flags a round uses. It must answer as the recorded fixture says
(so the parity test compares against what this vLLM really does), and the adapter must
generate what the same adapter generates merged into its base on the CPU server.
"""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest
from tracebank.serve.config import CpuServerConfig
from tracebank.serve.cpu_server import ChatModel, SamplingSpec
from tracebank.serve.process import free_port, start_server
from tracebank.serve.vllm_env import ensure_vllm_env
from tracebank.serve.vllm_server import vllm_command, vllm_environment

from tests.serve import vllm_parity as parity

ADAPTER = "tuned"


def make_adapter(base: Path, out: Path, rank: int = 32) -> Path:
    """A LoRA adapter with random (non-zero) weights on every projection of ``base``, saved by peft."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(1)
    targets = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]
    config = LoraConfig(r=rank, lora_alpha=2 * rank, target_modules=targets, init_lora_weights=False)
    model = get_peft_model(AutoModelForCausalLM.from_pretrained(str(base)), config)
    model.save_pretrained(str(out))
    AutoTokenizer.from_pretrained(str(base)).save_pretrained(str(out))
    return out


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> tuple[Path, Path]:
    from tracebank.train.tiny_model import build_tiny_qwen3_model

    root = tmp_path_factory.mktemp("vllm-real")
    base = build_tiny_qwen3_model(root / "base", seed=parity.MODEL_SEED)
    return base, make_adapter(base, root / "adapter")


@pytest.fixture(scope="module")
def vllm(models, tmp_path_factory):
    base, adapter = models
    port = free_port()
    launch = parity.vllm_launch(ensure_vllm_env(), base, port)
    launch = type(launch)(**{**vars(launch), "lora_modules": ((ADAPTER, adapter),)})
    root = f"http://127.0.0.1:{port}"
    log = tmp_path_factory.mktemp("vllm-log") / "vllm.log"
    with start_server(
        vllm_command(launch), f"{root}/v1", f"{root}/health", log, 900, vllm_environment(True), label="vLLM"
    ) as server:
        yield server


def chat(server, model: str, **fields) -> dict:
    body = {**parity.request_body("plain_token_ids"), "model": model, **fields}
    resp = httpx.post(f"{server.base_url}/chat/completions", json=body, timeout=300)
    assert resp.status_code == 200, resp.text
    return resp.json()


def test_live_vllm_answers_as_recorded(vllm):
    want = parity.load_fixture()["responses"]["plain_token_ids"]["body"]
    got = chat(vllm, parity.MODEL_NAME)
    assert parity.shape(got) == parity.shape(want)
    assert got["prompt_token_ids"] == want["prompt_token_ids"]
    assert got["choices"][0]["token_ids"] == want["choices"][0]["token_ids"]


def test_lora_adapter_serves_what_the_merged_adapter_generates(vllm, models):
    base, adapter = models
    listed = {m["id"]: m for m in httpx.get(f"{vllm.base_url}/models").json()["data"]}
    assert listed[ADAPTER]["parent"] == parity.MODEL_NAME
    tuned = chat(vllm, ADAPTER)["choices"][0]["token_ids"]
    plain = chat(vllm, parity.MODEL_NAME)["choices"][0]["token_ids"]
    assert tuned != plain  # the adapter is applied
    cpu = ChatModel(CpuServerConfig(model=adapter))  # the CPU server merges the adapter into its base
    _, prompt = cpu.render(parity.MESSAGES)
    assert cpu.generate(prompt, SamplingSpec(max_tokens=8, temperature=0)).token_ids == tuned


def test_the_openai_clients_log_of_live_vllm_becomes_rows_of_vllms_own_ids(vllm, models, tmp_path):
    """Issue 29: the ``openai`` client asks the live vLLM engine for ``return_token_ids`` (with tools
    too), its calls are logged as JSONL, collected with ``--format openai`` and transformed with the
    served model's tokenizer: every row is vLLM's prompt + response ids, and the request messages
    retokenize to the very prompt ids vLLM saw."""
    import pyarrow.parquet as pq

    import tracebank
    from tests.fixtures.openai_log import logging_client

    base, _ = models
    log = tmp_path / "vllm-calls.jsonl"
    client = logging_client(vllm.base_url, log)
    served = []
    for tools in (None, parity.TOOLS):
        extra = {"tools": tools} if tools else {}
        reply = client.chat.completions.create(
            model=parity.MODEL_NAME,
            messages=parity.MESSAGES,
            max_tokens=4,
            temperature=0,
            extra_body={"return_token_ids": True},
            **extra,
        )
        served.append(reply.model_dump())
    wh = tracebank.open(tmp_path / "warehouse")
    collected = wh.collect(str(log), format="openai")
    assert collected.counts["rollouts"] == 2
    again = wh.collect(str(log), format="openai")  # a re-import adds nothing
    assert again.collection_id is None and again.counts["skipped"] == 2
    # the logged responses carry no reward: a layer gives every call one, as for any text source
    scorer = tmp_path / "one.py"
    scorer.write_text("def one(rollout):\n    return 1.0\n")
    wh.rescore(f"{scorer}:one", name="one", workers=1)
    version = wh.transform("served", rewards="one", tokenizer=str(base), val_fraction=0.0)
    files = [version.folder / f["path"] for f in version.manifest["files"]]
    rows = [row for path in files for row in pq.read_table(path).to_pylist()]
    want = sorted(s["prompt_token_ids"] + s["choices"][0]["token_ids"] for s in served)
    assert sorted(r["input_ids"] for r in rows) == want
    retok = version.manifest["counts"]["text"]["retokenization"]
    assert (retok["compared"], retok["equal"], retok["differ"]) == (2, 2, 0)
