"""Assertion features from each branch's KV cache equal a full re-encode of prompt + branch + template."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from float_bounds import feature_tolerance, statistics_tolerance
from lover_lmeval.core.decode.decoding import DecodingConfig
from lover_lmeval.core.decode.engine import HFEngine, RunSpec, decode_all
from lover_lmeval.core.decode.features import (FALSE_TEMPLATE, TRUE_TEMPLATE, assertion_features, check_layer,
                                        features_from_tokens, length_buckets, stats_from_tokens)
from lover_lmeval.core.decode.token_stats import STAT_NAMES


def _decode(model, tokenizer, prompts, config, max_new, stop=(), eos=frozenset({-1}), max_rows=None):
    """Every prompt's branches and caches, branches ending at `eos` (default none: -1 is no token)."""
    return decode_all(HFEngine(model, tokenizer, eos=eos), prompts, RunSpec(config, stop, max_new, max_rows))


def _reencode(model, ids: list[int], layer: int) -> torch.Tensor:
    out = model(input_ids=torch.tensor([ids]), output_hidden_states=True)
    return out.hidden_states[layer][0, -1]


@pytest.mark.parametrize("mode, max_rows", [("cot", None), ("cot", 8), ("beam", None)])
def test_features_equal_full_reencode_for_padded_batched_branches(tiny_model, tokenizer, mode, max_rows):
    # Prompts of different lengths (left padding) and a stop string that ends some branches
    # early (their caches hold tokens beyond the kept text) while others run out of budget (their
    # last token was never fed): every cache-trimming path is exercised. With 8 rows, the third
    # prompt joins the running batch when the second question's branches end early (EOS after a
    # few tokens): the running rows are padded anew to the joining prompt's width.
    prompts = [tokenizer.encode("Question: what is two plus five?\nAnswer:"), tokenizer.encode("Hello"),
               tokenizer.encode("Question: and what is three times three, my friend?\nAnswer:")]
    templates = [tokenizer.encode(t, add_special_tokens=False) for t in (TRUE_TEMPLATE, FALSE_TEMPLATE)]
    free, _ = _decode(tiny_model, tokenizer, prompts, DecodingConfig(4, mode), 10)
    stop = free[0][1].text[-4:-2]
    eos = {b.token_ids[1] for b in free[1]}
    steps = []
    hook = tiny_model.register_forward_hook(lambda module, args, kwargs, out: steps.append(kwargs["input_ids"].shape),
                                            with_kwargs=True)
    try:
        branches, caches = _decode(tiny_model, tokenizer, prompts, DecodingConfig(4, mode), 10, [stop], eos,
                                   max_rows)
    finally:
        hook.remove()
    widths = [shape[1] for shape in steps]  # 1 for a decoding step, the prompt width for a prefill
    if max_rows:
        assert widths.index(1) < max(i for i, w in enumerate(widths) if w > 1), f"no question joined: {widths}"
    reasons = {b.finish_reason for q in branches for b in q}
    assert {"stop", "length"} <= reasons, reasons
    layer = 2
    for prompt, q_branches, q_caches in zip(prompts, branches, caches):
        features = assertion_features(tiny_model, q_branches, q_caches, templates, layer, rows_per_pass=3)
        assert features.shape == (4, 2, tiny_model.config.hidden_size)
        for k, branch in enumerate(q_branches):
            for t, template in enumerate(templates):
                expected = _reencode(tiny_model, prompt + branch.token_ids + template, layer)
                tolerance = feature_tolerance(tiny_model, expected, len(prompt) + 10 + len(template))
                torch.testing.assert_close(features[k, t], expected, atol=tolerance, rtol=0)
        assert not torch.allclose(features[:, 0], features[:, 1]), "x+ and x- must differ"


def test_layer_defaults_to_middle_and_accepts_negative_indices():
    assert check_layer(None, 24) == 12
    assert check_layer(-1, 24) == 24
    assert check_layer(-24, 24) == 1
    assert check_layer(1, 24) == 1


