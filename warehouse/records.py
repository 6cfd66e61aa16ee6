"""Typed records of the warehouse: what a manifest or run record holds, and its JSON form.

Every committed folder is described by one of these: a collection (bronze), a silver cache,
a dataset version, a training run. Writers build a record and hand it to
:mod:`tracebank.warehouse.storage`; readers get records back, validated: a file that is
valid JSON of the wrong shape is reported by name in one line, never read with defaults.

Each record carries ``format_version``. A record written by a newer tracebank is refused
(its meaning may have changed); one written before the field existed reads as version 1.
Keys this version does not know are kept in ``other`` and written back unchanged, so an
older reader that rewrites a run record loses nothing.
"""

from __future__ import annotations

import dataclasses
import re
import types
import typing
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar, Union

from tracebank.core.errors import CorruptFileError
from tracebank.core.text import loss
from tracebank.warehouse import finite

R = TypeVar("R", bound="Record")
#: What a committed file may be called: one name, no separator, no NUL, not hidden.
PLAIN_NAME = re.compile(r"\A[A-Za-z0-9_][A-Za-z0-9._=-]{0,199}\Z")


def _type_name(tp: Any) -> str:
    return getattr(tp, "__name__", str(tp))


def checked_value(value: Any, tp: Any, where: str) -> Any:
    """``value`` converted to ``tp`` (records from dicts), or a ValueError saying what is wrong."""
    origin = typing.get_origin(tp)
    if origin in (Union, types.UnionType):
        options = typing.get_args(tp)
        if value is None and type(None) in options:
            return None
        for option in (o for o in options if o is not type(None)):
            return checked_value(value, option, where)
    if origin is list:
        if not isinstance(value, list):
            raise ValueError(f"{where} should be a list, not {type(value).__name__}")
        (item,) = typing.get_args(tp) or (Any,)
        return [checked_value(v, item, f"{where}[{i}]") for i, v in enumerate(value)]
    if origin is dict:
        if not isinstance(value, dict):
            raise ValueError(f"{where} should be an object, not {type(value).__name__}")
        return value
    if tp is Any:
        return value
    if isinstance(tp, type) and issubclass(tp, Record):
        return tp._from_json(value, where)
    if tp is float and isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    if not isinstance(value, tp) or (tp is int and isinstance(value, bool)):
        raise ValueError(f"{where} should be {_type_name(tp)}, not {type(value).__name__}")
    return value


