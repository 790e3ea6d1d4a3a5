#!/usr/bin/env python
"""Decoding cost of `lover_hf` against plain greedy decoding and lm-eval's self-consistency.

On the first Q GSM8K test questions, with lover_gsm8k's prompt (doc_to_text), stop strings and a budget
of --max-new-tokens, this times, question by question (so that CPU contention hits every method alike):

  1. branches    N=10 CoT-decoding branches (`HFEngine.decode`, the LoverLM's model and tokenizer, B
                 questions per batch = --batch-size), exactly what `LoverLM.decode_requests` runs;
  2. features    `assertion_features` for those branches (template tokens on top of the branch caches);
  3. re-encode   the naive alternative: a full forward of prompt + branch + template for every
                 (branch, template) pair, batched 16 rows a pass like `assertion_features` (LM head on
                 the last position only, `logits_to_keep=1`, as it needs no logits); its hidden
                 states are compared with the features (max |diff|) as a correctness check;
  4. greedy      one plain greedy decode per question, the way lm-eval's `--model hf` runs it
                 (`HFLM._model_generate`: `generate(do_sample=False)` with lm-eval's stop-sequence
                 criteria), one question per call (lm-eval's default batch size) and, with
                 --batch-size B > 1, also B left-padded questions per call; and our own
                 `HFEngine.decode` with n_branches=1;
then, as a subprocess,
  5. lm-eval     `lm_eval --model hf --model_args pretrained=<converted folder> --device cpu --tasks
                 bench_gsm8k_sc10 --include_path benchmarks/tasks --limit K` (10 sampled repeats at
                 temperature 0.7, same prompt / stop strings / budget). Its model-load and start-up time
                 is removed by also timing the same command with `--limit 1 --gen_kwargs max_gen_toks=1`
                 (start-up + model + data loading + 10 one-token generations) and subtracting it.
                 (lm-eval 0.4.13 rejects `--limit 0`, and `device=cpu` inside --model_args clashes with the
                 CLI's own device argument, hence `--device cpu`.)

Prints a Markdown table and writes it, with the machine, command line and ratios, to
benchmarks/results/decode_<date>.json (and .md). Example:

    .venv/bin/python -m benchmarks.performance.bench_decode --n-questions 10 --max-new-tokens 256
"""

from __future__ import annotations

import argparse
import datetime
import glob
import json
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.bench_common import REPO, RESULTS, add_model_options, model_path, offline_env
from lover_lmeval.core.files import write_text

MODEL_NAME = "qwen2.5-coder-0.5b-instruct"
BENCH_TASK = "bench_gsm8k_sc10"
LOVER_TASK = "lover_gsm8k"
TARGETS = {  # ratio name -> target (lower is better)
    "branches_over_greedy": 3.0,
    "branches_over_lm_eval_repeats10": 0.5,
    "features_over_decode": 0.05,
    "continuous_over_greedy_batched": 1.3,  # issue Speed
    "continuous_over_lm_eval_repeats10": 0.25,
}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n-questions", type=int, default=10, help="Q, first Q GSM8K test questions (default 10)")
    p.add_argument("--max-new-tokens", type=int, default=256, help="token budget of every method (default 256)")
    p.add_argument("--n-branches", type=int, default=10, help="N branches (default 10)")
    add_model_options(p, MODEL_NAME, dtype=None)  # --model, --gguf
    p.add_argument("--lm-eval-questions", type=int, default=None,
                   help="K questions for the lm-eval self-consistency run (default Q; 0 skips it). It is the "
                        "slowest method: on a small CPU use fewer and compare against branches on the same K.")
    p.add_argument("--lm-eval-batch-size", default="1", help="lm-eval --batch_size (default 1, lm-eval's default)")
    p.add_argument("--batch-size", type=int, default=1,
                   help="B, questions decoded together by HFEngine.decode (B*N rows), as `lover_hf` does with "
                        "lm-eval's --batch_size B. Greedy is timed both one question at a time (lm-eval's default) "
                        "and B questions per generate call. Default 1.")
    p.add_argument("--threads", type=int, default=None,
                   help="torch / OpenMP threads for every method, lm-eval's subprocess included (default: torch's "
                        "default). On a shared, oversubscribed CPU, 1 avoids OpenMP spin-wait collapse.")
    p.add_argument("--skip-own-greedy", action="store_true", help="skip the HFEngine.decode n_branches=1 baseline")
    p.add_argument("--skip-reencode", action="store_true",
                   help="skip the full re-encode baseline of the features (~38 s a question for the 0.5B on 2 cores)")
    p.add_argument("--profile", action="store_true",
                   help="also cProfile decode + features of question 0 and store the top functions")
    p.add_argument("--dtype", default="float32", help="weights and activations of every method (default float32)")
    p.add_argument("--device", default="cpu", help="cpu or cuda, for every method, lm-eval's subprocess included")
    p.add_argument("--output", default=None, help="JSON path (default benchmarks/results/decode_<date>.json)")
    p.add_argument("--stats-ab", type=int, default=0, metavar="R",
                   help="only the token-statistics overhead: continuous batching with the per-step statistics and "
                        "with them replaced by zeros, alternated R times each in this run (issue Selectors: <= 5%%)")
    args = p.parse_args(argv)
    if args.lm_eval_questions is None:
        args.lm_eval_questions = args.n_questions
    args.lm_eval_questions = min(args.lm_eval_questions, args.n_questions)
    if args.batch_size < 1 or args.lm_eval_questions % args.batch_size:
        p.error(f"--lm-eval-questions {args.lm_eval_questions} must be a multiple of --batch-size {args.batch_size} "
                "(the branch time of the first K questions is summed over whole batches)")
    return args