@pytest.mark.parametrize("layer", [25, -26])
def test_layer_out_of_range_names_the_allowed_range(layer):
    with pytest.raises(ValueError, match=rf"layer={layer} is out of range.*1\.\.24"):
        check_layer(layer, 24)


@pytest.mark.parametrize("layer", [0, -25])
def test_the_embedding_layer_is_refused_with_the_reason_and_the_fix(layer):
    """Index 0 of hidden_states is the embedding of the template's last token: one vector for every branch."""
    with pytest.raises(ValueError, match=rf"extra_layers={layer} is the token embeddings.*carries nothing.*1\.\.24"):
        check_layer(layer, 24, "extra_layers")


def test_banked_branches_give_the_same_features_and_a_layer_sweep_costs_one_pass(tiny_model, tokenizer):
    prompt = tokenizer.encode("Question: what is two plus five?\nAnswer:")
    templates = [tokenizer.encode(t, add_special_tokens=False) for t in (TRUE_TEMPLATE, FALSE_TEMPLATE)]
    (branches,), (caches,) = _decode(tiny_model, tokenizer, [prompt], DecodingConfig(3), 6)
    live = assertion_features(tiny_model, branches, caches, templates, 2)
    sweep = features_from_tokens(tiny_model, prompt, branches, templates, [1, 2])  # (N, T, L, D)
    assert sweep.shape == (3, 2, 2, tiny_model.config.hidden_size)
    tolerance = feature_tolerance(tiny_model, sweep, len(prompt) + 6 + max(map(len, templates)))
    torch.testing.assert_close(sweep[:, :, 1], live, atol=tolerance, rtol=0)
    torch.testing.assert_close(sweep[:, :, 0], assertion_features(tiny_model, branches, caches, templates, 1),
                               atol=tolerance, rtol=0)


def test_length_buckets_bound_the_padding_of_a_shared_pass():
    """Lengths [10, 256, 197, 25, 79, 79, 71, 61, 5, 233], slack 1.25, shortest first:
    5 | 10: 2 x 10 = 20 > 1.25 x 15 -> new run | 25: 50 > 43.75 -> new | 61: 122 > 107.5 -> new |
    71: 142 <= 165, 79: 237 <= 263.75, 79: 316 <= 362.5 -> one run | 197: 985 > 608.75 -> new |
    233: 466 <= 537.5, 256: 768 <= 857.5 -> one run.
    Padded work 5 + 10 + 25 + 4 x 79 + 3 x 256 = 1,124 tokens for 1,016 held, where one pass computes 10 x 256 = 2,560.
    """
    lengths = [10, 256, 197, 25, 79, 79, 71, 61, 5, 233]
    assert length_buckets(lengths) == [[8], [0], [3], [7, 6, 4, 5], [2, 9, 1]]
    for run in length_buckets(lengths):
        held = [lengths[i] for i in run]
        assert len(run) == 1 or len(run) * max(held) <= 1.25 * sum(held)
    assert length_buckets([4, 4, 4]) == [[0, 1, 2]]
    assert length_buckets([]) == []


def test_banked_branches_of_very_different_lengths_equal_a_full_reencode(tiny_model, tokenizer):
    """Branches cut to 1, 2, 9 and 10 tokens take separate passes (length_buckets), one with no token (EOS first)
    takes none; each row's features must still be those of prompt + branch + template encoded on its own, at a
    middle layer and at the last one (no LM head)."""
    prompt = tokenizer.encode("Question: what is two plus five?\nAnswer:")
    templates = [tokenizer.encode(t, add_special_tokens=False) for t in (TRUE_TEMPLATE, FALSE_TEMPLATE)]
    (branches,), _ = _decode(tiny_model, tokenizer, [prompt], DecodingConfig(5), 10)
    cut = [dataclasses.replace(b, token_ids=b.token_ids[:keep]) for b, keep in zip(branches, (1, 10, 0, 2, 9))]
    assert len(length_buckets([len(b.token_ids) for b in cut])) > 1
    last = tiny_model.config.num_hidden_layers
    features = features_from_tokens(tiny_model, prompt, cut, templates, [2, last])  # (N, T, L, D)
    for k, branch in enumerate(cut):
        for t, template in enumerate(templates):
            for j, layer in enumerate((2, last)):
                expected = _reencode(tiny_model, prompt + branch.token_ids + template, layer)
                tolerance = feature_tolerance(tiny_model, expected, len(prompt) + 10 + len(template))
                torch.testing.assert_close(features[k, t, j], expected, atol=tolerance, rtol=0)


