"""What the benchmark scripts share: paths, the model file and its options, a `START:END` document range, a task's
prompts and the offline environment.

The scripts live in one folder per study (`benchmarks/<study>/NAME.py`, listed in benchmarks/README.md) and import
this module as `benchmarks.bench_common`. Each runs as a module from the repository root,
`python -m benchmarks.<study>.NAME`, which puts the root on the import path: nothing to install beyond the package,
and no script edits `sys.path`.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BANKS = REPO / "benchmarks" / "banks"  # committed branch banks, one folder per model
RESULTS = REPO / "benchmarks" / "results"  # committed outputs of the scripts (paths kept: RESULTS.md's runs cite them)
SHARED = REPO.parent / "shared"  # data, models and samples shared beside the clone
GET_MODEL = SHARED / "bin" / "get-model"
DEFAULT_MODEL = "qwen2.5-coder-0.5b-instruct"
# task_configs/_lover_base.yaml's stop strings (every banked task): part of each bank record's key
UNTIL = ["Question:", "</s>", "<|im_end|>", "<|endoftext|>"]


def model_file(name: str) -> str:
    """The GGUF file of `name`, fetched and verified by ../shared/bin/get-model (its last output line)."""
    if not GET_MODEL.is_file():
        raise SystemExit(f"{GET_MODEL} not found: the benchmarks fetch models with it; clone the project beside "
                         "../shared (a script with --gguf also takes a model file)")
    done = subprocess.run([str(GET_MODEL), name], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"get-model {name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def add_model_options(parser, model: str | None = DEFAULT_MODEL, dtype: str | None = "float32",
                      model_default: str | None = None) -> None:
    """--model (default `model`; `model_default` says what None means to the script), --gguf and, unless `dtype` is
    None, --dtype: which model a script loads."""
    parser.add_argument("--model", default=model, help=f"a name get-model knows (default {model_default or model})")
    parser.add_argument("--gguf", default=None, help="the model file itself, instead of get-model MODEL")
    if dtype is not None:
        parser.add_argument("--dtype", default=dtype, help=f"weights and activations (default {dtype})")


def model_path(args) -> str:
    """The model file of parsed `add_model_options`: --gguf, else get-model's file of --model."""
    return args.gguf or model_file(args.model)


def add_question_options(parser, docs: str) -> None:
    """--model, --gguf, --dtype, --task, --split and --docs (default `docs`): which questions of which model a script
    reads."""
    add_model_options(parser)
    parser.add_argument("--task", default="lover_gsm8k", help="lm-eval task")
    parser.add_argument("--split", default="test")
    parser.add_argument("--docs", default=docs, help="START:END, document indices of the split")


def docs_range(text: str, option: str = "--docs") -> tuple[int, int]:
    """'START:END' -> (START, END), document indices of a split (END exclusive); `option` names it in errors."""
    try:
        start, end = (int(x) for x in text.split(":"))
    except ValueError:
        raise SystemExit(f"{option} {text!r} is not START:END (e.g. 0:100)") from None
    if not 0 <= start < end:
        raise SystemExit(f"{option} {text!r} is empty or negative: pass START:END with 0 <= START < END")
    return start, end


def task_docs(task, split: str, span: str, option: str = "--docs") -> list[dict]:
    """The documents `span` ('START:END', given as `option`) of a loaded lm-eval task's split."""
    start, end = docs_range(span, option)
    return list(task.dataset[split])[start:end]


def task_contexts(task, lm, docs: list[dict]) -> list[str]:
    """Zero-shot, chat-templated contexts of `docs`: the strings lm-eval would hand `lm` for them."""
    return [task.fewshot_context(d, 0, apply_chat_template=True, chat_template=lm.apply_chat_template) for d in docs]


def offline_env() -> None:
    """Data from ../shared/data and no network, unless the caller's environment already says otherwise."""
    os.environ.setdefault("LOVER_DATA_DIR", str(SHARED / "data"))
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def load_model(name: str, dtype: str = "float32", gguf: str | None = None):
    """(model, tokenizer, gguf path) of get-model's `name` (or the GGUF file `gguf`): converted once to a plain HF
    folder (loading.convert_gguf; later loads take seconds), weights in `dtype`, eval mode."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from lover_lmeval.core.loading import convert_gguf

    if dtype not in ("float32", "bfloat16", "float16"):
        raise SystemExit(f"--dtype {dtype!r}: pass float32, bfloat16 or float16")
    path = Path(gguf or model_file(name))
    folder = convert_gguf(path)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=getattr(torch, dtype)).eval()
    return model, AutoTokenizer.from_pretrained(folder), path


def banked_questions(args) -> tuple:
    """For the scripts that re-read banked branches (parsed `add_question_options` with --bank and --layers): a
    bank-only `lover_hf` on --bank with no feature cache, the chosen documents' prompt ids and bank keys, and the
    --layers checked against the model. Returns (lm, prompts, keys, layers)."""
    from lm_eval.tasks import TaskManager

    from lover_lmeval.core.decode.features import check_layer
    from lover_lmeval.harness.model import LoverLM

    docs_range(args.docs)  # refused before the model loads
    lm = LoverLM(gguf_file=model_path(args), dtype=args.dtype, bank=args.bank, bank_only=True, verifier=None,
                 feature_cache="none")
    task = TaskManager().load([args.task])["tasks"][args.task]
    prompts, spec = lm.prompts(task_contexts(task, lm, task_docs(task, args.split, args.docs)),
                               dict(task.config.generation_kwargs))
    layers = [check_layer(int(x), lm.model.config.num_hidden_layers) for x in args.layers.split(",")]
    return lm, prompts, lm.pipeline.record_keys(prompts, spec), layers
