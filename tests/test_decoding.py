"""N-branch decoding on a tiny random llama with a real tokenizer."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from float_bounds import feature_tolerance, statistics_tolerance
from lover_lmeval.core.decode.decoding import BatchingConfig, DecodingConfig
from lover_lmeval.core.decode.engine import HFEngine, RunSpec, decode_all
from lover_lmeval.core.decode.token_stats import STAT_NAMES

PROMPTS = ["Question: Tom has 3 apples and buys 4 more. How many apples?\nAnswer:", "Hi"]


def _engine(model, tokenizer, eos=None, **batching):
    """The HF engine, ending branches at `eos` (default the tokenizer's EOS alone), rows run as `batching` says."""
    return HFEngine(model, tokenizer, BatchingConfig(**batching), eos={tokenizer.eos_token_id} if eos is None else eos)


def _decode(model, tokenizer, mode="cot", n=4, max_new=12, stop=(), eos=None, prompts=PROMPTS, max_rows=None,
            sync_every=BatchingConfig.sync_every, static_cache=False, columns=None, **kw):
    ids = [tokenizer.encode(p) for p in prompts]
    engine = _engine(model, tokenizer, eos, sync_every=sync_every, static_cache=static_cache, columns=columns)
    return decode_all(engine, ids, RunSpec(DecodingConfig(n_branches=n, mode=mode, **kw), stop, max_new, max_rows))


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


@pytest.mark.parametrize("mode", ["cot", "sample", "beam"])
def test_offsets_tile_the_text_and_margins_are_probability_gaps(tiny_model, tokenizer, mode):
    """Every kept token (a stop string cuts some branches) has an offset, a margin in [0, 1] and its 4 token_stats:
    log-probs <= 0, an entropy in [0, ln V], KL(U || p) >= 0 (their values against the model: test_features.py), each
    bound up to the float32 error float_bounds gives these statistics."""
    branches, _ = _decode(tiny_model, tokenizer, mode, n=3, max_new=10, stop=["e"])
    assert "stop" in {b.finish_reason for q in branches for b in q}
    ln_v = math.log(len(tokenizer))
    slack = statistics_tolerance(tiny_model, [tokenizer.encode(p) + b.token_ids for p, q in zip(PROMPTS, branches)
                                              for b in q])
    for branch in (b for q in branches for b in q):
        assert len(branch.offsets) == len(branch.token_ids) == len(branch.margins)
        assert "".join(branch.text[s:e] for s, e in branch.offsets) == branch.text
        assert all(0.0 <= m <= 1.0 for m in branch.margins)
        assert list(branch.stats) == list(STAT_NAMES)
        assert all(len(values) == len(branch.token_ids) for values in branch.stats.values())
        assert all(lp <= 0 and tk <= 0 for lp, tk in zip(branch.stats["logprob"], branch.stats["topk_logprob"]))
        assert all(-slack <= h <= ln_v + slack for h in branch.stats["entropy"])
        assert all(kl >= -slack for kl in branch.stats["kl_uniform"])


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
    """The bank writes a question when `HFEngine.decode` yields it: question 1's two branches end at once (their first
    tokens count as EOS here) and are handed over after the prefill alone, while question 0 still decodes to its
    budget of 12 tokens (1 prefill + 11 steps), not at the end of the batch."""
    firsts = [tiny_model(torch.tensor([tokenizer.encode(p)])).logits[0, -1].topk(2).indices.tolist() for p in PROMPTS]
    assert not set(firsts[0]) & set(firsts[1]), "the test needs disjoint first tokens"
    forwards, handed = [], []
    hook = tiny_model.register_forward_hook(lambda *args: forwards.append(1))
    try:
        for decoded in _engine(tiny_model, tokenizer, set(firsts[1])).decode(
                [tokenizer.encode(p) for p in PROMPTS], RunSpec(DecodingConfig(n_branches=2), (), 12)):
            handed.append((decoded.q, len(forwards), decoded.branches))
    finally:
        hook.remove()
    branches, _ = _decode(tiny_model, tokenizer, n=2, max_new=12, eos=set(firsts[1]))
    assert [(q, count) for q, count, _ in handed] == [(1, 1), (0, 12)]
    assert [b for _, _, b in sorted(handed, key=lambda h: h[0])] == branches


QUESTIONS = [f"Question: {name} has {a} apples and buys {b} more. How many apples?\nAnswer:"
             for name, a, b in [("Tom", 3, 4), ("Ann", 12, 9), ("Bo", 1, 1), ("Eve", 250, 37), ("Li", 8, 80)]]


def _alone(model, tokenizer, mode, max_new, eos, **kw):
    """One question per call: every branch decoded with nothing else in its batch."""
    return [_decode(model, tokenizer, mode, n=3, max_new=max_new, eos=eos, prompts=[q], **kw)[0][0]
            for q in QUESTIONS]


@pytest.fixture(scope="module")
def smollm2_model(smollm2_dir):
    from transformers import AutoModelForCausalLM

    return AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()


@pytest.mark.parametrize("mode, kw", [("cot", {}), pytest.param("sample", {"seed": 5, "temperature": 0.7, "top_p": 0.95},
                                                                  marks=pytest.mark.slow)])  # the real SmolLM2
def test_continuous_batching_gives_the_branches_of_each_question_decoded_alone(request, tokenizer, mode, kw):
    """Five questions of 3 branches through 3, 6 or 7 rows, or all 15 at once: questions join as others end (two
    tokens taken as EOS end branches at different steps). Every branch is token-identical to decoding its question
    alone, for `cot` and for `sample` (each question draws from its own generator, `question_seed`).

    Which rows share a step moves float rounding in the logits (1e-6 here); argmax never notices, but a sampled
    draw that lands within that rounding of a bucket edge of the cumulative distribution would. Over the random
    tiny model's nearly flat 49k-token distribution such draws are common, so `sample` runs on the real SmolLM2
    (peaked distributions, as users' models give) at the default temperature and top-p; its sampled branches still
    differ from each other and from greedy."""
    model = request.getfixturevalue("tiny_model" if mode == "cot" else "smollm2_model")
    free = _alone(model, tokenizer, mode, 14, set(), **kw)
    eos = {free[0][1].token_ids[4], free[3][0].token_ids[7]}
    alone = _alone(model, tokenizer, mode, 14, eos, **kw)
    ends = sorted({len(b.token_ids) for q in alone for b in q})
    assert len(ends) >= 3 and {"eos", "length"} <= {b.finish_reason for q in alone for b in q}, ends
    if mode == "sample":
        greedy = _alone(model, tokenizer, "cot", 14, eos)
        assert all(len({tuple(b.token_ids) for b in q}) == 3 for q in alone)
        assert [b.token_ids for q in alone for b in q] != [b.token_ids for q in greedy for b in q]
    # Which rows share a step moves the logits' rounding: margins and statistics within float32's bound for them
    tolerance = statistics_tolerance(model, [tokenizer.encode(q) + b.token_ids for q, qa in zip(QUESTIONS, alone)
                                             for b in qa])
    for max_rows in (3, 6, 7, None):
        batched, _ = _decode(model, tokenizer, mode, n=3, max_new=14, eos=eos, prompts=QUESTIONS,
                             max_rows=max_rows, **kw)
        for q_alone, q_batched in zip(alone, batched):
            assert [b.token_ids for b in q_batched] == [b.token_ids for b in q_alone], max_rows
            assert [b.finish_reason for b in q_batched] == [b.finish_reason for b in q_alone]
            for one, other in zip(q_alone, q_batched):  # the real model's larger logits round coarser: its bound is
                assert one.margins == pytest.approx(other.margins, abs=tolerance)
                for name in STAT_NAMES:
                    assert one.stats[name] == pytest.approx(other.stats[name], abs=tolerance)



def _same_caches(one, other, model):
    """The same KV caches, each key and value within float32's bound for two computations of a hidden state."""
    for a, b in zip(one, other, strict=True):
        assert a.prompt_length == b.prompt_length and a.length == b.length
        for x, y in zip(a.keys + a.values, b.keys + b.values):
            torch.testing.assert_close(x, y, rtol=0, atol=feature_tolerance(model, x, a.length))


def test_blocks_of_steps_and_static_rows_decode_what_step_by_step_decoding_does(tiny_model, tokenizer):
    """Five questions of 3 branches through 6 rows (questions join as others end); two tokens taken as EOS and a stop
    string end branches at different steps. Against the default loop (a growing batch, one host transfer a step):
    blocks of 3 or 16 steps (`sync_every`: tokens feed back on the device, rows end inside blocks), and static rows
    (`static_cache`: a preallocated cache, questions placed in freed slots), also with blocks, and also with a cache of
    just enough columns for the longest prompt and budget, so that its columns are compacted again and again. Every
    branch (tokens, finish reason, margins, statistics) and its KV cache is the same: a row decoded on past its end is
    cut where it ended, cache included."""
    free = _alone(tiny_model, tokenizer, "cot", 14, set())
    eos = {free[0][1].token_ids[4], free[3][0].token_ids[7]}
    kw = dict(n=3, max_new=14, eos=eos, prompts=QUESTIONS, max_rows=6)
    # A stop string: the last characters of a branch that EOS does not end, so that one at least stops on it.
    ended = [b for q in _decode(tiny_model, tokenizer, sync_every=1, **kw)[0] for b in q]
    stop = [next(b.text[-4:] for b in ended if b.finish_reason == "length" and b.text[-4:].strip())]
    kw["stop"] = stop
    steps, step_caches = _decode(tiny_model, tokenizer, sync_every=1, **kw)
    reasons = {b.finish_reason for q in steps for b in q}
    assert reasons == {"eos", "stop", "length"}, reasons

    def tight(sync):  # L = longest prompt + budget + 1 columns: the least static rows can decode in
        columns = max(len(tokenizer.encode(q)) for q in QUESTIONS) + 15
        return _decode(tiny_model, tokenizer, sync_every=sync, static_cache=True, columns=columns, **kw)

    variants = {"blocks of 3": lambda: _decode(tiny_model, tokenizer, sync_every=3, **kw),
                "blocks of 16": lambda: _decode(tiny_model, tokenizer, sync_every=16, **kw),
                "static": lambda: _decode(tiny_model, tokenizer, sync_every=1, static_cache=True, **kw),
                "static, blocks of 3": lambda: _decode(tiny_model, tokenizer, sync_every=3, static_cache=True, **kw),
                "static, tight": lambda: tight(1), "static, tight, blocks of 4": lambda: tight(4)}
    tolerance = statistics_tolerance(tiny_model, [tokenizer.encode(q) + b.token_ids for q, qs in zip(QUESTIONS, steps)
                                                  for b in qs])
    for name, run in variants.items():
        branches, caches = run()
        for q_steps, q_other, c_steps, c_other in zip(steps, branches, step_caches, caches, strict=True):
            assert [b.token_ids for b in q_other] == [b.token_ids for b in q_steps], name
            assert [b.finish_reason for b in q_other] == [b.finish_reason for b in q_steps], name
            for one, other in zip(q_steps, q_other):
                assert one.margins == pytest.approx(other.margins, abs=tolerance), name
                for stat in STAT_NAMES:
                    assert one.stats[stat] == pytest.approx(other.stats[stat], abs=tolerance), name
            _same_caches(c_steps, c_other, tiny_model)


def test_a_block_of_steps_reaches_the_host_in_one_transfer(tiny_model, tokenizer, monkeypatch):
    """One question, 2 branches, a budget of 12 tokens, no end before it: the prefill's first tokens, then 11 steps.
    Step by step, 1 + 11 = 12 transfers; in blocks of 4, 1 + 3 (4 + 4 + 3 steps: no row passes its budget). Sampling
    transfers every step whatever the setting: a question's draws depend on which of its rows still decode."""
    from lover_lmeval.core.decode import rows

    transfers = []
    real = rows.to_host
    monkeypatch.setattr(rows, "to_host", lambda packed: transfers.append(packed.shape[1]) or real(packed))
    for mode, sync_every, expected in [("cot", 1, [1] * 12), ("cot", 4, [1, 4, 4, 3]), ("sample", 4, [1] * 12)]:
        transfers.clear()
        branches, _ = _decode(tiny_model, tokenizer, mode, n=2, max_new=12, eos=set(), prompts=PROMPTS[:1],
                              sync_every=sync_every)
        assert transfers == expected, (mode, sync_every)
        assert [len(b.token_ids) for b in branches[0]] == [12, 12]

def test_finished_rows_are_refilled_and_the_row_budget_holds(tiny_model, tokenizer):
    """Question 0's branches end after their first token (it is EOS here); with 6 rows for 3-branch questions, the
    third question takes those rows at once, so questions 1 and 2 decode side by side: 11 steps for all three
    (the budget is 12 tokens), where batches of two questions would take 11 + 11."""
    prompts = [tokenizer.encode(q) for q in ["Hi", QUESTIONS[0], QUESTIONS[1]]]
    eos = set(tiny_model(torch.tensor([prompts[0]])).logits[0, -1].topk(3).indices.tolist())
    later = [tiny_model(torch.tensor([p])).logits[0, -1].topk(3).indices.tolist() for p in prompts[1:]]
    assert not eos & set(later[0] + later[1]), "the test needs question 0's first tokens to be the others' EOS only"
    rows = []
    hook = tiny_model.register_forward_hook(lambda module, args, kwargs, out: rows.append(kwargs["input_ids"].shape),
                                            with_kwargs=True)
    try:
        order = [decoded.q for decoded in _engine(tiny_model, tokenizer, eos).decode(
            prompts, RunSpec(DecodingConfig(n_branches=3), (), 12, max_rows=6))]
    finally:
        hook.remove()
    steps = [shape[0] for shape in rows if shape[1] == 1]  # (A, 1) decoding steps; prefills are wider
    assert order == [0, 1, 2]
    assert len(steps) == 11 and max(steps) == 6


def test_row_budget_below_one_question_is_refused_before_decoding():
    """From model_args (LoverConfig), and where a decode's request is built (RunSpec), before any engine runs."""
    from lover_lmeval.core.config import LoverConfig

    with pytest.raises(ValueError, match="max_rows=5 is fewer than n_branches=10.*max_rows >= 10"):
        LoverConfig.from_model_args({"max_rows": "5"})
    with pytest.raises(ValueError, match="max_rows=5 is fewer than n_branches=10.*max_rows >= 10"):
        RunSpec(DecodingConfig(), (), 8, max_rows=5)
    with pytest.raises(ValueError, match="max_rows=0 must be >= 1"):
        LoverConfig.from_model_args({"max_rows": "0"})


@pytest.mark.slow
def test_continuous_batching_reproduces_a_committed_bank_of_the_real_model(smollm2_dir, smollm2_model, tokenizer):
    """The real SmolLM2-135M (fp32) on four banked GSM8K test prompts (`benchmarks/banks/smollm2-135m-instruct/`,
    decoded batch by batch, 10 questions a batch, before continuous batching existed), now through 20 rows: two
    questions decode at a time and the others join as rows free up; and the shortest on static rows
    (`static_cache`, the fixed rows a CUDA graph can capture) in blocks of 8 steps (`sync_every`). The record keys
    are recomputed from these settings (so the bank was decoded with them) and every branch comes back token for
    token, with the same finish reason and margins: the bank's float32 and ours each within float_bounds' statistics
    bound of the exact margin (the model's config, the longest prompt + branch, its largest logit), whatever CPU
    decoded the bank. The four are the bank's shortest (longest branch 89-145 tokens), to keep the test short."""
    from dataclasses import asdict

    from lover_lmeval.core.store.bank import record_key
    from lover_lmeval.core.store.bank_store import open_store
    from lover_lmeval.core.loading import default_gguf, model_identity, sha256_file
    from lover_lmeval.core.pipeline import Pipeline

    bank = Path(__file__).resolve().parents[1] / "benchmarks/banks/smollm2-135m-instruct/lover_gsm8k-test.jsonl.gz"
    records = list(open_store(bank).records())
    records = sorted(records, key=lambda r: max(len(b["token_ids"]) for b in r["branches"]))[:4]
    until, config = ["Question:", "</s>", "<|im_end|>", "<|endoftext|>"], DecodingConfig()
    identity = model_identity(str(smollm2_dir), sha256_file(default_gguf()), None)
    settings = {"decoding": asdict(config), "until": until, "max_gen_toks": 256}
    assert [record_key(identity, r["prompt_ids"], settings) for r in records] == [r["key"] for r in records]
    model = smollm2_model  # the module's copy, loaded once
    eos_ids = Pipeline(model, tokenizer).eos_ids()
    branches, _ = decode_all(_engine(model, tokenizer, eos_ids), [r["prompt_ids"] for r in records],
                             RunSpec(config, until, 256, max_rows=20))
    # The shortest again on static rows, in blocks of 8 steps: what a GPU run would use.
    static, _ = decode_all(_engine(model, tokenizer, eos_ids, sync_every=8, static_cache=True),
                           [records[0]["prompt_ids"]], RunSpec(config, until, 256, max_rows=10))
    tolerance = statistics_tolerance(model, [r["prompt_ids"] + b["token_ids"] for r in records for b in r["branches"]])
    for record, q_branches in zip(records, branches):
        assert [b.token_ids for b in q_branches] == [b["token_ids"] for b in record["branches"]]
        assert [b.finish_reason for b in q_branches] == [b["finish_reason"] for b in record["branches"]]
        for branch, banked in zip(q_branches, record["branches"]):
            assert branch.margins == pytest.approx(banked["margins"], abs=tolerance)
    assert [b.token_ids for b in static[0]] == [b["token_ids"] for b in records[0]["branches"]]
    assert [b.finish_reason for b in static[0]] == [b["finish_reason"] for b in records[0]["branches"]]
    for branch, banked in zip(static[0], records[0]["branches"]):
        assert branch.margins == pytest.approx(banked["margins"], abs=tolerance)


def test_each_question_samples_from_its_own_seed(tiny_model, tokenizer):
    """`question_seed` depends on the run's seed and the prompt only: the same prompt twice in one batch draws the
    same branches (its draws do not depend on its place or batch-mates), two prompts draw different streams, and the
    value is pinned (sha256 of `[seed, prompt]`, the same on every machine: a bank key relies on it)."""
    import hashlib
    from dataclasses import asdict

    from lover_lmeval.core.store.bank import record_key
    from lover_lmeval.core.config import LoverConfig
    from lover_lmeval.core.decode.engine import RunSpec
    from lover_lmeval.core.decode.sampling import question_seed
    from lover_lmeval.core.pipeline import Pipeline

    assert question_seed(1234, [1, 2, 3]) == question_seed(1234, [1, 2, 3]) != question_seed(1234, [1, 2, 4])
    assert question_seed(1234, [1, 2, 3]) != question_seed(1235, [1, 2, 3])
    assert question_seed(0, []) == int.from_bytes(hashlib.sha256(b"[0, []]").digest()[:8], "little") >> 1
    twice, _ = _decode(tiny_model, tokenizer, mode="sample", n=3, max_new=6, seed=3, temperature=1.0, top_p=0.9,
                       prompts=[QUESTIONS[0], QUESTIONS[1], QUESTIONS[0]])
    assert [b.token_ids for b in twice[0]] == [b.token_ids for b in twice[2]]
    assert [b.token_ids for b in twice[0]] != [b.token_ids for b in twice[1]]
    # Records drawn the old way (one generator shared by a batch) keep their keys; these never take them.
    sample = DecodingConfig(mode="sample")
    pipeline = Pipeline(tiny_model, tokenizer, LoverConfig(decoding=sample), model_name="tiny")
    old = record_key("tiny", [5, 6], {"decoding": asdict(sample), "until": [], "max_gen_toks": 8})
    assert pipeline.record_keys([[5, 6]], RunSpec(sample, [], 8)) != [old]
    assert Pipeline(tiny_model, tokenizer, model_name="tiny").record_keys([[5, 6]], RunSpec(DecodingConfig(), [], 8)) == [
        record_key("tiny", [5, 6], {"decoding": asdict(DecodingConfig()), "until": [], "max_gen_toks": 8})]