def setup_env(threads=None):
    if threads:
        for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
            os.environ[var] = str(threads)
    offline_env()
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


def machine_info():
    import torch

    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor())
    try:
        env = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_THREAD_LIMIT")}
        nproc = int(subprocess.run(["nproc"], capture_output=True, text=True, env=env).stdout.strip())
    except Exception:  # noqa: BLE001
        nproc = os.cpu_count()
    import lm_eval
    import transformers

    return {"nproc": nproc, "cpu_model": cpu, "torch_threads": torch.get_num_threads(),
            "torch": torch.__version__, "transformers": transformers.__version__,
            "lm_eval": getattr(lm_eval, "__version__", "?"), "python": platform.python_version(),
            "platform": platform.platform(),
            "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None}


def loadavg():
    return [round(x, 2) for x in os.getloadavg()]


def task_requests(name: str, include_path: Path, limit: int):
    """(contexts, gen_kwargs, targets) of the first `limit` docs, exactly as lm-eval builds them."""
    from lm_eval.tasks import TaskManager

    task = TaskManager(include_path=str(include_path)).load([name])["tasks"][name]
    task.build_all_requests(limit=limit, rank=0, world_size=1)
    seen, contexts, gens, docs = set(), [], [], []
    for inst in sorted(task.instances, key=lambda i: i.doc_id):
        if inst.doc_id in seen:  # repeats
            continue
        seen.add(inst.doc_id)
        contexts.append(inst.args[0])
        gens.append(inst.args[1])
        docs.append(inst.doc)
    return contexts, gens[0], [task.doc_to_target(d) for d in docs], getattr(task.config, "repeats", 1)


def check_bench_task(lover_contexts, lover_gen, max_new_tokens):
    """The lm-eval task must use lover_gsm8k's prompt, stop strings and budget."""
    contexts, gen, _, repeats = task_requests(BENCH_TASK, REPO / "benchmarks" / "tasks", min(2, len(lover_contexts)))
    if contexts != lover_contexts[: len(contexts)]:
        raise SystemExit(f"{BENCH_TASK} prompts differ from {LOVER_TASK}'s; update benchmarks/tasks/")
    if list(gen["until"]) != list(lover_gen["until"]):
        raise SystemExit(f"{BENCH_TASK} stop strings {gen['until']} differ from {LOVER_TASK}'s {lover_gen['until']}")
    if int(gen["max_gen_toks"]) != int(lover_gen["max_gen_toks"]):
        raise SystemExit(f"{BENCH_TASK} max_gen_toks differs from {LOVER_TASK}'s")
    return {"repeats": repeats, "do_sample": gen.get("do_sample"), "temperature": gen.get("temperature"),
            "until": gen["until"], "max_gen_toks_in_yaml": gen["max_gen_toks"], "max_gen_toks_used": max_new_tokens}


def reencode_features(model, prompt, branches, template_ids, layer, rows_per_pass=16):
    """Naive features: full forward of prompt + branch + template per row (right-padded batches)."""
    import torch

    seqs = [prompt + b.token_ids + t for b in branches for t in template_ids]
    out_rows = []
    with torch.inference_mode():
        for start in range(0, len(seqs), rows_per_pass):
            chunk = seqs[start: start + rows_per_pass]
            width = max(len(s) for s in chunk)
            ids = torch.zeros((len(chunk), width), dtype=torch.long, device=model.device)
            mask = torch.zeros_like(ids)
            for i, s in enumerate(chunk):
                ids[i, : len(s)] = torch.tensor(s)
                mask[i, : len(s)] = 1
            # logits_to_keep=1: the baseline needs hidden states only, so it skips most of the LM head.
            out = model(input_ids=ids, attention_mask=mask, use_cache=False, output_hidden_states=True,
                        logits_to_keep=1)
            last = torch.tensor([len(s) - 1 for s in chunk])
            out_rows.append(out.hidden_states[layer][torch.arange(len(chunk)), last].float().cpu())
    return torch.cat(out_rows).reshape(len(branches), len(template_ids), -1), sum(len(s) for s in seqs)


def timed(fn, *a, **k):
    import torch

    # CUDA kernels run asynchronously: wait for the queued ones before and after, so each method pays its own.
    sync = torch.cuda.synchronize if torch.cuda.is_available() else (lambda: None)
    sync()
    t0 = time.perf_counter()
    out = fn(*a, **k)
    sync()
    return out, time.perf_counter() - t0


def run_lm_eval(folder: Path, k: int, max_new_tokens: int, batch_size: str, tokenizer, workdir: Path,
                dtype: str = "float32", device: str = "cpu"):
    """Time `lm_eval --model hf` on K questions, and the same command's fixed cost (see module doc)."""
    exe = REPO / ".venv" / "bin" / "lm_eval"
    exe = str(exe) if exe.exists() else (shutil.which("lm_eval") or "lm_eval")
    base = [exe, "--model", "hf", "--model_args", f"pretrained={folder},dtype={dtype}", "--device", device,
            "--tasks", BENCH_TASK, "--include_path", str(REPO / "benchmarks" / "tasks"), "--batch_size", str(batch_size)]
    runs = {}
    for name, extra in (("overhead", ["--limit", "1", "--gen_kwargs", "max_gen_toks=1"]),
                        ("full", ["--limit", str(k), "--gen_kwargs", f"max_gen_toks={max_new_tokens}",
                                  "--log_samples", "--output_path", str(workdir / "full")])):
        cmd = base + extra
        print(f"[bench] lm-eval {name}: {shlex.join(cmd)}", flush=True)
        la0 = loadavg()
        t0 = time.perf_counter()
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO)
        wall = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"lm_eval {name} failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        runs[name] = {"cmd": shlex.join(cmd), "wall_s": wall, "loadavg_before": la0, "loadavg_after": loadavg()}
        print(f"[bench] lm-eval {name}: {wall:.1f}s", flush=True)
    tokens, samples, accuracy = 0, 0, None
    for path in glob.glob(str(workdir / "full" / "**" / f"samples_{BENCH_TASK}_*.jsonl"), recursive=True):
        for line in Path(path).read_text().splitlines():
            row = json.loads(line)
            texts = [t for r in row["resps"] for t in (r if isinstance(r, list) else [r])]
            samples += len(texts)
            tokens += sum(len(tokenizer.encode(t, add_special_tokens=False)) for t in texts)
    for path in glob.glob(str(workdir / "full" / "**" / "results_*.json"), recursive=True):
        res = json.loads(Path(path).read_text())["results"].get(BENCH_TASK, {})
        accuracy = next((v for key, v in res.items() if key.startswith("exact_match")), None)
    gen_s = runs["full"]["wall_s"] - runs["overhead"]["wall_s"]
    return {"questions": k, "runs": runs, "generation_s": gen_s, "samples": samples,
            "tokens_in_returned_text": tokens, "maj@10_exact_match": accuracy,
            "timing_method": "wall(--limit K) - wall(--limit 1 --gen_kwargs max_gen_toks=1); the subtracted run "
                             "also holds 10 prefills + 10 one-token steps of question 1, so this slightly "
                             "favours lm-eval"}


