"""``ORG/NAME[@REVISION]``: a Hugging Face hub id resolved through the local cache, never downloaded.

Shared by every stage that takes a model or tokenizer by name (``train --base-model``,
``transform --tokenizer``): a hub id names a snapshot already in the Hugging Face cache
(``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else ``~/.cache/huggingface/hub``), found offline. A local
folder of that name wins over a hub id. The snapshot's commit is recorded, so ``ORG/NAME@<commit>``
names exactly the files used.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from tracebank.core.errors import TracebankError

#: ``ORG/NAME`` or ``ORG/NAME@REVISION`` (a branch, tag or commit).
HUB_ID = re.compile(r"^(?P<repo>[\w.-]+/[\w.-]+)(?:@(?P<revision>[\w./-]+))?$")


@dataclass(frozen=True)
class Pretrained:
    """Where a model's (or tokenizer's) files are, and their hub commit (None: a local folder)."""

    path: Path
    repo: str | None = None
    revision: str | None = None

    @property
    def pinned(self) -> str:
        """How a run names it: the folder, or ``ORG/NAME@<commit>``."""
        return f"{self.repo}@{self.revision}" if self.repo else str(self.path)


def hub_cache() -> Path:
    """The Hugging Face hub cache this process would use (read now, not at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    home = os.environ.get("HF_HOME") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", "~/.cache"), "huggingface"
    )
    return Path(home).expanduser() / "hub"


def resolve_pretrained(name: str, what: str, error: type[TracebankError]) -> Pretrained:
    """A local folder as it is, or a hub id's cached snapshot; ``error`` (one line, naming ``what``,
    such as "base model") when it is not cached."""
    local = Path(name).expanduser()
    match = HUB_ID.match(name)
    if local.exists() or match is None:
        return Pretrained(local.resolve())
    repo, revision = match["repo"], match["revision"]
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    cache = hub_cache()
    try:
        folder = Path(snapshot_download(repo, revision=revision, cache_dir=cache, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, ValueError) as exc:
        fetch = f"hf download {repo}" + (f" --revision {revision}" if revision else "")
        raise error(
            f"{what} {name} is not in the Hugging Face cache {cache} (tracebank does not download)",
            f"fetch it once with `{fetch}` (same HF_HOME), or pass a local folder",
        ) from exc
    return Pretrained(folder, repo=repo, revision=folder.name)
