"""`lover_vllm`'s engine: the N branches from vLLM, by the same definitions as the HF engine's.

- `cot`: one 1-token greedy request per question with the first step's top-N log-probabilities, then N greedy
  continuations of prompt + token k (vLLM's prefix caching shares the prompt's KV cache among them);
- `sample`: one request with n = N, the temperature and top-p, seeded per question (`question_seed`: the HF
  engine's seed), so that a rerun gives the same branches;
- `beam`: refused by name (the HF engine's `decoding=beam`).

Questions go to vLLM in chunks (`chunk_questions` per call) and come back chunk by chunk, so the pipeline banks each
chunk's questions as it returns and a kill loses at most the chunk in flight. A chunk holds enough sequences to keep
the engine's batch full for most of its time (`chunk_size`: CHUNK_BATCHES times max_num_seqs, vLLM's running batch);
each chunk still ends on its longest branch with the batch draining, the price of a bank that grows as vLLM decodes.

vLLM's stop strings and end tokens stop a request early; the host then scans each branch's tokens one by one as the HF
engine does (`finish_reason_of`, the first end ends the branch), so a branch is cut where lover_hf would cut the same
tokens, a stop string reaching into the first token included. vLLM keeps no full distribution, so its branches come
without margins or statistics: the pipeline computes both, with the features, in one teacher-forced pass of the HF
copy of the same weights (Pipeline._complete), and every row means the same whichever engine decoded.

Dimensions: Q questions, N branches per question.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator

from ...core.decode.branch import Branch, finish_reason_of, make_branch
from ...core.decode.engine import Decoded, RunSpec
from ...core.decode.sampling import question_seed

from ...log import log

#: why lover_vllm has no beams, said by `parse_vllm_args` before anything loads and by the engine if driven directly
BEAM_REFUSAL = ("decoding=beam is lover_hf's (beam search through transformers' generate); lover_vllm decodes cot or "
                "sample: use --model lover_hf for beams.")


#: A chunk's sequences (questions x N) in multiples of the engine's running batch (max_num_seqs): at 4, the batch is
#: full for most of a chunk, and the drain at its end, when fewer sequences than a batch remain, is a small share of it.
CHUNK_BATCHES = 4
#: vLLM's running batch (max_num_seqs) where neither model_args nor the engine say: its default on GPUs
MAX_NUM_SEQS = 256


def chunk_size(max_num_seqs: int, n_branches: int) -> int:
    """Questions per vLLM call: CHUNK_BATCHES running batches of N branches each (vLLM's GPU default, 256 sequences
    a batch, and N = 10: 103 questions a chunk)."""
    return max(1, math.ceil(CHUNK_BATCHES * max_num_seqs / n_branches))


def running_batch(llm, vllm_args: dict) -> int:
    """vLLM's running batch (max_num_seqs): as the started engine `llm` reports it, else model_args', else vLLM's
    default on GPUs (MAX_NUM_SEQS)."""
    engine = getattr(llm, "llm_engine", None)
    scheduler = getattr(getattr(engine, "vllm_config", None), "scheduler_config", None)
    return int(getattr(scheduler, "max_num_seqs", None) or vllm_args.get("max_num_seqs") or MAX_NUM_SEQS)


def shut_down(engine, llm) -> None:
    """vLLM stopped now: `engine`'s data-parallel replicas (a `ReplicaEngine`), `llm`'s engine process (an `LLM`,
    or None); their processes exit, their memory with them."""
    if hasattr(engine, "shutdown"):
        engine.shutdown()
    core = getattr(getattr(llm, "llm_engine", None), "engine_core", None)
    if core is not None:
        core.shutdown()


def cut(tokenizer, ids: list[int], stop: list[str], eos_ids: set[int], budget: int) -> Branch:
    """The branch these decoded tokens make: scanned one by one as the HF engine's rows take them (`Row.take_pending`),
    ended at the first stop string, end token or the budget; no margins or statistics yet (the pipeline's pass). One
    list grows as the row's does: a copy of every prefix (ids[:end]) made the scan quadratic in the branch's length."""
    grown: list[int] = []
    for token in ids:
        grown.append(token)
        reason = finish_reason_of(tokenizer, grown, stop, eos_ids, budget)
        if reason is not None:
            return make_branch(tokenizer, grown, [], stop, reason)
    # vLLM stopped where the scan finds no end (its context window, max_model_len): cut by the engine's limit
    return make_branch(tokenizer, ids, [], stop, "length")


class VLLMEngine:
    """Decodes through `generate(prompts, params) -> outputs` (lm-eval's `VLLM._model_generate`: one engine, or its
    data-parallel replicas), with `tokenizer` and the end tokens `eos_ids` of the HF engine, `chunk_questions`
    questions a call (None: all of them in one). `name` goes into the bank keys: "vllm", plus the model changes it
    decodes with (settings.model_changes)."""

    NAME = "vllm"

    def __init__(self, generate: Callable, tokenizer, eos_ids: set[int], chunk_questions: int | None = None,
                 name: str = NAME):
        self.generate, self.tokenizer, self.eos_ids = generate, tokenizer, eos_ids
        self.chunk_questions, self.name = chunk_questions, name

    def with_generate(self, generate: Callable) -> VLLMEngine:
        """The same engine decoding through another `generate` (a replica's own vLLM)."""
        return VLLMEngine(generate, self.tokenizer, self.eos_ids, self.chunk_questions, self.name)

    def decode(self, prompts: list[list[int]], spec: RunSpec) -> Iterator[Decoded]:
        """Each question's N branches, chunk by chunk: a chunk's questions are handed over once vLLM returns it."""
        step = self.chunk_questions or max(len(prompts), 1)
        for start in range(0, len(prompts), step):
            began, chunk = time.perf_counter(), list(self.decode_chunk(prompts[start:start + step], spec))
            seconds, tokens = time.perf_counter() - began, sum(len(b.token_ids) for d in chunk for b in d.branches)
            log.info("lover_vllm: vLLM decoded questions %d-%d of %d: %d kept tokens in %.1f s, %.0f tokens/s",
                     start + 1, start + len(chunk), len(prompts), tokens, seconds, tokens / max(seconds, 1e-9))
            for decoded in chunk:
                yield decoded._replace(q=start + decoded.q)

    def decode_chunk(self, prompts: list[list[int]], spec: RunSpec) -> Iterator[Decoded]:
        """One vLLM call's questions (two calls for cot: the first tokens, then the continuations)."""
        from vllm import SamplingParams  # lazy: the core and lover_hf never need vLLM

        config, stop, budget = spec.decoding, list(spec.until), spec.max_gen_toks
        if config.mode == "beam":  # parse_vllm_args refuses it first; this engine is also driven directly
            raise ValueError(BEAM_REFUSAL)
        ends = dict(stop=stop, stop_token_ids=sorted(self.eos_ids))
        if config.mode == "sample":
            params = [SamplingParams(n=config.n_branches, temperature=config.temperature, top_p=config.top_p,
                                     seed=question_seed(config.seed, p), max_tokens=budget, **ends) for p in prompts]
            outputs = self.generate(prompts, params)
            for q, output in enumerate(outputs):
                ids = [list(c.token_ids) for c in sorted(output.outputs, key=lambda c: c.index)]
                yield Decoded(q, [cut(self.tokenizer, branch, stop, self.eos_ids, budget) for branch in ids])
            return
        firsts = self.first_tokens(prompts, config.n_branches)  # (Q, N)
        # A first token that already ends its branch (an end token, a stop string) needs no continuation.
        ongoing = [(q, k) for q, tokens in enumerate(firsts) for k, token in enumerate(tokens)
                   if budget > 1 and finish_reason_of(self.tokenizer, [token], stop, self.eos_ids, budget) is None]
        greedy = SamplingParams(temperature=0.0, max_tokens=budget - 1, **ends)
        continued = self.generate([prompts[q] + [firsts[q][k]] for q, k in ongoing], [greedy] * len(ongoing))
        rest = {row: list(out.outputs[0].token_ids) for row, out in zip(ongoing, continued)}
        for q, tokens in enumerate(firsts):
            yield Decoded(q, [cut(self.tokenizer, [token, *rest.get((q, k), [])], stop, self.eos_ids, budget)
                              for k, token in enumerate(tokens)])

    def first_tokens(self, prompts: list[list[int]], n: int) -> list[list[int]]:
        """Per prompt, the N likeliest first tokens, likeliest first (CoT-decoding's branch starts)."""
        from vllm import SamplingParams

        outputs = self.generate(prompts, [SamplingParams(max_tokens=1, temperature=0.0, logprobs=n)] * len(prompts))
        firsts = []
        for output in outputs:
            ranked = sorted(output.outputs[0].logprobs[0].items(), key=lambda item: (-item[1].logprob, item[0]))
            if len(ranked) < n:
                raise ValueError(f"vLLM returned {len(ranked)} first-step candidates for n_branches={n}; raise vLLM's "
                                 "max_logprobs (model_args max_logprobs=...) to at least n_branches.")
            firsts.append([token for token, _ in ranked[:n]])
        return firsts
