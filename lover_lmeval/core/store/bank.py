"""A resumable bank of decoded branches (decoding is the expensive part on CPU).

Each question is written as soon as its own branches are decoded, in its own transaction (bank_store: SQLite for
new banks, gzip members for older ones), so a kill loses at most the questions in flight and a torn or corrupt
record costs only itself. Each record is keyed by everything that determines the branches: model identity,
prompt token ids, decoding config and generation settings. Only compact text goes in (ids, margins, offsets):
features are recomputed from the tokens at whatever layer an experiment needs (features.features_from_tokens).

A branch's per-token statistics (`Branch.stats`, token_stats.py) are stored with it when it has them, as one base64
string of little-endian float16 values per statistic (`token_stats.encode_stats`); a branch without them (decoded
before they existed) is written, and read back, without the field. Per token, not per branch: DeepConf's
confidence is the lowest mean over sliding windows of 32 tokens, self-certainty and CISC average over the tokens,
and the next selector will want another reduction; per-branch aggregates would fix today's reductions for good.
Measured on a real record (benchmarks/banks/smollm2-135m-instruct/lover_gsm8k-test.jsonl.gz, its first: 10 branches,
1,622 kept tokens, statistics from features.stats_from_tokens): its gzip member grows from 22,815 to 38,688 bytes
(+70%, 9.8 bytes a token for the 4 statistics: float16 is near-incompressible, so base64's 10.7 characters a token
stay ~that size); the same values as JSON number lists would make it 49,202 bytes (+116%).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import numpy as np
import torch

from .bank_store import GzipStore, SqliteStore, open_store, store_kind
from ..decode.branch import Branch
from ..decode.decoding import DecodingConfig
from ..decode.engine import ENGINES
from ..files import atomic_path
from ..decode.token_stats import decode_stats, encode_stats

#: `feature_cache` value meaning the lover-lmeval cache dir (loading.cache_dir() / "features").
DEFAULT_FEATURE_CACHE = "default"


def check_bank_path(path: str) -> None:
    """Raise ValueError naming `path` and the fix unless a bank can be read and written there (cheap: run before
    the model loads, so a bad path never costs a decode)."""
    target = Path(path).expanduser()
    kind = store_kind(target)  # a directory or a foreign file
    if target.exists():
        if not os.access(target, os.W_OK):
            raise ValueError(f"bank={path} is not writable; pass a bank path you can write, or make it writable.")
        if kind == "sqlite":
            SqliteStore(target).close()  # another program's database is refused before anything is written
        return
    parent = target.parent
    while not parent.exists():  # the bank creates missing folders: the first existing ancestor must be writable
        parent = parent.parent
    if not parent.is_dir() or not os.access(parent, os.W_OK):
        raise ValueError(f"bank={path}: cannot create it ({parent} is not a writable folder); pass a bank path "
                         "in a folder you can write.")


@dataclass
class BankConfig:
    """Where decoded branches and computed features are kept between runs."""

    path: str | None = None
    """Branch bank file: banked questions are read instead of decoded, new ones written (None: no bank). A new
    file is SQLite unless its name ends in `.gz` (the older gzip-member banks, still read and appended to)."""
    bank_only: bool = False
    """Never decode: a question missing from the bank is an error (needs `path`)."""
    key_dtype: str | None = None
    """The precision whose records to read and write (`float32`, `bfloat16`, ...); None: the model's. Rescoring a
    bank's branches in another precision than they were decoded in (bf16 records read in float32) needs it."""
    key_engine: str | None = None
    """The engine whose records to read and write (`hf`, `vllm`); None: the run's own. lover_hf reads a bank that
    lover_vllm wrote (with `bank_only`: without vLLM installed) only when told to: engines never mix silently."""
    feature_cache: str | None = DEFAULT_FEATURE_CACHE
    """With a bank, features per question and layer are kept in this folder ("default": the lover-lmeval cache
    dir, never the repository; None: off), so banked questions are not re-run through the model."""

    def __post_init__(self) -> None:
        if self.key_dtype is not None and not isinstance(getattr(torch, str(self.key_dtype), None), torch.dtype):
            raise ValueError(f"bank_dtype={self.key_dtype} is not a torch dtype; pass e.g. bank_dtype=bfloat16, or "
                             "omit it (the model's dtype).")
        if self.key_engine is not None and self.key_engine not in ENGINES:
            raise ValueError(f"bank_engine={self.key_engine} is not an engine; pass one of {', '.join(ENGINES)} (the "
                             "engine whose records to read), or omit it (the run's own).")
        if self.bank_only and self.path is None:
            raise ValueError("bank_only=true needs bank=PATH (the bank to read every question from)")
        if self.path is not None:
            check_bank_path(self.path)
        folder = None if self.feature_cache in (None, DEFAULT_FEATURE_CACHE) else Path(self.feature_cache).expanduser()
        if folder is not None and folder.exists() and not folder.is_dir():
            raise ValueError(f"feature_cache={self.feature_cache} is not a folder; pass a folder for the feature "
                             "files, or feature_cache=none to switch the cache off.")


