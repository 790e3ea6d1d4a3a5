"""N-branch decoding on a tiny random llama with a real tokenizer."""

from __future__ import annotations

import pytest
import torch

from lover_lmeval.core.decoding import DecodingConfig, decode_branches

PROMPTS = ["Question: Tom has 3 apples and buys 4 more. How many apples?\nAnswer:", "Hi"]


def _decode(model, tokenizer, mode="cot", n=4, max_new=12, stop=(), eos=None, prompts=PROMPTS, on_question=None,
            **kw):
    ids = [tokenizer.encode(p) for p in prompts]
    eos_ids = {tokenizer.eos_token_id} if eos is None else eos
    return decode_branches(model, tokenizer, ids, DecodingConfig(n_branches=n, mode=mode, **kw), max_new,
                           list(stop), eos_ids, tokenizer.pad_token_id, on_question=on_question)


def _greedy(model, tokenizer, prompt, max_new):
    ids = torch.tensor([tokenizer.encode(prompt)])
    out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_new,
                         pad_token_id=tokenizer.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


def test_branch_zero_is_greedy_generate_even_when_batched_with_left_padding(tiny_model, tokenizer):
    branches, _ = _decode(tiny_model, tokenizer, max_new=12)
    for prompt, q_branches in zip(PROMPTS, branches):
        assert q_branches[0].token_ids == _greedy(tiny_model, tokenizer, prompt, 12)
        assert q_branches[0].finish_reason == "length"


def test_cot_branches_start_with_the_top_n_first_tokens_in_order(tiny_model, tokenizer):
    branches, _ = _decode(tiny_model, tokenizer, n=5, max_new=3)
    for prompt, q_branches in zip(PROMPTS, branches):
        logits = tiny_model(torch.tensor([tokenizer.encode(prompt)])).logits[0, -1]
        assert [b.token_ids[0] for b in q_branches] == logits.topk(5).indices.tolist()
        assert len({b.token_ids[0] for b in q_branches}) == 5


def test_stop_string_cuts_text_and_ends_only_that_branch(tiny_model, tokenizer):
    free, _ = _decode(tiny_model, tokenizer, n=3, max_new=16, prompts=PROMPTS[:1])
    greedy_text = free[0][0].text
    stop = greedy_text[len(greedy_text) // 2: len(greedy_text) // 2 + 3]
    assert stop.strip(), "pick a non-blank stop string"
    stopped, _ = _decode(tiny_model, tokenizer, n=3, max_new=16, stop=[stop], prompts=PROMPTS[:1])
    branch = stopped[0][0]
    assert branch.finish_reason == "stop"
    assert branch.text == greedy_text[: greedy_text.index(stop)]
    assert stop not in branch.text
    assert all(stop not in other.text for other in stopped[0][1:])


def test_eos_ends_a_branch_and_is_not_kept(tiny_model, tokenizer):
    free, _ = _decode(tiny_model, tokenizer, n=2, max_new=8, prompts=PROMPTS[:1])
    fourth = free[0][0].token_ids[3]
    ended, _ = _decode(tiny_model, tokenizer, n=2, max_new=8, eos={fourth}, prompts=PROMPTS[:1])
    assert ended[0][0].finish_reason == "eos"
    assert ended[0][0].token_ids == free[0][0].token_ids[:3]


def test_offsets_tile_the_text_and_margins_are_probability_gaps(tiny_model, tokenizer):
    branches, _ = _decode(tiny_model, tokenizer, n=3, max_new=10)
    for branch in (b for q in branches for b in q):
        assert len(branch.offsets) == len(branch.token_ids) == len(branch.margins)
        assert "".join(branch.text[s:e] for s, e in branch.offsets) == branch.text
        assert all(0.0 <= m <= 1.0 for m in branch.margins)


def test_sampling_is_seeded(tiny_model, tokenizer):
    first, _ = _decode(tiny_model, tokenizer, mode="sample", n=3, max_new=6, seed=7, temperature=1.5)
    again, _ = _decode(tiny_model, tokenizer, mode="sample", n=3, max_new=6, seed=7, temperature=1.5)
    other, _ = _decode(tiny_model, tokenizer, mode="sample", n=3, max_new=6, seed=8, temperature=1.5)
    ids = lambda bs: [b.token_ids for q in bs for b in q]  # noqa: E731
    assert ids(first) == ids(again)
    assert ids(first) != ids(other)


def test_beam_returns_n_beams_best_first(tiny_model, tokenizer):
    branches, caches = _decode(tiny_model, tokenizer, mode="beam", n=3, max_new=6, prompts=PROMPTS[:1])
    ids = torch.tensor([tokenizer.encode(PROMPTS[0])])
    best = tiny_model.generate(ids, attention_mask=torch.ones_like(ids), num_beams=3, do_sample=False,
                               max_new_tokens=6, pad_token_id=tokenizer.pad_token_id)[0, ids.shape[1]:]
    assert len(branches[0]) == len(caches[0]) == 3
    assert branches[0][0].token_ids == best.tolist()


@pytest.mark.parametrize("kwargs, message", [
    ({"mode": "nucleus"}, "decoding='nucleus'"),
    ({"n_branches": 0}, "n_branches=0"),
    ({"mode": "sample", "temperature": 0}, "temperature=0"),
])
def test_bad_decoding_config_names_the_value(kwargs, message):
    with pytest.raises(ValueError, match=message):
        DecodingConfig(**kwargs)


def test_each_question_is_handed_over_as_soon_as_its_own_branches_end(tiny_model, tokenizer):
    """The bank writes a question from `on_question`: question 1's two branches end at once (their first tokens
    count as EOS here) and are handed over after the prefill alone, while question 0 still decodes to its budget
    of 12 tokens (1 prefill + 11 steps), not at the end of the batch."""
    firsts = [tiny_model(torch.tensor([tokenizer.encode(p)])).logits[0, -1].topk(2).indices.tolist() for p in PROMPTS]
    assert not set(firsts[0]) & set(firsts[1]), "the test needs disjoint first tokens"
    forwards, handed = [], []
    hook = tiny_model.register_forward_hook(lambda *args: forwards.append(1))
    try:
        branches, _ = _decode(tiny_model, tokenizer, n=2, max_new=12, eos=set(firsts[1]),
                              on_question=lambda q, b: handed.append((q, len(forwards), b)))
    finally:
        hook.remove()
    assert [(q, count) for q, count, _ in handed] == [(1, 1), (0, 12)]
    assert [b for _, _, b in sorted(handed, key=lambda h: h[0])] == branches
