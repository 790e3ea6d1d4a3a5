"""Where a branch bank's records live on disk: SQLite (the default for new banks) or gzip members (older banks).

A record is one question's JSON object `{"key", "prompt_ids", "branches": [...]}`. Both stores guarantee what a
bank needs (`bank.BranchBank`): every record reported written reads back after a `kill -9` at any moment, a record
is never duplicated, and concurrent writers (data-parallel ranks, two jobs) never interleave or lose records.

- `SqliteStore` (`*.sqlite`, `*.db`, or any new path not ending in `.gz`): SQLite does the hard part. WAL journal,
  one transaction per question, `synchronous=FULL`, the key as primary key (a second writer of the same question is
  ignored), zlib-compressed JSON blobs.
- `GzipStore` (`*.jsonl.gz`, the committed banks): one gzip member per question, appended under an exclusive
  `flock` with a single write and an fsync. A torn or corrupt member (a kill mid-write, flipped bytes) costs only
  itself: reading skips to the next gzip header with one warning naming the file and byte offset.

`convert` copies every record between any two (including plain JSON lines, for other tools).
"""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import time
import zlib
from collections.abc import Iterator
from pathlib import Path

try:  # POSIX; elsewhere gzip banks have a single writer at a time
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

from ...log import log
GZIP_MAGIC = b"\x1f\x8b\x08"  # the first bytes of every gzip member (deflate)
SQLITE_MAGIC = b"SQLite format 3\x00"
SQLITE_SUFFIXES = (".sqlite", ".sqlite3", ".db")


def _is_record(record) -> bool:
    return isinstance(record, dict) and isinstance(record.get("key"), str) and isinstance(record.get("branches"), list)


def _check_gzip_bank(path: Path) -> None:
    """Refuse a gzip file whose first member is whole but holds no bank record (a data file named by mistake:
    appending records to it would damage it); a torn first member (a kill mid-write) is a bank's and passes."""
    with open(path, "rb") as handle:
        raw = handle.read(1 << 20)
    inflater = zlib.decompressobj(wbits=31)
    try:
        text = inflater.decompress(raw, 1 << 22)
        first = json.loads(text.split(b"\n", 1)[0]) if inflater.eof else None
    except (zlib.error, UnicodeDecodeError, json.JSONDecodeError):
        first = None if not inflater.eof else False
    if first is False or (first is not None and not _is_record(first)):
        raise ValueError(f"bank={path} is a gzip file but not a lover-lmeval bank (its first member holds no record); "
                         "pass a new file path (e.g. bank=run.sqlite) or the bank file you meant.")


def store_kind(path: Path) -> str:
    """"sqlite" or "gzip": an existing file by its first bytes, a new one by its suffix (`.gz` -> gzip).

    Raises ValueError naming the file when it exists but is neither (a foreign file would otherwise be read as an
    empty bank and appended to, unreadably)."""
    if path.is_dir():
        raise ValueError(f"bank={path} is a directory; pass a file inside it, e.g. bank={path / 'bank.sqlite'}")
    if path.is_file() and path.stat().st_size > 0:
        with open(path, "rb") as handle:
            head = handle.read(len(SQLITE_MAGIC))
        if head.startswith(SQLITE_MAGIC):
            return "sqlite"
        if head.startswith(GZIP_MAGIC):
            _check_gzip_bank(path)
            return "gzip"
        raise ValueError(f"bank={path} exists but is not a lover-lmeval bank (neither SQLite nor gzip records); "
                         "pass a new file path (e.g. bank=run.sqlite) or the bank file you meant.")
    return "gzip" if path.name.endswith(".gz") else "sqlite"


class GzipStore:
    def __init__(self, path: Path):
        self.path = path

    def records(self) -> Iterator[dict]:
        """Every whole record, in file order."""
        if not self.path.is_file():
            return
        raw = self.path.read_bytes()
        offset = 0
        while offset < len(raw):
            inflater = zlib.decompressobj(wbits=31)  # one gzip member at a time
            try:
                text = inflater.decompress(raw[offset:]) + inflater.flush()
                records = [json.loads(line) for line in text.decode().splitlines()] if inflater.eof else None
            except (zlib.error, UnicodeDecodeError, json.JSONDecodeError):
                records = None
            if records is None or not all(_is_record(r) for r in records):
                following = raw.find(GZIP_MAGIC, offset + 1)
                log.warning("%s: skipping an unreadable record at byte %d (%d bytes; a torn write or corruption)",
                            self.path, offset, (following if following >= 0 else len(raw)) - offset)
                if following < 0:
                    break
                offset = following
                continue
            offset = len(raw) - len(inflater.unused_data)
            yield from records

    def add(self, record: dict) -> None:
        member = gzip.compress((json.dumps(record, separators=(",", ":")) + "\n").encode())
        self.path.parent.mkdir(parents=True, exist_ok=True)
        handle = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            if fcntl is not None:
                fcntl.flock(handle, fcntl.LOCK_EX)  # another writer's member is never split by ours
            view = memoryview(member)
            while view:  # O_APPEND: every write lands at the end, under the lock
                view = view[os.write(handle, view):]
            os.fsync(handle)
        finally:
            os.close(handle)  # closing releases the lock