@dataclass
class Record:
    """Base of every record: checked construction from JSON, and the JSON form back."""

    #: Version of this record's shape; bump it when a field changes meaning.
    FORMAT_VERSION: ClassVar[int] = 1
    #: What the record is, for messages ("collection manifest").
    WHAT: ClassVar[str] = "record"

    @classmethod
    def _from_json(cls: type[R], data: Any, where: str) -> R:
        if not isinstance(data, dict):
            raise ValueError(f"{where} should be an object, not {type(data).__name__}")
        hints = typing.get_type_hints(cls)
        known = {f.name: f for f in dataclasses.fields(cls) if f.name not in ("other", "format_version")}
        missing = [
            name
            for name, f in known.items()
            if name not in data
            and f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING
        ]
        if missing:
            raise ValueError(f"{where} lacks {', '.join(missing)}")
        values = {k: checked_value(v, hints[k], f"{where}.{k}") for k, v in data.items() if k in known}
        extra = {k: v for k, v in data.items() if k not in known and k != "format_version"}
        record = cls(**values)
        if "other" in hints:
            record.other = extra  # type: ignore[attr-defined]
        if "format_version" in hints:
            version = checked_value(data.get("format_version", 1), int, f"{where}.format_version")
            if version > cls.FORMAT_VERSION:
                raise ValueError(
                    f"{where} is format v{version}, newer than this tracebank reads (v{cls.FORMAT_VERSION})"
                )
            record.format_version = version  # type: ignore[attr-defined]
        return record

    @classmethod
    def from_json(cls: type[R], data: Any, source: str) -> R:
        """The record ``data`` describes; CorruptFileError naming ``source`` if its shape is wrong."""
        try:
            found = finite.first_non_finite(data, cls.WHAT)  # records hold standard JSON numbers only
            if found is not None:
                raise ValueError(f"{found[0]} is {found[1]}, not a finite number")
            return cls._from_json(data, cls.WHAT)
        except ValueError as exc:
            raise CorruptFileError(
                f"{source} is not a valid {cls.WHAT}: {exc}",
                "it was edited or written by another program; restore it or remove its folder",
            ) from exc

    def to_json(self) -> dict[str, Any]:
        """The JSON object this record is written as (unknown keys read earlier included)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if f.name == "other":
                continue
            out[f.name] = _plain(value)
        out.update(getattr(self, "other", {}) or {})
        return out


def _plain(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


@dataclass
class FileEntry(Record):
    """One committed data file: its name relative to the manifest, size, hash and table."""

    WHAT: ClassVar[str] = "file entry"

    path: str
    """File name inside the committed folder."""
    bytes: int
    """Size when committed; a different size means truncated or altered."""
    sha256: str
    """Hash of the whole file, verified before training."""
    rows: int | None = None
    """Rows in the file (Parquet)."""

    table: str | None = None
    """Warehouse table the rows belong to (``spans``, ``llm_calls``, ``dataset_rows`` ...)."""
    split: str | None = None
    """Dataset split (``train``, ``validation``) of a dataset version's file."""

    def __post_init__(self) -> None:
        # Manifests may come from a shared bucket: a listed path is a plain name inside its
        # committed folder, never a way to read or write anything else.
        if not PLAIN_NAME.match(self.path) or self.path in (".", ".."):
            raise ValueError(f"file entry path {self.path[:80]!r} is not a plain file name")

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in super().to_json().items() if v is not None or k in ("path", "bytes")}


@dataclass(kw_only=True)
class Manifest(Record):
    """A committed folder: the files it lists become visible when this is written."""

    files: list[FileEntry] = field(default_factory=list)
    """The data files of the commit."""

    def files_of(self, table: str | None = None) -> list[FileEntry]:
        """The listed files (of ``table`` only, when given), in commit order."""
        return [e for e in self.files if table is None or e.table == table]


@dataclass(kw_only=True)
class CollectionManifest(Manifest):
    """``collections/<id>/manifest.json``: one collect run's bronze files and what it saw."""

    WHAT: ClassVar[str] = "collection manifest"

    collection_id: str
    """Id of the collection (sorts by creation time)."""
    created_at: str | None = None
    """ISO time the collect run started."""
    finished_at: str | None = None
    """ISO time it committed."""
    tag: str | None = None
    """User tag (``--tag``)."""
    store_url: str | None = None
    """The store it read (URL, or a description of an in-process store)."""
    source: str | None = None
    """``agl1`` for an Agent Lightning 1.0 collection (events); absent for 0.3 (spans)."""
    filters: dict[str, Any] = field(default_factory=dict)
    """Filters the rollouts were chosen by."""
    counts: dict[str, Any] = field(default_factory=dict)
    """Rollouts, attempts and spans seen, skipped and written."""
    seconds: dict[str, Any] = field(default_factory=dict)
    """Time per phase."""
    evicted: list[Any] = field(default_factory=list)
    """(rollout, attempt) pairs whose spans the store had already dropped."""
    no_llm_spans_rollouts: list[Any] = field(default_factory=list)
    """Succeeded rollouts without any LLM-call span (first 100)."""
    redaction: dict[str, Any] = field(default_factory=dict)
    """Whether secrets were redacted, and how many values."""
    warnings: list[Any] = field(default_factory=list)
    """Warnings printed by the run."""
    concurrency: int | None = None
    """Span fetches in flight."""
    versions: dict[str, Any] = field(default_factory=dict)
    """Versions of the libraries that read the store."""
    extra: dict[str, Any] = field(default_factory=dict)
    """User metadata (``--extra``)."""
    content_hash: str | None = None
    """Hash of the content when the writer computed one (else derived from the files)."""
    format_version: int = 1
    """Shape version of this manifest."""
    other: dict[str, Any] = field(default_factory=dict)
    """Keys this version does not know, kept as read."""


