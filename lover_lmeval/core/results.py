"""The object `lover_hf.generate_until` returns for each request.

`LoverResult` is a `str` whose value is branch 0, the plain greedy answer, so every stock lm-eval
filter (`regex`, `take_first`, ...) and metric works on it unchanged and scores greedy decoding.
Everything else rides along as attributes for the `lover_select` filter: all N branches with their
token margins and offsets, the assertion features (N, 2, D) and, with a verifier, p+ and p-.

Features are kept in the precision they were computed in: a bf16 or fp16 model's hidden states are exactly
representable in that dtype, so storing them as such halves the memory of a large task at no loss (they are upcast
to float32 where read). `str(result)` is compact JSON (texts, finish reasons, feature shape, scores; no arrays),
which is what lm-eval's `--log_samples` writes. Pickling (lm-eval's `--use_cache`, the ranks' exchange) goes
through `__reduce__`, because `str` subclasses otherwise re-create themselves from their string value alone.
"""

from __future__ import annotations

import json

import numpy as np
import torch

from .decode.branch import Branch
from .verify.losses import score


#: Precisions features may be stored in; anything else (numpy arrays, lists, float64) is stored as float32.
STORED_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def _stored(features) -> torch.Tensor:
    """A CPU tensor of `features` in a :data:`STORED_DTYPES` precision (float32 unless given as a half tensor)."""
    if isinstance(features, torch.Tensor) and features.dtype in STORED_DTYPES:
        stored = features.detach().cpu()
        # A view into a bigger tensor (one layer of (N, 2, L, D)) would keep, and pickle, all of it.
        return stored.clone() if stored.untyped_storage().nbytes() > stored.numel() * stored.element_size() else stored
    array = np.ascontiguousarray(features, dtype=np.float32)  # torch refuses negative strides and read-only buffers
    return torch.from_numpy(array if array.flags.writeable else array.copy())


def _rebuild(state: dict, copy: int = 0) -> "LoverResult":
    return LoverResult(**state).copy_for(copy)


def model_arg_scoring(verifier: str) -> str:
    """The model_arg that makes a run compute `verifier`'s scores, for the errors that name the fix: LoVer and the plain
    probes fitted beside it come with verifier=fit or a checkpoint."""
    fixes = {"supervised": "supervised_verifier=PATH", "ptrue": "ptrue=true (one more teacher-forced pass per branch)"}
    return fixes.get(verifier, "verifier=fit (or verifier=PATH)")


class LoverResult(str):
    branches: list[Branch]
    stored_features: torch.Tensor | None  # (N, 2, D) in the precision it was computed in (STORED_DTYPES)
    verifier_probs: dict[str, np.ndarray]  # verifier name -> (N, 2): p+ and p- per branch
    layer: int | None
    prompt_ids: list[int] | None  # the prompt's token ids, so features can be recomputed at any layer later
    stored_layer_features: dict[int, torch.Tensor]  # more layers' (N, 2, D) features (lover_hf extra_layers=)
    fit_extract: str | None  # extractor that grouped the answers of the test-time fit ("lover" scores)
    scored_by: dict[str, str]  # verifier name -> which verifier made its scores (fit or checkpoint, with a hash)

    def __new__(cls, branches: list[Branch], features=None, verifier_probs=None, layer=None, prompt_ids=None,
                layer_features=None, fit_extract=None, scored_by=None):
        if not branches:
            raise ValueError("a LoverResult needs at least one branch")
        self = super().__new__(cls, branches[0].text)
        self.branches = list(branches)
        self.features = features
        if self.stored_features is not None and self.stored_features.shape[:2] != (len(branches), 2):
            raise ValueError(f"features must be (N={len(branches)}, 2, D), got {tuple(self.stored_features.shape)}")
        self.verifier_probs = {k: np.asarray(v, dtype=np.float64) for k, v in (verifier_probs or {}).items()}
        self.layer = layer
        self.prompt_ids = None if prompt_ids is None else list(prompt_ids)
        self.stored_layer_features = {int(k): _stored(v) for k, v in (layer_features or {}).items()}
        self.fit_extract = fit_extract
        self.scored_by = dict(scored_by or {})
        return self

    @property
    def features(self) -> np.ndarray | None:
        """(N, 2, D) float32: an upcast copy when stored in half precision, else a view (edit neither; set it)."""
        return None if self.stored_features is None else self.stored_features.float().numpy()

    @features.setter
    def features(self, value) -> None:
        self.stored_features = None if value is None else _stored(value)

    @property
    def layer_features(self) -> dict[int, np.ndarray]:
        """More layers' (N, 2, D) features, float32 (all upcast: read `stored_layer_features[layer]` for one)."""
        return {k: v.float().numpy() for k, v in self.stored_layer_features.items()}

    @property
    def texts(self) -> list[str]:
        return [b.text for b in self.branches]

    def scores(self, verifier: str = "lover") -> np.ndarray:
        """LoVer score per branch, p = (p+ + 1 - p-) / 2; KeyError names what is available."""
        if verifier not in self.verifier_probs:
            have = ", ".join(sorted(self.verifier_probs)) or "none"
            raise KeyError(f"this result carries no scores of verifier {verifier!r} (available: {have}); pass "
                           f"{model_arg_scoring(verifier)} in --model_args to lover_hf.")
        probs = self.verifier_probs[verifier]
        return score(probs[:, 0], probs[:, 1])

    def copy_for(self, j: int) -> "LoverResult":
        """The answer to copy j of a question lm-eval sends K times (`repeats: K`, decoded once with K branches): its
        text is branch j, so the task's own `majority_vote` / `take_first_k` rows read the K branches; every other
        attribute is this result's own (the same objects: scores stored later reach every copy)."""
        if j == 0:
            return self
        other = str.__new__(LoverResult, self.branches[j].text)
        other.__dict__.update(self.__dict__)
        other.copy_index = j
        return other

    def to_dict(self) -> dict:
        return {
            "texts": self.texts,
            "finish": [b.finish_reason for b in self.branches],
            "features": None if self.stored_features is None else list(self.stored_features.shape),
            "scores": {name: [round(float(s), 4) for s in self.scores(name)] for name in self.verifier_probs},
            **({"scored_by": self.scored_by} if self.scored_by else {}),
        }

    def __str__(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, separators=(",", ":"))

    def __repr__(self) -> str:
        return f"LoverResult(n_branches={len(self.branches)}, greedy={str.__repr__(self)[:60]})"

    def __reduce__(self):
        state = {"branches": self.branches, "features": self.stored_features,  # compact: ranks exchange these
                 "verifier_probs": self.verifier_probs, "layer": self.layer, "prompt_ids": self.prompt_ids,
                 "layer_features": self.stored_layer_features, "fit_extract": self.fit_extract,
                 "scored_by": self.scored_by}
        return _rebuild, (state, getattr(self, "copy_index", 0))
