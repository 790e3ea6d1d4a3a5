"""Tests for lover_lmeval.core.select.answers: hand-written cases per extractor, then real Qwen2.5-Coder-0.5B
outputs."""

from __future__ import annotations

import collections
import dataclasses
import json
from pathlib import Path

import pytest

from lover_lmeval.core.select.answers import (
    EXTRACTORS,
    Answer,
    extract_choice,
    extract_number,
    extract_true_false,
    extract_yes_no,
    get_extractor,
    normalise_number,
)

SAMPLES = Path(__file__).parents[1].parent / "shared" / "samples" / "qwen2.5-coder-0.5b-gsm8k-cot10.jsonl"


def _check(extractor, text: str, value: str | None, span: str | None = None) -> Answer | None:
    """Assert ``extractor(text)`` gives ``value`` and that its span covers ``span`` (default: ``value``)."""
    answer = extractor(text)
    if value is None:
        assert answer is None, answer
        return None
    assert answer is not None, text
    assert answer.value == value
    assert text[answer.start : answer.end] == (value if span is None else span)
    return answer


# --- normalise_number --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("18", "18"),
        ("18.0", "18"),
        ("18.00", "18"),
        ("$18", "18"),
        ("\\$18", "18"),
        (" 18. ", "18"),
        ("18%", "18"),
        ("1,000", "1000"),
        ("1,234,567.50", "1234567.5"),
        ("-50", "-50"),
        ("\u221250", "-50"),
        ("+3", "3"),
        ("-0.0", "0"),
        ("0.50", "0.5"),
        (".5", "0.5"),
        ("007", "7"),
        ("123456789012345678901234567890", "123456789012345678901234567890"),
    ],
)
def test_normalise_number(raw, expected):
    assert normalise_number(raw) == expected


@pytest.mark.parametrize("raw", ["", "N", "abc", "1,8", "12,34", "1,0000", "1.2.3", "18 dollars", "--5", "3B"])
def test_normalise_number_rejects_non_numbers(raw):
    assert normalise_number(raw) is None


def test_gold_and_prediction_group_together():
    assert normalise_number("18") == normalise_number("18.00") == normalise_number("$18.") == "18"


# --- number --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "span"),
    [
        ("She makes 9 * 2 = 18 dollars. The answer is $18.", "18", "18"),
        ("The answer is 18 dollars.", "18", "18"),
        ("The answer is 18.00", "18", "18.00"),
        ("So the total is 1,000 apples. The answer is 1,000.", "1000", "1,000"),
        ("The temperature falls to -50 degrees. The answer is -50.", "-50", "-50"),
        ("The answer is \u22127.", "-7", "\u22127"),
        ("Half of 1 is 0.50, so the answer is 0.50.", "0.5", "0.50"),
        ("**Answer:** 42", "42", "42"),
        ("Final Answer: 42\n", "42", "42"),
        ("The answer is: **42**", "42", "42"),
        ("Therefore, the answer is \\(\\boxed{-12}\\).", "-12", "-12"),
        ("Janet makes \\(\\boxed{\\$18}\\) dollars every day.", "18", "18"),
        ("The total is \\boxed{18 \\text{ dollars}} per day.", "18", "18"),
        ("9 * 2 = 18\n#### 18", "18", "18"),
        # BBH multistep arithmetic / object counting CoT endings.
        ("(-1 + 2 + 9 * 5) = 46. (-2 + -4 + -4 * -7) = 22. So 46 - 22 = 24. So the answer is 24.", "24", "24"),
        ("A = -12 * 960 = -11520. So the answer is -11520.", "-11520", "-11520"),
        ("flute (1), piano (2), trombone (3). So the answer is 3.", "3", "3"),
    ],
)
def test_number_markers(text, value, span):
    _check(extract_number, text, value, span)


def test_number_span_points_at_the_last_marker():
    text = "Janet makes $18 a day. The answer is $18."
    answer = _check(extract_number, text, "18")
    assert answer.start == text.rindex("18")


