"""Every name inside a warehouse, and nothing else: this module only builds names and paths.

WAREHOUSE/
  FORMAT.json                         format name and version
  collections/<collection_id>/        bronze: one collect run
    rollouts-0000.parquet attempts-0000.parquet spans-0000.parquet
    manifest.json                     written last: the commit
  silver/<collection_id>/             llm_calls, rewards, messages (+ manifest)
  datasets/<name>/v0001/              gold: one immutable dataset version
    RESERVED train.parquet [validation.parquet] manifest.json
                                      (a large split: train-00000.parquet, train-00001.parquet, ...)
  rewards/<name>/v0001/                a reward layer (tracebank rescore): scores of archived rollouts
    RESERVED scores.parquet manifest.json
  runs/<run_id>/run.json metrics.jsonl
  claims/<name>/<generation>[.alive|.released]
  tmp/                                scratch; never read

Keys are paths relative to the warehouse root with ``/`` separators: the same key names a
file in a folder and an object under ``s3://bucket/prefix``. :func:`commit_folder_of` is the
one classifier of keys into the commit folders they belong to (gc and verify use it).
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

from tracebank.core.errors import UsageError

FORMAT_NAME = "tracebank-warehouse"
FORMAT_VERSION = 1
#: The warehouse's format file, at its root.
FORMAT = "FORMAT.json"
#: The file that commits a folder: written last, it lists the folder's data files.
MANIFEST = "manifest.json"
#: In a dataset version folder: who reserved the number, created only if absent.
RESERVED = "RESERVED"
#: A run's record and its metric events (one JSON object a line).
RUN_RECORD = "run.json"
RUN_METRICS = "metrics.jsonl"
#: Marks a file being written under a name only its writer uses (``<name>.tmp-<random>``).
TMP_MARK = ".tmp-"
#: A temp file or uncommitted folder younger than this may still be a live writer's (gc's --min-age).
DEFAULT_MIN_AGE_S = 3600.0
#: Suffixes of a claim generation's companions: its holder is alive / gave it up.
CLAIM_ALIVE = ".alive"
CLAIM_RELEASED = ".released"

COLLECTIONS = "collections"
SILVER = "silver"
DATASETS = "datasets"
RUNS = "runs"
REWARDS = "rewards"
CLAIMS = "claims"
TMP = "tmp"
#: The top-level folders a warehouse (or a mirror of one) holds.
TOP_FOLDERS = (COLLECTIONS, SILVER, DATASETS, REWARDS, RUNS, TMP)
#: Every top-level folder tracebank reads, writes or sweeps (claims are made when first needed).
WAREHOUSE_FOLDERS = (*TOP_FOLDERS, CLAIMS)

ENV_VAR = "TRACEBANK_WAREHOUSE"
#: Moves tracebank's cache folder (default ``~/.cache/tracebank``): built environments, mirrors.
CACHE_VARIABLE = "TRACEBANK_CACHE_DIR"

_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


def validate_name(name: str, what: str = "name") -> str:
    """Return ``name`` if it is safe as a folder name, else raise UsageError."""
    if not isinstance(name, str) or not _NAME_RE.match(name) or name in {".", ".."}:
        raise UsageError(
            f"invalid {what} {name!r}",
            "use letters, digits, '.', '_' or '-', starting with a letter or digit",
        )
    return name


def cache_dir() -> Path:
    """tracebank's cache folder: ``$TRACEBANK_CACHE_DIR`` or ``~/.cache/tracebank``."""
    return Path(os.environ.get(CACHE_VARIABLE) or Path.home() / ".cache" / "tracebank").expanduser()


def mirror_folder(uri: str) -> Path:
    """Where this machine mirrors the remote warehouse ``uri`` (one folder per location)."""
    scheme, _, rest = uri.partition("://")
    parts = [validate_name(p, "warehouse location part") for p in rest.strip("/").split("/") if p]
    return cache_dir().joinpath("warehouses", scheme, *parts)


# -- keys of committed folders ------------------------------------------------------------------
def collection_key(collection_id: str) -> str:
    return f"{COLLECTIONS}/{validate_name(collection_id, 'collection id')}"


def silver_key(collection_id: str) -> str:
    return f"{SILVER}/{validate_name(collection_id, 'collection id')}"


def dataset_key(name: str) -> str:
    return f"{DATASETS}/{validate_name(name, 'dataset name')}"


