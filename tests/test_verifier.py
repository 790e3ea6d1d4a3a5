"""Tests for lover_lmeval.core.verify.verifier (config, fit on a planted direction, determinism) and its checkpoints."""

import json
import math

import pytest
import torch
from safetensors import safe_open

import lover_lmeval.core.verify.verifier as V
from lover_lmeval.core.verify.checkpoints import load_checkpoint, save_checkpoint
from lover_lmeval.core.verify.verifier import FitResult, Verifier, VerifierConfig, config_from_string, fit

DIM = 48


def make_world(dim, seed=1234, offset_norm=50.0):
    """A hidden unit direction u and large shared offsets for the x+ and x- sets."""
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(dim, generator=g)
    off = torch.randn(2, dim, generator=g)  # (2, D)
    return u / u.norm(), offset_norm * off / off.norm(dim=1, keepdim=True)


def planted(n_q, world, *, n=10, seed=0, signal=1.0, p_minority=0.6):
    """Branches grouped like real ones: 2-5 answer groups out of ``n`` branches per question.

    With probability ``p_minority`` the true group is NOT the largest, so majority vote is
    often wrong.  x+ = question + branch noise + offset_pos + signal * s * u,
    x- = same question/branch noise + offset_neg - signal * s * u, s = +1 on the true group's
    branches, -1 elsewhere.  Returns features, mask, groups, labels, true group id, majority id.
    """
    u, off = world
    g = torch.Generator().manual_seed(seed)
    groups = torch.zeros(n_q, n, dtype=torch.long)
    labels = torch.zeros(n_q, n)
    true_group = torch.zeros(n_q, dtype=torch.long)
    majority = torch.zeros(n_q, dtype=torch.long)
    for q in range(n_q):
        k = int(torch.randint(2, 6, (1,), generator=g))
        assign = torch.cat([torch.arange(k), torch.randint(0, k, (n - k,), generator=g)])  # (n,) in [0, k)
        order = torch.argsort(torch.bincount(assign, minlength=k), descending=True, stable=True)
        minority = float(torch.rand(1, generator=g)) < p_minority
        t = int(order[1 + int(torch.randint(0, k - 1, (1,), generator=g))]) if minority else int(order[0])
        ids = torch.randperm(n, generator=g)[:k]  # arbitrary, non-contiguous group ids
        groups[q], labels[q] = ids[assign], (assign == t).float()
        true_group[q], majority[q] = ids[t], ids[int(order[0])]
    s = (2 * labels - 1)[..., None]  # (Q, N, 1)
    dim = u.numel()
    base = torch.randn(n_q, 1, dim, generator=g) + torch.randn(n_q, n, dim, generator=g)  # (Q, N, D)
    xp = base + off[0] + signal * s * u + 0.3 * torch.randn(n_q, n, dim, generator=g)
    xn = base + off[1] - signal * s * u + 0.3 * torch.randn(n_q, n, dim, generator=g)
    features = torch.stack([xp, xn], dim=2)  # (Q, N, 2, D)
    return features, torch.ones(n_q, n, dtype=torch.bool), groups, labels, true_group, majority


def picked_group(scores, mask, groups):
    """Group with the highest mean score per question."""
    onehot = torch.nn.functional.one_hot(groups, groups.shape[1]).float() * mask[..., None]  # (Q, N, G)
    counts = onehot.sum(1)  # (Q, G)
    means = torch.einsum("qng,qn->qg", onehot, scores) / counts.clamp(min=1)  # (Q, G)
    return torch.where(counts > 0, means, torch.full_like(means, -1.0)).argmax(1)  # (Q,)


pytestmark = pytest.mark.usefixtures("one_thread")


@pytest.fixture(scope="module")
def data():
    world = make_world(DIM)
    return planted(200, world, seed=1, signal=0.7), planted(300, world, seed=2, signal=0.7)


@pytest.fixture(scope="module")
def unsupervised_fit(data):
    train, _ = data
    return fit(*train[:3], VerifierConfig())


