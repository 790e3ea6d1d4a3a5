"""The README's leaderboard is generated from the committed selector results, so it cannot drift from them."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _selectors(module: str = "selectors_table"):
    """A module of benchmarks/selectors/, imported from the repository root as `python -m` imports it (benchmarks is
    not installed; pyproject.toml's pytest `pythonpath` puts the root on the import path)."""
    return importlib.import_module(f"benchmarks.selectors.{module}")


def test_readme_leaderboard_is_what_the_committed_results_give():
    selectors_table = _selectors()
    table, recommendation = selectors_table.build(REPO / "benchmarks" / "results" / "selectors")
    readme = (REPO / "README.md").read_text()
    assert selectors_table.readme_block(table, recommendation) in readme, \
        "README's leaderboard differs from the results: run `python -m benchmarks.selectors.selectors_table`"
    assert (REPO / "docs" / "leaderboard.png").is_file()


def _report(name: str, right: dict[str, list[int]]) -> dict:
    """A selectors_run.py report reduced to what the recommendation reads: per question, each selector's 0/1."""
    n = len(right["majority"])
    return {"set": name, "questions": [{"correct": {s: v[i] for s, v in right.items()}} for i in range(n)]}


def test_recommendation_follows_the_rule_fixed_before_the_results():
    """Run 19 B's rule, on hand-made outcomes (40 questions a set, `pass_at_n` right everywhere):

    - arithmetic, 0.5b/gsm8k and 0.5b/igsm: majority right on 20 of each, cot_sum on those 20 and 10 more. Pooled
      cot_sum 60/80 = 0.75 against 0.50; every paired difference is 0 or +1 with 20 of 80 at +1, so a bootstrap
      resample without any +1 has probability (60/80)^80 ~ 1e-10: the interval lies above 0 -> `cot_sum`,
      provisional (multistep and object_counting unscored). The SmolLM2 set of the family, where majority wins
      everything, is not read.
    - yes/no, 0.5b/bbh_navigate: cot_sum right on one question more than majority: best point estimate, but a
      resample misses that question with probability (39/40)^40 ~ 0.36, so the lower bound is 0 -> majority.
    - multiple choice: no 0.5B set -> no recommendation.
    """
    selectors_table = _selectors()
    arithmetic = {"majority": [1] * 20 + [0] * 20, "cot_sum": [1] * 30 + [0] * 10, "pass_at_n": [1] * 40}
    navigate = {"majority": [1] * 20 + [0] * 20, "cot_sum": [1] * 21 + [0] * 19, "pass_at_n": [1] * 40}
    smollm = {"majority": [1] * 40, "cot_sum": [0] * 40, "pass_at_n": [1] * 40}
    reports = {name: _report(name, right) for name, right in (
        ("0.5b/gsm8k", arithmetic), ("0.5b/igsm", arithmetic), ("0.5b/bbh_navigate", navigate),
        ("135m/gsm8k", smollm))}
    found = selectors_table.recommend(reports)

    assert found["arithmetic"]["selector"] == "cot_sum"
    assert found["arithmetic"]["n"] == 80 and found["arithmetic"]["best_acc"] == 0.75
    assert found["arithmetic"]["best_minus_majority"]["low"] > 0
    assert found["arithmetic"]["sets"] == ["0.5b/gsm8k", "0.5b/igsm"]
    assert found["arithmetic"]["missing"] == ["0.5b/bbh_multistep_arithmetic_two", "0.5b/bbh_object_counting"]
    assert found["yes/no, true/false"]["selector"] == "majority"
    assert found["yes/no, true/false"]["best_point_estimate"] == "cot_sum"
    assert found["yes/no, true/false"]["best_minus_majority"]["low"] == 0
    assert found["multiple choice"]["selector"] is None


def test_a_recommendation_that_answers_one_way_says_so():
    """The one-answer check, by hand (20 questions a set):

    - 0.5b/bbh_navigate: the gold answers are "Yes" on the first 14 questions (0.70). `lover_max` says "Yes" to the
      first 19 (share 0.95 of 20 answered: exactly on the package's rule, >= 0.95 of >= 20, so it is one answer):
      right on 15. Majority says "Yes" to the first 10, "No" to the next 4 and "Yes"
      to the last 6 (share 0.80, not flagged): right on 10.
    - 0.5b/bbh_web_of_lies: both say "No" on 12 and "Yes" on 8 (share 0.60, not flagged), right on 18 of 20.
    - 0.5b/bbh_causal_judgement: both right on all 20; its report has no picks -> listed as unchecked, not as fine.
    Pooled, lover_max 53/60 against majority 48/60: the best point estimate, flagged on navigate with 0.95 / 0.70.
    """
    selectors_table = _selectors()

    def report(name: str, gold: list[str], picked: dict[str, list[str]] | None) -> dict:
        questions = [{"correct": {**{s: int(v[i] == gold[i]) for s, v in picked.items()}, "pass_at_n": 1},
                      "gold": gold[i], "picked": {s: v[i] for s, v in picked.items()}} for i in range(len(gold))]
        return {"set": name, "questions": questions}

    navigate_gold = ["Yes"] * 14 + ["No"] * 6
    navigate = report("0.5b/bbh_navigate", navigate_gold,
                      {"majority": ["Yes"] * 10 + ["No"] * 4 + ["Yes"] * 6, "lover_max": ["Yes"] * 19 + ["No"]})
    lies_gold = ["No"] * 10 + ["Yes"] * 10
    lies_picks = ["No"] * 12 + ["Yes"] * 8
    lies = report("0.5b/bbh_web_of_lies", lies_gold, {"majority": lies_picks, "lover_max": lies_picks})
    judgement = _report("0.5b/bbh_causal_judgement",
                        {"majority": [1] * 20, "lover_max": [1] * 20, "pass_at_n": [1] * 20})

    assert selectors_table.one_answer_shares(navigate) == {
        "shares": {"majority": 0.8, "lover_max": 0.95, "gold": 0.7}, "one_way": ["lover_max"]}
    assert selectors_table.one_answer_shares(judgement) is None
    found = selectors_table.recommend({"0.5b/bbh_navigate": navigate, "0.5b/bbh_web_of_lies": lies,
                                       "0.5b/bbh_causal_judgement": judgement})["yes/no, true/false"]
    assert found["best_point_estimate"] == "lover_max" and found["best_acc"] == 53 / 60
    assert found["one_answer"] == {"0.5b/bbh_navigate": {"share": 0.95, "gold": 0.7}}
    assert found["one_answer_unchecked"] == ["0.5b/bbh_causal_judgement"]
    assert selectors_table._one_answer(found) == ("; `lover_max` answers one way on 0.5b/bbh_navigate 95% (gold 70%); "
                                                  "not checked for one answer: 0.5b/bbh_causal_judgement (reports "
                                                  "without picks)")


def test_a_winner_answering_one_way_on_every_set_is_read_beside_the_best_that_does_not():
    """The family's only set answered one way by its winner (20 questions, gold "A" on the first 14, "B" after):

    - `lover_max` says "A" to all 20 (share 1.0, one answer): right on 14, the set's base rate 0.70;
    - majority says "A" to the first 10 and "C" to the rest: right on 10 (0.50);
    - `cot_sum` says "A" to the first 10, "C" to the next 4, "B" to 2, "C" to the last 4 (share 0.50): right on 12.
    The rule's winner is lover_max; its gain is the base rate. Beside it: cot_sum, +0.10 over majority, the two extra
    right answers a resample misses with probability (18/20)^20 ~ 0.12, so its interval starts at 0: not above it.
    """
    selectors_table = _selectors()
    gold = ["A"] * 14 + ["B"] * 6
    picked = {"majority": ["A"] * 10 + ["C"] * 10, "lover_max": ["A"] * 20,
              "cot_sum": ["A"] * 10 + ["C"] * 4 + ["B"] * 2 + ["C"] * 4}
    questions = [{"correct": {**{s: int(v[i] == gold[i]) for s, v in picked.items()}, "pass_at_n": 1},
                  "gold": gold[i], "picked": {s: v[i] for s, v in picked.items()}} for i in range(20)]
    found = selectors_table.recommend({"0.5b/mmlu_pro": {"set": "0.5b/mmlu_pro", "questions": questions}})
    found = found["multiple choice"]
    assert found["best_point_estimate"] == "lover_max" and found["best_acc"] == 0.7
    assert found["best_answering_no_set_one_way"]["selector"] == "cot_sum"
    assert abs(found["best_answering_no_set_one_way"]["minus_majority"]["diff"] - 0.1) < 1e-12
    assert found["best_answering_no_set_one_way"]["minus_majority"]["low"] == 0
    text = selectors_table._no_selection(found)
    assert text.startswith(". It answers one way on every set of the family: its gain is the sets' base rates")
    assert "the best selector answering no set one way is `cot_sum`, +0.100 [" in text and text.endswith(
        "vs majority (not above it).")


def test_sets_of_drawn_paths_say_their_greedy_row_is_no_greedy_decode():
    selectors_table = _selectors()
    table = {"decoding": {"0.5b/gsm8k": "cot", "0.5b/gsm8k_sample": "sample"}}
    assert selectors_table._not_greedy(table) == [
        "On 0.5b/gsm8k_sample (decoding=sample) `greedy` is branch 0, one sampled path, not a greedy decode.", ""]
    assert selectors_table._not_greedy({"decoding": {"0.5b/gsm8k": "cot"}}) == []


def test_sampled_and_cot_banks_are_paired_by_question_not_by_position():
    """The same 20 questions in the two banks, the sampled report's in reverse order (pairing must follow (task, doc)):

    - CoT bank: majority right on questions 0-9, cot_sum on 0-11 -> +0.10 over majority;
    - sampled bank: majority right on 0-5 and 10-13 (10 of 20), cot_sum on 0-13 -> cot_sum 0.70 vs 0.60 on CoT:
      sampled - CoT = +0.10 (two questions, 12 and 13, gained; none lost). Majority: 0.50 on both, yet not the same
      questions (6-9 lost, 10-13 gained), so its paired difference is 0 with an interval on both sides of it.
    - one path score, right branch first on CoT (AUROC 1.0), wrong branch first on sampled (0.0).
    A report over other documents is refused by name.
    """
    sampled_vs_cot = _selectors("sampled_vs_cot")

    def report(name, right, order, scores):
        return {"set": name, "questions": [
            {"task": "lover_gsm8k", "doc": i, "correct": {s: int(i in r) for s, r in right.items()},
             "branch_right": [1, 0], "path_scores": {"cot_confidence": scores}} for i in order]}

    everything = set(range(20))
    cot = report("0.5b/gsm8k", {"majority": set(range(10)), "cot_sum": set(range(12)), "pass_at_n": everything},
                 range(20), [0.9, 0.1])
    sampled = report("0.5b/gsm8k_sample", {"majority": set(range(6)) | set(range(10, 14)),
                                           "cot_sum": set(range(14)), "pass_at_n": everything},
                     reversed(range(20)), [0.1, 0.9])
    found = sampled_vs_cot.compare(sampled, cot)
    assert found["n"] == 20
    cot_sum, majority = found["strategies"]["cot_sum"], found["strategies"]["majority"]
    assert (cot_sum["cot_acc"], cot_sum["sampled_acc"]) == (0.6, 0.7)
    assert abs(cot_sum["sampled_minus_cot"]["diff"] - 0.1) < 1e-12 and cot_sum["sampled_minus_cot"]["high"] > 0
    assert abs(cot_sum["cot_minus_majority"]["diff"] - 0.1) < 1e-12
    assert abs(cot_sum["sampled_minus_majority"]["diff"] - 0.2) < 1e-12
    assert majority["sampled_minus_cot"]["diff"] == 0
    assert majority["sampled_minus_cot"]["low"] < 0 < majority["sampled_minus_cot"]["high"]
    assert found["auroc"]["cot_confidence"] == {"sampled": 0.0, "cot": 1.0}
    assert "| `cot_sum` | 0.600 | 0.700 | +0.100 [" in sampled_vs_cot.markdown(found)
    other = report("0.5b/gsm8k", {"majority": set(), "cot_sum": set(), "pass_at_n": everything}, range(1, 21),
                   [0.9, 0.1])
    with pytest.raises(SystemExit, match="hold different questions"):
        sampled_vs_cot.compare(sampled, other)


def test_committed_sampled_vs_cot_reading_is_what_the_committed_reports_give():
    folder = REPO / "benchmarks" / "results" / "selectors"
    _, text = _selectors("sampled_vs_cot").reading(folder)
    assert (folder / "sampled_vs_cot.md").read_text() == text, \
        "sampled_vs_cot.md differs from the reports: run `python -m benchmarks.selectors.sampled_vs_cot`"


def test_lover_standing_names_every_selector_whose_interval_lies_above_a_lover_row():
    """By hand (40 questions a set; `pass_at_n` right everywhere, an oracle, never compared):

    - 0.5b/gsm8k: majority right on questions 0-19, `lover_max` and greedy on 0-9 (inside majority's), `lover_sum`
      on 0-19 (majority's), `cot_sum` on 0-29. 0.5b/igsm, pooled after it: every selector right on none, and its
      report says `lover_max` answers one way there. Pooled (n = 80): `lover_max` − majority = 10/80 = −0.125, every
      paired difference 0 or −1. Against `lover_max`: `cot_sum` +0.25 and majority +0.125, each resample lacking a +1
      with probability at most (70/80)^80 ~ 2e-5, so both intervals lie above 0; greedy ties it (0, not above).
      Against `lover_sum`: `cot_sum` +0.125 only (majority ties). Largest difference first.
    - 0.5b/gsm8k_sample (in no family) is left out; 1.5b/gsm8k, where every selector is right everywhere, is its own
      size, and `lover_max` is beaten by none there.
    """
    lover_standing = _selectors("lover_standing")
    gsm8k = {"majority": [1] * 20 + [0] * 20, "lover_max": [1] * 10 + [0] * 30, "greedy": [1] * 10 + [0] * 30,
             "lover_sum": [1] * 20 + [0] * 20, "cot_sum": [1] * 30 + [0] * 10, "pass_at_n": [1] * 40}
    nowhere = {s: [0] * 40 for s in gsm8k}
    everywhere = {s: [1] * 40 for s in gsm8k}
    reports = {name: _report(name, right) for name, right in (
        ("0.5b/gsm8k", gsm8k), ("0.5b/igsm", nowhere), ("0.5b/gsm8k_sample", gsm8k), ("1.5b/gsm8k", everywhere))}
    found = lover_standing.lover_standing(reports, {"0.5b/igsm": {"one_way": ["lover_max"]}, "0.5b/gsm8k": None})

    assert [(e["size"], e["family"], e["row"], e["sets"], e["n"]) for e in found] == [
        ("0.5b", "arithmetic", row, ["0.5b/gsm8k", "0.5b/igsm"], 80) for row in ("lover_max", "lover_sum")] + [
        ("1.5b", "arithmetic", row, ["1.5b/gsm8k"], 40) for row in ("lover_max", "lover_sum")]
    lover_max, lover_sum, large, _ = found
    assert lover_max["minus_majority"]["diff"] == -0.125 and lover_max["minus_majority"]["high"] < 0
    assert [(b["selector"], b["minus_lover"]["diff"]) for b in lover_max["beaten_by"]] == [("cot_sum", 0.25),
                                                                                          ("majority", 0.125)]
    assert all(b["minus_lover"]["low"] > 0 for b in lover_max["beaten_by"])
    assert [b["selector"] for b in lover_sum["beaten_by"]] == ["cot_sum"]
    assert lover_max["one_way_on"] == ["0.5b/igsm"] and lover_sum["one_way_on"] == []
    assert large["beaten_by"] == []
    lines = lover_standing.readme_lines(found)
    assert lines[1].startswith("- 0.5b arithmetic (gsm8k, igsm; n = 80): `lover_max` -0.125 [")
    assert ("beaten by 2 selectors (majority voting among them), most by `cot_sum` (+0.250 [" in lines[1]
            and "answering one way on 1 of its 2 sets; `lover_sum`" in lines[1])
    assert lines[2].startswith("- 1.5b arithmetic (gsm8k; n = 40): `lover_max` +0.000 [+0.000, +0.000] vs majority, "
                               "beaten by none;")


def test_lover_standing_compares_only_selectors_every_pooled_set_holds():
    """A family's second set lacks `cot_sum` (a report written before that row; 40 questions a set, majority right on
    the first 20 of each, `lover_max` on none, `cot_sum` on all 40 of the first). Pooled over both (n = 80) majority
    beats `lover_max` (+0.25, a resample without a +1 has probability (60/80)^80 ~ 1e-10); `cot_sum` is left out of
    the comparison rather than failing on the missing key. A set without `majority` stops with the set named."""
    lover_standing = _selectors("lover_standing")
    full = {"majority": [1] * 20 + [0] * 20, "lover_max": [0] * 40, "cot_sum": [1] * 40}
    short = {"majority": [1] * 20 + [0] * 20, "lover_max": [0] * 40}
    found = lover_standing.lover_standing({"0.5b/gsm8k": _report("0.5b/gsm8k", full),
                                           "0.5b/igsm": _report("0.5b/igsm", short)})
    assert [(e["row"], e["n"], [b["selector"] for b in e["beaten_by"]]) for e in found] == [("lover_max", 80,
                                                                                            ["majority"])]
    no_majority = {"set": "0.5b/gsm8k", "questions": [{"correct": {"lover_max": 0}}]}
    with pytest.raises(SystemExit, match="0.5b/gsm8k: no `majority` row"):
        lover_standing.lover_standing({"0.5b/gsm8k": no_majority})
