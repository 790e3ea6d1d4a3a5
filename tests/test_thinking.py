"""think_end_token (harness/thinking.py): answers are read after the last end of thinking, as lm-eval's HFLM reads
them; the bank and the samples keep each branch whole. Planted branches, the real SmolLM2 tokenizer and model."""

from __future__ import annotations

import json
import logging

import pytest
from lm_eval.api.instance import Instance

from lover_lmeval.core.decode.branch import make_branch
from lover_lmeval.core.select.answers import extract_number, span_confidence, stated_answer
from lover_lmeval.core.store.bank import BranchBank
from lover_lmeval.harness.filter import LoverSelect
from lover_lmeval.harness.thinking import after_thinking, answer_start, think_marker

THINKING = "<think>Two bags of 5 apples make 10. The answer is 10.</think>"
#: branch 0: the thinking states 10, the reply (no marker) 7; branch 1: the thinking states 4, the reply none
PLANTED = [THINKING + "\n\nShe ate 3, so 7 remain.", "<think>Maybe 4. The answer is 4.</think> I am not sure."]
CONTEXT = "Question: Two bags of 5 apples; she eats 3. How many remain?\nAnswer:"
GEN_KWARGS = {"until": ["Question:"], "max_gen_toks": 64}


def _branch(tokenizer, text: str):
    ids = tokenizer.encode(text, add_special_tokens=False)
    return make_branch(tokenizer, ids + [tokenizer.eos_token_id], [0.5] * (len(ids) + 1), [], "eos")


def test_the_answer_part_starts_after_the_last_end_of_thinking(tokenizer):
    """Branch 0: "</think>" ends at character len(THINKING) = 62, then "\\n\\n" (skipped, as lm-eval lstrips): its
    answer part starts at 64, "She ate 3, so 7 remain.". The whole text's extractor reads the thinking's marked "The
    answer is 10"; the answer part has no marker, so its last number, 7 (a finished branch keeps a fallback answer).
    The tokens of the thinking span no character of the view, so CoT-decoding's confidence averages the margins of
    "7"'s own token(s): 0.5."""
    branch = _branch(tokenizer, PLANTED[0])
    assert len(THINKING) == 62 and answer_start(branch, "</think>") == 64
    view, start = after_thinking(branch, "</think>")
    assert (view.text, start) == ("She ate 3, so 7 remain.", 64)
    assert stated_answer(extract_number, branch).value == "10"
    answer = stated_answer(extract_number, view)
    assert answer.value == "7" and view.text[answer.start:answer.end] == "7"
    inside = [k for k, (s, e) in enumerate(view.offsets) if s < answer.end and e > answer.start]
    assert [branch.text[s:e].strip() for s, e in (branch.offsets[k] for k in inside)] == ["7"]
    assert span_confidence(view.margins, view.offsets, answer) == 0.5
    assert (view.token_ids, view.margins) == (branch.token_ids, branch.margins)  # tokens stay whole
    assert after_thinking(_branch(tokenizer, "No thinking here: 7."), "</think>")[1] == 0  # no marker: all of it


def test_a_token_id_marker_ends_thinking_at_that_token(tokenizer):
    """HFLM's integer think_end_token: the last occurrence of the id among the branch's tokens. A special token
    (here SmolLM2's <|im_start|>, id 1) decodes to nothing, so the answer part starts where the token stands, after
    the thinking's "The answer is 10." (17 characters) and the space that follows."""
    marker = tokenizer.convert_tokens_to_ids("<|im_start|>")
    ids = (tokenizer.encode("The answer is 10.", add_special_tokens=False) + [marker]
           + tokenizer.encode(" So 7.", add_special_tokens=False))
    branch = make_branch(tokenizer, ids, [0.0] * len(ids), [], "stop")
    assert think_marker(str(marker)) == marker == 1 and think_marker("</think>") == "</think>"
    view, start = after_thinking(branch, marker)
    assert (start, view.text) == (18, "So 7.")
    assert stated_answer(extract_number, view).value == "7"