def version_folder_name(version: int) -> str:
    """``3`` -> ``v0003``."""
    return f"v{version:04d}"


def version_number(folder_name: str) -> int | None:
    """``v0003`` -> 3; None for a name that is not a version folder."""
    digits = folder_name[1:]
    return int(digits) if folder_name.startswith("v") and digits.isdigit() else None


def version_key(name: str, version: int) -> str:
    return f"{dataset_key(name)}/{version_folder_name(version)}"


def reward_layer_key(name: str) -> str:
    """The folder of every version of reward layer ``name``."""
    return f"{REWARDS}/{validate_name(name, 'reward layer name')}"


def reward_version_key(name: str, version: int) -> str:
    return f"{reward_layer_key(name)}/{version_folder_name(version)}"


def run_key(run_id: str) -> str:
    return f"{RUNS}/{validate_name(run_id, 'run id')}"


def claim_key(name: str) -> str:
    return f"{CLAIMS}/{validate_name(name, 'claim name')}"


@dataclass(frozen=True)
class CommitFolder:
    """A folder that is, or was meant to become, one commit."""

    key: str
    """Its key (``collections/<id>``, ``silver/<id>``, ``datasets/<name>/v0003``)."""
    kind: str
    """Which manifest commits it: ``collection``, ``silver``, ``dataset`` or ``reward``."""


_COMMIT_DEPTH = {
    COLLECTIONS: (2, "collection"),
    SILVER: (2, "silver"),
    DATASETS: (3, "dataset"),
    REWARDS: (3, "reward"),
}


def commit_folder_of(key: str) -> CommitFolder | None:
    """The commit folder the file ``key`` lies in, or None for a key outside every one."""
    parts = key.split("/")
    depth, kind = _COMMIT_DEPTH.get(parts[0], (0, ""))
    if not depth or len(parts) <= depth:
        return None
    return CommitFolder("/".join(parts[:depth]), kind)


def is_manifest_of(key: str, folder: CommitFolder) -> bool:
    return key == f"{folder.key}/{MANIFEST}"


# -- data file names inside committed folders (the one builder; content hashes cover these names) --
#: The file of a reward layer version: one row per scored rollout.
REWARD_SCORES_FILE = "scores.parquet"
#: A dataset version's files of tables other than its rows, by table: a merged version's calls that
#: could not be merged, and why.
VERSION_TABLE_FILES = {"merge_diagnostics": "merge_diagnostics.parquet"}


def version_table_file(table: str) -> str:
    """A dataset version's file of warehouse table ``table`` (one of VERSION_TABLE_FILES)."""
    return VERSION_TABLE_FILES[table]


def bronze_file(table: str, index: int = 0) -> str:
    """A collection's ``index``-th file of bronze table ``table``: ``spans-0003.parquet``."""
    return f"{table}-{index:04d}.parquet"


def silver_file(table: str, build: str) -> str:
    """A silver cache's file of ``table`` written by build ``build`` (a fresh suffix per rebuild,
    so the previous cache stays readable until the new manifest replaces it)."""
    return f"{table}-{build}.parquet"


def split_file(split: str, piece: int | None = None) -> str:
    """A dataset version's file of ``split``: ``train.parquet`` when the split is one file, else its
    ``piece``-th file ``train-00003.parquet``."""
    return f"{split}.parquet" if piece is None else f"{split}-{piece:05d}.parquet"


# -- train's files outside the committed folders ----------------------------------------------
def scratch_key(run_id: str) -> str:
    """A run's scratch folder inside the warehouse (checkpoints, caches; removed by gc)."""
    return f"{TMP}/train-{validate_name(run_id, 'run id')}"


#: Inside a run's scratch: the trainer's checkpoints, each finished one marked by CHECKPOINT_COMPLETE.
CHECKPOINTS = "checkpoints"
CHECKPOINT_COMPLETE = "tracebank-complete"


def staging_dir(output: Path, run_id: str) -> Path:
    """Where train writes a run's model before moving it to ``output`` (beside it, same file system)."""
    return output.parent / f".{output.name}{TMP_MARK}{run_id}"


def output_claim_key(output: Path) -> str:
    """The key of the claim that lets one run at a time write the model folder ``output``: kept in
    the warehouse with its other claims (nothing is left beside the model), named by the path."""
    digest = hashlib.sha256(str(output.resolve()).encode()).hexdigest()[:16]
    return f"{CLAIMS}/output-{digest}"
