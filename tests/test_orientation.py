"""Label-free orientation of a fitted verifier (VerifierConfig.orient="vote"|"confidence", training.orient_by)."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from lover_lmeval.core.verify.checkpoints import load_checkpoint, save_checkpoint
from lover_lmeval.core.verify.scoring import branch_confidences, orient_by, vote_shares
from lover_lmeval.core.stats import spearman
from lover_lmeval.core.verify.verifier import Verifier, VerifierConfig

# Q = 2 questions, N = 4 branches; branch 3 of question 1 has no answer.
ANSWERS = [["4", "4", "4", "5"], ["1", "2", "2", None]]
SHARES = [[0.75, 0.75, 0.75, 0.25], [0.25, 0.5, 0.5, 0.0]]


def test_spearman_hand_worked_with_ties():
    """x = [1, 2, 2, 3] has average ranks [0, 1.5, 1.5, 3], y = [1, 3, 2, 4] ranks [0, 2, 1, 3].
    Centred (mean rank 1.5): rx = [-1.5, 0, 0, 1.5], ry = [-1.5, 0.5, -0.5, 1.5];
    Σ rx·ry = 4.5, |rx|² = 4.5, |ry|² = 5  ->  ρ = 4.5 / sqrt(22.5) = 0.948683."""
    x, y = torch.tensor([1.0, 2.0, 2.0, 3.0]), torch.tensor([1.0, 3.0, 2.0, 4.0])
    assert spearman(x, y) == pytest.approx(0.948683, abs=1e-6)
    assert spearman(x, -y) == pytest.approx(-0.948683, abs=1e-6)
    assert spearman(x, torch.ones(4)) == 0.0  # a constant has no ranking: no evidence either way


def test_vote_shares_count_each_answer_within_its_question():
    """Question 0: "4" is given by 3 of 4 branches (0.75), "5" by 1 (0.25); question 1: "2" by 2 of 4 (0.5),
    a branch without an answer gets 0; padding (width 5) gets 0."""
    shares = vote_shares(ANSWERS, width=5)
    assert shares.shape == (2, 5)
    assert torch.allclose(shares, torch.tensor([row + [0.0] for row in SHARES]))


def _linear_verifier(weight: float) -> tuple[Verifier, torch.Tensor, torch.Tensor]:
    """A linear probe reading feature 0 of x+, which holds the branch's vote share (x- is all zeros): p+ =
    sigmoid(weight · share), p- = 0.5, so the score rises with the share for weight > 0 and falls for weight < 0."""
    verifier = Verifier(2, VerifierConfig(n_hidden_layers=0, normalize="none"))
    with torch.no_grad():
        verifier.mlp[0].weight.copy_(torch.tensor([[weight, 0.0]]))
        verifier.mlp[0].bias.zero_()
    features = torch.zeros(2, 4, 2, 2)  # (Q, N, 2, D)
    features[:, :, 0, 0] = torch.tensor(SHARES)
    return verifier, features, torch.ones(2, 4, dtype=torch.bool)


def test_a_fit_ranking_against_the_vote_is_flipped_and_one_ranking_with_it_is_kept():
    verifier, features, mask = _linear_verifier(-5.0)
    with torch.no_grad():
        before = verifier.scores(features)
    correlation = orient_by(verifier, features, mask, vote_shares(ANSWERS, 4))
    assert correlation == pytest.approx(-1.0) and float(verifier.orientation) == -1.0
    with torch.no_grad():
        after = verifier.scores(features)
    assert torch.allclose(after, 1 - before)  # p+ and p- swapped: score -> 1 - score, ranking reversed
    assert orient_by(verifier, features, mask, vote_shares(ANSWERS, 4)) == pytest.approx(-1.0)  # idempotent
    assert float(verifier.orientation) == -1.0

    kept, features, mask = _linear_verifier(5.0)
    assert orient_by(kept, features, mask, vote_shares(ANSWERS, 4)) == pytest.approx(1.0)
    assert float(kept.orientation) == 1.0


def test_orientation_survives_a_checkpoint_and_older_checkpoints_load_unflipped(tmp_path):
    verifier, features, mask = _linear_verifier(-5.0)
    orient_by(verifier, features, mask, vote_shares(ANSWERS, 4))
    save_checkpoint(tmp_path / "flipped.safetensors", verifier, {"model": "m"})
    loaded, _ = load_checkpoint(tmp_path / "flipped.safetensors")
    with torch.no_grad():
        assert float(loaded.orientation) == -1.0 and torch.equal(loaded.scores(features), verifier.scores(features))

    # A checkpoint written before `orient` existed: no orientation tensor, no orient in its config.
    config = {k: v for k, v in json.loads((tmp_path / "flipped.json").read_text())["verifier_config"].items()
              if k != "orient"}
    meta = {"model": "m", "verifier_config": config, "input_dim": 2, "format_version": 1}
    tensors = {k: v for k, v in verifier.state_dict().items() if k != "orientation"}
    save_file(tensors, str(tmp_path / "old.safetensors"), metadata={"lover": json.dumps(meta)})
    old, _ = load_checkpoint(tmp_path / "old.safetensors")
    assert float(old.orientation) == 1.0 and old.config.orient == "none"


def test_test_time_fit_with_orient_vote_flips_a_fit_that_ranks_against_the_vote():
    """On these random features (seed 2) the plain label-free fit happens to rank against the vote (Spearman -0.33);
    the same fit with orient=vote stores the mirrored scores, 1 - p, which rise with the vote share."""
    from lover_lmeval.core.decode.branch import Branch
    from lover_lmeval.core.results import LoverResult
    from lover_lmeval.core.verify.scoring import fit_on_results

    g = torch.Generator().manual_seed(2)
    results = []
    for q in range(12):  # 12 questions x 6 branches, answers "q" or "q+1", features random (D = 8)
        texts = [f"The answer is {q + (i % 3 == 0)}." for i in range(6)]
        # one token spanning the text: CoT-decoding's confidence is its margin, 0.5 for the 4 majority branches and
        # 0.1 for the 2 others, so orienting by confidence must agree with orienting by the vote
        branches = [Branch(t, [0], [0.1 if i % 3 == 0 else 0.5], [(0, len(t))], "eos") for i, t in enumerate(texts)]
        results.append(LoverResult(branches, torch.randn(6, 2, 8, generator=g).numpy()))
    config = dict(restarts=1, epochs=5, hidden=8)
    fit_on_results(results, "number", VerifierConfig(**config))
    plain = torch.tensor([s for r in results for s in r.scores()])
    fit_on_results(results, "number", VerifierConfig(orient="vote", **config))
    oriented = torch.tensor([s for r in results for s in r.scores()])
    shares = vote_shares([[str(q + (i % 3 == 0)) for i in range(6)] for q in range(12)], 6).flatten()
    assert spearman(plain, shares) < 0  # -0.33: the flip is what this test exercises
    assert torch.allclose(oriented, 1 - plain, atol=1e-6) and spearman(oriented, shares) > 0
    assert torch.allclose(branch_confidences(results, "number", 7)[0], torch.tensor([0.1, 0.5, 0.5, 0.1, 0.5, 0.5, 0]))
    fit_on_results(results, "number", VerifierConfig(orient="confidence", **config))
    assert torch.allclose(torch.tensor([s for r in results for s in r.scores()]), oriented, atol=1e-6)
