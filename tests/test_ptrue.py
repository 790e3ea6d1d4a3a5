"""P(True) (decode/ptrue.py): the formula by hand, the batched pass against one plain forward per branch on the tiny
llama, and the opt-in through lover_hf's model args (scores, provenance with its time, the filter refused without it).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from lover_lmeval.core.decode.branch import Branch
from lover_lmeval.core.decode.ptrue import (FALSE_WORDS, PTRUE_QUERY, TRUE_WORDS, PTrueConfig, ptrue_from_tokens,
                                            ptrue_of_probs, word_tokens)


def test_ptrue_of_probs_hand_worked():
    """V = 6, p = (0.1, 0.2, 0.1, 0.3, 0.2, 0.1), true words' tokens {1, 2}, false {3}: 0.3 / (0.3 + 0.3) = 0.5; with
    false {3, 4}: 0.3 / 0.8 = 0.375. No mass on either: 0.5."""
    probs = torch.tensor([0.1, 0.2, 0.1, 0.3, 0.2, 0.1])
    assert float(ptrue_of_probs(probs, [1, 2], [3])) == pytest.approx(0.5)
    assert float(ptrue_of_probs(probs, [1, 2], [3, 4])) == pytest.approx(0.375)
    assert float(ptrue_of_probs(torch.tensor([1.0, 0.0, 0.0]), [1], [2])) == 0.5


def test_the_config_refuses_an_empty_query():
    assert PTrueConfig().enabled is False and PTrueConfig().query == PTRUE_QUERY
    with pytest.raises(ValueError, match="query .* is empty"):
        PTrueConfig(query="  ")
    with pytest.raises(ValueError, match="ptrue must be true or false"):
        PTrueConfig(enabled="yes")


def test_the_pass_equals_one_plain_forward_per_branch(tiny_model, tokenizer):
    """Branches of 0, 3 and 7 tokens (two share a bucket, the empty one runs the query alone) against
    softmax(model(prompt + branch + query).logits[-1]) read with the same formula: equal to 1e-5."""
    prompt = tokenizer.encode("Question: what is 2 + 3?\nAnswer:", add_special_tokens=False)
    query = tokenizer.encode(PTRUE_QUERY, add_special_tokens=False)
    true_ids, false_ids = word_tokens(tokenizer, TRUE_WORDS), word_tokens(tokenizer, FALSE_WORDS)
    assert len(true_ids) == 2 and len(false_ids) == 2  # " true" / " True" are distinct tokens in SmolLM2's vocabulary
    branches = [Branch(text, tokenizer.encode(text, add_special_tokens=False), [], [], "eos")
                for text in ("", " It is 5.", " Two plus three makes five, so 5.")]
    found = ptrue_from_tokens(tiny_model, prompt, branches, query, true_ids, false_ids)
    with torch.no_grad():
        slow = [float(ptrue_of_probs(tiny_model(torch.tensor([prompt + b.token_ids + query])).logits[0, -1]
                                     .float().softmax(-1), true_ids, false_ids)) for b in branches]
    assert np.allclose(found, slow, atol=1e-5), (found, slow)


def test_ptrue_is_opt_in_and_its_time_is_recorded(tiny_model_dir):
    """ptrue=true: every result carries verifier_probs["ptrue"] = (P, 1 - P), so ptrue_max reads P; the provenance
    holds the questions scored and the seconds a question. Without it nothing is computed and no provenance entry."""
    from lover_lmeval.core.decode.engine import RunSpec
    from lover_lmeval.core.select.answers import extract_number
    from lover_lmeval.core.select.selection import select
    from lover_lmeval.harness.model import LoverLM

    lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, verifier=None, ptrue="true")
    prompts = [lm.tok_encode("Question: 2 + 3?\nAnswer:"), lm.tok_encode("Question: 4 + 4?\nAnswer:")]
    results = lm.pipeline.run(prompts, RunSpec(lm.pipeline.config.decoding, ["\n\n"], 6))
    for result in results:
        probs = result.verifier_probs["ptrue"]
        assert probs.shape == (2, 2) and np.allclose(probs.sum(-1), 1.0) and np.all((0 <= probs) & (probs <= 1))
        assert np.allclose(result.scores("ptrue"), probs[:, 0])
        select(result, "ptrue_max", extract_number)  # reads it without error
    found = lm.pipeline.provenance()["ptrue"]
    assert found["questions"] == 2 and found["seconds_per_question"] > 0 and found["query"] == PTRUE_QUERY
    plain = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, verifier=None)
    (result,) = plain.pipeline.run(prompts[:1], RunSpec(plain.pipeline.config.decoding, ["\n\n"], 6))
    assert "ptrue" not in result.verifier_probs and "ptrue" not in plain.pipeline.provenance()
    with pytest.raises(KeyError, match="pass ptrue=true"):
        result.scores("ptrue")