# ---------------------------------------------------------------- config

@pytest.mark.parametrize("field, value, needle", [
    ("hidden", 0, "hidden"), ("n_hidden_layers", -1, "n_hidden_layers"), ("epochs", 0, "epochs"),
    ("restarts", 0, "restarts"), ("batch_questions", -2, "batch_questions"), ("seed", 1.5, "seed"),
    ("normalize", "zscore", "none, mean, meanstd"), ("lr", 0.0, "lr"), ("lr", math.nan, "lr"),
    ("weight_decay", -0.1, "weight_decay"), ("curriculum", -0.2, "curriculum"), ("curriculum", math.inf, "curriculum"),
    ("losses", "nega+intre", "intre"), ("orient", "majority", "none, vote, confidence"),
    ("losses", "nega+supervised", "labels to fit")])
def test_config_validation(field, value, needle):
    with pytest.raises(ValueError, match=needle) as err:
        VerifierConfig(**{field: value})
    assert field in str(err.value)


def test_config_from_string():
    config = config_from_string(" losses=nega+intra+inter_raw ; curriculum=0.2;epochs=7;")
    assert (config.losses, config.curriculum, config.epochs) == ("nega+intra+inter_raw", 0.2, 7)
    assert config_from_string("") == VerifierConfig()
    for bad, needle in [("curiculum=0.2", "key one of hidden, "), ("epochs", "key=value"),
                        ("epochs=2.5", "epochs='2.5': expected int"), ("lr=1e-3;lr=2e-3", "lr twice"),
                        ("curriculum=-1", "curriculum must be")]:
        with pytest.raises(ValueError, match=needle):
            config_from_string(bad)


def test_forward_shapes():
    v = Verifier(DIM, VerifierConfig(hidden=8))
    p_pos, p_neg = v(torch.randn(3, 4, 2, DIM))
    assert p_pos.shape == p_neg.shape == (3, 4)
    s = v.scores(torch.randn(5, 2, DIM))
    assert s.shape == (5,) and ((s >= 0) & (s <= 1)).all()
    with pytest.raises(AssertionError, match=r"\(\.\.\., 2, 48\)"):
        v(torch.randn(3, 2, DIM + 1))


# ---------------------------------------------------------------- fit

def test_unsupervised_planted_direction_beats_majority(data, unsupervised_fit):
    """Held-out questions: the max-mean-score group is the true one >= 90% of the time."""
    _, (feats, mask, groups, labels, true_group, majority) = data
    with torch.no_grad():
        picked = picked_group(unsupervised_fit.verifier.scores(feats), mask, groups)
    acc = (picked == true_group).float().mean().item()
    majority_acc = (majority == true_group).float().mean().item()
    assert majority_acc < 0.6
    assert acc >= 0.9 and acc > majority_acc, (acc, majority_acc)


def test_raw_entropy_inter_term_finds_the_planted_direction_too(data):
    (train, (feats, mask, groups, _, true_group, majority)) = data
    result = fit(*train[:3], VerifierConfig(losses="nega+intra+inter_raw"))
    with torch.no_grad():
        acc = (picked_group(result.verifier.scores(feats), mask, groups) == true_group).float().mean().item()
    assert acc >= 0.85 and acc > (majority == true_group).float().mean().item() + 0.3, acc


def test_curriculum_stage_one_trains_the_inter_term_alone(data):
    """A threshold no batch ever gets under keeps the fit in stage one: the weights must equal those of a
    fit on the inter-group term alone (same seed, same representative draws)."""
    train, _ = data
    kw = dict(restarts=1, epochs=3, seed=7)
    staged = fit(*train[:3], VerifierConfig(losses="nega+intra+inter", curriculum=1e-12, **kw)).verifier
    alone = fit(*train[:3], VerifierConfig(losses="inter", **kw)).verifier
    for (name, a), b in zip(staged.state_dict().items(), alone.state_dict().values()):
        assert torch.equal(a, b), name
    plain = fit(*train[:3], VerifierConfig(losses="nega+intra+inter", **kw)).verifier
    assert not torch.equal(plain.mlp[0].weight, staged.mlp[0].weight)


