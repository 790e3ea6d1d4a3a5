"""Name the bad key when a model_arg is neither lover_hf's nor HFLM's nor accepted by the model loader.

HFLM passes keys it does not know to `AutoModelForCausalLM.from_pretrained`, whose error blames the model class
(`LlamaForCausalLM.__init__() got an unexpected keyword argument 'foo'`). A key one edit away from a known one is
refused before the model loads; any other unknown key is named when the loader rejects it.
"""

from __future__ import annotations

import difflib
import inspect

from lm_eval.models.huggingface import HFLM

from ..core.config import MODEL_ARGS

LOVER_ARGS = (*MODEL_ARGS, "fit_config", "pretrained", "gguf_file", "device")


def _hflm_args() -> set[str]:
    return set(inspect.signature(HFLM.__init__).parameters) - {"self", "kwargs"}


def _unknown(key: str, value, suggestion: str | None) -> ValueError:
    hint = f"did you mean {suggestion}? " if suggestion else ""
    return ValueError(f"model_arg {key}={value} is neither a lover_hf argument ({', '.join(LOVER_ARGS)}) nor "
                      f"HFLM's, nor accepted by the model loader; {hint}see the README's lover_hf model args.")


def check_before_loading(hf_args: dict) -> None:
    """Refuse a key that is not HFLM's but is a near miss of a known one (a typo would go to the model loader)."""
    hflm = _hflm_args()
    for key, value in hf_args.items():
        if key not in hflm:
            close = difflib.get_close_matches(key, [*LOVER_ARGS, *hflm], n=1, cutoff=0.85)
            if close:
                raise _unknown(key, value, close[0])


def loader_error(error: TypeError, hf_args: dict) -> Exception:
    """The loader's `unexpected keyword argument 'foo'` as an error naming foo=VALUE; other errors unchanged."""
    for key, value in hf_args.items():
        if f"unexpected keyword argument '{key}'" in str(error):
            return _unknown(key, value, None)
    return error