@dataclass(kw_only=True)
class SilverManifest(Manifest):
    """``silver/<id>/manifest.json``: the cached silver tables derived from one collection."""

    WHAT: ClassVar[str] = "silver manifest"

    collection_id: str
    """The collection the tables were derived from."""
    silver_version: int
    """Derivation version (:data:`tracebank.warehouse.contract.SILVER_VERSION` when current)."""
    created_at: str | None = None
    """ISO time of the build."""
    counts: dict[str, int] = field(default_factory=dict)
    """Rows per table, and usable calls."""
    format_version: int = 1
    """Shape version of this manifest."""
    other: dict[str, Any] = field(default_factory=dict)
    """Keys this version does not know, kept as read."""


@dataclass(kw_only=True)
class DatasetManifest(Manifest):
    """``datasets/<name>/vNNNN/manifest.json``: one immutable dataset version."""

    WHAT: ClassVar[str] = "dataset manifest"

    name: str
    """Dataset name."""
    version: int
    """Version number (the folder's vNNNN)."""
    created_at: str | None = None
    """ISO time of the commit."""
    tracebank_version: str | None = None
    """tracebank that built it."""
    content_hash: str
    """Hash of options, sources and rows: the same inputs give the same hash."""
    params: dict[str, Any] = field(default_factory=dict)
    """Transform options."""
    sources: list[dict[str, Any]] = field(default_factory=list)
    """Collections read: ``{collection_id, content_hash}``."""
    counts: dict[str, Any] = field(default_factory=dict)
    """Calls, rewards and rows kept or dropped at each step."""
    stats: dict[str, Any] = field(default_factory=dict)
    """Token, length and reward statistics."""
    rows: int = 0
    """Rows over every split."""
    notes: dict[str, Any] | None = None
    """User metadata (``--extra``)."""
    config: dict[str, Any] | None = None
    """Every transform option as given (flags and --config file merged; none in versions written before
    it was recorded): what ``datasets show --format yaml`` prints back. Not part of the content hash."""
    format_version: int = 1
    """Shape version of this manifest."""
    other: dict[str, Any] = field(default_factory=dict)
    """Keys this version does not know, kept as read."""

    @property
    def kind(self) -> str:
        """``sft`` (token rows) or ``preference`` (chosen/rejected pairs)."""
        return str(self.params.get("kind") or "sft")

    def summary_lines(self, ref: object, folder: object) -> list[str]:
        """What `tracebank datasets show` prints for this version (``ref`` NAME@vN, committed in
        ``folder``): its counts, statistics, options, sources and files, one line each."""
        from tracebank.warehouse.record_text import dataset_summary_lines

        return dataset_summary_lines(ref, folder, self.to_json())

    def split_files(self) -> dict[str, list[FileEntry]]:
        """Row files per split (``train`` first)."""
        out: dict[str, list[FileEntry]] = {}
        for entry in self.files:
            if (entry.table or "dataset_rows") in ("dataset_rows", "preference_rows"):
                out.setdefault(entry.split or "train", []).append(entry)
        return out

    def to_json(self) -> dict[str, Any]:
        out = super().to_json()
        for optional in ("notes", "config"):
            if out.get(optional) is None:
                out.pop(optional, None)
        return out


