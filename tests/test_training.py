"""`lover train` end to end on a tiny llama: no label leakage, resumable bank, checkpoints that load."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from lover_lmeval.core.decode import decoding
from lover_lmeval.core.verify.checkpoints import load_checkpoint
from lover_lmeval.apps.settings import TrainSettings
from lover_lmeval.apps.train import train

REPO = Path(__file__).resolve().parents[1]
SHARED_GSM8K = REPO.parent / "shared" / "data" / "gsm8k"


def _data_dir(root: Path, scramble: bool, keep_rows: set[int] = frozenset()) -> Path:
    """A LOVER_DATA_DIR with 6 real GSM8K questions; `scramble` replaces every gold number but those of `keep_rows`."""
    (root / "gsm8k").mkdir(parents=True)
    rows = [json.loads(line) for line in open(SHARED_GSM8K / "train.jsonl")][:6]
    for i, row in enumerate(rows):
        if scramble and i not in keep_rows:
            row["answer"] = re.sub(r"\d+", str(900 + i), row["answer"])
    for split in ("train", "test"):
        (root / "gsm8k" / f"{split}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return root


def _train(tmp_path, monkeypatch, tiny_model_dir, name, scramble=False, limit=4, keep_rows=frozenset(),
           split_name="train", **kw):
    monkeypatch.setenv("LOVER_DATA_DIR", str(_data_dir(tmp_path / f"data-{name}", scramble, keep_rows)))
    out = tmp_path / f"{name}.safetensors"
    kw.setdefault("bank", str(tmp_path / f"bank-{name}.jsonl.gz"))
    metadata = train(TrainSettings(model_args=f"pretrained={tiny_model_dir},n_branches=3", task="lover_gsm8k",
                                   split=split_name, limit=limit, out=out, include_path=str(REPO / "task_configs"),
                                   gen_kwargs="max_gen_toks=12", **kw))
    return out, metadata


def test_scrambled_gold_answers_leave_the_unsupervised_checkpoint_bit_identical(tmp_path, monkeypatch, tiny_model_dir):
    clean, meta = _train(tmp_path, monkeypatch, tiny_model_dir, "clean")
    scrambled, _ = _train(tmp_path, monkeypatch, tiny_model_dir, "scrambled", scramble=True)
    assert clean.read_bytes() == scrambled.read_bytes()
    # the authors' regime without dev labels is just as label-free (a short run of it)
    authors = "regime=authors;epochs=30;resample_every=10"
    clean_a, meta_a = _train(tmp_path, monkeypatch, tiny_model_dir, "clean-authors", fit_config=authors)
    scrambled_a, _ = _train(tmp_path, monkeypatch, tiny_model_dir, "scrambled-authors", scramble=True,
                            fit_config=authors)
    assert clean_a.read_bytes() == scrambled_a.read_bytes()
    assert json.loads(clean_a.with_suffix(".json").read_text())["verifier_config"]["regime"] == "authors"
    assert meta["supervised"] is False and meta["n_questions"] == 4 and meta["extract"] == "number"
    assert clean.with_suffix(".json").is_file() and clean.with_suffix(".report.json").is_file()
    assert clean.with_suffix(".losses.png").stat().st_size > 0


def test_supervised_checkpoint_does_read_labels(tmp_path, monkeypatch, tiny_model_dir):
    _, meta = _train(tmp_path, monkeypatch, tiny_model_dir, "sup", supervised=True)
    assert meta["supervised"] is True and meta["losses"] == "supervised"


def test_retraining_from_the_bank_decodes_nothing_and_checkpoints_refuse_other_layers(tmp_path, monkeypatch,
                                                                                       tiny_model_dir):
    bank = str(tmp_path / "bank.jsonl.gz")
    first, meta = _train(tmp_path, monkeypatch, tiny_model_dir, "first", bank=bank)

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded again although every question is in the bank")

    monkeypatch.setattr("lover_lmeval.core.decode.engine.HFEngine.decode", no_decoding)
    again, _ = _train(tmp_path, monkeypatch, tiny_model_dir, "again", bank=bank, losses="nega+inter")
    assert json.loads(again.with_suffix(".json").read_text())["losses"] == "nega+inter"
    # A bank still growing: --banked_only trains on the 4 banked of the first 6 questions, decoding none.
    _, grown = _train(tmp_path, monkeypatch, tiny_model_dir, "grown", bank=bank, limit=6, banked_only=True)
    assert grown["n_questions"] == 4 and grown["question_indices"] == [0, 1, 2, 3]
    verifier, stored = load_checkpoint(first, expect={k: meta[k] for k in ("model", "hidden_size", "layer", "templates")})
    with pytest.raises(ValueError, match=r"trained on layer=2, but this run uses layer=3"):
        load_checkpoint(first, expect={**{k: meta[k] for k in ("model", "hidden_size", "templates")}, "layer": 3})
    assert decoding.DecodingConfig(**stored["decoding"]).n_branches == 3


def test_one_sided_flags_fits_that_call_every_branch_false_or_true():
    from lover_lmeval.core.verify.scoring import one_sided

    """Per question, on what selection sees: a held-out fit that calls no branch true (highest score 0.258,
    median 0.067) calls every answer false; 19 of 20 questions without a branch above 0.5 = 95% -> flagged, 18 of
    20 = 90% -> not."""
    held_out = [np.array([0.258, 0.067, 0.01]), np.array([0.067, 0.002])]
    assert one_sided(held_out) == "false"
    assert one_sided([np.array([0.99, 0.6]), np.array([0.97, 0.51])]) == "true"
    silent = [np.array([0.1, 0.3])]
    assert one_sided(silent * 19 + [np.array([0.2, 0.7])]) == "false"
    assert one_sided(silent * 18 + [np.array([0.2, 0.7])] * 2) is None
    assert one_sided([np.array([0.2, 0.7])] * 20) is None
    assert one_sided([np.array([])]) is None


def test_constant_answer_flags_fits_that_give_every_question_the_same_answer():
    """navigate, run 10: "no" in 250 of 250 -> "no"; 19 of 20 = 95% -> flagged; 18 of 20 = 90% -> not; under 20
    answered questions (e.g. `--limit 10`) one answer everywhere is too likely by chance to warn about."""
    from lover_lmeval.core.verify.scoring import constant_answer

    assert constant_answer(["no"] * 250) == "no"
    assert constant_answer(["False"] * 19 + ["True"]) == "False"
    assert constant_answer(["no"] * 18 + ["yes"] * 2) is None
    assert constant_answer(["yes"] * 10) is None
    assert constant_answer([]) is None
    assert constant_answer([""] * 20) is None  # no branch answered: nothing was picked
    assert constant_answer(["no"] * 20 + [""] * 5) == "no"  # share among the answered questions


def test_warn_if_constant_answer_names_the_answer_its_share_and_the_task(caplog):
    """20 questions, each with branches answering 3 (scored .9) and 4 (.1, .2): LoVer(sum) picks 3 everywhere."""
    from lover_lmeval.core.decode.branch import Branch
    from lover_lmeval.core.results import LoverResult
    from lover_lmeval.core.verify.scoring import warn_if_constant_answer

    def result(p_pos):
        branches = [Branch(f"So the answer is {a}.", [1], [0.5], [(0, 1)], "stop") for a in ("3", "4", "4")]
        return LoverResult(branches, None, {"lover": np.stack([p_pos, 1 - np.array(p_pos)], axis=-1)})

    with caplog.at_level("WARNING", logger="lm_eval.lover_hf"):
        warn_if_constant_answer([result([0.9, 0.1, 0.2])] * 19 + [result([0.1, 0.9, 0.9])], "lover_gsm8k", "number")
    assert "picks the answer '3' in 95% of them" in caplog.text and "lover_gsm8k" in caplog.text
    caplog.clear()
    with caplog.at_level("WARNING", logger="lm_eval.lover_hf"):
        warn_if_constant_answer([result([0.9, 0.1, 0.2])] * 18 + [result([0.1, 0.9, 0.9])] * 2, "lover_gsm8k", "number")
    assert caplog.text == ""


def test_vote_orientation_is_label_free_and_stored_in_the_checkpoint(tmp_path, monkeypatch, tiny_model_dir):
    clean, meta = _train(tmp_path, monkeypatch, tiny_model_dir, "oriented", fit_config="orient=vote")
    scrambled, _ = _train(tmp_path, monkeypatch, tiny_model_dir, "oriented-scrambled", scramble=True,
                          fit_config="orient=vote")
    assert clean.read_bytes() == scrambled.read_bytes()  # the orientation reads answers' agreement, never gold
    orientation = meta["orientation"]
    assert orientation["by"] == "vote" and orientation["flipped"] == (orientation["correlation"] < 0)
    verifier, stored = load_checkpoint(clean)
    assert float(verifier.orientation) == (-1.0 if orientation["flipped"] else 1.0)
    assert stored["verifier_config"]["orient"] == "vote"
    _, supervised = _train(tmp_path, monkeypatch, tiny_model_dir, "oriented-sup", supervised=True,
                           fit_config="orient=vote")
    assert supervised["orientation"] is None  # labels fix a supervised verifier's sign