class NotInBank(LookupError):
    """Raised by lover_hf with bank_only=true when a question has no record in its bank."""


def record_settings(decoding: DecodingConfig, until: list[str], max_gen_toks: int, dtype: str = "float32",
                    engine: str = "hf") -> dict:
    """The settings part of a record's key: everything besides model and prompt that determines its branches. One
    recipe for lover_hf's keys (Pipeline.record_keys) and the benchmarks' recomputed ones (benchmarks/bank_sets.py)."""
    settings = {"decoding": asdict(decoding), "until": list(until), "max_gen_toks": max_gen_toks}
    # Another engine's branches are not HF's (other kernels, other near-ties): never the same record. HF keys stay
    # as they were, keeping every bank written before engines existed valid.
    if engine != "hf":
        settings["engine"] = engine
    # Greedy branches in bf16 differ from fp32 ones (29 of 100 equal on a CPU,
    # benchmarks/runs/perf3_continuous_batching.md), so they never share a record; fp32 keys stay as they were,
    # keeping every bank decoded before dtype was part of the key valid.
    if dtype != "float32":
        settings["dtype"] = dtype
    # Sampled branches come from a generator per question (decoding.question_seed); older sample records, drawn from
    # one generator shared by their batch, keep their keys and are never mixed with these.
    if decoding.mode == "sample":
        settings["rng"] = "question_seed"
    return settings