@dataclass(kw_only=True)
class RewardLayerManifest(Manifest):
    """``rewards/<name>/vNNNN/manifest.json``: scores a scorer gave archived rollouts (tracebank rescore)."""

    WHAT: ClassVar[str] = "reward layer manifest"

    name: str
    """Layer name (``--name``)."""
    version: int
    """Version number (the folder's vNNNN)."""
    scorer: str
    """The scorer, ``module:function``."""
    source_hash: str
    """sha256 of the scorer's source file: the same source gives the same layer."""
    content_hash: str
    """Hash of scorer, source, collections and scores."""
    created_at: str | None = None
    """ISO time of the commit."""
    tracebank_version: str | None = None
    """tracebank that built it."""
    source_file: str | None = None
    """Where the scorer's source was read from."""
    collections: list[str] = field(default_factory=list)
    """Collections whose rollouts were scored."""
    counts: dict[str, Any] = field(default_factory=dict)
    """Rollouts, scored, unscored (None returned), failed, and the first line of each failure."""
    judge: dict[str, Any] | None = None
    """An LLM judge's layer (``rescore --judge``; None for a scorer function): ``model`` (the local
    folder or the endpoint's model name), ``model_sha256`` (sha256 over the folder's files; None
    behind an endpoint), ``url`` (the endpoint without its query; None in-process), ``rubric_sha256``,
    ``scale``, ``samples``, ``temperature``, ``seed`` and ``group``. ``source_hash`` is its sha256."""
    format_version: int = 1
    """Shape version of this manifest."""
    other: dict[str, Any] = field(default_factory=dict)
    """Keys this version does not know, kept as read."""


@dataclass
class RunRecord(Record):
    """``runs/<run_id>/run.json``: everything about one training run."""

    WHAT: ClassVar[str] = "run record"

    run_id: str
    """Sortable, readable, unique id."""
    status: str
    """running | succeeded | failed."""
    dataset: str
    """The dataset version trained on (``NAME@vN``)."""
    content_hash: str | None
    """That version's content hash."""
    base_model: str
    """Base model path, or ``ORG/NAME@<commit>`` for a Hugging Face hub id."""
    backend: str
    """trl | unsloth."""
    output_dir: str
    """Where the model was saved."""
    save: str
    """merged | lora."""
    hyperparameters: dict[str, Any]
    """The training config as run."""
    libraries: dict[str, str]
    """Versions of the training libraries."""
    started_at: str
    """ISO time of the start."""
    finished_at: str | None = None
    """ISO time of the end (None while running)."""
    error: str | None = None
    """One-line error of a failed run."""
    resolved: dict[str, Any] = field(default_factory=dict)
    """Settings resolved at run time (max length, dtype, device)."""
    data: dict[str, Any] = field(default_factory=dict)
    """Rows and tokens trained on."""
    model: dict[str, Any] = field(default_factory=dict)
    """Parameter counts and what was saved."""
    summary: dict[str, Any] = field(default_factory=dict)
    """Losses, steps and throughput."""
    best_checkpoint: dict[str, Any] | None = None
    """The checkpoint kept by early stopping."""
    owner: dict[str, Any] | None = None
    """The process running it (pid, host, start): a running run whose process is gone reads as failed."""
    log_file: str | None = None
    """The child's log."""
    base_model_revision: str | None = None
    """Hub commit the base model resolved to (None for a local folder)."""
    attempts: list[dict[str, Any]] = field(default_factory=list)
    """Each start of the run (the first and every resume): times, status, owner, checkpoint steps."""
    format_version: int = 1
    """Shape version of this record."""
    other: dict[str, Any] = field(default_factory=dict)
    """Keys this version does not know, kept as read."""

    def summary_line(self) -> str:
        """The one line that says how a run went: losses, steps, speed and output (for a node other
        than 0 of a multi-node run, that node 0 records the run)."""
        hp = self.hyperparameters
        if hp.get("node_rank"):
            return (
                f"node {hp['node_rank']} of {hp['nnodes']} finished its {hp['nproc_per_node']} rank(s); "
                f"node 0 records the run and writes the model to {self.output_dir}"
            )
        s = self.summary
        best_eval = s.get("eval_loss_best")
        eval_part = f", eval best {loss(best_eval)}" if best_eval is not None else ""
        best = self.best_checkpoint
        if best and best.get("step") != s.get("steps"):
            eval_part += f" (kept the step-{best['step']} checkpoint)"
        speed = f"{s['tokens_per_s']:,.0f} tokens/s" if s.get("tokens_per_s") else "n/a tokens/s"
        return (
            f"run {self.run_id} {self.status}: loss {loss(s.get('train_loss_first'))} -> "
            f"{loss(s.get('train_loss_last'))}{eval_part}, {s.get('steps')} steps, {speed}, "
            f"output {self.output_dir}"
        )
