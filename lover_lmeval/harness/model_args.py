"""Name the bad key when a model_arg is neither lover_hf's nor HFLM's nor accepted by the model loader.

HFLM passes keys it does not know to `AutoModelForCausalLM.from_pretrained`, whose error blames the model class
(`LlamaForCausalLM.__init__() got an unexpected keyword argument 'foo'`). A key one edit away from a known one is
refused before the model loads; any other unknown key is named when the loader rejects it.
"""

from __future__ import annotations

import contextlib
import difflib
import inspect
import os
import sys

from lm_eval.models.huggingface import HFLM

from ..core.config import MODEL_ARGS, LoverConfig

from ..log import log, model_name

LOVER_ARGS = (*MODEL_ARGS, "fit_config", "pretrained", "gguf_file", "device", "truncation_side")
#: model_args that choose the decoding; a request's generation kwargs may not contradict those the user set
DECODING_ARGS = ("decoding", "temperature", "top_p")


def _hflm_args() -> set[str]:
    return set(inspect.signature(HFLM.__init__).parameters) - {"self", "kwargs"}


class LoverUsageError(ValueError):
    """A setting the user passed that lover_hf cannot run with; the message names the value and the fix."""


def banked_interrupt(bank) -> KeyboardInterrupt:
    """Ctrl-C during a run banking into `bank` (a `BranchBank`): still a KeyboardInterrupt, of that exact type (Python
    exits by SIGINT, status 130, only for that type), whose message says how many questions the bank holds and where;
    marked `lover_banked` for `one_line_errors`."""
    interrupt = KeyboardInterrupt(f"interrupted: {len(bank)} questions are banked in {bank.path}; run the same "
                                  "command to resume (banked questions are read back, not decoded again)")
    interrupt.lover_banked = True
    return interrupt


@contextlib.contextmanager
def usage_errors():
    """Our configs' ValueErrors (they name the value and the fix) as `LoverUsageError`s."""
    try:
        yield
    except LoverUsageError:
        raise
    except ValueError as error:
        raise LoverUsageError(str(error)) from None


def parse_model_args(kwargs: dict) -> tuple[LoverConfig, dict, set[str]]:
    """(config, the args left for HFLM, the decoding args, `n_branches` and `extract` as far as the user set them);
    warns on a
    degenerate setting."""
    with usage_errors():
        config, hf_args = LoverConfig.from_model_args(kwargs)
    if config.decoding.n_branches == 1:
        log.warning("%s: n_branches=1 decodes one branch a question, so every selector row reports that "
                    "branch's answer (greedy's) and the test-time fit is skipped; use n_branches >= 2 (e.g. 10) to "
                    "compare selectors.", model_name())
    return config, hf_args, {arg for arg in (*DECODING_ARGS, "n_branches", "extract") if arg in kwargs}


def one_line_errors(model: str = "lover_hf") -> None:
    """On the `lm_eval` / `lover` command line, print a `LoverUsageError` or a `banked_interrupt` as one line instead
    of a traceback (the message already says what to change or how to resume; 70 lines of loader frames hide it), as
    `model` (lover_hf, lover_vllm). Other errors, and every error under a Python caller (notebook, simple_evaluate),
    keep their tracebacks."""
    program = os.path.normpath(sys.argv[0]) if sys.argv and sys.argv[0] else ""
    name = os.path.basename(program)
    on_cli = name in ("lm_eval", "lm-eval", "lover") or (  # the console scripts, or `python -m lm_eval`
        name == "__main__.py" and os.path.basename(os.path.dirname(program)) == "lm_eval")
    if not on_cli or getattr(sys.excepthook, "lover_one_line", False):
        return
    previous = sys.excepthook

    def hook(kind, error, traceback):
        if isinstance(error, LoverUsageError):
            print(f"{model}: error: {error}", file=sys.stderr)
        elif getattr(error, "lover_banked", False):  # Ctrl-C: one line, not the 30 frames it interrupted
            print(f"{model}: {error}", file=sys.stderr)
        else:
            previous(kind, error, traceback)

    hook.lover_one_line = True
    sys.excepthook = hook


def hub_error(error: OSError, pretrained) -> Exception:
    """A model that could not be loaded from `pretrained` (a hub id offline, a typo) as the ways out."""
    if pretrained is None or os.path.isdir(str(pretrained)):
        return error
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return LoverUsageError(
        f"pretrained={pretrained} could not be loaded ({first[:200]}). If it is a Hugging Face hub id and this "
        "machine is offline (HF_HUB_OFFLINE=1 or no network): pass gguf_file=PATH to a local GGUF file, "
        "pretrained=PATH to a local model folder, leave pretrained out to use the embedded SmolLM2-135M-Instruct, "
        "or go online; otherwise check the id.")


def _unknown(key: str, value, suggestion: str | None) -> ValueError:
    hint = f"did you mean {suggestion}? " if suggestion else ""
    return LoverUsageError(f"model_arg {key}={value} is neither a lover_hf argument ({', '.join(LOVER_ARGS)}) nor "
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
