"""The committed banks as evaluation sets: each record joined to its task document and gold answer, no model run.

A bank record holds a question's prompt token ids and its N branches (`lover_lmeval/core/store/bank.py`), keyed by a
hash of model, prompt and decoding settings. A set here is one (bank file, task, split, document range, token budget, dtype):
its records are found by recomputing their keys (`Pipeline.record_keys`' recipe, so a bank that holds the same
prompt under two budgets or dtypes gives each set only its own records), and each record is joined to the document
whose `doc_to_text` its decoded prompt contains. Only the tokenizer is loaded (from the GGUF), never the weights.

    from benchmarks.bank_sets import SETS, load_set
    questions = load_set(SETS["0.5b/gsm8k"])   # [BankQuestion(doc_index, gold, branches, prompt_ids, key), ...]

Selectors then run on `questions` exactly as `lover_select` runs them in lm-eval (`core.select.selection.select`).
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from benchmarks.bench_common import BANKS, UNTIL, model_file
from lover_lmeval.core.store.bank import BranchBank, record_key, record_settings
from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.decode.decoding import DecodingConfig
from lover_lmeval.core.loading import sha256_file


@dataclass(frozen=True)
class BankSet:
    """One evaluation set read from a committed bank."""

    model: str
    """A name `get-model` knows (the bank's folder)."""
    bank: str
    """Bank file name in benchmarks/banks/<model>/."""
    tasks: tuple[str, ...]
    """lm-eval task(s) whose documents the records answer (MMLU-Pro and iGSM sets span several)."""
    split: str
    """The tasks' split."""
    docs: int | tuple[int, ...]
    """The first `docs` documents of each task, or one count per task (the banks README says how many were
    decoded)."""
    budget: int
    """max_gen_toks of the records (part of their key)."""
    extract: str
    """The tasks' answer extractor (their `lover_select` filters')."""
    dtype: str = "float32"
    """Precision the records were decoded in (bf16 keys carry it)."""
    decoding: str = "cot"
    """lover_hf's `decoding=` of the records (DecodingConfig.mode, its other fields at their defaults)."""
    read_dtype: str | None = None
    """Precision the model reads the records in when rescoring them teacher-forced (token statistics, features); None:
    the one they were decoded in. Their keys and margins stay the bank's whatever it is."""

    @property
    def reading_dtype(self) -> str:
        """The precision the model is loaded in to rescore the records."""
        return self.read_dtype or self.dtype


SETS = {
    "0.5b/gsm8k": BankSet("qwen2.5-coder-0.5b-instruct", "lover_gsm8k-test.jsonl.gz", ("lover_gsm8k",), "test", 400,
                          256, "number"),
    "0.5b/hotpotqa_yesno": BankSet("qwen2.5-coder-0.5b-instruct", "lover_hotpotqa_yesno-test.jsonl.gz",
                                   ("lover_hotpotqa_yesno",), "test", 458, 256, "yes_no"),
    "0.5b/igsm": BankSet("qwen2.5-coder-0.5b-instruct", "lover_igsm-test.jsonl.gz",
                         ("lover_igsm_op2", "lover_igsm_op4", "lover_igsm_op8", "lover_igsm_op16"), "test", 100, 1024,
                         "number"),
    "0.5b/mmlu_pro": BankSet("qwen2.5-coder-0.5b-instruct", "lover_mmlu_pro-test.jsonl.gz",
                             ("lover_mmlu_pro_biology", "lover_mmlu_pro_computer_science", "lover_mmlu_pro_history",
                              "lover_mmlu_pro_physics"), "test", (100, 100, 50, 8), 1024, "choice"),
    # Run 32: the first 100 MATH-500 problems, their LaTeX answers grouped by math-verify's equivalence.
    "0.5b/math500": BankSet("qwen2.5-coder-0.5b-instruct", "lover_math500-test.jsonl.gz", ("lover_math500",), "test",
                            100, 1024, "math"),
    **{f"0.5b/bbh_{name}": BankSet("qwen2.5-coder-0.5b-instruct", f"lover_bbh_{name}.jsonl.gz", (f"lover_bbh_{name}",),
                                   "test", 250, 512, extract)
       for name, extract in (("boolean_expressions", "true_false"), ("causal_judgement", "yes_no"),
                             ("multistep_arithmetic_two", "number"), ("navigate", "yes_no"),
                             ("object_counting", "number"), ("web_of_lies", "yes_no"))},
    # Read in float32: bf16 products are ~3x slower on CPUs without bf16 kernels; a GPU reads it in float32 too, so
    # both readings are of one precision (run 19 B, session 28's plan).
    "1.5b/gsm8k": BankSet("qwen2.5-coder-1.5b-instruct", "lover_gsm8k-test.jsonl.gz", ("lover_gsm8k",), "test", 400,
                          256, "number", dtype="bfloat16", read_dtype="float32"),
    # The 2025 selectors were published on sampled paths (issue Selectors): the same 400 questions, decoding=sample.
    "0.5b/gsm8k_sample": BankSet("qwen2.5-coder-0.5b-instruct", "lover_gsm8k-test-sample.jsonl.gz", ("lover_gsm8k",),
                                 "test", 400, 256, "number", decoding="sample"),
    "135m/gsm8k": BankSet("smollm2-135m-instruct", "lover_gsm8k-test.jsonl.gz", ("lover_gsm8k",), "test", 100, 256,
                          "number"),
    **{f"135m/bbh_{name}": BankSet("smollm2-135m-instruct", f"lover_bbh_{name}.jsonl.gz", (f"lover_bbh_{name}",),
                                   "test", 50, 512, extract)
       for name, extract in (("boolean_expressions", "true_false"), ("web_of_lies", "yes_no"))},
}


@dataclass
class BankQuestion:
    """One banked question of a set, with what scoring it needs."""

    task: str
    doc_index: int
    gold: str
    """The doc's `target` field, as the `pass_at_n` filter reads it (never shown to a selector)."""
    branches: list[Branch]
    prompt_ids: list[int]
    key: str


@lru_cache(maxsize=None)
def model_source(model: str) -> tuple[str, str]:
    """(GGUF path, model identity as bank keys name it) of a get-model name."""
    gguf = model_file(model)
    return gguf, f"gguf-sha256:{sha256_file(Path(gguf))}"


@lru_cache(maxsize=None)
def tokenizer_of(model: str):
    from transformers import AutoTokenizer  # only here: the set table above needs no transformers

    gguf = Path(model_source(model)[0])
    return AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)