def test_lover_hf_reads_planted_branches_after_their_thinking(smollm2_dir, tokenizer, tmp_path, caplog):
    """A bank holding two planted branches for one question, read back by lover_hf with think_end_token=</think>
    (bank_only: no decoding). What reads answers reads the answer parts: the result's string (stock filters) is
    branch 0's, the majority filter answers 7 (the whole texts would tie 10 and 4), and the task's report counts
    branch 1 as stating no answer (its thinking's 4 is not read). The bank and the samples keep the whole texts."""
    from lover_lmeval.harness.model import LoverLM

    path = str(tmp_path / "bank.sqlite")
    lm = LoverLM(pretrained=str(smollm2_dir), n_branches=2, bank=path, bank_only="true", think_end_token="</think>",
                 feature_cache="none")
    prompts, spec = lm.prompts([CONTEXT], GEN_KWARGS)
    (key,) = lm.pipeline.record_keys(prompts, spec)
    BranchBank(path).add(key, [_branch(tokenizer, text) for text in PLANTED], prompt_ids=prompts[0])
    request = Instance("generate_until", {}, (CONTEXT, GEN_KWARGS), 0, metadata=("task_a", 0, 1))
    with caplog.at_level(logging.INFO, logger="lm_eval.lover_hf"):
        (result,) = lm.generate_until([request], disable_tqdm=True)
    assert str.__str__(result) == "She ate 3, so 7 remain."
    assert LoverSelect("majority", extract="number").apply([[result]], [{}]) == [["7"]]
    assert "1 of 2 branches (50%) gave no answer" in caplog.text and "think_end_token='</think>'" in caplog.text
    assert lm.pipeline.record.fits["task_a"]["extract"] == "number" and result.fit_extract == "number"
    logged = json.loads(str(result))
    assert logged["texts"] == PLANTED and logged["answer_starts"] == [64, len(PLANTED[1]) - len("I am not sure.")]
    assert [b.text for b in BranchBank(path).get(key)] == PLANTED


def test_a_branch_cut_in_its_thinking_states_no_answer_but_the_tasks_own_row_reads_it_whole(smollm2_dir, tokenizer,
                                                                                          tmp_path, caplog):
    """Branch 0 was cut at the budget inside its thinking ("... The answer is 4", no </think>, finish "length");
    branch 1 answers 7 and branch 2 answers 4 after theirs. Read whole, branch 0's 4 would make the vote 4 (two to
    one); cut in its thinking it states no answer: 7 and 4 tie and the tie goes to the lower branch, 7. The result's
    string, which the task's own row reads, is branch 0's whole text, as lm-eval's HFLM returns a text without the
    marker; a repeated request's copy 0 too. The log counts the cut branch."""
    from lover_lmeval.harness.model import LoverLM
    from lover_lmeval.core.decode.branch import make_branch

    cut_text = "<think>Two bags of 5 apples. Maybe the answer is 4"
    planted = [make_branch(tokenizer, tokenizer.encode(cut_text, add_special_tokens=False), [0.5] * 64, [], "length"),
               _branch(tokenizer, THINKING + " She ate 3, so the answer is 7."),
               _branch(tokenizer, "<think>Hmm.</think> The answer is 4.")]
    path = str(tmp_path / "bank.sqlite")
    lm = LoverLM(pretrained=str(smollm2_dir), n_branches=3, bank=path, bank_only="true", think_end_token="</think>",
                 feature_cache="none")
    prompts, spec = lm.prompts([CONTEXT], GEN_KWARGS)
    (key,) = lm.pipeline.record_keys(prompts, spec)
    BranchBank(path).add(key, planted, prompt_ids=prompts[0])
    request = Instance("generate_until", {}, (CONTEXT, GEN_KWARGS), 0, metadata=("task_a", 0, 1))
    with caplog.at_level(logging.INFO, logger="lm_eval.lover_hf"):
        (result,) = lm.generate_until([request], disable_tqdm=True)
    assert str.__str__(result) == cut_text == str.__str__(result.copy_for(0))
    assert [b.text for b in result.branches] == ["", "She ate 3, so the answer is 7.", "The answer is 4."]
    assert LoverSelect("majority", extract="number").apply([[result]], [{}]) == [["7"]]
    assert "1 of 3 branches were cut at the token budget before their end of thinking" in caplog.text
    assert json.loads(str(result))["texts"][0] == cut_text


@pytest.mark.parametrize("side, kept", [("left", "e f"), ("right", "a b"), ("middle", "a f")])
def test_truncation_side_cuts_a_long_prompt_where_it_says(tiny_model_dir, side, kept, caplog):
    """lm-eval's truncation_side, honoured by lover_hf as lm-eval's VLLM honours it: a prompt of 6 one-token words
    in a window of 6 tokens with max_gen_toks=4 keeps 2 tokens: the last two (left), the first two (right), or the
    first and the last (middle)."""
    from lover_lmeval.harness.model import LoverLM

    lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, max_length=6, verifier=None, truncation_side=side)
    words = "a b c d e f"
    assert len(lm.tok_encode(words)) == 6
    with caplog.at_level(logging.WARNING):
        ids = lm._prompt_ids(words, 2)
    assert lm.tokenizer.decode(ids).strip() == kept and f"truncation_side={side}" in caplog.text


def test_a_truncation_side_that_is_none_is_refused_by_name(tiny_model_dir):
    from lover_lmeval.harness.model import LoverLM
    from lover_lmeval.harness.model_args import LoverUsageError

    with pytest.raises(LoverUsageError, match="truncation_side=top is not a side; pass one of left, right, middle"):
        LoverLM(pretrained=str(tiny_model_dir), truncation_side="top")
