"""What the benchmark scripts share: the model file, a `START:END` document range and a task's prompts.

Each script is run as `python benchmarks/NAME.py`, so this folder is on `sys.path` and `import bench_common` works
without installing anything.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GET_MODEL = REPO.parent / "shared" / "bin" / "get-model"


def model_file(name: str) -> str:
    """The GGUF file of `name`, fetched and verified by ../shared/bin/get-model (its last output line)."""
    if not GET_MODEL.is_file():
        raise SystemExit(f"{GET_MODEL} not found: the benchmarks fetch models with it; clone the project beside "
                         "../shared (a script with --gguf also takes a model file)")
    done = subprocess.run([str(GET_MODEL), name], capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"get-model {name} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
    return done.stdout.strip().splitlines()[-1]


def add_question_options(parser, docs: str) -> None:
    """--model, --dtype, --task, --split and --docs (default `docs`): which questions of which model a script reads."""
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct", help="a name get-model knows")
    parser.add_argument("--dtype", default="float32")
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
