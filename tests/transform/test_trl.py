"""A committed version is taken by TRL's SFTTrainer as a pre-tokenized set (one real step)."""

from __future__ import annotations

import pytest
from tracebank.transform import TransformConfig, transform

from tests.fixtures.bronze import commit_collection
from tests.fixtures.proxy_spans import random_rollout_spans


def _tiny_tokenizer(vocab: int):
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    words = {f"t{i}": i for i in range(vocab)}
    tok = Tokenizer(models.WordLevel(vocab=words, unk_token="t0"))
    return PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t1", eos_token="t2")


@pytest.mark.filterwarnings("ignore")
def test_sft_trainer_trains_one_step_on_a_version(wh, tmp_path):
    import random

    torch = pytest.importorskip("torch")
    from datasets import load_dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    rng = random.Random(0)
    spans = []
    for i in range(6):
        spans += random_rollout_spans(
            f"r{i}", f"r{i}-a", rng, n_calls=2, vocab=60, prompt_len=12, response_len=4, reward=0.5 + i / 10
        )
    commit_collection(wh, spans)
    version = transform(wh, TransformConfig(name="trl"))
    ds = load_dataset("parquet", data_files=str(version.folder / "train.parquet"), split="train")
    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        )
    )
    args = SFTConfig(
        output_dir=str(tmp_path / "out"),
        max_steps=1,
        per_device_train_batch_size=2,
        report_to="none",
        use_cpu=True,
        save_strategy="no",
        logging_steps=1,
    )
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=_tiny_tokenizer(64))
    # Taken as is: no re-tokenization, every row kept.
    assert trainer.train_dataset.num_rows == ds.num_rows == version.manifest["rows"]
    assert trainer.train_dataset["input_ids"] == ds["input_ids"]
    batch = trainer.data_collator([trainer.train_dataset[i] for i in range(2)])
    assert batch["input_ids"].shape[0] == 2
    # One plain optimisation step on the collated batch (TRL's own fused loss needs Triton, absent on CPU).
    loss = model(
        input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], labels=batch["labels"]
    ).loss
    loss.backward()
    assert torch.isfinite(loss) and loss.item() > 0


def test_collator_keeps_the_prompt_masked(wh, tmp_path):
    """TRL's collator must train on our labels (prompt tokens -100), not on every token."""
    import random

    pytest.importorskip("torch")
    from datasets import load_dataset
    from transformers import LlamaConfig, LlamaForCausalLM
    from trl import SFTConfig, SFTTrainer

    rng = random.Random(1)
    commit_collection(
        wh,
        random_rollout_spans("r", "r-a", rng, n_calls=1, vocab=60, prompt_len=8, response_len=3, reward=1.0),
    )
    version = transform(wh, TransformConfig(name="mask"))
    ds = load_dataset("parquet", data_files=str(version.folder / "train.parquet"), split="train")
    model = LlamaForCausalLM(
        LlamaConfig(
            vocab_size=64,
            hidden_size=16,
            intermediate_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            num_key_value_heads=2,
        )
    )
    args = SFTConfig(output_dir=str(tmp_path / "out"), max_steps=1, report_to="none", use_cpu=True)
    trainer = SFTTrainer(model=model, args=args, train_dataset=ds, processing_class=_tiny_tokenizer(64))
    batch = trainer.data_collator([trainer.train_dataset[0]])
    assert batch["labels"][0].tolist() == ds[0]["labels"]