@pytest.fixture(scope="module")
def peaked_model(tokenizer):
    """conftest's tiny llama with weights 25x larger (initializer_range 0.5): its next-token distributions are peaked
    like a trained model's (entropy 0.2-5.8 nats), where the default tiny model's are nearly uniform (entropy 10.79
    at every position), which would hide a statistic read from the wrong position."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id, initializer_range=0.5)
    return LlamaForCausalLM(config).eval()


@pytest.mark.parametrize("mode", ["cot", "sample", "beam"])
def test_rescored_statistics_equal_the_ones_decoding_computed(peaked_model, tokenizer, mode, one_thread):
    """fp32: two prompts of different lengths (left padding), 3 branches each, up to 12 tokens, two tokens taken as
    EOS (so some branches end early and their kept tokens are fewer than the decoded ones). `stats_from_tokens`
    rebuilds every kept token's 4 statistics from the tokens alone (prefill + one padded pass) and matches decoding's
    (cache + one token a step) within what float32 rounding can move each (tests/float_bounds.py: each statistic
    moves by at most 2x the largest logit change; ~2e-3 here, seen <= 4e-5). Reading a
    neighbouring position instead moves them by >= 0.2 (asserted below, so the tolerance could not hide it).
    `features_from_tokens(stats=True)` gives the same statistics and the same features as without them."""
    prompts = [tokenizer.encode("Question: what is two plus five?\nAnswer:"), tokenizer.encode("Hello")]
    free, _ = _decode(peaked_model, tokenizer, prompts, DecodingConfig(3, mode), 12)
    eos = {free[0][1].token_ids[5], free[1][0].token_ids[3]}
    branches, _ = _decode(peaked_model, tokenizer, prompts, DecodingConfig(3, mode), 12, eos=eos)
    assert "eos" in {b.finish_reason for q in branches for b in q}
    templates = [tokenizer.encode(t, add_special_tokens=False) for t in (TRUE_TEMPLATE, FALSE_TEMPLATE)]
    shifts = {name: 0.0 for name in STAT_NAMES}
    for prompt, q_branches in zip(prompts, branches):
        tolerance = statistics_tolerance(peaked_model, [prompt + b.token_ids for b in q_branches])
        rescored = stats_from_tokens(peaked_model, prompt, q_branches)
        for branch, again in zip(q_branches, rescored):
            for name in STAT_NAMES:
                assert len(branch.stats[name]) == len(branch.token_ids) == len(again[name])
                assert again[name] == pytest.approx(branch.stats[name], abs=tolerance, rel=0), (mode, name)
                shifts[name] = max([shifts[name]] + [abs(a - b) for a, b in zip(again[name], again[name][1:])])
        features, with_features = features_from_tokens(peaked_model, prompt, q_branches, templates, 2, stats=True)
        assert with_features == rescored
        alone = features_from_tokens(peaked_model, prompt, q_branches, templates, 2)
        positions = len(prompt) + 12 + max(map(len, templates))
        torch.testing.assert_close(features, alone, atol=feature_tolerance(peaked_model, alone, positions), rtol=0)
    assert min(shifts.values()) > 0.2, shifts


def test_several_questions_share_passes_and_get_what_each_gets_alone(peaked_model, tokenizer, one_thread):
    """fp32, three prompts of 2, 11 and 20 tokens, 3 branches each of up to 12 tokens (some ended early by two EOS
    tokens, one cut to no token at all): `questions_features` runs every question's branches on top of its own
    prompt in shared passes (rows of different questions side by side, prompts padded to the widest, 4 rows a pass),
    and gives each question the features, statistics and margins that `features_from_tokens` gives it alone. The
    padded columns change only the order of summation, so both are held to the same float64 computation within what
    float32 rounding can move them (tests/float_bounds.py: here 1.7e-5 of the largest feature, ~360, so 6.0e-3;
    seen against float64: at most 8.7e-4 on an AMD EPYC under its AVX-512, AVX2 and scalar kernels; between the two
    sides, 2.59e-4 on an Intel Xeon with AMX). Statistics and margins within 2 x the logits' bound (1.2e-3 here; the
    1e-5 this test once allowed failed a log-probability under AVX2). A planted error of 1e-4 of the largest value
    on one feature of the shared pass fails the bound."""
    import copy
    from dataclasses import replace

    from float_bounds import decoder_relative_error, logit_statistics_error

    from lover_lmeval.core.decode.features import questions_features

    prompts = [tokenizer.encode("Hello"), tokenizer.encode("Question: what is two plus five?\nAnswer:"),
               tokenizer.encode("Question: and what is three times three, my friend, and why?\nAnswer:")]
    assert len({len(p) for p in prompts}) == 3
    free, _ = _decode(peaked_model, tokenizer, prompts, DecodingConfig(3, "cot"), 12)
    eos = {free[0][1].token_ids[5], free[1][0].token_ids[3]}
    branches, _ = _decode(peaked_model, tokenizer, prompts, DecodingConfig(3, "cot"), 12, eos=eos)
    branches[2][1] = replace(branches[2][1], token_ids=[], text="", margins=[], offsets=[], stats=None)
    templates = [tokenizer.encode(t, add_special_tokens=False) for t in (TRUE_TEMPLATE, FALSE_TEMPLATE)]
    together = questions_features(peaked_model, list(zip(prompts, branches)), templates, [1, 2], stats=True,
                                  margins=True, max_rows=4)
    exact = copy.deepcopy(peaked_model).double()
    config = peaked_model.config
    for prompt, q_branches, (features, found) in zip(prompts, branches, together):
        alone, alone_found = features_from_tokens(peaked_model, prompt, q_branches, templates, [1, 2], stats=True,
                                                  margins=True)
        reference, reference_found = features_from_tokens(exact, prompt, q_branches, templates, [1, 2], stats=True,
                                                          margins=True)
        assert features.shape == alone.shape == (3, 2, 2, config.hidden_size)
        positions = len(prompt) + max(len(b.token_ids) for b in q_branches) + max(map(len, templates))
        bound = decoder_relative_error(config, positions) * float(reference.abs().max())
        for computed in (features, alone):
            torch.testing.assert_close(computed.double(), reference.double(), atol=bound, rtol=0)
        planted = features.clone()
        planted[0, 0, 0, 0] += 1e-4 * float(reference.abs().max())
        planted_error = float((planted.double() - reference.double()).abs().max())
        assert planted_error > bound, "the bound would hide a planted error"
        with torch.no_grad():
            largest_logit = max(float(exact(torch.tensor([prompt + b.token_ids])).logits.abs().max())
                                for b in q_branches)
        statistics_bound = logit_statistics_error(config, positions, largest_logit)
        for computed in (found, alone_found):
            for mine, theirs in zip(computed, reference_found):
                assert mine.keys() == theirs.keys()
                for name in mine:
                    assert mine[name] == pytest.approx(theirs[name], abs=statistics_bound), name


def test_statistics_of_branches_with_no_token_or_one(peaked_model, tokenizer, one_thread):
    """A branch cut to no tokens (EOS first) has empty statistics; one cut to its first token has the prefill's."""
    prompt = tokenizer.encode("Question: what is two plus five?\nAnswer:")
    (branches,), _ = _decode(peaked_model, tokenizer, [prompt], DecodingConfig(2), 6)
    cut = [dataclasses.replace(branches[0], token_ids=[]),
           dataclasses.replace(branches[1], token_ids=branches[1].token_ids[:1])]
    empty, first = stats_from_tokens(peaked_model, prompt, cut)
    assert empty == {name: [] for name in STAT_NAMES}
    tolerance = statistics_tolerance(peaked_model, [prompt + cut[1].token_ids])
    for name in STAT_NAMES:
        assert first[name] == pytest.approx(branches[1].stats[name][:1], abs=tolerance)