@pytest.mark.parametrize(
    ("text", "value"),
    [
        # A marker beats numbers written after it ...
        ("The answer is 12. That is 2 more than 10.", "12"),
        ("Cynthia will spend \\(\\boxed{16}\\) dollars on ice cream after 60 days.", "16"),
        # ... and the last marker wins.
        ("The answer is 5. Wait: 6 + 6 = 12. The answer is 12.", "12"),
        ("The answer is \\(\\boxed{3}\\). Check: 1 + 2 = 3. \\boxed{4}", "4"),
    ],
)
def test_number_marker_priority(text, value):
    _check(extract_number, text, value)


@pytest.mark.parametrize(
    ("text", "value", "span"),
    [
        # The prompt's "The answer is N." copied literally is not an answer; the last real number is.
        ("3 + 4 = 7 eggs are used.\nThe answer is N.", "7", "7"),
        ("The answer is N. Billy sold 8 DVDs on Tuesday.", "8", "8"),
        # A marker followed by words or an expression does not count.
        ("# The answer is the profit\nprint(profit)\n```output\n10000.0\n```", "10000", "10000.0"),
        ("The answer is 2 + 3 = 5.", "5", "5"),
        ("\\(\\boxed{N}\\) miles, that is 230 miles", "230", "230"),
        # No marker: last number, with units, currency and thousands commas.
        ("Josh's profit is $130,000 - $80,000 = $50,000.", "50000", "50,000"),
        ("The candle is 8 cm shorter.", "8", "8"),
        # Step labels, list labels, clock times and identifiers are not numbers.
        ("200 + 80 = 280 minutes.\nStep 4: The answer is N.", "280", "280"),
        ("So 2 + 1 = 3 bolts.\n4. Done", "3", "3"),
        ("It burns 8 cm from 1:00 PM to 5:00 PM", "8", "8"),
        ("total = 36\nprint(eggs_per_4_weeks)", "36", "36"),
        # Subtraction is not a negative sign; a truncated \boxed{ falls back to its number.
        ("20-4", "4", "4"),
        ("Kylar needs to pay \\(\\boxed{240", "240", "240"),
    ],
)
def test_number_fallback(text, value, span):
    _check(extract_number, text, value, span)


@pytest.mark.parametrize(
    "text",
    ["", "The answer is N.", "I do not know.", "N = 3B", "print(x_2)", "The answer is \\(\\boxed{N}\\)."],
)
def test_number_none(text):
    assert extract_number(text) is None


# --- choice --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("Regulators forbid encouraging unsafe practices. The answer is (I).", "I"),
        ("Let's think step by step. Managers owe duties of care and skill. The answer is F.", "F"),
        ("The answer is C because the others are wrong.", "C"),
        ("Answer: C", "C"),
        ("Answer: (G) Shareholders, Care and Skill, Diligence", "G"),
        ("The correct option is **B**.", "B"),
        ("So the answer is option D.", "D"),
        ("Thus the answer is \\boxed{E}.", "E"),
        ("Thus the answer is $\\boxed{\\text{J}}$.", "J"),
        # The last marker wins, and a marker beats a later parenthesised letter.
        ("The answer is (A). Re-checking the units... The answer is (E).", "E"),
        ("The answer is (B). Option (C) fails because the sign is wrong.", "B"),
        # Fallback: last letter in parentheses, ignoring sentence-initial capitals.
        ("A man pushes a cart. I think (A) is wrong, so I pick (H) instead.", "H"),
        ("Answer: I think it must be (G).", "G"),
        ("The answer is A man of many talents... hence (D).", "D"),
    ],
)
def test_choice(text, value):
    _check(extract_choice, text, value)


def test_choice_span_is_the_letter_inside_parentheses():
    text = "(A) 5  (B) 6  (C) 7\nThe answer is (B)."
    answer = _check(extract_choice, text, "B")
    assert (text[answer.start - 1], text[answer.end]) == ("(", ")")
    assert answer.start == text.rindex("B")


