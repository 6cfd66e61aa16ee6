"""``--base-model ORG/NAME[@REVISION]``: a Hugging Face hub id resolved through the local cache.

tracebank never downloads at run time: a hub id names a snapshot already in the Hugging Face
cache (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``), found
offline. A local folder of that name wins over a hub id. The run records the snapshot's commit,
so ``ORG/NAME@<commit>`` names exactly the weights a run trained.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tracebank.train.errors import TrainError

#: ``ORG/NAME`` or ``ORG/NAME@REVISION`` (a branch, tag or commit).
HUB_ID = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<revision>[\w./-]+))?$")


@dataclass(frozen=True)
class BaseModel:
    """Where a base model's files are, and the hub commit they came from (None for a local folder)."""

    path: Path
    repo: str | None = None
    revision: str | None = None

    @property
    def pinned(self) -> str:
        """How the run names it: the folder, or ``ORG/NAME@<commit>``."""
        return f"{self.repo}@{self.revision}" if self.repo else str(self.path)


def hub_cache() -> Path:
    """The Hugging Face hub cache this process would use (read now, not at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def resolve_base_model(name: str) -> BaseModel:
    """A local folder as it is, or a hub id's cached snapshot (one-line error when it is not cached)."""
    local = Path(name).expanduser()
    match = HUB_ID.match(name)
    if local.exists() or match is None:
        return BaseModel(local.resolve())
    repo, revision = match["repo"], match["revision"]
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = hub_cache()
    try:
        folder = Path(snapshot_download(repo, revision=revision, cache_dir=cache, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError) as exc:
        fetch = f"hf download {repo}" + (f" --revision {revision}" if revision else "")
        raise TrainError(
            f"base model {name} is not in the Hugging Face cache {cache} (tracebank does not download)",
            f"fetch it once with `{fetch}` (same HF_HOME), or pass a local folder",
        ) from exc
    return BaseModel(folder, repo=repo, revision=folder.name)
