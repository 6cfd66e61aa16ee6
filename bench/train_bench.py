"""Train bench: loading a dataset version into the trainer vs the anchor's `Dataset.from_list`.

Both sides end with a `datasets.Dataset` of the same rows, ready for SFTTrainer:
- tracebank: `train.dataset.load_split` on the committed Parquet file (decoded batch by batch
  into an Arrow stream file, then memory-mapped; only input_ids/attention_mask/labels are read);
- `datasets.Dataset.from_parquet` on the same file, for reference;
- anchor: the rows as Python lists of dicts (how the upstream recipe holds them after its
  adapter loop), then `Dataset.from_list(rows)`.
Each side runs in a fresh subprocess; peak memory is that process's own peak RSS
(VmHWM, the
kernel's high-water mark of its resident set) taken right after the load, next to its RSS
right after the imports and its anonymous (not file-backed) RSS.

A second section trains the tiny local model on rows of widely spread lengths, padded and
packed (``--packing``), and reports trained tokens per second of each (CPU, fixed steps).

``python -m bench.run train`` runs it; TRACEBANK_BENCH_TRAIN_ROWS / _TOKENS change the size,
TRACEBANK_BENCH_PACKING_STEPS the packing runs' length.
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROWS = int(os.environ.get("TRACEBANK_BENCH_TRAIN_ROWS", "20000"))
MEAN_TOKENS = int(os.environ.get("TRACEBANK_BENCH_TRAIN_TOKENS", "1024"))
VOCAB = 151_936  # a Qwen vocabulary: token ids are not small cached ints


def _status_mib(key: str = "VmRSS") -> float:
    """A memory line of /proc/self/status in MiB (VmRSS, RssAnon, RssFile, VmHWM)."""
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _peak_mib() -> float:
    # VmHWM is this process image's own high-water mark; ru_maxrss would also carry the
    # parent's peak across fork+exec on Linux (the bench parent builds the data set).
    peak = _status_mib("VmHWM")
    return peak if peak == peak else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def make_version(
    root: Path, rows: int = ROWS, mean_tokens: int = MEAN_TOKENS, vocab: int = VOCAB, spread: float = 0.25
) -> tuple[Path, int]:
    """Commit a version of ``rows`` rows (about ``mean_tokens`` tokens each, standard deviation
    ``spread`` of that) with the warehouse protocol."""
    import numpy as np
    import pyarrow as pa
    from tracebank.warehouse import schemas
    from tracebank.warehouse.contract import IGNORE_INDEX
    from tracebank.warehouse.location import Warehouse
    from tracebank.warehouse.records import DatasetManifest
    from tracebank.warehouse.storage import Storage

    rng = np.random.default_rng(0)
    lengths = np.clip(
        rng.normal(mean_tokens, mean_tokens * spread, rows).astype(np.int64), 16, 4 * mean_tokens
    )
    prompt = (lengths * rng.uniform(0.6, 0.95, rows)).astype(np.int64)
    offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
    total = int(offsets[-1])
    ids = rng.integers(0, vocab, total, dtype=np.int32)
    position = np.arange(total) - np.repeat(offsets[:-1], lengths)
    labels = np.where(position < np.repeat(prompt, lengths), IGNORE_INDEX, ids).astype(np.int32)

    def lists(values: np.ndarray) -> pa.Array:
        return pa.ListArray.from_arrays(pa.array(offsets), pa.array(values))

    table = pa.table(
        {
            "input_ids": lists(ids),
            "attention_mask": lists(np.ones(total, dtype=np.int32)),
            "labels": lists(labels),
            "reward": pa.array(rng.uniform(0, 1, rows)),
        }
    )
    table = schemas.conform(table, schemas.DATASET_ROWS)
    wh = Warehouse(root / "warehouse").init()
    storage = Storage(wh)
    version, folder = storage.reserve_version("bench")
    entry = storage.write_table(folder, "train.parquet", table, "dataset_rows")
    entry.split = "train"
    manifest = DatasetManifest(
        name="bench", version=version, content_hash=entry.sha256, rows=rows, files=[entry]
    )
    storage.commit_version(folder, manifest)
    return folder / "train.parquet", total


def side(kind: str, parquet: str, cache: str) -> dict[str, float]:
    """One measurement, in this (fresh) process."""
    import datasets  # noqa: F401  (imports are not what is measured)
    import pyarrow.parquet as pq
    from tracebank.train.dataset import load_split

    datasets.disable_progress_bars()
    base = _status_mib()
    started = time.perf_counter()
    out: dict[str, float] = {}
    if kind == "tracebank":
        dataset = load_split([Path(parquet)], Path(cache))
    elif kind == "from_parquet":
        dataset = datasets.Dataset.from_parquet(
            parquet, columns=["input_ids", "attention_mask", "labels"], cache_dir=cache
        )
    else:
        t = time.perf_counter()
        rows = pq.read_table(parquet, columns=["input_ids", "attention_mask", "labels", "reward"]).to_pylist()
        out["materialise_s"] = time.perf_counter() - t
        dataset = datasets.Dataset.from_list(rows)
    out["load_s"] = time.perf_counter() - started
    out["rows"] = len(dataset)
    out["peak_rss_mib"] = _peak_mib()  # the load's peak, before any row is read
    out["anon_after_load_mib"] = _status_mib("RssAnon")
    t = time.perf_counter()
    for i in range(0, len(dataset), max(1, len(dataset) // 256)):
        _ = dataset[i]["input_ids"]  # what the trainer's sampler does, spread over the file
    out["read_256_rows_s"] = time.perf_counter() - t
    out["rss_after_imports_mib"] = base
    out["file_after_reads_mib"] = _status_mib("RssFile")
    return out


def _run_side(kind: str, parquet: Path, cache: Path) -> dict[str, float]:
    env = dict(os.environ)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.train_bench", kind, str(parquet), str(cache)],
        capture_output=True,
        text=True,
        env=env,
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"{kind} side failed: {proc.stderr.strip().splitlines()[-1:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


PACKING_STEPS = int(os.environ.get("TRACEBANK_BENCH_PACKING_STEPS", "12"))


def packing_section() -> str:
    """Tokens/s of the tiny model on CPU, rows padded to the batch's longest vs packed."""
    from tracebank.train import TrainConfig, train
    from tracebank.train.tiny_model import build_tiny_model
    from tracebank.warehouse.location import Warehouse

    tmp = Path(tempfile.mkdtemp(prefix="tracebank-packing-bench-"))
    results = {}
    try:
        model = build_tiny_model(tmp / "model", seed=0)
        _, tokens = make_version(tmp, rows=256, mean_tokens=256, vocab=384, spread=1.0)
        wh = Warehouse(tmp / "warehouse")
        for packing in (False, True):
            config = TrainConfig(
                dataset="bench@v1",
                base_model=str(model),
                output=str(tmp / f"out-{packing}"),
                save="lora",
                batch_size=8,
                grad_accum=1,
                max_steps=PACKING_STEPS,
                packing=packing,
            )
            results[packing] = train(wh, config).summary
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    padded, packed = results[False], results[True]
    return "\n".join(
        [
            "## train: packing (CPU, tiny model)",
            "",
            f"256 rows of 16 to 1,024 tokens (mean 256, standard deviation 256; {tokens:,} tokens), batch 8, "
            f"{PACKING_STEPS} optimizer steps of the tiny Qwen2 (LoRA, fp32, CPU). Tokens/s counts real "
            "tokens (no padding) over the training loop.",
            "",
            "| batches | tokens/s | train loop s |",
            "| --- | ---: | ---: |",
            *(
                f"| {name} | {r['tokens_per_s']:,.0f} | {r['train_runtime_s']:.2f} |"
                for name, r in (
                    ("padded to the batch's longest row", padded),
                    ("packed (`--packing`)", packed),
                )
            ),
            "",
            f"Packed/padded throughput: {packed['tokens_per_s'] / padded['tokens_per_s']:.2f}x.",
        ]
    )


