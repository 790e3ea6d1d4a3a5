#!/usr/bin/env python
"""Long branches end to end: `lover_hf` on the embedded SmolLM2-135M through the real `lm_eval` CLI, the same
questions at two token budgets (default 256 and 2,048), each run under cProfile, and per stage its seconds against
the tokens the run decoded. A stage whose log-log slope (seconds against tokens, between the two budgets) is above
1.2 is flagged: it grows faster than the work it is given.

Which questions: long branches need questions the model does not finish early. SmolLM2 mostly reaches its end token
within 256 tokens on GSM8K, so the questions are chosen from the committed bank of its 256-token GSM8K branches
(benchmarks/banks/smollm2-135m-instruct/lover_gsm8k-test.jsonl.gz, chat template, N = 10): those with the most
branches cut by the budget (finish reason "length"), ties to the most tokens. That reads no gold answer. Each bank
record is matched to its document by its question's text; the runs select the documents with lm-eval's `--samples`.

Stages, from the profile (cumulative seconds of the function named; the profiler's overhead inflates Python-heavy
stages, so shares are upper bounds there):
- decode: `HFEngine.decode` (the model's steps, sampling and the token statistics), less the cutting inside it;
- cutting: `branch.make_branch` (offsets and the stop-string cut of every branch);
- features: `assertion_features` / `features_from_tokens` (the templates read on each branch's KV cache);
- banking: `BranchBank.add` (each question written to a fresh bank, `bank=`);
- fit: `Pipeline.finish_task` (LoVer's test-time fit, CCS and PCA, the rank checks), split into its parts;
- selection: `LoverSelect.apply` (every row's filter).

    .venv/bin/python -m benchmarks.performance.bench_long_branches [--questions 2] [--budgets 256,2048]
        [--render JSON]

Writes benchmarks/results/long_branches.json and .md. Cost on the shared 2-core CPU: the 256-token run 113 s; the
2,048-token run (2 torch threads then, the CPU loaded by another job) had not finished after 60 min (the results say
why): run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import datetime
import gzip
import json
import math
import os
import platform
import pstats
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_common import BANKS, REPO, RESULTS, offline_env

TASK = "lover_gsm8k"
SOURCE_BANK = BANKS / "smollm2-135m-instruct" / "lover_gsm8k-test.jsonl.gz"
THREADS = 1  # torch's threads in the CLI (--threads)
SOURCE_BUDGET = 256  # the source bank's max_gen_toks
FLAG_ABOVE = 1.2
#: The decode less its quadratic kernels, per step: above this slope it is a defect, not the machine's caches or load
DEFECT_ABOVE = 1.5
#: (stage, [(file suffix, function name)]): the functions whose cumulative seconds make each stage.
STAGES = [("decode", [("core/decode/engine.py", "decode")]),
          ("cutting", [("core/decode/branch.py", "make_branch")]),
          ("features", [("core/decode/features.py", "assertion_features"),
                        ("core/decode/features.py", "features_from_tokens")]),
          ("banking", [("core/store/bank.py", "add")]),
          ("fit", [("core/pipeline.py", "finish_task")]),
          ("selection", [("harness/filter.py", "apply")])]
#: The fit's parts (inside `fit`): LoVer's fit, the plain probes (CCS, PCA), the rank checks, the stacked batch.
FIT_PARTS = [("fit_lover", [("core/verify/scoring.py", "fit_on_results")]),
             ("fit_probes", [("core/verify/probes.py", "fit_probes")]),
             ("rank_checks", [("core/verify/scoring.py", "rank_checks")]),
             ("task_batch", [("core/verify/scoring.py", "task_batch")])]

#: The model's kernels, own seconds over the whole run (nearly all of it the decode's steps): the weights' products
#: (linear in the steps and rows), attention over the KV cache and the cache's growth by concatenation (both linear in
#: a step's context, so quadratic in a branch's length).
KERNELS = [("k_linear", "<built-in method torch._C._nn.linear>"),
           ("k_attention", "<built-in method torch._C._nn.scaled_dot_product_attention>"),
           ("k_cache_cat", "<built-in method torch.cat>")]


def long_questions(count: int) -> list[dict]:
    """The `count` documents of the source bank with the most branches cut at its budget (then the most tokens):
    [{doc, length_cut, tokens, key}], matched to the task's test documents by question text."""
    from transformers import AutoTokenizer

    from lover_lmeval.core.loading import convert_gguf, default_gguf
    from lover_lmeval.data.tasks import load_gsm8k

    tokenizer = AutoTokenizer.from_pretrained(convert_gguf(default_gguf()))
    docs = load_gsm8k()["test"]
    with gzip.open(SOURCE_BANK, "rt") as f:
        records = [json.loads(line) for line in f]
    found = []
    for record in records:
        prompt = tokenizer.decode(record["prompt_ids"])
        matches = [d for d in range(len(docs)) if docs[d]["question"].strip() in prompt]
        if len(matches) != 1:
            raise SystemExit(f"bank record {record['key'][:12]} matches {len(matches)} documents, not one")
        branches = record["branches"]
        found.append({"doc": matches[0], "key": record["key"],
                      "length_cut": sum(b["finish_reason"] == "length" for b in branches),
                      "tokens": sum(len(b["token_ids"]) for b in branches)})
    found.sort(key=lambda r: (-r["length_cut"], -r["tokens"]))
    return found[:count]