def test_a_model_whose_logits_are_not_its_head_of_the_last_state_is_refused(peaked_model, tokenizer, one_thread):
    """Statistics of banked branches apply the output embeddings to the decoder's final states (features._head); a
    model that does more after the decoder must be refused, not scored wrong. A soft cap of 3 in the config is one
    the llama forward ignores while _head applies it: every pass checks its last column against the model's own
    logits and raises, naming the fix."""
    prompt = tokenizer.encode("Hello")
    (branches,), _ = _decode(peaked_model, tokenizer, [prompt], DecodingConfig(2), 4)
    peaked_model.config.final_logit_softcapping = 3.0
    try:
        with pytest.raises(ValueError, match="LlamaForCausalLM's logits are not its output embeddings.*features._head"):
            stats_from_tokens(peaked_model, prompt, branches)
    finally:
        del peaked_model.config.final_logit_softcapping


def test_banked_branches_without_stats_get_them_once(peaked_model, tokenizer, tmp_path, one_thread):
    """Pipeline.run: a question decoded now carries its statistics, rounded to float16 as its bank record keeps
    them. The same record without them (as decoded before they existed) in another bank: the run computes them
    with the features (one pass through every block), equal to the decoded ones within float32's bound plus one
    float16 step (values ~1e-5 apart can round to neighbouring float16s: relative 2^-10), and keeps them in the
    feature cache, so the next run of that record runs no forward pass at all and gives the same values.
    RunSpec(stats=False) leaves a banked branch's statistics None."""
    from lover_lmeval.core.store.bank import BankConfig, BranchBank
    from lover_lmeval.core.config import LoverConfig
    from lover_lmeval.core.decode.engine import RunSpec
    from lover_lmeval.core.pipeline import Pipeline
    from lover_lmeval.core.decode.token_stats import decode_stats, encode_stats

    def pipeline(bank: str, cache: str) -> Pipeline:
        config = LoverConfig(decoding=DecodingConfig(n_branches=3),
                             bank=BankConfig(path=str(tmp_path / bank), feature_cache=str(tmp_path / cache)))
        return Pipeline(peaked_model, tokenizer, config, model_name="peaked")

    prompt = tokenizer.encode("Question: what is two plus five?\nAnswer:")
    decoder = pipeline("new.jsonl.gz", "cache-new")
    spec = RunSpec(DecodingConfig(n_branches=3), [], 8)
    key = decoder.record_keys([prompt], spec)[0]
    (decoded,) = decoder.run([prompt], spec)
    for branch in decoded.branches:
        assert decode_stats(encode_stats(branch.stats)) == branch.stats  # float16 values, as banked
    BranchBank(tmp_path / "old.jsonl.gz").add(key, [dataclasses.replace(b, stats=None) for b in decoded.branches],
                                              prompt_ids=prompt)
    reader = pipeline("old.jsonl.gz", "cache-old")
    (first,) = reader.run([prompt], spec)
    tolerance = statistics_tolerance(peaked_model, [prompt + b.token_ids for b in decoded.branches])
    for branch, fresh in zip(first.branches, decoded.branches):
        for name in STAT_NAMES:
            # float16 as banked (relative 2^-10 at most), on top of the two float32 computations' difference
            assert branch.stats[name] == pytest.approx(fresh.stats[name], rel=2 ** -10, abs=tolerance), name
    forwards = []
    hook = peaked_model.register_forward_hook(lambda *args: forwards.append(1))
    try:
        (again,) = reader.run([prompt], spec)
    finally:
        hook.remove()
    assert forwards == [] and [b.stats for b in again.branches] == [b.stats for b in first.branches]
    (bare,) = pipeline("old.jsonl.gz", "cache-bare").run([prompt], dataclasses.replace(spec, stats=False))
    assert all(b.stats is None for b in bare.branches)
