#!/usr/bin/env python
"""Where HFEngine.decode / assertion_features spend their time (evidence for
benchmarks/runs/perf1_one_question_per_batch.md).

On one GSM8K question (lover_gsm8k prompt and stop strings) with a short budget, this
  1. cProfiles HFEngine.decode (N branches) and prints the top functions by own time;
  2. times HFEngine.decode(n_branches=1) against model.generate(do_sample=False, stop_strings=...)
     (our loop's per-token overhead over HF's);
  3. times assertion_features as it is (all L layers + LM head over every template token) against the
     same computation stopped right after the block whose output is the feature layer (a forward hook
     raising an exception: the upper blocks and the LM head are skipped), and checks both give the same
     features;
  4. times the prefill with and without logits for every prompt position (`logits_to_keep=1`).

    .venv/bin/python -m benchmarks.performance.profile_decode --max-new-tokens 64 --threads 1
"""

from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import time

from benchmarks.bench_common import REPO, model_file
from benchmarks.performance import bench_decode as bd


class _Stop(Exception):
    pass


def features_early_exit(model, branches, caches, template_ids, layer, rows_per_pass=16):
    """assertion_features, but the forward stops after the block producing hidden_states[layer]."""
    import torch

    from lover_lmeval.core.decode.kv import BranchCache, extend_with_tokens

    def prefix(cache, keep):  # the cache's first `keep` positions, where assertion_features starts each template
        return BranchCache(cache.prompt_length, [k[:, :keep] for k in cache.keys], [v[:, :keep] for v in cache.values])

    jobs = []
    for branch, cache in zip(branches, caches):
        in_cache = cache.length - cache.prompt_length
        base = prefix(cache, cache.prompt_length + min(len(branch.token_ids), in_cache))
        for ids in template_ids:
            jobs.append((base, branch.token_ids[in_cache:] + ids))
    captured = {}

    def hook(_module, _args, output):
        captured["h"] = output[0] if isinstance(output, tuple) else output
        raise _Stop

    block = model.model.layers[layer - 1]  # hidden_states[layer] is the output of block layer-1
    hidden = []
    with torch.inference_mode():
        for start in range(0, len(jobs), rows_per_pass):
            chunk = jobs[start: start + rows_per_pass]
            handle = block.register_forward_hook(hook)
            try:
                extend_with_tokens(model, [c for c, _ in chunk], [t for _, t in chunk])
            except _Stop:
                pass
            finally:
                handle.remove()
            last = torch.tensor([len(t) - 1 for _, t in chunk])
            hidden.append(captured["h"][torch.arange(len(chunk)), last].float().cpu())
    return torch.cat(hidden).reshape(len(branches), len(template_ids), -1)


