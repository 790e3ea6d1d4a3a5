"""The core pipeline runs on a transformers model with lm-eval unimportable, and gives what lover_hf gives."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
import torch
from lm_eval.api.instance import Instance

from lover_lmeval.harness.model import LoverLM

CONTEXTS = ["Question: 2 + 2?\nAnswer:", "Question: 3 + 4?\nAnswer:", "Question: name a colour.\nAnswer:"]
GEN_KWARGS = {"until": ["\n\n"], "max_gen_toks": 6}
MODEL_ARGS = dict(n_branches=3, batch_size=2, fit_config="epochs=3;restarts=1")

# Run in a fresh interpreter where `import lm_eval` fails, as in an environment without lm-eval.
CORE_ONLY = """
import json, sys
sys.modules["lm_eval"] = None  # any import of lm_eval now raises ImportError
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from lover_lmeval.core.config import LoverConfig
from lover_lmeval.core.decode.decoding import DecodingConfig
from lover_lmeval.core.decode.engine import RunSpec
from lover_lmeval.core.pipeline import Pipeline
from lover_lmeval.core.verify.verifier import VerifierConfig

folder, prompts, until, budget = json.loads(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(folder).eval()
tokenizer = AutoTokenizer.from_pretrained(folder)
config = LoverConfig(decoding=DecodingConfig(n_branches=3), fit=VerifierConfig(epochs=3, restarts=1))
pipe = Pipeline(model, tokenizer, config, model_name=folder)
results = pipe.run(prompts, RunSpec(config.decoding, until, budget, max_rows=2 * 3))
pipe.fit(results, extract="number")
print(json.dumps({
    "token_ids": [[b.token_ids for b in r.branches] for r in results],
    "features": [r.features.tolist() for r in results],
    "scores": [r.scores("lover").tolist() for r in results],
    "picks": {s: pipe.select(results, s, extract="number") for s in ("greedy", "majority", "cot_sum", "lover_max", "lover_sum")},
    "lm_eval_imported": any(m.split(".")[0] == "lm_eval" for m in sys.modules if sys.modules[m] is not None),
}))
"""


def test_core_pipeline_without_lm_eval_matches_lover_hf(tiny_model_dir):
    lm = LoverLM(pretrained=str(tiny_model_dir), **MODEL_ARGS)
    prompts, spec = lm.prompts(CONTEXTS, GEN_KWARGS)
    done = subprocess.run([sys.executable, "-c", CORE_ONLY,
                           json.dumps([str(tiny_model_dir), prompts, spec.until, spec.max_gen_toks])],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    core = json.loads(done.stdout.strip().splitlines()[-1])
    assert core["lm_eval_imported"] is False
    requests = [Instance("generate_until", {}, (c, GEN_KWARGS), i) for i, c in enumerate(CONTEXTS)]
    for request in requests:
        request.task_name = "task_a"
    results = lm.generate_until(requests, disable_tqdm=True)
    assert core["token_ids"] == [[b.token_ids for b in r.branches] for r in results]
    for got, want in zip(core["features"], results):
        np.testing.assert_allclose(np.array(got), want.features, atol=1e-5)
    for got, want in zip(core["scores"], results):
        np.testing.assert_allclose(np.array(got), want.scores("lover"), atol=1e-5)
    assert all(len(picks) == len(CONTEXTS) and all(isinstance(p, str) for p in picks)
               for picks in core["picks"].values())
    assert core["picks"]["lover_sum"] == lm.pipeline.select(results, "lover_sum")


JOIN_CONTEXTS = ["Question: name a colour.\nAnswer:", "Q: 2 + 2?\nA:", "Q: 3 + 4?\nA:"]  # longest first, as decoded


def test_continuous_batching_changes_no_result_only_when_they_come(tiny_model_dir):
    """Three questions through 2 x 3 rows: batch by batch (continuous_batching=false: two questions, then one) and
    continuously (the third takes the rows of the first to end) give the same branches and features; the caller
    hears of every question once, as it ends, in both. The longest question (decoded first) ends at once: its three
    first tokens count as EOS here, so the third question's rows join the second's while it still decodes."""
    runs, shapes = {}, {}
    for continuous in (False, True):
        lm = LoverLM(pretrained=str(tiny_model_dir), **MODEL_ARGS, continuous_batching=str(continuous).lower())
        prompts = lm.prompts(JOIN_CONTEXTS, GEN_KWARGS)[0]
        firsts = [set(lm.model(torch.tensor([p])).logits[0, -1].topk(3).indices.tolist()) for p in prompts]
        assert not firsts[0] & (firsts[1] | firsts[2]), "the test needs question 0's first tokens to end it alone"
        lm.pipeline.engine.eos_ids = firsts[0]
        heard, shapes[continuous] = [], []
        # Decoding's forwards only: a prefill keeps one logit per row; a step feeds one token per row.
        hook = lm.model.register_forward_hook(lambda module, args, kwargs, out, seen=shapes[continuous]: seen.append(
            ("prefill" if kwargs.get("logits_to_keep") == 1 else "step", kwargs["input_ids"].shape[0])),
            with_kwargs=True)
        try:
            results = lm.run_contexts(JOIN_CONTEXTS, GEN_KWARGS, on_done=lambda indices, done, heard=heard: heard.extend(
                (i, len(r.branches)) for i, r in zip(indices, done)))
        finally:
            hook.remove()
        runs[continuous] = results, heard
    for results, heard in runs.values():
        assert sorted(heard) == [(0, 3), (1, 3), (2, 3)]
    # The step after the third question's prefill: continuously, its 3 rows join a question still decoding (more
    # than 3 rows); batch by batch, it decodes alone (3 rows).
    after_join = {c: s[[i for i, (kind, _) in enumerate(s) if kind == "prefill"][1] + 1][1] for c, s in shapes.items()}
    assert after_join[False] == 3 and 3 < after_join[True] <= 6, shapes
    for a, b in zip(runs[False][0], runs[True][0]):
        assert [x.token_ids for x in a.branches] == [x.token_ids for x in b.branches]
        np.testing.assert_allclose(a.features, b.features, atol=1e-5)


def test_a_shared_pass_closes_at_the_plans_tokens_or_at_its_rows():
    """Questions wait for one shared pass until their rows, each padded to its question's prompt and longest branch,
    reach N x context tokens (what the memory plan reserves for one question) or MAX_PASS_ROWS (64) rows. A question
    of a 100-token prompt and branches of 50 and 30 tokens counts 2 x (100 + 50) = 300 tokens; with N = 2 and a
    300-token context the budget is 600: one such question waits, two run. 32 questions of 2 one-token branches and a
    1-token prompt are 64 rows but 128 tokens: they run at 64 rows."""
    from lover_lmeval.core.decode.branch import Branch
    from lover_lmeval.core.decode.engine import Decoded
    from lover_lmeval.core.store.complete import pass_is_full

    def question(prompt: int, *lengths: int) -> tuple[list[int], Decoded]:
        return [0] * prompt, Decoded(0, [Branch("", [1] * n, [], [], "eos") for n in lengths])

    assert not pass_is_full([question(100, 50, 30)], n_branches=2, context=300)
    assert pass_is_full([question(100, 50, 30)] * 2, n_branches=2, context=300)
    assert not pass_is_full([question(1, 1, 1)] * 31, n_branches=2, context=300)
    assert pass_is_full([question(1, 1, 1)] * 32, n_branches=2, context=300)


def test_read_with_hands_the_pipeline_another_copy_and_the_feature_cache_follows_the_copy_that_reads(
        tiny_model, tokenizer, tmp_path):
    """lover_vllm's phases in small: a pipeline built on a meta-device skeleton of the tiny model (no weights), bank
    only, reads a bank with the real copy once `read_with` hands it over. Its features are those a pipeline built on
    the real copy computes (the same pass: equal), and they are cached under the copy that read them (its dtype and
    device), not the skeleton it was built with. A pipeline whose HF engine decodes with its own model, and a copy in
    another dtype, are refused."""
    import copy

    from transformers import LlamaForCausalLM

    from lover_lmeval.core.config import LoverConfig
    from lover_lmeval.core.decode.decoding import DecodingConfig
    from lover_lmeval.core.decode.engine import RunSpec
    from lover_lmeval.core.pipeline import Pipeline
    from lover_lmeval.core.store.bank import BankConfig, FeatureCache

    bank = str(tmp_path / "bank.sqlite")
    decoding = DecodingConfig(n_branches=3)
    prompts = [tokenizer.encode(c) for c in ("Q: 2 + 2?\nA:", "Q: name a colour.\nA:")]
    spec = RunSpec(decoding, ("\n",), 4)
    Pipeline(tiny_model, tokenizer, LoverConfig(decoding=decoding, bank=BankConfig(bank, feature_cache=None)),
             model_name="tiny").run(prompts, spec)  # decoded and banked

    def reader_pipeline(model, name: str) -> Pipeline:
        (tmp_path / name).mkdir()
        return Pipeline(model, tokenizer, LoverConfig(decoding=decoding, bank=BankConfig(
            bank, bank_only=True, feature_cache=str(tmp_path / name))), model_name="tiny")

    with torch.device("meta"):
        skeleton = LlamaForCausalLM(tiny_model.config).eval()
    staged = reader_pipeline(skeleton, "staged")
    staged.read_with(tiny_model)
    got = staged.run(prompts, spec)
    want = reader_pipeline(tiny_model, "direct").run(prompts, spec)
    assert all(torch.equal(a.stored_features, b.stored_features) for a, b in zip(got, want))
    cache, keys = FeatureCache(tmp_path / "staged"), staged.record_keys(prompts, spec)
    assert all(cache.read_by(tiny_model).get(k, staged.layers, staged.template_ids) is not None for k in keys)
    assert all(cache.read_by(skeleton).get(k, staged.layers, staged.template_ids) is None for k in keys)
    with pytest.raises(ValueError, match="HF engine decodes with the model it reads with"):
        Pipeline(tiny_model, tokenizer).read_with(tiny_model)
    with pytest.raises(ValueError, match="torch.bfloat16 copy cannot replace the torch.float32"):
        staged.read_with(copy.deepcopy(tiny_model).to(torch.bfloat16))