@pytest.mark.parametrize(
    "text",
    [
        "",
        "A man walks into a bar. I think it is fine.",
        "The answer is (K).",
        "f(A) = 2",
        "The answer is A bit unclear.",
    ],
)
def test_choice_none(text):
    assert extract_choice(text) is None


# --- yes / no ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "span"),
    [
        ("Scott Derrickson is American. Ed Wood is American. So the answer is yes.", "yes", "yes"),
        (
            "Sherrie tells the truth. Vernell says Sherrie tells the truth, so Vernell tells the truth. Alexis says "
            "Vernell lies, so Alexis lies. Michaela says Alexis tells the truth, so Michaela lies. Elanor says "
            "Michaela tells the truth, so Elanor lies. So the answer is No.",
            "no",
            "No",
        ),
        ("We start at (0, 0). After all steps we are at (-3, 1), not the origin. So the answer is No.", "no", "No"),
        ("Answer: Yes", "yes", "Yes"),
        ("The final answer is **No**.", "no", "No"),
        ("\\boxed{\\text{yes}}", "yes", "yes"),
        ("The answer is yes. Hmm, checking the dates again... The answer is no.", "no", "no"),
        # Fallback: the last standalone yes/no, not the determiner "no".
        ("Yes, both bands are from the United States.", "yes", "Yes"),
        ("There is no reason to doubt it; both are opera composers, so yes.", "yes", "yes"),
        ("Is the Laleli Mosque in Esma Sultan's neighbourhood? No.\nThey are in different districts.", "no", "No"),
    ],
)
def test_yes_no(text, value, span):
    _check(extract_yes_no, text, value, span)


@pytest.mark.parametrize(
    "text", ["", "No one knows where they were born.", "There is no reason to think so.", "The answer is Noah."]
)
def test_yes_no_none(text):
    assert extract_yes_no(text) is None


# --- true / false --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "value", "span"),
    [
        (
            "not ( True ) = False. So the expression is False and ( True ) = False. So the answer is False.",
            "False",
            "False",
        ),
        ("True and not not ( not False ) = True and True = True. So the answer is True.", "True", "True"),
        ("Answer: true", "True", "true"),
        ("The result is \\boxed{\\text{False}}.", "False", "False"),
        ("not not True = True. Then True and False = False.", "False", "False"),
        ("The answer is False. Wait: not True or False = False or False. The answer is False.", "False", "False"),
    ],
)
def test_true_false(text, value, span):
    answer = _check(extract_true_false, text, value, span)
    assert answer.start == text.rindex(span)


@pytest.mark.parametrize("text", ["", "I cannot evaluate this expression.", "The answer is Truely unclear"])
def test_true_false_none(text):
    assert extract_true_false(text) is None


# --- registry ------------------------------------------------------------------------------------------


def test_registry():
    assert set(EXTRACTORS) == {"number", "choice", "yes_no", "true_false", "math"}  # math: tests/test_math_answers.py
    assert get_extractor("number") is extract_number
    assert get_extractor("yes_no")("So the answer is Yes.") == Answer("yes", 17, 20)


def test_get_extractor_rejects_unknown_name():
    with pytest.raises(ValueError, match=r"'letters'.*choice.*number.*true_false.*yes_no"):
        get_extractor("letters")


def test_answer_is_frozen():
    with pytest.raises(dataclasses.FrozenInstanceError):
        Answer("1", 0, 1).value = "2"  # type: ignore[misc]


# --- real model outputs --------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def samples() -> dict[int, dict]:
    if not SAMPLES.is_file():
        pytest.skip(f"real model outputs not found at {SAMPLES} (the ../shared checkout beside the repo)")
    with SAMPLES.open() as f:
        rows = [json.loads(line) for line in f]
    return {row["test_index"]: row for row in rows}


