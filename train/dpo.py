"""``train --method dpo``: TRL's DPOTrainer on a ``--kind preference`` version's token ids.

The model is the base with a fresh LoRA adapter (the same loading and attachment as SFT); the
reference is that same model with the adapter disabled (TRL does this for a PEFT model when no
``ref_model`` is given), so no second copy of the weights is held. With LoRA's B matrices at zero
the policy equals the reference at the first step, and the sigmoid loss is exactly ln 2.

The rows are already token ids (``prompt_input_ids``, ``chosen_input_ids``, ``rejected_input_ids``),
so TRL's dataset preparation (prompt extraction, EOS, tokenisation) is skipped; the collator is
TRL's, with the completion mask narrowed to the tokens the version labels (``--unit trajectory``
masks tool output between turns).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tracebank.train.errors import TrainError
from tracebank.train.recipe import SFTRecipe, training_arguments
from tracebank.warehouse.contract import IGNORE_INDEX
from tracebank.warehouse.storage import iter_batches

#: The stored columns the trainer reads, and the names TRL's collator knows them by.
COLUMNS = {
    "prompt_input_ids": "prompt_ids",
    "chosen_input_ids": "chosen_ids",
    "rejected_input_ids": "rejected_ids",
    "chosen_labels": "chosen_labels",
    "rejected_labels": "rejected_labels",
}


def load_pairs(paths: list[Path], keep_rows: list[int] | None = None) -> Any:
    """A `datasets.Dataset` of the pairs in ``paths``, with TRL's column names."""
    from datasets import Dataset

    rows: dict[str, list[Any]] = {name: [] for name in COLUMNS.values()}
    for batch in iter_batches(paths, list(COLUMNS)):
        for stored, name in COLUMNS.items():
            rows[name] += batch.column(stored).to_pylist()
    dataset = Dataset.from_dict(rows)
    return dataset.select(keep_rows) if keep_rows is not None else dataset


def _collator(pad_token_id: int, max_length: int | None) -> Any:
    import torch
    from trl.trainer.dpo_trainer import DataCollatorForPreference

    class LabelledPreferenceCollator(DataCollatorForPreference):  # type: ignore[misc]
        """TRL's collator; a completion token whose label is -100 does not count in the loss."""

        def torch_call(self, examples: list[dict[str, Any]]) -> dict[str, Any]:
            out = super().torch_call(examples)
            masks = [
                [0] * len(e["prompt_ids"]) + [int(t != IGNORE_INDEX) for t in e[f"{side}_labels"]]
                for side in ("chosen", "rejected")
                for e in examples
            ]
            labelled = torch.zeros_like(out["completion_mask"])
            for row, mask in enumerate(masks):
                mask = mask[: labelled.shape[1]]
                labelled[row, : len(mask)] = torch.tensor(mask, dtype=labelled.dtype)
            out["completion_mask"] = out["completion_mask"] * labelled
            return out

    return LabelledPreferenceCollator(pad_token_id=pad_token_id, max_length=max_length)


class PlainLogProbs:
    """TRL's chunked log-probability function (``trl.kernels``, Triton), in plain torch.

    TRL 1.15's DPOTrainer always computes the per-token log-probabilities with its fused LM head,
    whose kernel needs Triton (Linux with a GPU build of torch). Where Triton is missing (the CPU
    wheel, MPS) the same outputs come from the whole logits, so DPO runs there too. Same
    signature and outputs as ``ChunkedLogProbFunction.apply``.
    """

    @staticmethod
    def apply(
        hidden: Any,
        weight: Any,
        bias: Any,
        targets: Any,
        temperature: float,
        chunk_size: int,
        final_logit_softcapping: float | None = None,
        logit_scale: float = 1.0,
        outputs: tuple[str, ...] = ("entropy", "log_sum_sq_probs", "mean_logits", "is_top1"),
    ) -> tuple[Any, ...]:
        import torch

        logits = torch.nn.functional.linear(hidden, weight, bias).float() * logit_scale
        if final_logit_softcapping is not None:
            logits = final_logit_softcapping * torch.tanh(logits / final_logit_softcapping)
        logits = logits / temperature
        logp = logits.log_softmax(-1)
        log_probs = logp.gather(-1, targets[:, None]).squeeze(-1)
        wanted = {
            "entropy": lambda: -(logp.exp() * logp).sum(-1),
            "log_sum_sq_probs": lambda: torch.logsumexp(2 * logp, -1),
            "mean_logits": lambda: logits.mean(-1),
            "is_top1": lambda: logits.argmax(-1) == targets,
        }
        return (log_probs, *(make() if name in outputs else None for name, make in wanted.items()))


def use_plain_log_probs_without_triton() -> None:
    from trl.trainer import utils as trl_utils

    if getattr(trl_utils, "_ChunkedLogProbFunction", None) is None:
        trl_utils._ChunkedLogProbFunction = PlainLogProbs  # type: ignore[misc, assignment]


def _patch_unsloth_dpo() -> None:
    """Unsloth's DPO path: its patch of TRL's DPOTrainer (fused kernels, its own reference handling),
    applied before the trainer is built. Only on CUDA, where the unsloth backend runs at all."""
    import unsloth

    patch = getattr(unsloth, "PatchDPOTrainer", None)
    if patch is not None:
        patch()


def _trainer_class() -> Any:
    from trl import DPOTrainer

    class TokenIdDPOTrainer(DPOTrainer):  # type: ignore[misc, valid-type]
        def _prepare_dataset(self, dataset: Any, *args: Any, **kwargs: Any) -> Any:
            return dataset  # already token ids: nothing to extract, add or tokenize

    return TokenIdDPOTrainer


class DPORecipe(SFTRecipe):
    """Direct preference optimisation of a LoRA adapter on one preference version."""

    def setup(self) -> None:
        model = self.load_model()
        config, spec, resolved = self.config, self.spec, self.resolved
        assert resolved is not None
        if "lm_head" in config.target_modules:
            raise TrainError(
                "DPO cannot train a LoRA adapter on lm_head", "drop lm_head from --target-modules"
            )
        splits, keep = spec.splits, spec.keep_rows
        train = load_pairs([Path(p) for p in splits["train"]], keep.get("train"))
        has_eval = "validation" in splits and config.eval_strategy != "no"
        evaluation = load_pairs([Path(p) for p in splits["validation"]]) if has_eval else None
        strategy = config.eval_strategy if has_eval else "no"
        if resolved.backend == "unsloth":
            _patch_unsloth_dpo()
        from trl import DPOConfig

        use_plain_log_probs_without_triton()

        args = DPOConfig(
            **training_arguments(config, resolved, spec, strategy),
            beta=config.beta,
            loss_type=[config.dpo_loss],
            max_length=spec.max_length,
            precompute_ref_log_probs=False,
        )
        self.trainer = _trainer_class()(
            model=model,
            ref_model=None,  # the base with the adapter disabled
            args=args,
            train_dataset=train,
            eval_dataset=evaluation,
            processing_class=self.tokenizer,
            data_collator=_collator(self.tokenizer.pad_token_id, spec.max_length),
            callbacks=self.callbacks(strategy),
        )

    def train(self) -> dict[str, Any]:
        resume = self.spec.resume_from
        if resume:
            # transformers' resume loads only the adapters in a checkpoint's subfolders once there are any
            # (TRL's frozen reference copy lives in ref/), leaving the trained one at the top fresh.
            self.trainer.model.load_adapter(resume, "default", is_trainable=True)
        return super().train()
