"""A resumable, append-only bank of decoded branches (decoding is the expensive part on CPU).

One gzip member per question is appended and flushed as soon as the question is decoded, so an
interrupted run loses at most the question in flight; a torn or corrupt member costs only itself. Each
record is keyed by everything that determines the branches: model identity, prompt token ids, decoding
config and generation settings. Only compact text goes in (ids, margins, offsets): features are
recomputed from the tokens at whatever layer an experiment needs (features.features_from_tokens).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import os
import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch

from .decoding import Branch

log = logging.getLogger(__name__)
GZIP_MAGIC = b"\x1f\x8b\x08"  # the first bytes of every gzip member (deflate)
#: `feature_cache` value meaning the lover-lmeval cache dir (loading.cache_dir() / "features").
DEFAULT_FEATURE_CACHE = "default"


@dataclass
class BankConfig:
    """Where decoded branches and computed features are kept between runs."""

    path: str | None = None
    """Branch bank file: banked questions are read instead of decoded, new ones appended (None: no bank)."""
    bank_only: bool = False
    """Never decode: a question missing from the bank is an error (needs `path`)."""
    feature_cache: str | None = DEFAULT_FEATURE_CACHE
    """With a bank, features per question and layer are kept in this folder ("default": the lover-lmeval cache
    dir, never the repository; None: off), so banked questions are not re-run through the model."""

    def __post_init__(self) -> None:
        if self.bank_only and self.path is None:
            raise ValueError("bank_only=true needs bank=PATH (the bank to read every question from)")


class NotInBank(LookupError):
    """Raised by lover_hf with bank_only=true when a question has no record in its bank."""


def record_key(model: str, prompt_ids: list[int], settings: dict) -> str:
    payload = json.dumps({"model": model, "prompt": prompt_ids, "settings": settings}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()


class BranchBank:
    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.records: dict[str, list[Branch]] = {}
        if self.path.is_file():
            self._load()

    def _load(self) -> None:
        """Read every whole record; a torn or corrupt member costs only itself: reading resumes at the next gzip
        member header after it (a kill during a write tears the member it was writing, and later runs append
        after the tear)."""
        raw = self.path.read_bytes()
        offset = 0
        while offset < len(raw):
            inflater = zlib.decompressobj(wbits=31)  # one gzip member at a time
            try:
                text = inflater.decompress(raw[offset:]) + inflater.flush()
                records = [json.loads(line) for line in text.decode().splitlines()] if inflater.eof else None
            except (zlib.error, UnicodeDecodeError, json.JSONDecodeError):
                records = None
            if records is None or not all(isinstance(r, dict) and "key" in r and "branches" in r for r in records):
                following = raw.find(GZIP_MAGIC, offset + 1)
                log.warning("%s: skipping an unreadable record at byte %d (%d bytes; a torn write or corruption)",
                            self.path, offset, (following if following >= 0 else len(raw)) - offset)
                if following < 0:
                    break
                offset = following
                continue
            offset = len(raw) - len(inflater.unused_data)
            for record in records:
                self.records[record["key"]] = [Branch(**{**b, "offsets": [tuple(o) for o in b["offsets"]]})
                                               for b in record["branches"]]

    def __len__(self) -> int:
        return len(self.records)

    def get(self, key: str) -> list[Branch] | None:
        return self.records.get(key)

    def add(self, key: str, branches: list[Branch], **info) -> None:
        record = {"key": key, **info, "branches": [asdict(b) for b in branches]}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.path, "ab") as handle:
            handle.write(gzip.compress((json.dumps(record, separators=(",", ":")) + "\n").encode()))
            handle.flush()
        self.records[key] = branches


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
            path = self._path(key, layer, template_ids)
            path.parent.mkdir(parents=True, exist_ok=True)
            partial = path.with_suffix(".partial.npy")
            np.save(partial, features[:, :, k].numpy())
            os.replace(partial, path)