def run_cli(docs: list[int], budget: int, batch: int, folder: Path, threads: int = THREADS) -> dict:
    """One `lm_eval` run of `docs` at `budget` tokens under cProfile, torch on `threads` threads: {wall_s, profile,
    bank, command}."""
    profile, bank, output = folder / f"cli_{budget}.prof", folder / f"bank_{budget}.sqlite", folder / f"out_{budget}"
    command = [sys.executable, "-m", "cProfile", "-o", str(profile), "-m", "lm_eval", "run", "--model", "lover_hf",
               "--model_args", f"bank={bank}", "--tasks", TASK, "--samples", json.dumps({TASK: docs}),
               "--apply_chat_template", "--gen_kwargs", f"max_gen_toks={budget}", "--batch_size", str(batch),
               "--output_path", str(output)]
    # this checkout's package, not another; torch's threads as --threads (a shared CPU: with more threads than free
    # cores every kernel call waits at OpenMP's barrier for a descheduled thread)
    env = {**os.environ, "PYTHONPATH": str(REPO), "TQDM_DISABLE": "1", "OMP_NUM_THREADS": str(threads),
           "MKL_NUM_THREADS": str(threads)}
    began = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=folder)
    wall = time.perf_counter() - began
    if done.returncode != 0:
        raise SystemExit(f"lm_eval at {budget} tokens failed ({done.returncode}):\n{done.stderr[-3000:]}")
    print(f"[long_branches] {budget} tokens: {wall:.1f} s", flush=True)
    return {"wall_s": wall, "profile": profile, "bank": bank, "command": command}


def bank_tokens(path: Path) -> dict:
    """What the run's bank holds: {questions, branches, tokens (sum of branch lengths), finish reasons, keys}."""
    from lover_lmeval.core.store.bank import BranchBank

    bank = BranchBank(path)
    keys = sorted(bank.keys())
    branches = [b for k in keys for b in bank.get(k)]
    reasons: dict[str, int] = {}
    for b in branches:
        reasons[b.finish_reason] = reasons.get(b.finish_reason, 0) + 1
    return {"questions": len(keys), "branches": len(branches), "tokens": sum(len(b.token_ids) for b in branches),
            "longest": max(len(b.token_ids) for b in branches), "finish_reasons": reasons, "keys": keys}


def cumulative(stats: pstats.Stats, functions: list[tuple[str, str]]) -> float:
    """Cumulative seconds of the named functions (the largest entry of each name in its file)."""
    total = 0.0
    for suffix, name in functions:
        found = [ct for (file, _, func), (_, _, _, ct, _) in stats.stats.items()
                 if func == name and file.replace(os.sep, "/").endswith("lover_lmeval/" + suffix)]
        total += max(found, default=0.0)
    return total


def stage_seconds(profile: Path) -> dict:
    """Each stage's seconds from a profile (decode less the cutting inside it), the fit's parts, the profile's
    total and its top functions by own time."""
    stats = pstats.Stats(str(profile))
    seconds = {name: cumulative(stats, fns) for name, fns in STAGES + FIT_PARTS}
    seconds["decode"] = max(0.0, seconds["decode"] - seconds["cutting"])  # the cut runs inside the decode
    for name, builtin in KERNELS:
        seconds[name] = sum(tt for (file, _, func), (_, _, tt, _, _) in stats.stats.items()
                            if file == "~" and func == builtin)
    top = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])[:12]
    return {"seconds": {k: round(v, 3) for k, v in seconds.items()}, "profiled_s": round(stats.total_tt, 2),
            "top_own_time": [{"function": f"{Path(f).name}:{line}:{fn}", "own_s": round(tt, 3), "calls": nc}
                             for (f, line, fn), (_, nc, tt, _, _) in top]}


