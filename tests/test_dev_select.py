"""select=dev:K: K gold-labelled dev questions choose the probe, and nothing else reads a label."""

from __future__ import annotations

import json

import pytest
import torch

from lover_lmeval.apps import train as train_module
from lover_lmeval.core.verify.dev_select import DevSelection, dev_accuracy, fit_with_dev, parse_select
from lover_lmeval.core.verify.verifier import VerifierConfig
from lover_lmeval.data.tasks import load_gsm8k
from test_training import _train
from test_verifier import make_world, picked_group, planted

pytestmark = pytest.mark.usefixtures("one_thread")


def test_parse_select():
    assert parse_select("none") == 0 and parse_select("dev:66") == 66
    for bad in ("dev", "dev:0", "test:5", "dev:x"):
        with pytest.raises(ValueError, match="dev:K"):
            parse_select(bad)


def test_dev_selection_settings_are_validated():
    with pytest.raises(ValueError, match="validate_every"):
        DevSelection(validate_every=0)


def test_dev_questions_never_come_from_the_test_split(tmp_path, monkeypatch, tiny_model_dir):
    with pytest.raises(ValueError, match="test split"):
        _train(tmp_path, monkeypatch, tiny_model_dir, "dev-test", select="dev:2", split_name="test")


def test_the_authors_regime_keeps_its_own_losses_in_lover_train(tmp_path, monkeypatch, tiny_model_dir):
    _, meta = _train(tmp_path, monkeypatch, tiny_model_dir, "authors-losses",
                     fit_config="regime=authors;epochs=2;restarts=1")
    assert meta["losses"] == "nega+intra+inter_raw"


def test_dev_accuracy_is_lover_max_on_real_branches():
    """Question 0: branch 1 scores highest and is right; question 1: the padded branch 2 would score highest but is
    padding, so branch 0 (wrong) is picked: accuracy 1/2."""

    class Fixed(torch.nn.Module):
        def scores(self, features):
            return features[..., 0, 0]  # (K, N): the score is the first feature of x+

    features = torch.zeros(2, 3, 2, 1)
    features[0, :, 0, 0] = torch.tensor([0.1, 0.9, 0.5])
    features[1, :, 0, 0] = torch.tensor([0.6, 0.2, 0.99])
    mask = torch.tensor([[True, True, True], [True, True, False]])
    labels = torch.tensor([[0.0, 1.0, 0.0], [0.0, 1.0, 1.0]])
    assert dev_accuracy(Fixed(), features, mask, labels) == 0.5


def test_dev_selection_keeps_the_checkpoint_its_dev_accuracy_names():
    world = make_world(32)
    train = planted(120, world, seed=1, signal=0.7)
    dev = planted(40, world, seed=2, signal=0.7)
    test = planted(200, world, seed=3, signal=0.7)
    config = VerifierConfig(epochs=12, restarts=2, seed=0)
    selection = DevSelection(init_tries=4, validate_every=2)
    result, report = fit_with_dev(train[0], train[1], train[2], dev[0], dev[1], dev[3], config, selection)
    assert len(report["tries"]) == 2
    assert report["dev_accuracy"] == max(t["dev_accuracy"] for t in report["tries"])
    assert dev_accuracy(result.verifier, dev[0], dev[1], dev[3]) == pytest.approx(report["dev_accuracy"])
    held_out = (picked_group(result.verifier.scores(test[0]).detach(), test[1], test[2]) == test[4]).float().mean()
    assert held_out > 0.6  # the planted direction, with its sign fixed by the dev labels
    again, _ = fit_with_dev(train[0], train[1], train[2], dev[0], dev[1], dev[3], config, selection)
    assert all(torch.equal(a, b) for a, b in zip(result.verifier.state_dict().values(),
                                                 again.verifier.state_dict().values()))


def _dev_questions(tmp_path, monkeypatch, limit, k):
    """The split's documents limit .. limit+k-1 (the dev questions) and their rows in the data file."""
    from test_training import _data_dir

    root = _data_dir(tmp_path / "probe-order", scramble=False)
    monkeypatch.setenv("LOVER_DATA_DIR", str(root))
    questions = [d["question"] for d in load_gsm8k()["train"]][limit: limit + k]
    rows = [json.loads(line) for line in open(root / "gsm8k" / "train.jsonl")]
    return questions, {i for i, row in enumerate(rows) if row["question"] in questions}


@pytest.mark.parametrize("supervised", [False, True])
def test_select_dev_reads_only_the_dev_labels(tmp_path, monkeypatch, tiny_model_dir, supervised):
    """Only the dev questions' gold answers are read, scrambling every other one leaves the checkpoint
    bit-identical, and the metadata discloses K labels and which questions. (A random tiny model is never right,
    so no dev accuracy reaches the authors' 0.1 floor: low_accuracy=0 keeps its tries normal.)"""
    dev_questions, keep = _dev_questions(tmp_path, monkeypatch, limit=4, k=2)
    read = []  # every document whose gold answer `lover train` reads (lm-eval itself peeks at a target to build a task)
    real_gold = train_module.gold_answers
    monkeypatch.setattr(train_module, "gold_answers", lambda split, docs, *a: read.extend(d["question"] for d in docs)
                        or real_gold(split, docs, *a))
    kw = dict(select="dev:2", dev_selection="init_tries=2;max_init_tries=2;low_accuracy=0",
              fit_config="epochs=4;restarts=1", supervised=supervised)
    clean, meta = _train(tmp_path, monkeypatch, tiny_model_dir, f"dev-{supervised}", **kw)
    scrambled, _ = _train(tmp_path, monkeypatch, tiny_model_dir, f"dev-scrambled-{supervised}", scramble=True,
                          keep_rows=keep, **kw)
    assert clean.read_bytes() == scrambled.read_bytes()
    assert read and set(read) == set(dev_questions)
    assert meta["gold_labels_used"] == 2 and meta["dev_question_ids"] == [4, 5] and meta["select"] == "dev:2"
    assert meta["supervised"] is supervised


def test_label_free_and_supervised_checkpoints_disclose_their_labels(tmp_path, monkeypatch, tiny_model_dir):
    _, free = _train(tmp_path, monkeypatch, tiny_model_dir, "free", fit_config="epochs=2;restarts=1")
    _, sup = _train(tmp_path, monkeypatch, tiny_model_dir, "sup-all", supervised=True, fit_config="epochs=2;restarts=1")
    assert free["gold_labels_used"] == 0 and "select" not in free
    assert sup["gold_labels_used"] == 4


def test_rows_scored_by_a_labelled_checkpoint_say_how_many_labels():
    from lover_lmeval.apps.samples import verifier_rows
    from lover_lmeval.core.verify.checkpoints import gold_labels_used, label_tag

    assert label_tag({"gold_labels_used": 0}) == "" and label_tag({"supervised": False, "n_questions": 200}) == ""
    assert label_tag({"gold_labels_used": 66, "select": "dev:66"}) == "[dev66]"
    assert label_tag({"gold_labels_used": 200, "supervised": True}) == "[gold200]"
    assert gold_labels_used({"supervised": True, "n_questions": 150}) == 150  # a checkpoint older than the field
    rows = verifier_rows([], [], None, "trained", "trained", "[dev66]")
    assert set(rows) == {"trained_max[dev66]", "trained_sum[dev66]"}
