"""One configuration per component, parsed once from lover_hf's model_args (key=value strings).

Each component owns its dataclass, its defaults and its validation (`__post_init__`): decoding
(`DecodingConfig`), features (`FeatureConfig`), the test-time fit (`VerifierConfig`, the `fit_config` string),
selection (`SelectionConfig`), the bank (`BankConfig`), how questions share the decoding batch
(`BatchingConfig`) and the opt-in P(True) pass (`PTrueConfig`). This module only maps model_args onto their fields.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .store.bank import BankConfig
from .decode.decoding import BatchingConfig, DecodingConfig
from .decode.static import check_static_mode
from .decode.features import FeatureConfig
from .decode.ptrue import PTrueConfig
from .select.selection import SelectionConfig
from .verify.verifier_config import VerifierConfig, config_from_string


def _optional(value) -> str | None:
    return None if value in (None, "", "None") else str(value)


def _optional_int(value) -> int | None:
    return None if value in (None, "", "None") else int(value)


def _layers(value) -> tuple[int, ...]:
    """ "15;18" (lm-eval splits model_args on commas) -> (15, 18)."""
    return tuple(int(x) for x in str(value or "").replace(";", " ").split())


def _flag(value) -> bool:
    text = str(value).lower()
    if text not in ("true", "1", "yes", "false", "0", "no"):
        raise ValueError(value)
    return text in ("true", "1", "yes")


def _feature_cache(value) -> str | None:
    return None if str(value).lower() in ("", "none", "false", "off") else str(value)


#: what each parser accepts, for error messages
EXPECTED = {int: "an integer", float: "a number", _optional_int: "an integer (or None)",
            _layers: "';'-separated integers, e.g. 15;18", _flag: "true or false"}

#: model_arg -> (component, field, parser); a component's default applies when the arg is absent.
MODEL_ARGS = {
    "n_branches": ("decoding", "n_branches", int),
    "decoding": ("decoding", "mode", str),
    "temperature": ("decoding", "temperature", float),
    "top_p": ("decoding", "top_p", float),
    "seed": ("decoding", "seed", int),
    "continuous_batching": ("batching", "continuous", _flag),
    "max_rows": ("batching", "max_rows", _optional_int),
    "sync_every": ("batching", "sync_every", int),
    "static_cache": ("batching", "static_cache", _flag),
    "compile_step": ("batching", "compile_step", _flag),
    "layer": ("features", "layer", _optional_int),
    "extra_layers": ("features", "extra_layers", _layers),
    "true_template": ("features", "true_template", str),
    "false_template": ("features", "false_template", str),
    "extract": ("selection", "extract", str),
    "verifier": ("selection", "verifier", _optional),
    "supervised_verifier": ("selection", "supervised_verifier", _optional),
    "bank": ("bank", "path", _optional),
    "bank_only": ("bank", "bank_only", _flag),
    "bank_dtype": ("bank", "key_dtype", _optional),
    "bank_engine": ("bank", "key_engine", _optional),
    "feature_cache": ("bank", "feature_cache", _feature_cache),
    "ptrue": ("ptrue", "enabled", _flag),
}


@dataclass
class LoverConfig:
    """Everything lover_hf adds to a Hugging Face model: one config per pipeline component."""

    decoding: DecodingConfig = field(default_factory=DecodingConfig)
    """How the N branches are decoded (n_branches, decoding, temperature, top_p, seed)."""
    features: FeatureConfig = field(default_factory=FeatureConfig)
    """Which hidden states make phi(x) (layer, extra_layers, the two templates)."""
    fit: VerifierConfig = field(default_factory=VerifierConfig)
    """The test-time fit's hyperparameters (model_arg `fit_config="losses=...;curriculum=..."`)."""
    selection: SelectionConfig = field(default_factory=SelectionConfig)
    """Whose scores choose and how answers are grouped (verifier, supervised_verifier, extract)."""
    bank: BankConfig = field(default_factory=BankConfig)
    """Where decoded branches and features are kept (bank, bank_only, bank_dtype, bank_engine, feature_cache)."""
    batching: BatchingConfig = field(default_factory=BatchingConfig)
    """How questions share the decoding batch (continuous_batching, max_rows, sync_every, static_cache,
    compile_step)."""
    ptrue: PTrueConfig = field(default_factory=PTrueConfig)
    """The opt-in P(True) pass, one more teacher-forced pass per branch (ptrue)."""

    def __post_init__(self):
        if self.batching.max_rows is not None:  # fewer rows than one question's branches can never decode
            self.batching.rows(1, self.decoding.n_branches)
        if self.batching.static_cache:
            check_static_mode(self.decoding.mode)
        if self.batching.compile_step and not self.batching.static_cache:
            raise ValueError("compile_step=true compiles the step of static rows; add static_cache=true (the growing "
                             "batch changes shapes every step) or drop compile_step=true.")

    @classmethod
    def from_model_args(cls, args: dict) -> tuple[LoverConfig, dict]:
        """Split model_args into this config and the rest (for the model loader); errors name the argument."""
        rest = dict(args)
        fields: dict[str, dict] = {"decoding": {}, "features": {}, "selection": {}, "bank": {}, "batching": {},
                                   "ptrue": {}}
        for arg, (component, name, parse) in MODEL_ARGS.items():
            if arg not in rest:
                continue
            value = rest.pop(arg)
            try:
                fields[component][name] = parse(value)
            except (TypeError, ValueError):
                raise ValueError(f"{arg}={value!r} is not {EXPECTED.get(parse, 'valid')}; see the README's "
                                 "lover_hf model args") from None
        fit = config_from_string(rest.pop("fit_config", "") or "")
        return cls(DecodingConfig(**fields["decoding"]), FeatureConfig(**fields["features"]), fit,
                   SelectionConfig(**fields["selection"]), BankConfig(**fields["bank"]),
                   BatchingConfig(**fields["batching"]), PTrueConfig(**fields["ptrue"])), rest