def slope(t1: float, t2: float, n1: int, n2: int) -> float | None:
    """log(t2 / t1) / log(n2 / n1): 1 linear in the tokens, 2 quadratic."""
    if min(t1, t2) <= 0 or n1 == n2:
        return None
    return math.log(t2 / t1) / math.log(n2 / n1)


def machine() -> dict:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    flags = Path("/proc/cpuinfo").read_text()
    return {"cpu": cpu, "cores": os.cpu_count(), "avx512": " avx512f" in flags, "python": platform.python_version(),
            "loadavg_start": [round(x, 2) for x in os.getloadavg()]}


def decode_diagnosis(rows: dict[str, dict], runs: list[dict]) -> str:
    """Why the decode grows faster than its tokens, from its kernels' slopes and shares (`rows`: records by name)."""
    def shown(name: str) -> str:
        return "-" if rows[name]["slope"] is None else f"{rows[name]['slope']:.2f}"

    quadratic = [rows["k_attention"]["seconds"][k] + rows["k_cache_cat"]["seconds"][k] for k in (0, -1)]
    decode = rows["decode"]["seconds"]
    rest = [d - q for d, q in zip(decode, quadratic)]
    n1, n2 = runs[0]["tokens"]["tokens"], runs[-1]["tokens"]["tokens"]
    without = slope(rest[0], rest[-1], n1, n2)
    if without is None or without > FLAG_ABOVE:
        steps = [r["budget"] for r in (runs[0], runs[-1])]
        per_step = slope(rest[0], rest[-1], *steps)
        rows_a_step = [r["tokens"]["tokens"] / r["budget"] for r in (runs[0], runs[-1])]
        if per_step is None or per_step > DEFECT_ABOVE:
            return (f"not explained by attention alone: the decode less attention and the cache's growth still grows "
                    f"with slope {'-' if without is None else f'{without:.2f}'} in tokens, "
                    f"{'-' if per_step is None else f'{per_step:.2f}'} in steps: a defect to find.")
        return (f"the decode less attention and the cache's growth still grows with slope "
                f"{'-' if without is None else f'{without:.2f}'} in tokens ({'-' if per_step is None else f'{per_step:.2f}'}"
                f" in steps: a step's weight products cost the same whatever its rows, and the rows a step fell from "
                f"{rows_a_step[0]:.1f} to {rows_a_step[-1]:.1f} as branches ended). The weights' products (k_linear, "
                f"slope {shown('k_linear')}) took more per step at the longer budget; on this shared machine (another "
                f"job on the other core) that can be the larger cache evicting the weights from the CPU's caches, or "
                f"load: not settled by one run. Attention (slope {shown('k_attention')}) and transformers' "
                f"DynamicCache growing by torch.cat every step (slope {shown('k_cache_cat')}: all earlier keys and "
                f"values copied a step) are the quadratic terms, {100 * quadratic[-1] / decode[-1]:.0f}% of the "
                f"decode at {runs[-1]['budget']} tokens; `static_cache=true` (cot only) writes each step in place.")
    return (f"attention's quadratic term, as expected: every step attends over (k_attention, slope "
            f"{shown('k_attention')}) and, in transformers' DynamicCache, copies by torch.cat (k_cache_cat, slope "
            f"{shown('k_cache_cat')}) all of each row's earlier keys and values, work linear in the step's context, "
            f"so quadratic in a branch's length; the weights' products (k_linear, slope {shown('k_linear')}) grow "
            f"with the steps. The two took {100 * quadratic[0] / decode[0]:.0f}% of the decode at "
            f"{runs[0]['budget']} tokens and {100 * quadratic[-1] / decode[-1]:.0f}% at {runs[-1]['budget']}; the "
            f"decode less them grows with slope {'-' if without is None else f'{without:.2f}'}. Not the plugin's "
            "own code: a preallocated cache (`static_cache=true`, cot only) writes each step in place instead of "
            "copying (the attention itself stays).")


def banking_diagnosis(rows: dict[str, dict], runs: list[dict]) -> str:
    """A bank write is one record's JSON, compressed: linear in its tokens; one write a run is milliseconds."""
    scaling = RESULTS / "scaling.json"
    measured = ""
    if scaling.is_file():
        stages = json.loads(scaling.read_text()).get("stages", [])
        found = [st.get("slope") for st in stages if isinstance(st, dict) and st.get("name") == "bank_write[sqlite]"]
        measured = f" (bench_scaling times it alone, the fastest of up to 5 calls: slope {found[0]:.2f})" \
            if found and found[0] is not None else ""
    return (f"{rows['banking']['seconds'][0]:.3f} s and {rows['banking']['seconds'][-1]:.3f} s: one record a run, "
            f"timed once, milliseconds on a shared machine; a record is its branches' JSON, compressed, linear in "
            f"their tokens{measured}. Noise, not a defect.")