def test_no_signal_control_is_near_chance():
    """Same generator without the planted direction: nothing to find, so no better than majority."""
    world = make_world(DIM)
    train, (feats, mask, groups, _, true_group, _) = planted(100, world, seed=3, signal=0.0), planted(
        300, world, seed=4, signal=0.0)
    r = fit(*train[:3], VerifierConfig(epochs=10, restarts=1))
    with torch.no_grad():
        acc = (picked_group(r.verifier.scores(feats), mask, groups) == true_group).float().mean().item()
    assert acc < 0.6


def test_balance_term_needs_answer_ids_and_is_trained(data):
    """The cross-question `balance` term reads answer ids (here each group id stands for one answer string in every
    question); without them the fit refuses to start, with them the term is in the history and the final losses."""
    features, mask, groups = data[0][:3]
    config = VerifierConfig(losses="nega+intra+inter+balance", epochs=2, restarts=1)
    with pytest.raises(ValueError, match="answer_ids"):
        fit(features, mask, groups, config)
    result = fit(features, mask, groups, config, answer_ids=groups)
    assert result.final_losses["balance"] > 0
    assert all("balance" in row for row in result.history)


def test_fit_result_contents(unsupervised_fit):
    r = unsupervised_fit
    assert isinstance(r, FitResult) and not r.verifier.training
    assert set(r.final_losses) == {"nega", "intra", "inter", "total"}
    assert len(r.restart_losses) == 3 and r.final_losses["total"] == min(r.restart_losses)
    assert len(r.history) == 3 * 40 and {"restart", "epoch", "total", "nega"} <= set(r.history[0])


def test_supervised_fit(data):
    (feats, mask, groups, labels, *_), (tf, tm, tg, tl, true_group, _) = data
    r = fit(feats, mask, groups, VerifierConfig(epochs=20, restarts=1), labels=labels)
    assert "supervised" in r.final_losses and "total" in r.final_losses
    with torch.no_grad():
        s = r.verifier.scores(tf)
    assert ((s > 0.5).float() == tl).float().mean() > 0.85
    assert (picked_group(s, tm, tg) == true_group).float().mean() > 0.95


def test_determinism_and_global_rng_untouched(data):
    feats, mask, groups = (x[:40] for x in data[0][:3])
    cfg = VerifierConfig(epochs=2, restarts=2, seed=7)
    state = torch.get_rng_state()
    a, b = fit(feats, mask, groups, cfg), fit(feats, mask, groups, cfg)
    assert torch.equal(state, torch.get_rng_state())
    for k, v in a.verifier.state_dict().items():
        assert torch.equal(v, b.verifier.state_dict()[k]), k
    assert a.history == b.history and a.restart_losses == b.restart_losses
    c = fit(feats, mask, groups, VerifierConfig(epochs=2, restarts=2, seed=8))
    assert not torch.equal(a.verifier.mlp[0].weight, c.verifier.mlp[0].weight)


def test_nan_features_rejected_but_nan_padding_ok(data):
    feats, mask, groups = (x[:20].clone() for x in data[0][:3])
    mask[:, -1] = False
    feats[:, -1] = math.nan  # padding: ignored
    fit(feats, mask, groups, VerifierConfig(epochs=1, restarts=1))
    feats[3, 2, 0, 5] = math.nan
    with pytest.raises(ValueError, match="NaN/inf in 1 real branch"):
        fit(feats, mask, groups, VerifierConfig(epochs=1, restarts=1))
    with pytest.raises(AssertionError, match=r"features must be \(Q, N, 2, D\), got \(20, 10, 96\)"):
        fit(feats.flatten(2), mask, groups)


