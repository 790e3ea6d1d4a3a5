"""Datasets behind the task YAMLs in task_configs/ (called through lm-eval's `custom_dataset`).

With `LOVER_DATA_DIR` set, files are read from that folder in the layout of `../shared/data` (see its
README); without it, from the public hub datasets. Every loader returns a `datasets.DatasetDict` whose
docs carry a normalised `target` (what `exact_match` compares against) next to the original fields.
Splits follow the LoVer paper (appendix B).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .answers import normalise_number

DATA_ENV = "LOVER_DATA_DIR"
SPLIT_SEED = 0  # fixed shuffle for the paper's train/validation cut of GSM8K's train file


def data_dir() -> Path | None:
    value = os.environ.get(DATA_ENV)
    return Path(value).expanduser().resolve() if value else None


def read_jsonl(relative: str) -> list[dict]:
    """Rows of `$LOVER_DATA_DIR/relative`; a clear error says which variable or file is missing."""
    root = data_dir()
    path = root / relative
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: set {DATA_ENV} to a folder laid out like ../shared/data "
            f"(it must contain {relative}), or unset it to use the public hub datasets."
        )
    with open(path, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


def _dataset_dict(splits: dict[str, list[dict]]):
    import datasets

    return datasets.DatasetDict({name: datasets.Dataset.from_list(rows) for name, rows in splits.items()})


def _gsm8k_doc(row: dict) -> dict:
    gold = row["answer"].split("####")[-1].strip()
    return {"question": row["question"], "answer": row["answer"], "target": normalise_number(gold) or gold}


def load_gsm8k(**_):
    """train 7000 / validation 473 (a fixed shuffle of the 7473 train questions) / test 1319."""
    import random

    if data_dir() is None:
        import datasets

        hub = datasets.load_dataset("openai/gsm8k", "main")
        train, test = list(hub["train"]), list(hub["test"])
    else:
        train, test = read_jsonl("gsm8k/train.jsonl"), read_jsonl("gsm8k/test.jsonl")
    order = list(range(len(train)))
    random.Random(SPLIT_SEED).shuffle(order)
    train_docs = [_gsm8k_doc(train[i]) for i in order]
    return _dataset_dict({"train": train_docs[:7000], "validation": train_docs[7000:],
                          "test": [_gsm8k_doc(r) for r in test]})