#: Why a flagged stage grows faster than its tokens: stage -> (its records by name, the runs) -> text.
DIAGNOSES = {"decode": decode_diagnosis, "banking": banking_diagnosis}


def records(report: dict) -> list[dict]:
    """Per stage and fit part: seconds and seconds per 1k tokens at each budget, the slope between them, the flag."""
    runs, rows = report["runs"], []
    n1, n2 = runs[0]["tokens"]["tokens"], runs[-1]["tokens"]["tokens"]
    for name in [s for s, _ in STAGES] + [s for s, _ in FIT_PARTS + KERNELS] + ["other"]:
        seconds = [r["stages"]["seconds"][name] for r in runs]
        per_1k = [round(1000 * s / r["tokens"]["tokens"], 4) for s, r in zip(seconds, runs)]
        k = slope(seconds[0], seconds[-1], n1, n2)
        rows.append({"stage": name, "seconds": seconds, "s_per_1k_tokens": per_1k,
                     "slope": None if k is None else round(k, 3),
                     "flagged": k is not None and k > FLAG_ABOVE and name in dict(STAGES), "diagnosis": None})
    by_name = {r["stage"]: r for r in rows}
    for r in rows:
        if r["flagged"]:
            r["diagnosis"] = (DIAGNOSES[r["stage"]](by_name, runs) if r["stage"] in DIAGNOSES
                              else "not explained by what the stage must do: a defect to fix.")
    return rows


def markdown(report: dict) -> str:
    m, runs = report["machine"], report["runs"]
    budgets = [r["budget"] for r in runs]
    head = " | ".join(f"s @ {b} | s / 1k tok @ {b}" for b in budgets)
    lines = [f"`{report['command']}` — {report['date']}, commit {report['commit']}", "",
             f"Machine: {m['cpu']}, {m['cores']} cores, AVX-512 {'yes' if m['avx512'] else 'no'}, Python "
             f"{m['python']}; load average {m['loadavg_start']} at the start, {m['loadavg_end']} at the end (a shared "
             f"machine). `lover_hf` (the embedded SmolLM2-135M-Instruct, float32, N = 10, cot) on {TASK} documents "
             f"{report['docs']} through `lm_eval run --samples ... --apply_chat_template --gen_kwargs "
             f"max_gen_toks=B --batch_size {report['batch']}`, each under cProfile, a fresh bank each.", "",
             "Questions: from the committed bank of SmolLM2's 256-token branches, the documents with the most "
             "branches cut by the budget (no gold answer read): " + ", ".join(
                 f"doc {q['doc']} ({q['length_cut']} of 10 cut, {q['tokens']:,} tokens)" for q in report["questions"])
             + ".", "",
             "| | " + " | ".join(str(b) for b in budgets) + " |", "|---|" + "---|" * len(budgets)]
    for label, get in (("tokens decoded (sum of branch lengths)", lambda r: f"{r['tokens']['tokens']:,}"),
                       ("longest branch", lambda r: f"{r['tokens']['longest']:,}"),
                       ("finish reasons", lambda r: ", ".join(f"{k} {v}" for k, v in
                                                               sorted(r["tokens"]["finish_reasons"].items()))),
                       ("wall seconds (the CLI, profiled)", lambda r: f"{r['wall_s']:.1f}"),
                       ("profiled seconds (main thread)", lambda r: f"{r['stages']['profiled_s']:.1f}")):
        lines.append(f"| {label} | " + " | ".join(get(r) for r in runs) + " |")
    lines += ["", f"| stage | {head} | slope |", "|---|" + "---|---|" * len(budgets) + "---|"]
    for row in report["records"]:
        cells = " | ".join(f"{s:.3g} | {p:.3g}" for s, p in zip(row["seconds"], row["s_per_1k_tokens"]))
        k = "-" if row["slope"] is None else f"{row['slope']:.2f}" + (" ⚑" if row["flagged"] else "")
        name = row["stage"] if row["stage"] in dict(STAGES) or row["stage"] == "other" else f"↳ {row['stage']}"
        lines.append(f"| {name} | {cells} | {k} |")
    lines += ["", "Slope: log(seconds at the larger budget / at the smaller) over log(tokens at the larger / at the "
              "smaller); 1 is linear in the tokens decoded, 0 a fixed cost. ↳ fit_lover ... task_batch: parts of the "
              "fit; ↳ k_*: the model's kernels, their own seconds over the whole run (the decode's steps, nearly "
              "all; the prefill and the features pass too): k_linear the weights' products, k_attention attention over "
              "the KV cache, k_cache_cat the cache grown by concatenation at every step. other: the profile's total "
              "less the stages (loading the model and the task, lm-eval's own work).", "",
              f"## Slopes above {FLAG_ABOVE}", ""]
    flagged = [r for r in report["records"] if r["flagged"]]
    lines += ([f"- `{r['stage']}` (slope {r['slope']:.2f}): {r['diagnosis']}" for r in flagged]
              or ["None." if len(runs) > 1 else "Not measured: one budget only."])
    lines += ["", "## Notes", "", *(f"- {note}" for note in report.get("notes", []))]
    return "\n".join(lines)