class SqliteStore:
    SCHEMA = "CREATE TABLE IF NOT EXISTS records (key TEXT PRIMARY KEY, record BLOB NOT NULL) WITHOUT ROWID"
    APPLICATION_ID = 0x4C4F5652  # "LOVR" in the database header: a bank, not another program's database

    def __init__(self, path: Path):
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # timeout: a concurrent writer holds the lock for one question's insert, milliseconds
            self.db = sqlite3.connect(path, timeout=120, isolation_level=None)
            tables = {row[0] for row in self.db.execute("SELECT name FROM sqlite_master WHERE type='table'")}
            marked = self.db.execute("PRAGMA application_id").fetchone()[0] == self.APPLICATION_ID
            if tables and not marked:  # checked before any write: never touch another program's database
                raise ValueError(f"bank={path} is a SQLite database of another program (tables {sorted(tables)}); "
                                 "pass a new file path for the bank.")
            self._initialise(not tables)
        except sqlite3.DatabaseError as error:
            raise ValueError(f"bank={path} cannot be opened as a SQLite bank ({error}); pass a new file path or "
                             "the bank file you meant.") from None

    def _initialise(self, new: bool, wait_s: float = 120.0) -> None:
        """WAL mode and, for a new file, the schema. Two processes opening one new bank at once (two ranks) can get
        "database is locked" at once here: the journal-mode switch does not wait on SQLite's busy handler. Retried
        until the other has finished (milliseconds), up to `wait_s`."""
        deadline = time.monotonic() + wait_s
        while True:
            try:
                self.db.execute("PRAGMA journal_mode=WAL")
                self.db.execute("PRAGMA synchronous=FULL")
                if new:
                    self.db.execute(f"PRAGMA application_id={self.APPLICATION_ID}")
                    self.db.execute(self.SCHEMA)
                return
            except sqlite3.OperationalError as error:
                if "locked" not in str(error) or time.monotonic() > deadline:
                    raise
                time.sleep(0.05)

    def records(self) -> Iterator[dict]:
        for key, blob in self.db.execute("SELECT key, record FROM records"):
            record = self._decode(key, blob)
            if record is not None:
                yield record

    def _decode(self, key: str, blob: bytes) -> dict | None:
        try:
            record = json.loads(zlib.decompress(blob))
        except (zlib.error, UnicodeDecodeError, json.JSONDecodeError):
            record = None
        if not _is_record(record) or record["key"] != key:
            log.warning("%s: skipping the unreadable record %s (corrupt)", self.path, key)
            return None
        return record

    def get(self, key: str) -> dict | None:
        row = self.db.execute("SELECT record FROM records WHERE key = ?", (key,)).fetchone()
        return None if row is None else self._decode(key, row[0])

    def has(self, key: str) -> bool:
        return self.get(key) is not None  # a corrupt row counts as absent: the question is decoded again

    def keys(self) -> set[str]:
        return {row[0] for row in self.db.execute("SELECT key FROM records")}

    def add(self, record: dict) -> None:
        blob = zlib.compress(json.dumps(record, separators=(",", ":")).encode(), 6)
        with self.db:  # one transaction per question; a concurrent copy of the same question is kept once
            self.db.execute("BEGIN IMMEDIATE")
            stored = self.db.execute("SELECT record FROM records WHERE key = ?", (record["key"],)).fetchone()
            if stored is None or self._decode(record["key"], stored[0]) is None:  # new, or replacing a corrupt row
                self.db.execute("INSERT OR REPLACE INTO records (key, record) VALUES (?, ?)", (record["key"], blob))
        # Move the committed transaction from the -wal file into the bank file itself, so the .sqlite file alone
        # (copied, committed) holds every record; PASSIVE never waits for other connections.
        self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def discard(self, keys: list[str]) -> None:
        with self.db:  # one transaction: a kill keeps every record or removes all of these
            self.db.execute("BEGIN IMMEDIATE")
            self.db.executemany("DELETE FROM records WHERE key = ?", [(key,) for key in keys])
        self.db.execute("PRAGMA wal_checkpoint(PASSIVE)")

    def close(self) -> None:
        self.db.close()


def open_store(path: str | Path) -> GzipStore | SqliteStore:
    path = Path(path)
    return SqliteStore(path) if store_kind(path) == "sqlite" else GzipStore(path)


def convert(source: str | Path, destination: str | Path) -> int:
    """Copy every readable record of `source` into `destination` (a bank, or `*.jsonl`: plain JSON lines for other
    tools); returns how many. Records already in a destination bank are kept once."""
    destination, source = Path(destination), Path(source)
    if not source.is_file():
        raise FileNotFoundError(f"{source} is not a file: pass an existing bank to read from")
    records = open_store(source).records()
    if destination.suffix == ".jsonl":
        from ..files import atomic_path

        seen = set()
        with atomic_path(destination) as tmp, open(tmp, "w", encoding="utf-8") as handle:
            for record in records:
                if record["key"] not in seen:
                    seen.add(record["key"])
                    handle.write(json.dumps(record, separators=(",", ":")) + "\n")
        return len(seen)
    store, seen = open_store(destination), set()
    for record in records:
        if record["key"] not in seen:  # two writers of a gzip bank may both have appended a question
            seen.add(record["key"])
            store.add(record)
    return len(seen)