@pytest.mark.parametrize(
    ("test_index", "branch", "value", "span"),
    [
        (0, 8, "18", "18"),  # "Therefore, the answer is:\n\[ \boxed{18} \]"
        (0, 2, "22", "22"),  # "\(\boxed{22}\) dollars every day"
        (0, 9, None, None),  # the whole output is "The answer is N."
        (3, 7, "180", "180"),  # "The answer is 180 meters."
        (22, 9, "8", "8"),  # "The answer is N. Billy sold 8 DVDs on Tuesday."
        (2, 1, "50000", "50,000"),  # "$130,000 - $80,000 = $50,000.\n\nTherefore, the answer is N."
        (27, 7, "16", "16.00"),  # "\(\boxed{16.00}\) dollars on ice cream after 60 days."
        (23, 9, "8", "8"),  # "\(\boxed{8}\) centimeters shorter after burning from 1:00 PM to " (truncated)
        (5, 3, "240", "240"),  # truncated inside "\(\boxed{240"
        (24, 0, "5.25", "5.25"),  # "\(\boxed{5.25}\)"
        (7, 9, "280", "280"),  # "= 280 minutes.\nStep 4: The answer is N.\nTherefore, the answer is N."
        (20, 8, "15", "15"),  # "\( 24 - 9 = 15 \) liters\n\n5. **Final Answer:**\n   - The remaining ..." (truncated)
    ],
)
def test_real_branches(samples, test_index, branch, value, span):
    _check(extract_number, samples[test_index]["branches"][branch], value, span)


def test_real_spans_normalise_to_their_values(samples):
    for row in samples.values():
        for text in row["branches"]:
            answer = extract_number(text)
            if answer is not None:
                assert normalise_number(text[answer.start : answer.end]) == answer.value


def test_real_accuracy(samples):
    """Greedy / majority@10 / pass@10 on 29 GSM8K questions; a plain last-number extractor gets 5 / 7 / 14."""
    greedy = majority = any_correct = 0
    for row in samples.values():
        gold = normalise_number(row["gold"])
        values = [a.value if (a := extract_number(text)) else None for text in row["branches"]]
        votes = collections.Counter(v for v in values if v is not None)
        greedy += values[0] == gold
        majority += bool(votes) and votes.most_common(1)[0][0] == gold
        any_correct += gold in values
    assert len(samples) == 29
    # Measured with this extractor: 5/29, 6/29, 17/29 (regression bounds). Majority is one below the plain
    # extractor's 7 only through a 2-2 tie it broke luckily (its extra vote read the "1" of "D_1").
    assert greedy >= 5 and majority >= 6 and any_correct >= 17


# Real SmolLM2-135M-Instruct outputs (lover_hf, chat template, 2 branches, 160 tokens) on the first
# questions of four tasks, collected with:
#   lm_eval --model lover_hf --model_args n_branches=2 --gen_kwargs max_gen_toks=160 --apply_chat_template
#     --tasks lover_mmlu_pro_biology,lover_hotpotqa_yesno,lover_bbh_boolean_expressions,lover_bbh_navigate --limit 3
# Expected values were checked by reading each output.
SMOLLM2_EXPECTED = [
    "False", "True", "True", "False", "False", "True",  # boolean_expressions
    "no", "yes", "no", "yes", "no", "yes",  # navigate
    "yes", "no", None, "no", "yes", "no",  # hotpotqa: the third states a claim without yes/no
    "D", None, "D", "C", "J", "F",  # mmlu_pro: "The answer is (X)" is the prompt's placeholder, not a letter
]


def test_real_smollm2_outputs_for_the_word_and_letter_extractors():
    path = Path(__file__).parent / "data" / "smollm2_outputs.jsonl"
    rows = [json.loads(line) for line in path.open()]
    got = [(a.value if (a := get_extractor(r["extract"])(r["text"])) else None) for r in rows]
    assert got == SMOLLM2_EXPECTED