def best_of(reps, fn, *a, **k):
    times, out = [], None
    for _ in range(reps):
        t0 = time.perf_counter()
        out = fn(*a, **k)
        times.append(time.perf_counter() - t0)
    return out, min(times), times


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--question", type=int, default=0)
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--n-branches", type=int, default=10)
    p.add_argument("--threads", type=int, default=None)
    p.add_argument("--reps", type=int, default=3)
    args = p.parse_args()
    bd.setup_env(args.threads)
    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs

    from lover_lmeval.core.decode.decoding import DecodingConfig
    from lover_lmeval.core.decode.engine import HFEngine, RunSpec, decode_all
    from lover_lmeval.core.decode.features import assertion_features
    from lover_lmeval.harness.model import LoverLM

    print("loadavg", bd.loadavg(), "threads", torch.get_num_threads())
    lm = LoverLM(gguf_file=model_file(bd.MODEL_NAME), n_branches=args.n_branches, verifier=None)
    model, tok = lm.model, lm.tokenizer
    contexts, gen_kwargs, _, _ = bd.task_requests(bd.LOVER_TASK, REPO / "task_configs", args.question + 1)
    kwargs = normalize_gen_kwargs(dict(gen_kwargs), lm.max_gen_toks)
    until = handle_stop_sequences(kwargs.pop("until", None), eos=lm.tok_decode(lm.eot_token_id, skip_special_tokens=False))
    prompt = lm._prompt_ids(contexts[args.question], lm.max_length - args.max_new_tokens)
    pad_id = tok.pad_token_id if tok.pad_token_id is not None else lm.eot_token_id
    eos, stops, n = lm.pipeline.eos_ids(), [s for s in until if s], args.max_new_tokens
    engine, cfg = HFEngine(model, tok), DecodingConfig(n_branches=args.n_branches)  # EOS: lm.pipeline.eos_ids()
    decode_all(engine, [prompt], RunSpec(cfg, until, 2))  # warm-up

    # 1. profile of the N-branch decode
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    branches, caches = decode_all(engine, [prompt], RunSpec(cfg, until, n))
    prof.disable()
    wall = time.perf_counter() - t0
    branches, caches = branches[0], caches[0]
    steps = [c.length - c.prompt_length + 1 for c in caches]
    print(f"\n## HFEngine.decode N={args.n_branches}, {n} tokens max: {wall:.1f}s, steps per branch {steps}")
    buf = io.StringIO()
    pstats.Stats(prof, stream=buf).sort_stats("tottime").print_stats(18)
    print(buf.getvalue())

    # 2. our greedy loop vs generate
    ids = torch.tensor([prompt])
    gen_kw = dict(attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=n, stop_strings=stops,
                  tokenizer=tok, pad_token_id=pad_id, eos_token_id=sorted(eos), temperature=None, top_p=None, top_k=None)
    with torch.inference_mode():
        model.generate(ids, **{**gen_kw, "max_new_tokens": 2})
        out, t_gen, all_gen = best_of(args.reps, model.generate, ids, **gen_kw)
    (b1, c1), t_own, all_own = best_of(args.reps, decode_all, engine, [prompt],
                                       RunSpec(DecodingConfig(n_branches=1), until, n))
    g_tok, o_tok = out.shape[1] - len(prompt), c1[0][0].length - c1[0][0].prompt_length + 1
    print(f"## greedy, best of {args.reps}: generate {t_gen:.2f}s for {g_tok} tok ({t_gen / g_tok * 1e3:.0f} ms/tok)"
          f" {[round(t, 2) for t in all_gen]} | HFEngine.decode(n=1) {t_own:.2f}s for {o_tok} tok "
          f"({t_own / o_tok * 1e3:.0f} ms/tok) {[round(t, 2) for t in all_own]}")

    # 3. features: full forward vs early exit at the feature layer
    f_full, t_full, all_full = best_of(args.reps, assertion_features, model, branches, caches, lm.pipeline.template_ids, lm.pipeline.layer)
    f_fast, t_fast, all_fast = best_of(args.reps, features_early_exit, model, branches, caches, lm.pipeline.template_ids, lm.pipeline.layer)
    print(f"## assertion_features, best of {args.reps}: as is {t_full:.2f}s {[round(t, 2) for t in all_full]} | "
          f"stopped after block {lm.pipeline.layer - 1} of {model.config.num_hidden_layers} (no upper blocks, no LM head) "
          f"{t_fast:.2f}s {[round(t, 2) for t in all_fast]} | speed-up {t_full / t_fast:.2f}x | "
          f"max |diff| {float((f_full - f_fast).abs().max()):.1e}")

    # 4. prefill logits
    with torch.inference_mode():
        _, t_all, _ = best_of(args.reps, model, input_ids=ids, use_cache=True)
        _, t_one, _ = best_of(args.reps, model, input_ids=ids, use_cache=True, logits_to_keep=1)
    print(f"## prefill of {len(prompt)} tokens, best of {args.reps}: logits at every position {t_all:.2f}s | "
          f"logits_to_keep=1 {t_one:.2f}s")
    print("loadavg", bd.loadavg())


if __name__ == "__main__":
    main()