def other_seconds(runs: list[dict]) -> None:
    """What each run's profile saw outside the stages, as its stage `other`."""
    for r in runs:
        s = r["stages"]["seconds"]
        s["other"] = round(r["stages"]["profiled_s"] - sum(s[name] for name, _ in STAGES), 3)


def write_report(report: dict, out: Path) -> None:
    from lover_lmeval.core.files import write_text

    report["records"] = records(report)
    report["flagged"] = [r["stage"] for r in report["records"] if r["flagged"]]
    report["markdown"] = markdown(report)
    write_text(out, json.dumps(report, indent=1) + "\n")
    write_text(out.with_suffix(".md"), report["markdown"] + "\n")
    print(report["markdown"])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--questions", type=int, default=2, help="documents, those with the most branches cut")
    parser.add_argument("--budgets", default="256,2048", help="max_gen_toks of each run, smallest first")
    parser.add_argument("--out", default=str(RESULTS / "long_branches.json"), help="JSON path (a .md beside it)")
    parser.add_argument("--keep", default=None, help="a folder for the profiles, banks and lm-eval outputs "
                        "(with --render: the stages again from its profiles)")
    parser.add_argument("--render", default=None, metavar="JSON", help="measure nothing: the report again from "
                        "this earlier output (its stages recomputed from the stored seconds)")
    parser.add_argument("--threads", type=int, default=THREADS, help="torch's threads in the CLI (OMP_NUM_THREADS)")
    args = parser.parse_args(argv)
    if args.render:
        report = json.loads(Path(args.render).read_text())
        if args.keep:  # the stages again from the kept profiles
            for r in report["runs"]:
                r["stages"] = stage_seconds(Path(args.keep) / f"cli_{r['budget']}.prof")
            other_seconds(report["runs"])
        write_report(report, Path(args.out))
        return 0
    offline_env()
    info, started = machine(), datetime.datetime.now()
    questions = long_questions(args.questions)
    docs = sorted(q["doc"] for q in questions)
    folder = Path(args.keep or tempfile.mkdtemp(prefix="long_branches_"))
    folder.mkdir(parents=True, exist_ok=True)
    runs = []
    for budget in [int(b) for b in args.budgets.split(",")]:
        done = run_cli(docs, budget, len(docs), folder, args.threads)
        tokens = bank_tokens(done["bank"])
        runs.append({"budget": budget, "wall_s": round(done["wall_s"], 2), "tokens": tokens,
                     "stages": stage_seconds(done["profile"])})
    other_seconds(runs)
    info["loadavg_end"] = [round(x, 2) for x in os.getloadavg()]
    commit = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--short", "HEAD"], capture_output=True,
                            text=True).stdout.strip()
    at_source = next((r for r in runs if r["budget"] == SOURCE_BUDGET), None)  # the same key: the same prompt ids
    same = None if at_source is None else len(set(at_source["tokens"]["keys"]) & {q["key"] for q in questions})
    report = {"benchmark": "bench_long_branches", "date": started.isoformat(timespec="seconds"), "commit": commit,
              "command": " ".join([Path(sys.executable).name, "-m", "benchmarks.performance.bench_long_branches",
                                   *(argv if argv is not None else sys.argv[1:])]),
              "machine": info, "docs": docs, "batch": len(docs), "questions": questions, "runs": runs,
              "notes": [] if same is None else [
                  f"The {SOURCE_BUDGET}-token run's bank keys (model, prompt ids, decoding settings) equal the source "
                  f"bank's for {same} of {len(docs)} questions: the same prompts as the branches they were chosen by."]}
    write_report(report, Path(args.out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
