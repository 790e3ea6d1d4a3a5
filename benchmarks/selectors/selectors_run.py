"""Run 19 B: every selection strategy, old and new, on a committed bank set, from one pass over its branches.

For each set (bank_sets.SETS) the model reads the banked branches teacher-forced (never decoding): features for
LoVer's label-free test-time fit and the per-token statistics of the 2025 selectors (core/select/selectors.py), both
kept per question in the local feature cache, so a killed run resumes where it stopped. Then the default test-time fit,
every registered strategy, and per branch the path scores (with whether the branch's stated answer is right) for
AUROC. The report holds per-question outcomes and picks, so `selectors_table.py` pairs any two rows afterwards.

    LOVER_DATA_DIR=../shared/data HF_HUB_OFFLINE=1 .venv/bin/python -m benchmarks.selectors.selectors_run \\
        --set 135m/gsm8k   # -> benchmarks/results/selectors/135m_gsm8k.json (--out-dir to change)

Run 31 (Selectors II): the rows of every registered strategy come along (the plain probes are fitted with LoVer's
fit); `--ptrue` adds P(True), one more teacher-forced pass per branch (core/decode/ptrue.py), kept per question in
`<out-dir>/ptrue/<set>.jsonl` as it is computed, so a killed run resumes there too; its seconds a question go into
the report.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from lover_lmeval.core.decode.engine import RunSpec
from lover_lmeval.core.decode.ptrue import FALSE_WORDS, PTRUE_QUERY, TRUE_WORDS, ptrue_from_tokens, word_tokens
from lover_lmeval.core.select.answers import get_extractor, matches_gold, span_confidence, stated_answer
from lover_lmeval.core.files import write_text
from lover_lmeval.core.select.selection import ORACLES, STRATEGIES, select
from lover_lmeval.core.select.selectors import DEEPCONF_WINDOW, lowest_window_mean, span_lowest_probability
from lover_lmeval.core.verify.probes import PROBES
from lover_lmeval.harness.model import LoverLM

from benchmarks.bank_sets import SETS, load_set, model_source
from benchmarks.bench_common import BANKS, RESULTS, UNTIL

CHUNK = 10  # questions a featurise call: progress is logged (and cached) this often


def path_scores(result, extract) -> dict[str, list[float]]:
    """Per branch, each selector's path score (higher = more confident) and the stated answer's span confidence."""
    scorers = ["lover", *PROBES, *(["ptrue"] if "ptrue" in result.verifier_probs else [])]
    out: dict[str, list[float]] = {name: [] for name in ("self_certainty", "deepconf_lowest_group", "mean_logprob",
                                                         "cot_confidence", "minus_length", "minus_mean_entropy",
                                                         "softsc_min", *scorers)}
    scores = {name: result.scores(name) for name in scorers}
    for k, branch in enumerate(result.branches):
        stats = {name: np.asarray(values, dtype=np.float64) for name, values in branch.stats.items()}
        empty = len(branch.token_ids) == 0
        answer = stated_answer(extract, branch)
        out["self_certainty"].append(float("-inf") if empty else float(stats["kl_uniform"].mean()))
        out["deepconf_lowest_group"].append(lowest_window_mean(-stats["topk_logprob"], DEEPCONF_WINDOW))
        out["mean_logprob"].append(float("-inf") if empty else float(stats["logprob"].mean()))
        out["cot_confidence"].append(span_confidence(branch.margins, branch.offsets, answer))
        out["minus_length"].append(-float(len(branch.token_ids)))
        out["minus_mean_entropy"].append(float("-inf") if empty else -float(stats["entropy"].mean()))
        out["softsc_min"].append(span_lowest_probability(stats["logprob"], branch.offsets, answer))
        for name in scorers:
            out[name].append(float(scores[name][k]))
    return out


def add_ptrue(lm, chunk, results, sidecar: Path) -> float:
    """P(True) of each result's branches (verifier_probs["ptrue"] = (P, 1 - P)), from `sidecar` where a previous run
    computed it, else by the pass, appended to `sidecar` question by question; returns the seconds spent."""
    done = {}
    if sidecar.is_file():
        for line in sidecar.read_text().splitlines():
            record = json.loads(line)
            done[record["key"]] = record["ptrue"]
    pipe, spent = lm.pipeline, 0.0
    words = [word_tokens(pipe.tokenizer, w) for w in (TRUE_WORDS, FALSE_WORDS)]
    query = pipe.tokenizer.encode(PTRUE_QUERY, add_special_tokens=False)
    for q, result in zip(chunk, results):
        if q.key not in done:
            began = time.perf_counter()
            found = ptrue_from_tokens(pipe.model, q.prompt_ids, result.branches, query, *words).tolist()
            seconds = time.perf_counter() - began
            spent += seconds
            sidecar.parent.mkdir(parents=True, exist_ok=True)
            with sidecar.open("a") as handle:  # one line a question: a kill loses at most the one in flight
                handle.write(json.dumps({"key": q.key, "ptrue": found, "seconds": round(seconds, 2)}) + "\n")
            done[q.key] = found
        p = np.asarray(done[q.key], dtype=np.float64)
        result.verifier_probs["ptrue"] = np.stack([p, 1 - p], axis=-1)
    return spent


def run_set(name: str, limit: int | None, out_dir: Path, ptrue: bool = False) -> Path:
    bank_set = SETS[name]
    questions = load_set(bank_set)[:limit]
    gguf, identity = model_source(bank_set.model)
    lm = LoverLM(gguf_file=gguf, dtype=bank_set.reading_dtype, bank=str(BANKS / bank_set.model / bank_set.bank),
                 bank_only=True, bank_dtype=bank_set.dtype, extract=bank_set.extract, batch_size=1,
                 decoding=bank_set.decoding)
    assert lm.pipeline.identity["model"] == identity, "bank keys would not match this model"
    spec = RunSpec(lm.pipeline.config.decoding, UNTIL, bank_set.budget)
    began, results, ptrue_seconds = time.perf_counter(), [], 0.0
    sidecar = out_dir / "ptrue" / f"{name.replace('/', '_')}.jsonl"
    for start in range(0, len(questions), CHUNK):
        chunk = questions[start: start + CHUNK]
        prompts = [q.prompt_ids for q in chunk]
        assert lm.pipeline.record_keys(prompts, spec) == [q.key for q in chunk], "the set's keys are not the bank's"
        results += lm.pipeline.run(prompts, spec)
        if ptrue:
            ptrue_seconds += add_ptrue(lm, chunk, results[-len(chunk):], sidecar)
        rate = len(results) / (time.perf_counter() - began)
        print(f"{name}: {len(results)}/{len(questions)} questions read ({60 * rate:.1f} a minute)", flush=True)
    lm.pipeline.fit(results, name, bank_set.extract)  # label-free, default config: the lover_* and probe rows
    extract = get_extractor(bank_set.extract)
    # every registered label-free selector; P(True)'s only with its pass (opt-in)
    strategies = [s for s in STRATEGIES if s not in ORACLES and (ptrue or s != "ptrue_max")]
    report = {"set": name, "bank_set": {k: getattr(bank_set, k) for k in bank_set.__dataclass_fields__},
              "n": len(results), "seconds": round(time.perf_counter() - began, 1),
              "fit": lm.pipeline.record.fits[name], "questions": []}
    if ptrue:
        seconds = [json.loads(line)["seconds"] for line in sidecar.read_text().splitlines()]
        report["ptrue"] = {"query": PTRUE_QUERY, "questions": len(seconds),
                           "seconds_per_question": round(float(np.mean(seconds)), 2),
                           "seconds_this_run": round(ptrue_seconds, 1)}
    for q, result in zip(questions, results):
        gold = q.gold.strip()
        # Only the oracle (pass@N, an upper bound) is handed the gold answer.
        picks = {s: select(result, s, extract, gold=gold if s in ORACLES else None) for s in [*strategies, *ORACLES]}
        report["questions"].append({
            "task": q.task, "doc": q.doc_index, "gold": gold,
            "correct": {s: int(matches_gold(extract, p, gold)) for s, p in picks.items()},
            # The label-free picks themselves: selectors_table.py reads how often a selector gives one answer.
            "picked": {s: picks[s] for s in strategies},
            "branch_right": [int(a is not None and matches_gold(extract, a.value, gold))
                             for a in (stated_answer(extract, b) for b in result.branches)],
            "path_scores": {k: [round(v, 5) for v in vals] for k, vals in path_scores(result, extract).items()}})
    out = out_dir / f"{name.replace('/', '_')}.json"
    write_text(out, json.dumps(report, indent=None))
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", action="append", required=True, help=f"a set name ({', '.join(SETS)})")
    parser.add_argument("--limit", type=int, default=None, help="first N questions only (a check, not a result)")
    parser.add_argument("--out-dir", default=str(RESULTS / "selectors"), help="default benchmarks/results/selectors")
    parser.add_argument("--ptrue", action="store_true", help="add P(True): one more pass per branch (run 31)")
    args = parser.parse_args()
    unknown = [s for s in args.set if s not in SETS]
    if unknown:
        raise SystemExit(f"unknown set(s) {unknown}; choose from {list(SETS)}")
    for name in args.set:
        print("wrote", run_set(name, args.limit, Path(args.out_dir), args.ptrue), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
