"""Verifier checkpoints: safetensors weights with our JSON metadata in the header, plus a readable sidecar.

Never pickle: a checkpoint from a stranger can be loaded safely. The metadata records what the features were taken
from (:data:`MATCH_KEYS`), so a verifier trained on one model/layer/template is refused on another.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from ...log import log
from ..files import atomic_path, write_text
from .verifier import Verifier
from .verifier_config import VerifierConfig

#: Metadata keys that must agree between a checkpoint and the run that loads it.
MATCH_KEYS = ("model", "hidden_size", "layer", "templates")
_META_KEY = "lover"  # the one safetensors header key holding our JSON metadata
FORMAT_VERSION = 1


def _plain(value):
    """JSON round trip so that tuples/lists etc. compare equal to what a checkpoint stores."""
    return json.loads(json.dumps(value))


def tensors_sha256(tensors: dict[str, torch.Tensor]) -> str:
    """sha256 over every tensor's name, dtype, shape and bytes (sorted by name): recorded at save, checked at load,
    so flipped weight bytes (which safetensors itself loads silently) are caught."""
    digest = hashlib.sha256()
    for name in sorted(tensors):
        tensor = tensors[name].detach().cpu().contiguous()
        digest.update(json.dumps([name, str(tensor.dtype), list(tensor.shape)]).encode())
        digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


def save_checkpoint(path: str | Path, verifier: Verifier, metadata: dict) -> None:
    """Write safetensors weights (+ metadata in the header) and a readable ``.json`` sidecar, each atomically."""
    path = Path(path)
    tensors = {k: v.detach().cpu().contiguous() for k, v in verifier.state_dict().items()}
    meta = {**_plain(metadata), "verifier_config": asdict(verifier.config), "input_dim": verifier.dim,
            "format_version": FORMAT_VERSION, "tensors_sha256": tensors_sha256(tensors)}
    with atomic_path(path) as tmp:
        save_file(tensors, str(tmp), metadata={_META_KEY: json.dumps(meta)})
    sidecar = {**meta, "weights_file": path.name,
               "tensors": {k: list(v.shape) for k, v in tensors.items()}}
    write_text(path.with_suffix(".json"), json.dumps(sidecar, indent=2, sort_keys=True) + "\n")


def gold_labels_used(meta: dict) -> int:
    """How many gold labels made this checkpoint (0: label-free). Checkpoints from before the field existed used
    labels only when supervised: every training question's."""
    if "gold_labels_used" in meta:
        return int(meta["gold_labels_used"])
    return int(meta.get("n_questions", 0)) if meta.get("supervised") else 0


def label_tag(meta: dict) -> str:
    """What a row scored by this checkpoint appends to its name: "" label-free, "[devK]" for dev-label selection
    (or supervised on K dev labels), "[goldN]" for a probe trained on N gold labels."""
    count = gold_labels_used(meta)
    if not count:
        return ""
    return f"[dev{count}]" if str(meta.get("select", "")).startswith("dev:") else f"[gold{count}]"


def _show(value) -> str:
    return value if isinstance(value, str) else json.dumps(value)


def load_checkpoint(path: str | Path, expect: dict | None = None) -> tuple[Verifier, dict]:
    """Load a checkpoint written by :func:`save_checkpoint` (safetensors only, never pickle).

    ``expect`` values for :data:`MATCH_KEYS` must equal the stored metadata, else ValueError.
    """
    path = Path(path)
    try:
        handle = safe_open(str(path), framework="pt")
    except (SafetensorError, OSError) as error:  # truncated, garbage, or not a safetensors file at all
        raise ValueError(f"{path} is not a readable safetensors checkpoint ({error}); pass a file written by "
                         "`lover train`, or re-download it if it was cut short.") from None
    with handle as f:
        header = f.metadata() or {}
        if _META_KEY not in header:
            raise ValueError(f"{path} is not a LoVer checkpoint (no '{_META_KEY}' metadata in its header); pass "
                             "a file written by `lover train`.")
        meta = json.loads(header[_META_KEY])
        diffs = [k for k in MATCH_KEYS if expect is not None and k in expect
                 and meta.get(k, "<missing>") != _plain(expect[k])]
        if diffs:
            lines = [f"checkpoint was trained on {k}={_show(meta.get(k, '<missing>'))}, "
                     f"but this run uses {k}={_show(expect[k])}" for k in diffs]
            raise ValueError(f"{path}: " + "; ".join(lines)
                             + f"; retrain with `lover train` or pass the matching {'/'.join(diffs)}")
        try:
            tensors = {k: f.get_tensor(k) for k in f.keys()}
        except SafetensorError as error:
            raise ValueError(f"{path} is not a readable safetensors checkpoint ({error}); pass a file written by "
                             "`lover train`, or re-download it if it was cut short.") from None
    recorded = meta.get("tensors_sha256")  # checkpoints from before the checksum existed carry none
    if recorded is not None and tensors_sha256(tensors) != recorded:
        raise ValueError(f"{path}: its tensors do not match the checksum (tensors_sha256) recorded when it was "
                         "saved: the file is corrupt or was edited; re-download it or retrain with `lover train`.")
    try:  # a checkpoint from before `orient` existed was not oriented, whatever today's default
        config = VerifierConfig(**{"orient": "none", **meta["verifier_config"]})
    except TypeError as err:  # written by a newer/older version with different fields
        raise ValueError(f"{path}: incompatible verifier_config in checkpoint: {err}") from None
    verifier = Verifier(meta["input_dim"], config)
    tensors.setdefault("orientation", torch.ones(()))  # checkpoints from before `orient` existed are unflipped
    verifier.load_state_dict(tensors)
    verifier.eval()
    return verifier, meta


@dataclass
class LoadedVerifier:
    """A verifier read from a checkpoint (model_args' `verifier=` or `supervised_verifier=`)."""

    module: Verifier
    """The verifier, ready to score features."""
    meta: dict
    """Its checkpoint's metadata (what it was trained on, with how many gold labels)."""
    source: str
    """What scored its rows: "checkpoint PATH tensors_sha256:DIGEST", in each result's scored_by and the
    provenance."""


def load_verifier(path: str | Path, expect: dict, arg: str) -> LoadedVerifier:
    """`load_checkpoint` for model_args' `arg` (its name in a refusal), checked against the run's `expect`; a
    checkpoint made with gold labels is said to be so, since the rows it scores are then not label-free."""
    try:
        module, meta = load_checkpoint(path, expect=expect)
    except ValueError as error:
        raise ValueError(f"{arg}={path}: {error}") from None
    digest = meta.get("tensors_sha256") or tensors_sha256(module.state_dict())
    if label_tag(meta):  # the YAML names the metric rows; say here that these are not label-free
        log.warning("verifier %s was made with %d gold labels %s: the rows it scores (lover_*, or supervised_*) are "
                    "not label-free", path, gold_labels_used(meta), label_tag(meta))
    return LoadedVerifier(module, meta, f"checkpoint {path} tensors_sha256:{digest}")