def set_key(bank_set: BankSet, prompt_ids: list[int]) -> str:
    """The record key a lover_hf run of this set gives this prompt (Pipeline.record_keys' recipe, record_settings)."""
    settings = record_settings(DecodingConfig(mode=bank_set.decoding), UNTIL, bank_set.budget, bank_set.dtype)
    return record_key(model_source(bank_set.model)[1], prompt_ids, settings)


def _documents(bank_set: BankSet) -> list[tuple[str, int, str, str]]:
    """(task, doc index, doc_to_text, gold) of the set's documents, from lm-eval's own task objects."""
    from lm_eval.tasks import TaskManager, get_task_dict

    import lover_lmeval.harness.autoload  # noqa: F401  (indexes the package's task folder)

    out = []
    tasks = get_task_dict(list(bank_set.tasks), TaskManager())
    counts = bank_set.docs if isinstance(bank_set.docs, tuple) else (bank_set.docs,) * len(bank_set.tasks)
    for name, count in zip(bank_set.tasks, counts, strict=True):
        task = tasks[name]
        docs = list(task.dataset[bank_set.split])[:count]
        out += [(name, i, task.doc_to_text(doc), str(doc["target"])) for i, doc in enumerate(docs)]
    return out


def _prompt_ids(path: Path) -> dict[str, list[int]]:
    with gzip.open(path, "rt") as handle:
        return {record["key"]: record["prompt_ids"] for record in map(json.loads, handle)}


def load_set(bank_set: BankSet) -> list[BankQuestion]:
    """The set's banked questions in document order; SystemExit naming what is missing if a document has no record."""
    path = BANKS / bank_set.model / bank_set.bank
    bank, prompts = BranchBank(path), _prompt_ids(path)
    tokenizer = tokenizer_of(bank_set.model)
    texts = {key: tokenizer.decode(ids) for key, ids in prompts.items() if set_key(bank_set, ids) == key}
    questions, missing = [], []
    for task, index, doc_text, gold in _documents(bank_set):
        keys = [key for key, text in texts.items() if doc_text in text]
        if not keys:
            missing.append(f"{task}[{index}]")
            continue
        key = keys[0]  # a prompt repeated in the split (BBH causal_judgement) is one record: both docs read it
        questions.append(BankQuestion(task, index, gold, bank.get(key), prompts[key], key))
    if missing:
        raise SystemExit(f"{path}: no record of {bank_set.budget} tokens / {bank_set.dtype} for {len(missing)} "
                         f"documents ({', '.join(missing[:5])}...): check the set's docs, budget and dtype against "
                         "benchmarks/banks/README.md")
    return questions
