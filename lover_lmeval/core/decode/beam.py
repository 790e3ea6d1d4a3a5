"""Beam search as an N-branch decoder (`decoding=beam`): the N best beams of `generate`, with the margins, token_stats
and KV caches the other decoders give (features are computed on top of the caches, as for CoT-decoding).

Dimensions: N beams (branches) per question, T generated tokens, P prompt length, V vocabulary.
"""

from __future__ import annotations

import torch
from transformers import StoppingCriteriaList, StopStringCriteria

from .branch import finish_reason_of, make_branch, top1_top2_margin
from .kv import cache_of, extend_with_tokens, input_device, snapshot
from .token_stats import stats_dict, step_stats


def _strip_padding(seq: list[int], eos_ids: set[int], pad_id: int) -> list[int]:
    """`generate` pads finished beams: keep up to and including the first EOS, drop trailing pads."""
    for i, token in enumerate(seq):
        if token in eos_ids:
            return seq[: i + 1]
    while len(seq) > 1 and seq[-1] == pad_id:
        seq = seq[:-1]
    return seq


def iter_beam(model, tokenizer, prompts, config, max_new_tokens, stop, eos_ids, pad_id):
    """Beam search via `generate` (N beams, N returned), then margins, token_stats and caches in one extra pass.

    Beam search reorders its cache internally, so each beam's cache is rebuilt by running its tokens
    on top of the prompt's prefill (the question is still encoded once per prompt, not per beam).
    """
    device, n = input_device(model), config.n_branches
    stop_strings = [s for s in stop if s]
    for q, prompt in enumerate(prompts):
        input_ids = torch.tensor([prompt], device=device)  # (1, P)
        criteria = StoppingCriteriaList([StopStringCriteria(tokenizer, stop_strings)]) if stop_strings else None
        generated = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), num_beams=n,
                                   num_return_sequences=n, do_sample=False, max_new_tokens=max_new_tokens,
                                   stopping_criteria=criteria, pad_token_id=pad_id)[:, len(prompt):]  # (N, T)
        prefill = model(input_ids=input_ids, use_cache=True)
        base = snapshot(cache_of(prefill), 0, len(prompt))
        first_logits = prefill.logits[0, -1].float()  # (V,)
        first_probs = first_logits.softmax(-1)
        row_ids = [_strip_padding(seq, eos_ids, pad_id) for seq in generated.tolist()]
        out, _ = extend_with_tokens(model, [base] * n, row_ids)
        q_branches, q_caches = [], []
        for k, ids in enumerate(row_ids):
            # Token 0 from the prefill's distribution, token j > 0 from position j - 1 of the pass. One beam at a
            # time: the float32 logits, probabilities and statistics' temporaries of one (T, V), not of all N.
            logits = torch.cat([first_logits[None], out.logits[k, : len(ids) - 1].float()])  # (T_k, V)
            probs = torch.cat([first_probs[None], logits[1:].softmax(-1)])
            per_token = torch.cat([top1_top2_margin(probs)[:, None],
                                   step_stats(logits, torch.tensor(ids, device=logits.device), probs=probs)],
                                  dim=-1).tolist()  # (T_k, 5): margin, then the 4 statistics
            margins = [row[0] for row in per_token]
            reason = finish_reason_of(tokenizer, ids, stop, eos_ids, budget=len(ids))
            q_branches.append(make_branch(tokenizer, ids, margins, stop, reason,
                                          stats_dict([row[1:] for row in per_token])))
            q_caches.append(snapshot(cache_of(out), k, len(prompt), end=base.length + len(ids)))
        yield q, q_branches, q_caches