def run() -> str:
    return loading_section() + "\n\n" + packing_section()


def loading_section() -> str:
    tmp = Path(tempfile.mkdtemp(prefix="tracebank-train-bench-"))
    try:
        parquet, tokens = make_version(tmp)
        size_mib = parquet.stat().st_size / 2**20
        ours = _run_side("tracebank", parquet, tmp / "cache")
        hf_parquet = _run_side("from_parquet", parquet, tmp / "cache-hf")
        anchor = _run_side("anchor", parquet, tmp / "cache-anchor")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    def row(name: str, r: dict[str, float]) -> str:
        return (
            f"| {name} | {r['load_s']:.2f} | {r['peak_rss_mib']:.0f} | {r['anon_after_load_mib']:.0f} | "
            f"{r['rss_after_imports_mib']:.0f} | {r['read_256_rows_s'] * 1000:.0f} | "
            f"{r['file_after_reads_mib']:.0f} |"
        )

    sizes = (
        f"{ROWS:,} rows, {tokens:,} tokens in all (about {MEAN_TOKENS} per row, ids from a "
        f"{VOCAB:,}-token vocabulary), one committed Parquet file of {size_mib:.0f} MiB (zstd)."
    )
    method = (
        "Each side ends with a `datasets.Dataset` of input_ids/attention_mask/labels and runs in "
        "its own fresh process. Peak RSS is that process's high-water mark (VmHWM) right after "
        "the load, before any row is read; anonymous RSS is the part not backed by a file (what "
        "the load really holds); file-backed RSS after the reads is page cache of the "
        "memory-mapped file, which the kernel can drop."
    )
    lines = [
        "## train: loading a dataset version into the trainer",
        "",
        f"{sizes} {method}",
        "",
        "- **tracebank**: `train.dataset.load_split` (Parquet decoded batch by batch into one "
        "Arrow stream file that is then memory-mapped; reward and provenance columns are not read).",
        "- **from_parquet**: `datasets.Dataset.from_parquet` on the same file and columns (the "
        "obvious memory-mapped alternative; shown to explain the streaming loader).",
        "- **anchor**: the rows as Python lists of dicts, as the upstream recipe holds them, then "
        f"`Dataset.from_list` (materialising the lists from Parquet took "
        f"{anchor['materialise_s']:.2f} s of its load time; the recipe builds them from spans).",
        "",
        "| side | load s | peak RSS MiB | anonymous RSS after load MiB | RSS after imports MiB "
        "| 256 spread reads ms | file-backed RSS after reads MiB |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
        row("tracebank (memory-mapped Parquet)", ours),
        row("`Dataset.from_parquet`", hf_parquet),
        row("anchor (`Dataset.from_list`)", anchor),
        "",
        f"Load time ratio anchor/tracebank: {anchor['load_s'] / ours['load_s']:.1f}x; "
        f"peak memory ratio: {anchor['peak_rss_mib'] / ours['peak_rss_mib']:.1f}x.",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    kind_arg, parquet_arg, cache_arg = sys.argv[1:4]
    print(json.dumps(side(kind_arg, parquet_arg, cache_arg)))
