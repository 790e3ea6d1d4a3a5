"""Plain vLLM on lover_gsm8k's prompts: the engine's ceiling for N branches a question, before `lover_vllm` exists.

One engine, three ways of getting the branches, each timed alone: `sample` (n=N, temperature/top-p: the tokens a
sampled run decodes), `cot` (CoT-decoding as `lover_vllm` will ask for it: one 1-token request with the first step's
top-N logprobs, then N greedy continuations of prompt + token k, prefix caching on) and `greedy` (one branch). Then,
with the engine still holding its memory, the project's own teacher-forced pass (`features_from_tokens`, an HF copy
of the same weights) over the `cot` branches of the first `--features-questions` questions: the features and token
statistics a `lover_vllm` run must compute after decoding, its cost, and whether it fits beside the engine.

Writes a JSON of the rows (seconds, generated tokens, tokens/s, questions/s, GPU memory in use, finish reasons) and
the `cot` branches (token ids) for a later agreement reading against `lover_hf`'s bank of the same questions.

    python -m benchmarks.performance.vllm_ceiling --model-dir FOLDER --questions 400 --out O/vllm_ceiling.json
    python -m benchmarks.performance.vllm_ceiling --smoke TOKENIZER_DIR --out O/smoke.json   # a tiny random model

Dimensions: Q questions, N branches.
"""

from __future__ import annotations

import argparse
import gzip
import json
import time
from collections import Counter
from pathlib import Path

UNTIL = ["Question:", "</s>", "<|im_end|>", "<|endoftext|>"]  # task_configs/_lover_base.yaml's stop strings


def gpu_used_gib() -> float | None:
    """Memory in use on the card by every process (the engine runs in its own), in GiB; None without a GPU."""
    import torch

    if not torch.cuda.is_available():
        return None
    free, total = torch.cuda.mem_get_info()
    return round((total - free) / 2**30, 2)


def prompts_of(tokenizer, n: int) -> list[list[int]]:
    """lover_gsm8k's first `n` test prompts, chat-templated as `lm_eval --apply_chat_template` sends them."""
    from lm_eval.tasks import TaskManager

    task = TaskManager().load(["lover_gsm8k"])["tasks"]["lover_gsm8k"]
    docs = list(task.test_docs())[:n]
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": task.doc_to_text(d)}], tokenize=False,
                                           add_generation_prompt=True) for d in docs]
    return [tokenizer(t, add_special_tokens=False).input_ids for t in texts]


def row(name: str, seconds: float, outputs, n_questions: int) -> dict:
    """One timed way of decoding: its outputs are vLLM RequestOutputs (any n)."""
    completions = [c for o in outputs for c in o.outputs]
    tokens = sum(len(c.token_ids) for c in completions)
    return {"row": name, "seconds": round(seconds, 2), "questions": n_questions, "branches": len(completions),
            "generated_tokens": tokens, "tokens_per_s": round(tokens / seconds, 1),
            "questions_per_s": round(n_questions / seconds, 3), "gpu_used_gib": gpu_used_gib(),
            "finish": dict(Counter(str(c.finish_reason) for c in completions))}


def cot_decode(llm, prompts: list[list[int]], n: int, max_tokens: int):
    """CoT-decoding in two requests: the first step's top-n tokens (one 1-token request each question), then n greedy
    continuations of prompt + token k. Returns ((Q, N) first tokens, the Q*N continuation outputs, seconds)."""
    from vllm import SamplingParams, TokensPrompt

    began = time.perf_counter()
    first = llm.generate([TokensPrompt(prompt_token_ids=p) for p in prompts],
                         SamplingParams(max_tokens=1, temperature=0.0, logprobs=n), use_tqdm=False)
    tops = []
    for out in first:
        ranked = sorted(out.outputs[0].logprobs[0].items(), key=lambda kv: -kv[1].logprob)
        tops.append([token for token, _ in ranked[:n]])  # (Q, N)
    rest = [TokensPrompt(prompt_token_ids=p + [t]) for p, ts in zip(prompts, tops) for t in ts]
    greedy = SamplingParams(max_tokens=max_tokens - 1, temperature=0.0, stop=UNTIL)
    outputs = llm.generate(rest, greedy, use_tqdm=False)
    return tops, outputs, time.perf_counter() - began