def profile_one(engine, prompt, spec, template_ids, layer):
    import cProfile
    import io
    import pstats

    from lover_lmeval.core.decode.engine import decode_all
    from lover_lmeval.core.decode.features import assertion_features

    prof = cProfile.Profile()
    prof.enable()
    branches, caches = decode_all(engine, [prompt], spec)
    assertion_features(engine.model, branches[0], caches[0], template_ids, layer)
    prof.disable()
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(30)
    return buf.getvalue()


def fmt(x, nd=1):
    return "-" if x is None else f"{x:.{nd}f}"


def markdown(res) -> str:
    m = res["methods"]
    rows = [("Method", "Questions", "Wall s", "s / question", "Tokens", "Tokens / s", "Notes")]

    def add(name, key, note=""):
        r = m.get(key)
        if r is None:
            return
        tps = r["tokens"] / r["seconds"] if r.get("tokens") and r["seconds"] > 0 else None
        rows.append((name, str(r["questions"]), fmt(r["seconds"]), fmt(r["seconds"] / r["questions"], 2),
                     str(r.get("tokens", "-")), fmt(tps), note))

    add(f"N={res['n_branches']} CoT branches (HFEngine.decode, {res['batch_size']} question(s) per batch)", "branches",
        "tokens = decoding steps summed over branches")
    add(f"N={res['n_branches']} CoT branches, continuous batching ({res['batch_size'] * res['n_branches']} rows)",
        "branches_continuous", "all Q questions in one call")
    add("Assertion features (KV-cache reuse)", "features", "tokens = template (+ missing) tokens run")
    add("Full re-encode prompt+branch+template", "reencode", "tokens = tokens encoded, 16 rows/pass")
    add("Greedy: lm-eval HFLM._model_generate, 1 question per call", "greedy_generate", "incl. EOS / stop tokens")
    add(f"Greedy: HFLM._model_generate, {res['batch_size']} questions per call", "greedy_batched", "left-padded batch")
    add("Greedy: HFEngine.decode(n_branches=1)", "greedy_own", "")
    add(f"N={res['n_branches']} CoT branches, first K questions", "branches_k", "")
    add("lm-eval hf, repeats=10, T=0.7 (net of load)", "lm_eval",
        "tokens = re-tokenised returned text (cut at stop)")
    lines = ["| " + " | ".join(r) + " |" for r in rows]
    lines.insert(1, "|" + "---|" * len(rows[0]))
    lines += ["", "| Ratio | Value | Target | Met |", "|---|---|---|---|"]
    for name, value in res["ratios"].items():
        target = TARGETS.get(name)
        met = "-" if target is None or value is None else ("yes" if value <= target else "NO")
        lines.append(f"| {name} | {fmt(value, 3)} | {'≤ ' + str(target) if target else '-'} | {met} |")
    return "\n".join(lines)