def record_key(model: str, prompt_ids: list[int], settings: dict) -> str:
    payload = json.dumps({"model": model, "prompt": prompt_ids, "settings": settings}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


def _branches(record: dict) -> list[Branch]:
    return [Branch(**{**b, "offsets": [tuple(o) for o in b["offsets"]],
                      "stats": decode_stats(b["stats"]) if b.get("stats") is not None else None})
            for b in record["branches"]]


def branch_record(branch: Branch) -> dict:
    """A branch as stored: its fields, the stats (if any) as float16 base64 (`encode_stats`), none if absent. Each
    list copied shallowly (its items are numbers and tuples), not by `asdict`'s deep copy element by element: 2.8 s of
    a 4.7 s write at 10 branches of 32k tokens."""
    stored = {f.name: getattr(branch, f.name) for f in fields(branch)}
    stats = stored.pop("stats")
    stored = {name: list(value) if isinstance(value, list) else value for name, value in stored.items()}
    return stored if stats is None else {**stored, "stats": encode_stats(stats)}


class BranchBank:
    """Read and write one bank file: `get(key)` a question's branches, `add(key, branches)` a decoded one.

    A gzip bank is read whole when opened; a SQLite bank is queried per question (opening it costs nothing).
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.store = open_store(self.path)
        self._loaded: dict[str, list[Branch]] | None = None
        if isinstance(self.store, GzipStore):
            self._loaded = {r["key"]: _branches(r) for r in self.store.records()}

    def keys(self) -> set[str]:
        return set(self._loaded) if self._loaded is not None else self.store.keys()

    def __len__(self) -> int:
        return len(self.keys())

    def __contains__(self, key: str) -> bool:
        return self.store.has(key) if self._loaded is None else key in self._loaded

    def get(self, key: str) -> list[Branch] | None:
        if self._loaded is not None:
            return self._loaded.get(key)
        record = self.store.get(key)
        return None if record is None else _branches(record)

    def discard(self, keys: list[str]) -> None:
        """Remove these questions' records (a SQLite bank: the staging store of lover_vllm's phases)."""
        if self._loaded is not None:
            raise ValueError(f"{self.path} is a gzip bank: records are appended, never removed")
        self.store.discard(keys)

    def add(self, key: str, branches: list[Branch], **info) -> None:
        record = {"key": key, **info, "branches": [branch_record(b) for b in branches]}
        self.store.add(record)
        if self._loaded is not None:
            self._loaded[key] = _branches(record)  # as a reopened bank reads it: stats at float16


class FeatureCache:
    """Local (never committed) cache of one question's features per layer, beside a bank.

    Recomputing banked branches' features costs ~1/3 of decoding them (one pass over every branch's
    tokens), so every experiment from a bank would re-pay it. A file holds the (N, T, D) float32 features of
    one (bank record, layer, templates) triple: keyed by all three and by `salt` (dtype and device type: fp16
    GPU features differ from fp32 CPU ones), so another layer or template never reads a stale file. Files
    are written atomically (rename), so an interrupted run leaves no torn file.
    """

    def __init__(self, directory: str | Path, salt: str = ""):
        self.directory = Path(directory)
        self.salt = salt

    def read_by(self, model) -> FeatureCache:
        """This cache's files for the features `model` computes: keyed by its dtype and device type, so the copy that
        reads now (lover_vllm's phases swap a meta skeleton for the loaded copy) decides, not the one first built."""
        return FeatureCache(self.directory, salt=f"{model.dtype}/{model.device.type}")

    def _path(self, key: str, layer: int, template_ids: list[list[int]]) -> Path:
        digest = hashlib.sha256(json.dumps([key, layer, template_ids, self.salt]).encode()).hexdigest()
        return self.directory / digest[:2] / f"{digest}.npy"

    def get(self, key: str, layers: list[int], template_ids: list[list[int]]):
        """(N, T, L, D) features of these layers, or None unless every layer is cached."""
        paths = [self._path(key, layer, template_ids) for layer in layers]
        if not all(p.is_file() for p in paths):
            return None
        return torch.stack([torch.from_numpy(np.load(p)) for p in paths], dim=2)  # L x (N, T, D) -> (N, T, L, D)

    def put(self, key: str, layers: list[int], template_ids: list[list[int]], features: torch.Tensor) -> None:
        if features.ndim != 4:
            raise ValueError(f"features must be (N, T, L, D), got shape {tuple(features.shape)}")
        for k, layer in enumerate(layers):
            with atomic_path(self._path(key, layer, template_ids)) as tmp:  # two jobs may write the same file
                np.save(tmp, features[:, :, k].numpy())

    def _stats_path(self, key: str) -> Path:
        return self._path(key, -1, []).with_suffix(".stats.json")  # layer -1: never a feature layer's name

    def get_stats(self, key: str) -> list[dict[str, list[float]]] | None:
        """The token statistics of a bank record's branches, computed by an earlier run (None if not kept): banked
        branches decoded before the statistics existed need a pass through the whole model for them."""
        path = self._stats_path(key)
        return [decode_stats(s) for s in json.loads(path.read_text())] if path.is_file() else None

    def put_stats(self, key: str, stats: list[dict[str, list[float]]]) -> None:
        with atomic_path(self._stats_path(key)) as tmp:
            Path(tmp).write_text(json.dumps([encode_stats(s) for s in stats]))
