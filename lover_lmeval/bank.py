"""A resumable, append-only bank of decoded branches (decoding is the expensive part on CPU).

One gzip member per question is appended and flushed as soon as the question is decoded, so an
interrupted run loses at most the question in flight; a torn last member is skipped on reading. Each
record is keyed by everything that determines the branches: model identity, prompt token ids, decoding
config and generation settings. Only compact text goes in (ids, margins, offsets): features are
recomputed from the tokens at whatever layer an experiment needs (features.features_from_tokens).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import logging
import zlib
from dataclasses import asdict
from pathlib import Path

from .decoding import Branch

log = logging.getLogger(__name__)


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
        raw = self.path.read_bytes()
        while raw:
            inflater = zlib.decompressobj(wbits=31)  # one gzip member at a time
            try:
                text = inflater.decompress(raw) + inflater.flush()
            except zlib.error:
                text = b""
            if not inflater.eof:
                log.warning("%s: skipping a torn last record (interrupted write)", self.path)
                break
            raw = inflater.unused_data
            for line in text.decode().splitlines():
                record = json.loads(line)
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