def stats_overhead(args, engine, prompts, cfg, until, info, started) -> int:
    """Continuous batching with and without the per-step token statistics, alternated (on, off, on, off, ...) so
    that drift in the machine's speed falls on both arms; the statistics are switched off by handing the decoder
    zeros instead of `step_stats` (same shapes, same one transfer per step). Branches must come out the same."""
    import torch

    from lover_lmeval.core.decode import rows
    from lover_lmeval.core.decode.engine import RunSpec, decode_all

    real = rows.step_stats
    arms: dict[str, list[float]] = {"with_stats": [], "without_stats": []}
    tokens = {}
    for _ in range(args.stats_ab):
        for arm in arms:
            rows.step_stats = real if arm == "with_stats" else (
                lambda logits, chosen, probs=None: torch.zeros(*chosen.shape, 4, device=chosen.device))
            try:
                (branches, _), seconds = timed(decode_all, engine, prompts, RunSpec(
                    cfg, until, args.max_new_tokens, max_rows=args.batch_size * args.n_branches))
            finally:
                rows.step_stats = real
            arms[arm].append(seconds)
            tokens[arm] = [b.token_ids for q in branches for b in q]
            print(f"[bench] {arm}: {seconds:.1f}s", flush=True)
    best = {arm: min(times) for arm, times in arms.items()}
    res = {"benchmark": "bench_decode --stats-ab", "date": started.isoformat(timespec="seconds"),
           "command": shlex.join([sys.executable, *sys.argv]), "machine": info, "model": str(engine.model.name_or_path),
           "dtype": str(engine.model.dtype), "n_questions": len(prompts), "n_branches": args.n_branches,
           "max_new_tokens": args.max_new_tokens, "rows": args.batch_size * args.n_branches, "seconds": arms,
           "overhead_of_min": best["with_stats"] / best["without_stats"] - 1,
           "same_branches": tokens["with_stats"] == tokens["without_stats"], "loadavg_end": loadavg()}
    out = Path(args.output or REPO / "benchmarks" / "results" / f"decode_stats_ab_{started.date()}.json")
    write_text(out, json.dumps(res, indent=2) + "\n")
    print(f"[bench] token statistics cost {100 * res['overhead_of_min']:+.1f}% of decoding (min of {args.stats_ab} "
          f"each); same branches: {res['same_branches']}; wrote {out}", flush=True)
    return 0