def test_non_finite_restarts_skipped_then_error(data, monkeypatch):
    feats, mask, groups = (x[:20] for x in data[0][:3])
    real_total_loss = V.total_loss
    calls = {"n": 0}

    def first_restart_nan(*args, **kwargs):  # restart 0 does 1 step per epoch, 1 epoch here
        calls["n"] += 1
        total, terms = real_total_loss(*args, **kwargs)
        return (total * math.nan if calls["n"] == 1 else total), terms

    monkeypatch.setattr(V, "total_loss", first_restart_nan)
    with pytest.warns(UserWarning, match="restart 0"):
        r = fit(feats, mask, groups, VerifierConfig(epochs=1, restarts=2))
    assert math.isnan(r.restart_losses[0]) and math.isfinite(r.restart_losses[1])
    monkeypatch.setattr(V, "total_loss", lambda *a, **k: (real_total_loss(*a, **k)[0] * math.nan, {}))
    with pytest.raises(RuntimeError, match="all 2 verifier restart"), pytest.warns(UserWarning):
        fit(feats, mask, groups, VerifierConfig(epochs=1, restarts=2))


# ---------------------------------------------------------------- checkpoints

META = {"model": "Qwen/Qwen2.5-0.5B", "hidden_size": DIM, "layer": -1, "templates": ["true", "false"],
        "decoding": {"temperature": 0.7}, "n_branches": 10, "losses": "nega+intra+inter", "task": "gsm8k",
        "split": "train", "n_questions": 200, "seed": 0, "supervised": False, "final_losses": {"total": 3.2}}


def test_checkpoint_round_trip(tmp_path, data, unsupervised_fit):
    path = tmp_path / "ckpt" / "verifier.safetensors"
    save_checkpoint(path, unsupervised_fit.verifier, META)
    loaded, meta = load_checkpoint(path, expect={**META, "templates": ("true", "false")})
    feats = data[1][0]
    with torch.no_grad():
        assert torch.equal(loaded.scores(feats), unsupervised_fit.verifier.scores(feats))
    assert loaded.config == unsupervised_fit.verifier.config
    assert {k: meta[k] for k in META} == META and meta["input_dim"] == DIM
    sidecar = json.loads(path.with_suffix(".json").read_text())
    assert sidecar["model"] == META["model"] and sidecar["verifier_config"]["lr"] == VerifierConfig().lr
    with safe_open(str(path), framework="pt") as f:  # plain safetensors, metadata in the header
        assert json.loads(f.metadata()["lover"])["task"] == "gsm8k"
        assert set(f.keys()) >= {"norm_mean", "norm_std", "mlp.0.weight"}


@pytest.mark.parametrize("key, value", [("model", "meta-llama/Llama-3-8B"), ("hidden_size", 4096),
                                        ("layer", -2), ("templates", ["yes", "no"])])
def test_checkpoint_mismatch(tmp_path, key, value):
    path = tmp_path / "v.safetensors"
    save_checkpoint(path, Verifier(DIM, VerifierConfig(hidden=4)), META)
    with pytest.raises(ValueError) as err:
        load_checkpoint(path, expect={**META, key: value})
    msg = str(err.value)
    shown = lambda x: x if isinstance(x, str) else json.dumps(x)  # noqa: E731
    assert f"checkpoint was trained on {key}={shown(META[key])}" in msg
    assert f"but this run uses {key}={shown(value)}" in msg and "retrain with `lover train`" in msg


def test_checkpoint_several_mismatches_and_foreign_file(tmp_path):
    path = tmp_path / "v.safetensors"
    save_checkpoint(path, Verifier(DIM, VerifierConfig(hidden=4)), META)
    with pytest.raises(ValueError, match="model=.*layer=") as err:
        load_checkpoint(path, expect={"model": "x", "layer": 3})
    assert "hidden_size" not in str(err.value)
    assert load_checkpoint(path)[1]["task"] == "gsm8k"
    from safetensors.torch import save_file
    save_file({"w": torch.zeros(2)}, str(tmp_path / "other.safetensors"))
    with pytest.raises(ValueError, match="not a LoVer checkpoint"):
        load_checkpoint(tmp_path / "other.safetensors")
