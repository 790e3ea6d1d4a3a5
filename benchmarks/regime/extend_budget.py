#!/usr/bin/env python
"""Raise a bank's token budget: the branches of a question decoded at `--from` tokens, re-banked at `--to` (Regime
item 6), decoding only what the larger budget changes.

A branch that ended on EOS or a stop string before the old budget is the same under a larger one (greedy after its
first token: nothing after its end was ever read). Only the branches cut at the old budget (`finish_reason`
`length`) go on. Each is resumed as its own one-branch question: prompt = the question's prompt plus the branch's
tokens but its last, `n_branches=1` CoT-decoding, so the first token is the argmax there, which must be the banked
last token (checked), then greedy up to the new budget, all of them through the continuous-batching decoder. Its
tokens are then joined to the banked ones and cut at the first stop string by `make_branch`, as a fresh decode
would. Each question is banked at the new budget's record key as soon as its last branch is done (resumable).

`--verify K` decodes the first K questions afresh at the new budget (no bank) and counts the branches whose tokens
equal the extended ones.

    .venv/bin/python -m benchmarks.regime.extend_budget --model qwen2.5-coder-0.5b-instruct --dtype float32 \
      --bank benchmarks/banks/qwen2.5-coder-0.5b-instruct/lover_gsm8k-test.jsonl.gz --docs 0:100 --to 512 --verify 2
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

from lm_eval.tasks import TaskManager

from lover_lmeval.core.store.bank import BankConfig
from lover_lmeval.core.decode.branch import Branch, make_branch
from lover_lmeval.core.decode.decoding import DecodingConfig
from lover_lmeval.core.decode.engine import HFEngine, RunSpec
from lover_lmeval.core.files import write_text
from lover_lmeval.core.pipeline import Pipeline

from benchmarks.bench_common import add_question_options, docs_range, model_path, task_contexts, task_docs


def cut_share(records: list[list[Branch]]) -> float:
    """Share of the branches that ended on the token budget."""
    return sum(b.finish_reason == "length" for q in records for b in q) / sum(len(q) for q in records)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    add_question_options(parser, docs="0:100")
    parser.add_argument("--bank", required=True, help="holds the old budget's records; the new ones are added to it")
    parser.add_argument("--from", dest="old", type=int, default=256, help="the budget the bank was decoded with")
    parser.add_argument("--to", dest="new", type=int, default=512)
    parser.add_argument("--max-rows", type=int, default=50, help="branches decoded together")
    parser.add_argument("--verify", type=int, default=0, help="decode the first K questions afresh and compare")
    parser.add_argument("--out", default=None, help="a JSON summary (counts, truncation shares, the check)")
    args = parser.parse_args()
    if args.new <= args.old:
        raise SystemExit(f"--to {args.new} must exceed --from {args.old}: only a larger budget extends branches")
    start, _ = docs_range(args.docs)  # refused before the model loads
    from lover_lmeval.harness.model import LoverLM

    lm = LoverLM(gguf_file=model_path(args), dtype=args.dtype, bank=args.bank, verifier=None,
                 feature_cache="none")
    pipeline, tokenizer = lm.pipeline, lm.tokenizer
    task = TaskManager().load([args.task])["tasks"][args.task]
    contexts = task_contexts(task, lm, task_docs(task, args.split, args.docs))
    gen_kwargs = dict(task.config.generation_kwargs)
    prompts, old_spec = lm.prompts(contexts, {**gen_kwargs, "max_gen_toks": args.old})
    new_prompts, new_spec = lm.prompts(contexts, {**gen_kwargs, "max_gen_toks": args.new})
    assert prompts == new_prompts, "prompts cut differently"
    until = list(old_spec.until)
    old_keys = pipeline.record_keys(prompts, old_spec)
    new_keys = pipeline.record_keys(prompts, new_spec)
    old = [pipeline.bank.get(k) for k in old_keys]
    missing = [start + i for i, b in enumerate(old) if b is None]
    if missing:
        raise SystemExit(f"documents {missing[:10]} are not in {args.bank} at {args.old} tokens; decode them first")
    todo = [i for i, k in enumerate(new_keys) if k not in pipeline.bank]
    # One resumed row per cut branch: (question, branch) -> its prompt, its banked tokens.
    jobs = [(q, k) for q in todo for k, b in enumerate(old[q]) if b.finish_reason == "length"]
    print(f"{len(contexts)} questions, {len(todo)} to extend: {len(jobs)} branches cut at {args.old} tokens",
          flush=True)
    pending: dict[int, set[int]] = {q: set() for q in todo}  # question -> its cut branches not yet resumed
    for q, k in jobs:
        pending[q].add(k)
    extended = {q: list(old[q]) for q in todo}
    first_token_changed, began = 0, time.perf_counter()

    def bank(q: int) -> None:
        pipeline.bank.add(new_keys[q], extended[q], prompt_ids=prompts[q])
        print(f"{time.strftime('%H:%M:%S')} banked document {start + q} at {args.new} tokens "
              f"({len(todo) - len(pending)}/{len(todo)}, {time.perf_counter() - began:.0f} s)", flush=True)

    for q in [q for q in todo if not pending[q]]:  # nothing was cut: the same branches under the new key
        del pending[q]
        bank(q)
    # A cut branch keeps fewer than `--from` tokens when its last ones decode to no text (part of a character): it
    # resumes from what it kept, so the resumed rows' budgets differ; one decoding call per budget.
    by_budget: dict[int, list[tuple[int, int]]] = {}
    for q, k in jobs:
        by_budget.setdefault(args.new - (len(old[q][k].token_ids) - 1), []).append((q, k))
    for budget, group in sorted(by_budget.items()):
        resumed_prompts = [prompts[q] + old[q][k].token_ids[:-1] for q, k in group]
        resumed = RunSpec(DecodingConfig(n_branches=1), until, budget, max_rows=args.max_rows)
        for decoded in HFEngine(lm.model, tokenizer).decode(resumed_prompts, resumed):  # EOS: pipeline.eos_ids()
            (branch,), (q, k) = decoded.branches, group[decoded.q]
            banked = old[q][k]
            first_token_changed += branch.token_ids[:1] != banked.token_ids[-1:]
            ids = banked.token_ids[:-1] + branch.token_ids
            margins = banked.margins[:-1] + branch.margins
            # "stop" only keeps the last token (the resumed branch already dropped its EOS); the reason is its own.
            joined = make_branch(tokenizer, ids, margins, until, "stop")
            extended[q][k] = dataclasses.replace(joined, finish_reason=branch.finish_reason)
            pending[q].discard(k)
            if not pending[q]:
                del pending[q]
                bank(q)
    new = [pipeline.bank.get(k) for k in new_keys]
    summary = {"docs": args.docs, "from": args.old, "to": args.new, "model": args.model, "dtype": args.dtype,
               "extended_now": len(todo), "branches_resumed_now": len(jobs),
               "first_token_changed_on_resume": int(first_token_changed),
               "length_share": {str(args.old): cut_share(old), str(args.new): cut_share(new)},
               "seconds": round(time.perf_counter() - began, 1)}
    if args.verify:
        fresh = Pipeline(lm.model, tokenizer, dataclasses.replace(pipeline.config, bank=BankConfig()),
                         model_name=pipeline.identity["model"])  # the same model, no bank: everything decoded
        check = fresh.run(prompts[: args.verify], dataclasses.replace(new_spec, max_rows=5 * new_spec.decoding.n_branches))
        pairs = [(a.token_ids, b.token_ids) for r, q in zip(check, new) for a, b in zip(r.branches, q)]
        summary["verify"] = {"questions": args.verify, "branches": len(pairs),
                             "token_identical": sum(a == b for a, b in pairs)}
    print(json.dumps(summary, indent=1), flush=True)
    if args.out:
        write_text(args.out, json.dumps(summary, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