def main(argv=None):
    args = parse_args(argv)
    setup_env(args.threads)
    gguf = Path(model_path(args))

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

    from lover_lmeval.core.decode.decoding import DecodingConfig
    from lover_lmeval.core.decode.engine import HFEngine, RunSpec, decode_all
    from lover_lmeval.core.decode.features import assertion_features
    from lover_lmeval.harness.model import LoverLM

    started = datetime.datetime.now()
    info = machine_info()
    print(f"[bench] machine: {info} loadavg {loadavg()}", flush=True)
    (lm, load_s) = timed(LoverLM, gguf_file=str(gguf), n_branches=args.n_branches, verifier=None,
                          dtype=args.dtype, device=args.device)
    folder = Path(lm.model.name_or_path)
    model, tok = lm.model, lm.tokenizer
    layer, template_ids = lm.pipeline.layer, lm.pipeline.template_ids
    print(f"[bench] LoverLM loaded in {load_s:.1f}s from {folder}; layer {lm.pipeline.layer}", flush=True)

    contexts, gen_kwargs, targets, _ = task_requests(LOVER_TASK, REPO / "task_configs", args.n_questions)
    bench_task = check_bench_task(contexts, gen_kwargs, args.max_new_tokens)
    kwargs = normalize_gen_kwargs(dict(gen_kwargs), lm.max_gen_toks)
    eos_text = lm.tok_decode(lm.eot_token_id, skip_special_tokens=False)
    until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
    max_new = args.max_new_tokens
    prompts = [lm._prompt_ids(c, lm.max_length - max_new) for c in contexts]
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else lm.eot_token_id
    engine = HFEngine(model, tok)  # the pipeline's: EOS lm.pipeline.eos_ids(), padding with pad_id
    cfg = DecodingConfig(n_branches=args.n_branches, mode="cot")
    cfg1 = DecodingConfig(n_branches=1, mode="cot")
    stop_strings = [s for s in until if s]

    # Warm-up (first-call allocations): not timed.
    decode_all(engine, [prompts[0]], RunSpec(cfg, until, 2))
    lm._model_generate(torch.tensor([prompts[0]], device=model.device), max_length=len(prompts[0]) + 2, stop=until,
                       do_sample=False)

    if args.stats_ab:
        return stats_overhead(args, engine, prompts, cfg, until, info, started)

    def generate_greedy(batch):
        """lm-eval's own greedy path (`HFLM._model_generate`: `generate` with lm-eval's stop-sequence
        criteria) on a left-padded batch of prompts -> generated ids per prompt."""
        width = max(len(p) for p in batch)
        # (B, P), left-padded
        ids = torch.tensor([[pad_id] * (width - len(p)) + p for p in batch], device=model.device)
        mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in batch], device=model.device)
        with torch.inference_mode():
            out = lm._model_generate(ids, max_length=width + max_new, stop=until, do_sample=False,
                                     attention_mask=mask)
        return [row[width:].tolist() for row in out]

    def cut_text(ids):
        text = tok.decode(ids, skip_special_tokens=True)
        return text[: min((i for i in (text.find(s) for s in stop_strings) if i >= 0), default=len(text))]

    per_q, per_batch, b = [], [], args.batch_size
    for start in range(0, len(prompts), b):
        batch = prompts[start: start + b]
        brec = {"questions": list(range(start, start + len(batch))), "loadavg_before": loadavg()}
        (all_branches, all_caches), brec["branches_s"] = timed(decode_all, engine, batch, RunSpec(cfg, until, max_new))
        if b > 1:
            batched, brec["greedy_batched_s"] = timed(generate_greedy, batch)
        for offset, (prompt, branches, caches) in enumerate(zip(batch, all_branches, all_caches)):
            qi = start + offset
            rec = {"question": qi, "batch": len(per_batch), "prompt_tokens": len(prompt), "loadavg_before": loadavg()}
            rec["branch_steps"] = [c.length - c.prompt_length + 1 for c in caches]  # tokens sampled per branch
            rec["branch_kept_tokens"] = [len(br.token_ids) for br in branches]
            rec["finish"] = [br.finish_reason for br in branches]
            feats, rec["features_s"] = timed(assertion_features, model, branches, caches, lm.pipeline.template_ids, lm.pipeline.layer)
            rec["features_tokens"] = sum(max(0, len(br.token_ids) - (c.length - c.prompt_length)) + len(t)
                                         for br, c in zip(branches, caches) for t in lm.pipeline.template_ids)
            if not args.skip_reencode:
                (ref, ref_tokens), rec["reencode_s"] = timed(reencode_features, model, prompt, branches,
                                                             lm.pipeline.template_ids, lm.pipeline.layer)
                rec["reencode_tokens"] = ref_tokens
                rec["features_max_abs_diff_vs_reencode"] = float((ref - feats).abs().max())
            (greedy_ids,), rec["greedy_generate_s"] = timed(generate_greedy, [prompt])
            rec["greedy_generate_tokens"] = len(greedy_ids)
            rec["branch0_equals_generate_greedy"] = branches[0].text == cut_text(greedy_ids)
            if b > 1:
                rec["greedy_batched_tokens"] = len(batched[offset])
                rec["greedy_batched_equals_single"] = cut_text(batched[offset]) == cut_text(greedy_ids)
            if not args.skip_own_greedy:
                (b1, c1), rec["greedy_own_s"] = timed(decode_all, engine, [prompt], RunSpec(cfg1, until, max_new))
                rec["greedy_own_tokens"] = c1[0][0].length - c1[0][0].prompt_length + 1
                rec["own_greedy_equals_generate_greedy"] = b1[0][0].text == cut_text(greedy_ids)
            rec["loadavg_after"] = loadavg()
            rec["branch_token_ids"] = [br.token_ids for br in branches]
            per_q.append(rec)
            reencode = ("" if args.skip_reencode else f" | re-encode {rec['reencode_s']:.2f}s "
                        f"(diff {rec['features_max_abs_diff_vs_reencode']:.1e})")
            print(f"[bench] q{qi}: prompt {len(prompt)} tok | {sum(rec['branch_steps'])} branch tok, max "
                  f"{max(rec['branch_steps'])} | features {rec['features_s']:.2f}s{reencode} | greedy {rec['greedy_generate_s']:.1f}s "
                  f"({len(greedy_ids)} tok)" + ("" if args.skip_own_greedy else f" | own n=1 {rec['greedy_own_s']:.1f}s")
                  + f" | load {rec['loadavg_after']}", flush=True)
        brec["loadavg_after"] = loadavg()
        per_batch.append(brec)
        print(f"[bench] batch {len(per_batch) - 1} ({len(batch)} questions): branches {brec['branches_s']:.1f}s"
              + (f" | greedy batched {brec['greedy_batched_s']:.1f}s" if b > 1 else ""), flush=True)

    q = len(per_q)
    # Continuous batching: all Q questions through the same B*N rows, a question joining as soon as one has ended.
    la0 = loadavg()
    (continuous, continuous_caches), continuous_s = timed(decode_all, engine, prompts,
                                                          RunSpec(cfg, until, max_new, max_rows=b * args.n_branches))
    same = sum(br.token_ids == ids for rec, q_branches in zip(per_q, continuous)
               for br, ids in zip(q_branches, rec["branch_token_ids"]))
    continuous_rec = {"seconds": continuous_s, "max_rows": b * args.n_branches, "loadavg_before": la0,
                      "loadavg_after": loadavg(), "branches_equal_to_batch_by_batch": same,
                      "branches": q * args.n_branches,
                      "tokens": sum(c.length - c.prompt_length + 1 for qc in continuous_caches for c in qc)}
    print(f"[bench] continuous batching, {b * args.n_branches} rows: {continuous_s:.1f}s, {same} of "
          f"{q * args.n_branches} branches token-identical to batch by batch", flush=True)
    del continuous_caches

    def total(key, rows=per_q):
        return sum(r[key] for r in rows)

    methods = {
        "branches": {"questions": q, "seconds": total("branches_s", per_batch),
                     "tokens": sum(sum(r["branch_steps"]) for r in per_q)},
        "features": {"questions": q, "seconds": total("features_s"), "tokens": total("features_tokens")},
        "branches_continuous": {"questions": q, "seconds": continuous_s, "tokens": continuous_rec["tokens"]},
        "greedy_generate": {"questions": q, "seconds": total("greedy_generate_s"), "tokens": total("greedy_generate_tokens")},
    }
    if not args.skip_reencode:
        methods["reencode"] = {"questions": q, "seconds": total("reencode_s"), "tokens": total("reencode_tokens")}
    if b > 1:
        methods["greedy_batched"] = {"questions": q, "seconds": total("greedy_batched_s", per_batch),
                                     "tokens": total("greedy_batched_tokens")}
    if not args.skip_own_greedy:
        methods["greedy_own"] = {"questions": q, "seconds": total("greedy_own_s"), "tokens": total("greedy_own_tokens")}

    lm_eval_res = None
    k = args.lm_eval_questions
    if k > 0:
        methods["branches_k"] = {"questions": k, "seconds": total("branches_s", per_batch[: k // b]),
                                 "tokens": sum(sum(r["branch_steps"]) for r in per_q[:k])}
        del lm  # free memory for the subprocess
        with tempfile.TemporaryDirectory(prefix="bench_decode_") as tmp:
            lm_eval_res = run_lm_eval(folder, k, max_new, args.lm_eval_batch_size, tok, Path(tmp),
                                      dtype=args.dtype, device=args.device)
        methods["lm_eval"] = {"questions": k, "seconds": lm_eval_res["generation_s"],
                              "tokens": lm_eval_res["tokens_in_returned_text"]}

    ratios = {
        "branches_over_greedy": methods["branches"]["seconds"] / methods["greedy_generate"]["seconds"],
        "branches_over_lm_eval_repeats10": (methods["branches_k"]["seconds"] / methods["lm_eval"]["seconds"]
                                            if lm_eval_res else None),
        "features_over_decode": methods["features"]["seconds"] / methods["branches"]["seconds"],
        "continuous_over_greedy": continuous_s / methods["greedy_generate"]["seconds"],
        "continuous_over_lm_eval_repeats10": (continuous_s / methods["lm_eval"]["seconds"]
                                              if lm_eval_res and k == q else None),
        "continuous_over_batch_by_batch": continuous_s / methods["branches"]["seconds"],
    }
    if "reencode" in methods:
        ratios["features_over_reencode"] = methods["features"]["seconds"] / methods["reencode"]["seconds"]
    if "greedy_batched" in methods:
        ratios["branches_over_greedy_batched"] = methods["branches"]["seconds"] / methods["greedy_batched"]["seconds"]
        ratios["continuous_over_greedy_batched"] = continuous_s / methods["greedy_batched"]["seconds"]
    if "greedy_own" in methods:
        ratios["branches_over_own_greedy"] = methods["branches"]["seconds"] / methods["greedy_own"]["seconds"]
        ratios["own_greedy_over_generate_greedy"] = methods["greedy_own"]["seconds"] / methods["greedy_generate"]["seconds"]

    res = {
        "benchmark": "bench_decode",
        "date": started.isoformat(timespec="seconds"),
        "command": shlex.join([sys.executable, *sys.argv]),
        "model": {"gguf": str(gguf), "converted_folder": str(folder), "dtype": str(model.dtype),
                  "layers": model.config.num_hidden_layers, "feature_layer": layer},
        "machine": info,
        "n_questions": q, "n_branches": args.n_branches, "max_new_tokens": max_new, "batch_size": b,
        "task": LOVER_TASK, "stop_strings": until, "bench_task": bench_task,
        "lover_load_s": load_s,
        "methods": methods, "ratios": ratios, "targets": TARGETS, "continuous": continuous_rec,
        "lm_eval": lm_eval_res,
        "per_question": per_q, "per_batch": per_batch,
        "loadavg_end": loadavg(),
        "wall_total_s": (datetime.datetime.now() - started).total_seconds(),
    }
    if args.profile:
        res["profile_q0_tottime"] = profile_one(engine, prompts[0], RunSpec(cfg, until, max_new), template_ids,
                                                layer)
    table = markdown(res)
    res["markdown"] = table
    out = Path(args.output) if args.output else RESULTS / f"decode_{started.date()}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2, default=str))
    out.with_suffix(".md").write_text(f"`{res['command']}`\n\n{table}\n")
    print(table)
    print(f"[bench] wrote {out}")
    return res


if __name__ == "__main__":
    main()
