#!/usr/bin/env python
"""Write our banked questions' features in the array layout the authors' public code reads (the outside check).

The authors' `main.py` / `method.py` (github.com/wangxinyufighting/llm-lover; kept outside this repository, never
committed) read, per split: hidden states `(num_data, N, 2, d, num_layers)` as .npy (it indexes the last axis
with `--layer`), the model's answer per branch as JSON `{"i": [answer, ...]}` ("[invalid]" for none), and the gold
solution as JSON `{"i": "... #### 18"}` (their `extract_gt_answer` reads the number after "####"). This writes
those files from our banks, so their code can run unchanged on our features (`hs_train_*.npy`,
`answers_model_train_*.json`, `answers_gt_train_*.json` and the same for test), e.g.:

    LOVER_DATA_DIR=../shared/data HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 .venv/bin/python \
      -m benchmarks.regime.export_authors_layout --model qwen2.5-coder-0.5b-instruct --dtype float32 \
      --train-docs 0:266 --test-docs 0:400 --layers 12,24 --out /tmp/lover-authors-input

Train docs 0..265 hold our 200 training + 66 dev questions. Their loader draws its own 200/66 partition of the
exported training questions (`random.Random(1029)`); with `--match-partition 200` the training questions are written
in the order that makes that draw pick exactly our documents 0..199 as training and 200..265 as dev, so their run and
ours (`lover train --limit 200 --select dev:66`) see the same questions in each role. `order_train.json` records which
of our documents sits at each exported position.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

import numpy as np
from lm_eval.tasks import TaskManager

from lover_lmeval.core.select.answers import get_extractor
from lover_lmeval.harness.model import LoverLM

from benchmarks.bench_common import (
    BANKS, add_model_options, docs_range, model_path, task_contexts)

TASK = "lover_gsm8k"
INVALID = "[invalid]"  # the authors' BaseTask.INVALID_ANS


def authors_partition(total: int, train_num: int) -> tuple[list[int], list[int]]:
    """The positions the authors' `load_train_and_dev_data` draws as training and dev questions out of `total`
    (their seed and their expressions, so this interpreter iterates the set the way theirs does)."""
    rng = random.Random(1029)
    train = sorted(rng.sample(range(total), train_num))
    dev_size = min(int(train_num / 3), total - train_num)
    dev = sorted(rng.sample(list(set(list(range(total))) - set(train)), dev_size))
    return train, dev


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_model_options(parser)
    parser.add_argument("--train-docs", default="0:266")
    parser.add_argument("--test-docs", default="0:400")
    parser.add_argument("--layers", default="12,24", help="hidden-state indices stacked on the last axis, in order")
    parser.add_argument("--out", required=True, help="a folder outside the repository")
    parser.add_argument("--match-partition", type=int, default=None, metavar="TRAIN_NUM",
                        help="order the training questions so the authors' draw of TRAIN_NUM training questions "
                             "(--train_num_examples) picks our first TRAIN_NUM and their dev draw the rest")
    args = parser.parse_args()
    spans = {"train": docs_range(args.train_docs, "--train-docs"), "test": docs_range(args.test_docs, "--test-docs")}
    gguf = model_path(args)
    layers = [int(x) for x in args.layers.split(",")]
    task = TaskManager().load([TASK])["tasks"][TASK]
    extract = get_extractor("number")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split, (start, end) in spans.items():
        lm = LoverLM(gguf_file=gguf, dtype=args.dtype, bank=str(BANKS / args.model /
                                                                 f"{TASK}-{split}.jsonl.gz"),
                     bank_only=True, verifier=None, layer=layers[0], extra_layers=";".join(map(str, layers[1:])))
        docs = list(task.dataset[split])[start:end]
        order = list(range(len(docs)))  # order[position] = index into docs
        if split == "train" and args.match_partition is not None:
            train, dev = authors_partition(len(docs), args.match_partition)
            if len(train) + len(dev) != len(docs):
                raise SystemExit(f"--match-partition {args.match_partition}: {len(docs)} training questions are not "
                                 f"{len(train)} training + {len(dev)} dev; export exactly that many")
            for ours, position in enumerate(train + dev):
                order[position] = ours
            (out / "order_train.json").write_text(json.dumps({"doc_at_position": [start + i for i in order]}))
        docs = [docs[i] for i in order]
        contexts = task_contexts(task, lm, docs)
        results = lm.run_contexts(contexts, dict(task.config.generation_kwargs))
        stacked = [np.stack([r.features if layer == layers[0] else r.layer_features[layer] for layer in layers],
                            axis=-1) for r in results]  # each (N, 2, D, L)
        if len({s.shape for s in stacked}) != 1:
            raise SystemExit(f"{split}: questions have different branch counts; the layout needs one N")
        np.save(out / f"hs_{split}.npy", np.stack(stacked).astype(np.float32))  # (num_data, N, 2, D, L)
        answers = {str(i): [a.value if (a := extract(b.text)) is not None else INVALID for b in r.branches]
                   for i, r in enumerate(results)}
        (out / f"answers_model_{split}.json").write_text(json.dumps(answers))
        gold = {str(i): d.get("answer") or f"#### {task.doc_to_target(d)}" for i, d in enumerate(docs)}
        (out / f"answers_gt_{split}.json").write_text(json.dumps(gold))
        print(f"{split}: {len(results)} questions, layers {layers} -> {out}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
