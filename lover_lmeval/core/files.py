"""Atomic file outputs: a kill at any moment leaves either the old file or the whole new one, never a torn one.

Every output (checkpoints and their sidecars, leaderboards, per-question and branch logs, plots) is written to a
temporary file in the destination's folder (same filesystem, so the rename is atomic), flushed to disk, and renamed
over the destination; the folder is then fsynced so the rename itself survives a crash.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path


def _fsync_dir(folder: Path) -> None:
    try:
        handle = os.open(folder, os.O_RDONLY)
    except OSError:  # some platforms cannot open a directory; the rename is still atomic there
        return
    try:
        os.fsync(handle)
    except OSError:
        pass
    finally:
        os.close(handle)


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path beside `path`; once the block returns, move it over `path` (fsynced).

    For writers that want a file name (safetensors' save_file, matplotlib's savefig). If the block raises, the
    temporary file is removed and `path` is untouched. The suffix is kept, so writers that infer a format from
    it (savefig) still do.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=f".partial{path.suffix}")
    os.close(handle)
    tmp = Path(name)
    try:
        yield tmp
        with open(tmp, "rb+") as written:
            os.fsync(written.fileno())
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)  # mkstemp's 0600 would make every output private to its writer
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    _fsync_dir(path.parent)


def write_bytes(path: str | Path, data: bytes) -> None:
    """Atomically replace `path` with `data`."""
    with atomic_path(path) as tmp:
        tmp.write_bytes(data)


def write_text(path: str | Path, text: str) -> None:
    """Atomically replace `path` with `text` (UTF-8)."""
    write_bytes(path, text.encode("utf-8"))