def features_pass(model_dir: str, tokenizer, prompts, tops, outputs, n: int, questions: int) -> dict:
    """The project's teacher-forced pass (features at the middle layer and every token statistic) over the `cot`
    branches of the first `questions` questions, on an HF copy of the weights beside the engine."""
    import torch
    from transformers import AutoModelForCausalLM

    from lover_lmeval.core.decode.branch import make_branch
    from lover_lmeval.core.decode.features import FALSE_TEMPLATE, TRUE_TEMPLATE, check_layer, features_from_tokens

    gpu = torch.cuda.is_available()
    began = time.perf_counter()
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.bfloat16).to("cuda" if gpu else "cpu").eval()
    loaded = time.perf_counter() - began
    layer = check_layer(None, model.config.num_hidden_layers)
    templates = [tokenizer(t, add_special_tokens=False).input_ids for t in (TRUE_TEMPLATE, FALSE_TEMPLATE)]
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    sync()
    began = time.perf_counter()
    for q in range(questions):
        branches = []
        for k in range(n):
            done = outputs[q * n + k].outputs[0]
            ids = [tops[q][k], *done.token_ids]
            branches.append(make_branch(tokenizer, ids, [0.0] * len(ids), UNTIL, "length"))
        features_from_tokens(model, prompts[q], branches, templates, layer, stats=True)
    sync()
    seconds = time.perf_counter() - began
    return {"row": "features pass (HF bf16 beside the engine)", "questions": questions, "load_s": round(loaded, 2),
            "seconds": round(seconds, 2), "questions_per_s": round(questions / seconds, 3),
            "gpu_used_gib": gpu_used_gib(),
            "hf_peak_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2) if gpu else None}


def smoke_model(tokenizer_dir: str, where: Path) -> str:
    """A tiny random Qwen2 with the real tokenizer: checks the engine and this script start, in seconds."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    config = Qwen2Config(vocab_size=151936, hidden_size=256, intermediate_size=512, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         tie_word_embeddings=True)
    torch.manual_seed(0)
    Qwen2ForCausalLM(config).to(torch.bfloat16).save_pretrained(where)
    AutoTokenizer.from_pretrained(tokenizer_dir).save_pretrained(where)
    return str(where)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", help="an HF folder (the project's converted GGUF)")
    parser.add_argument("--smoke", metavar="TOKENIZER_DIR", help="a tiny random model with this tokenizer instead")
    parser.add_argument("--questions", type=int, default=400)
    parser.add_argument("--features-questions", type=int, default=100)
    parser.add_argument("--n", type=int, default=10, help="branches a question (N)")
    parser.add_argument("--max-tokens", type=int, default=256)
    parser.add_argument("--gpu-memory-utilization", type=float, default=0.6)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    from transformers import AutoTokenizer
    from vllm import LLM, SamplingParams, TokensPrompt

    out = Path(args.out)
    model_dir = smoke_model(args.smoke, out.parent / "smoke_model") if args.smoke else args.model_dir
    questions = 4 if args.smoke else args.questions
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompts = prompts_of(tokenizer, questions)
    report = {"model_dir": model_dir, "n": args.n, "max_tokens": args.max_tokens, "rows": []}
    began = time.perf_counter()
    # gpu_memory_utilization leaves the card room for the HF copy of the features pass; on vLLM's CPU backend (a dry
    # run of this script) it is a share of RAM
    llm = LLM(model=model_dir, dtype="bfloat16", seed=0, max_model_len=2048, enable_prefix_caching=True,
              gpu_memory_utilization=args.gpu_memory_utilization, enforce_eager=bool(args.smoke))
    report["engine_start_s"] = round(time.perf_counter() - began, 2)
    report["engine_gpu_used_gib"] = gpu_used_gib()
    print(json.dumps(report), flush=True)
    token_prompts = [TokensPrompt(prompt_token_ids=p) for p in prompts]
    llm.generate(token_prompts[:2], SamplingParams(max_tokens=8), use_tqdm=False)  # warm-up, untimed

    def timed(name, params):
        began = time.perf_counter()
        outputs = llm.generate(token_prompts, params, use_tqdm=False)
        report["rows"].append(row(name, time.perf_counter() - began, outputs, questions))
        print(json.dumps(report["rows"][-1]), flush=True)

    timed("sample n=N T=0.7 top_p=0.95", SamplingParams(n=args.n, temperature=0.7, top_p=0.95, seed=0,
                                                         max_tokens=args.max_tokens, stop=UNTIL))
    tops, outputs, seconds = cot_decode(llm, prompts, args.n, args.max_tokens)
    report["rows"].append({**row("cot (top-N first tokens, then greedy)", seconds, outputs, questions),
                           "generated_tokens_with_first": sum(len(o.outputs[0].token_ids) + 1 for o in outputs)})
    print(json.dumps(report["rows"][-1]), flush=True)
    timed("greedy (one branch)", SamplingParams(temperature=0.0, max_tokens=args.max_tokens, stop=UNTIL))
    branches = [[[tops[q][k], *outputs[q * args.n + k].outputs[0].token_ids] for k in range(args.n)]
                for q in range(questions)]  # (Q, N) token lists
    with gzip.open(out.with_suffix(".cot_branches.json.gz"), "wt") as f:
        json.dump({"prompts": prompts, "branches": branches}, f)
    features_q = min(args.features_questions, questions)
    report["rows"].append(features_pass(model_dir, tokenizer, prompts, tops, outputs, args.n, features_q))
    print(json.dumps(report["rows"][-1]), flush=True)
    out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":  # vLLM's engine runs in a spawned process, which re-imports this file
    main()
