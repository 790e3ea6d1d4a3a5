"""Token offsets in one pass (`branch.token_ends`, linear) equal the definition, every prefix decoded
(`_ends_reference`, the quadratic loop make_branch ran before), and `make_branch` builds the branch it built then
(`_make_branch_reference`, the old function as it was): on every branch of the committed SmolLM2 banks, on planted
hard cases and on long branches."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from tokenizers import Tokenizer, decoders, models
from transformers import PreTrainedTokenizerFast
from transformers.convert_slow_tokenizer import bytes_to_unicode

from benchmarks.bench_common import UNTIL
from lover_lmeval.core.decode.branch import Branch, make_branch, token_ends
from lover_lmeval.core.store.bank import BranchBank

REPO = Path(__file__).resolve().parents[1]
# The committed banks SmolLM2 decoded (the qwen2.5-coder banks need a tokenizer CI does not have offline).
GOLDEN_BANK = REPO / "tests" / "data" / "golden" / "smollm2_bank.jsonl.gz"
SMOLLM2_BANKS = [GOLDEN_BANK, *sorted((REPO / "benchmarks" / "banks" / "smollm2-135m-instruct").glob("*.jsonl.gz"))]


def _ends_reference(tokenizer, ids: list[int]) -> list[int]:
    """The definition, every prefix decoded: O(n^2)."""
    return [len(tokenizer.decode(ids[: k + 1], skip_special_tokens=True)) for k in range(len(ids))]


def _make_branch_reference(tokenizer, ids, margins, stop, reason, stats=None) -> Branch:
    """make_branch as it was before `token_ends` (the slow reference; benchmarks/performance/bench_cut.py times it)."""
    body = ids[:-1] if reason == "eos" else ids
    text = tokenizer.decode(body, skip_special_tokens=True)
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))
    text = text[:cut]
    ends = _ends_reference(tokenizer, body)
    starts = [0] + ends[:-1]
    kept = sum(1 for s in starts if s < len(text))
    offsets = [(min(s, len(text)), min(e, len(text))) for s, e in zip(starts[:kept], ends[:kept])]
    kept_stats = None if stats is None else {name: values[:kept] for name, values in stats.items()}
    return Branch(text, body[:kept], margins[:kept], offsets, reason, kept_stats)


def _branches(path: Path) -> list[Branch]:
    bank = BranchBank(path)
    return [branch for key in sorted(bank.keys()) for branch in bank.get(key)]


def _rebuilt(tokenizer, branch: Branch, build) -> Branch:
    """The branch `build` makes of a banked one's tokens (its end token put back when it ended on one)."""
    ids = branch.token_ids + ([tokenizer.eos_token_id] if branch.finish_reason == "eos" else [])
    return build(tokenizer, ids, branch.margins, UNTIL, branch.finish_reason, branch.stats)


class _Counting:
    """A tokenizer counting the calls of its decode, to tell the one-pass rule (one call: the check of the joined
    pieces) from the definition it falls back to (one more a token)."""

    def __init__(self, tokenizer):
        self.inner, self.backend_tokenizer, self.calls = tokenizer, tokenizer.backend_tokenizer, 0
        self.clean_up_tokenization_spaces = tokenizer.clean_up_tokenization_spaces

    def decode(self, ids, **kwargs):
        self.calls += 1
        return self.inner.decode(ids, **kwargs)


def _one_pass_ends(tokenizer, ids: list[int]) -> list[int]:
    """`token_ends`, checked to have taken the one-pass rule (the fallback would hide a wrong one: it is exact)."""
    counting = _Counting(tokenizer)
    ends = token_ends(counting, ids)
    assert counting.calls == 1
    return ends


def _byte_ids(tokenizer, data: bytes) -> list[int]:
    """One byte-level token per byte of `data` (SmolLM2's vocabulary holds all 256)."""
    spelling = bytes_to_unicode()
    return tokenizer.convert_tokens_to_ids([spelling[b] for b in data])


@pytest.mark.parametrize("path", SMOLLM2_BANKS, ids=lambda p: p.parent.name + "/" + p.name)
def test_offsets_stored_in_the_banks_are_the_ones_computed_now(tokenizer, path):
    """Each banked branch's offsets came from the definition when it was decoded (its whole body, clipped to its
    text; a token's end depends only on the tokens up to it): the kept tokens' ends give them back, clipped alike."""
    branches = _branches(path)
    assert branches
    for branch in branches:
        ends, n = _one_pass_ends(tokenizer, branch.token_ids), len(branch.text)
        assert [(min(s, n), min(e, n)) for s, e in zip([0] + ends[:-1], ends)] == branch.offsets


@pytest.mark.parametrize("path", [pytest.param(p, marks=[] if p == GOLDEN_BANK else pytest.mark.slow)
                                  for p in SMOLLM2_BANKS], ids=lambda p: p.parent.name + "/" + p.name)
def test_every_banked_branch_is_rebuilt_as_the_prefix_rule_builds_it(tokenizer, path):
    """Ends against the slow reference (the golden bank: ~2 s; the others, ~14 s together on a 2-core CPU, are marked
    slow), and whole branches: an eos or length branch kept every token of its body that starts inside its text, so its
    rebuild is the banked branch itself (the old make_branch's output); a stop branch's is the old function's of the
    same tokens."""
    for branch in _branches(path):
        assert _one_pass_ends(tokenizer, branch.token_ids) == _ends_reference(tokenizer, branch.token_ids)
        rebuilt = _rebuilt(tokenizer, branch, make_branch)
        if branch.finish_reason == "stop":
            assert rebuilt == _rebuilt(tokenizer, branch, _make_branch_reference)
        else:
            assert rebuilt == branch


def test_characters_split_over_tokens_end_where_they_become_whole(tokenizer):
    """Prefix texts by hand (U+FFFD while a character's bytes are incomplete; Python counts code points):
    'a🎉b' = a | F0 9F | 8E | 89 | b: 'a', 'a\ufffd', 'a\ufffd', 'a🎉', 'a🎉b' -> [1, 2, 2, 2, 3];
    'Hi 世界!' = Hi | ' ' | E4 B8 | 96 | E7 | 95 | 8C | !: -> [2, 3, 4, 4, 5, 5, 5, 6];
    bytes E2 | F0 | 9F | 8E | 89 | a (a truncated '€' before an emoji): '\ufffd', '\ufffd\ufffd' (E2 given up, F0
    pending), .., '\ufffd🎉', '\ufffd🎉a' -> [1, 2, 2, 2, 2, 3];
    bytes 80 | a (a lone continuation byte) -> [1, 2]; bytes F0 | 80 | a (F0 cannot precede 80) -> [1, 2, 3]."""
    cases = {"a🎉b": [1, 2, 2, 2, 3], "Hi 世界!": [2, 3, 4, 4, 5, 5, 5, 6]}
    for text, ends in cases.items():
        ids = tokenizer.encode(text, add_special_tokens=False)
        assert _one_pass_ends(tokenizer, ids) == _ends_reference(tokenizer, ids) == ends
    byte_cases = {b"\xe2\xf0\x9f\x8e\x89a": [1, 2, 2, 2, 2, 3], b"\x80a": [1, 2], b"\xf0\x80a": [1, 2, 3]}
    for data, ends in byte_cases.items():
        ids = _byte_ids(tokenizer, data)
        assert _one_pass_ends(tokenizer, ids) == _ends_reference(tokenizer, ids) == ends


def test_planted_branches_are_cut_as_before(tokenizer):
    """By hand. 'Hi 世界!' then EOS, ended by it: EOS dropped, ends [2, 3, 4, 4, 5, 5, 5, 6] as spans.
    'The answer is 5.' with the stop string 'swer' (inside ' answer', chars 3..10): text 'The an' (cut at 6), kept
    'The' (0, 3) and ' answer' clipped to (3, 6); margins and stats cut alike.
    'x<|im_end|>y' (the special token skipped): text 'xy', ends [1, 1, 2], the special an empty span (1, 1).
    x y <|im_end|> with no end reason: the special starts at 2 = len('xy'), outside the text, so it is dropped.
    A stop string at position 0 ('The'), an empty body and a lone EOS: empty branches."""
    hi = tokenizer.encode("Hi 世界!", add_special_tokens=False)
    eos = tokenizer.eos_token_id
    answer = tokenizer.encode("The answer is 5.", add_special_tokens=False)
    x, im_end, y = tokenizer.encode("x<|im_end|>y", add_special_tokens=False)
    stats = {"s": [0.1, 0.2, 0.3, 0.4, 0.5]}
    cases = [
        ((hi + [eos], [0.5] * 9, UNTIL, "eos"),
         Branch("Hi 世界!", hi, [0.5] * 8, [(0, 2), (2, 3), (3, 4), (4, 4), (4, 5), (5, 5), (5, 5), (5, 6)], "eos")),
        ((answer, [0.9, 0.8, 0.7, 0.6, 0.5], ["swer"], "stop", stats),
         Branch("The an", answer[:2], [0.9, 0.8], [(0, 3), (3, 6)], "stop", {"s": [0.1, 0.2]})),
        (([x, im_end, y], [0.1, 0.2, 0.3], UNTIL, "length"),
         Branch("xy", [x, im_end, y], [0.1, 0.2, 0.3], [(0, 1), (1, 1), (1, 2)], "length")),
        (([x, y, im_end], [0.1, 0.2, 0.3], UNTIL, "length"),
         Branch("xy", [x, y], [0.1, 0.2], [(0, 1), (1, 2)], "length")),
        ((answer, [0.9, 0.8, 0.7, 0.6, 0.5], ["The"], "stop", stats), Branch("", [], [], [], "stop", {"s": []})),
        (([], [], UNTIL, "length"), Branch("", [], [], [], "length")),
        (([eos], [0.5], UNTIL, "eos"), Branch("", [], [], [], "eos")),
    ]
    for args, expected in cases:
        assert make_branch(tokenizer, *args) == _make_branch_reference(tokenizer, *args) == expected


class _Doubling:
    """SmolLM2's tokenizer whose decode writes each 'a' twice: its byte-level backend no longer decodes as it does."""

    def __init__(self, tokenizer):
        self.inner, self.backend_tokenizer = tokenizer, tokenizer.backend_tokenizer
        self.clean_up_tokenization_spaces = False

    def decode(self, ids, **kwargs):
        return self.inner.decode(ids, **kwargs).replace("a", "aa")


def test_a_decode_that_is_not_its_backends_takes_the_definition(tokenizer):
    """'banana' is ban | ana: the one-pass pieces join to 'banana', not the tokenizer's own 'baanaanaa', so the
    definition answers: len('baan'), len('baanaanaa') = [4, 9]."""
    doubling = _Doubling(tokenizer)
    ids = tokenizer.encode("banana", add_special_tokens=False)
    assert token_ends(doubling, ids) == _ends_reference(doubling, ids) == [4, 9]


def test_a_sentencepiece_byte_fallback_decoder_takes_the_definition():
    """Byte fallback decodes a run of byte tokens together, all as U+FFFD if the run is not UTF-8, and the leading
    space is stripped: ▁a | <E2> | <82> | <AC> | <80> | ▁b gives 'a', 'a\ufffd', 'a\ufffd\ufffd', 'a€',
    'a\ufffd\ufffd\ufffd\ufffd', 'a\ufffd\ufffd\ufffd\ufffd b' -> [1, 2, 3, 2, 5, 7]. Not monotone: a prefix ending
    in a whole character ('a€') is no anchor here, so the byte-level pass must not run (it would say 3, not 5)."""
    vocab = {"<unk>": 0, "▁a": 1, "▁b": 2, **{f"<0x{b:02X}>": 3 + b for b in range(256)}}
    backend = Tokenizer(models.BPE(vocab=vocab, merges=[], unk_token="<unk>", byte_fallback=True))
    backend.decoder = decoders.Sequence([decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse(),
                                         decoders.Strip(" ", 1, 0)])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend)
    ids = [1, 3 + 0xE2, 3 + 0x82, 3 + 0xAC, 3 + 0x80, 2]
    assert token_ends(tokenizer, ids) == _ends_reference(tokenizer, ids) == [1, 2, 3, 2, 5, 7]


LONG = 4096  # the reference decodes ~8.4M tokens for it: ~3.5 s


def test_random_ids_from_the_whole_vocabulary(tokenizer):
    """Every kind of token in any order: special ones, byte pieces that never make a character, words."""
    ids = random.Random(0).choices(range(len(tokenizer)), k=LONG)
    assert _one_pass_ends(tokenizer, ids) == _ends_reference(tokenizer, ids)


def test_real_text_tiled(tokenizer):
    """A real banked branch's tokens repeated (each copy starts mid-context), with CJK and an emoji split into bytes."""
    branch = next(b for b in _branches(GOLDEN_BANK) if b.finish_reason == "eos")
    unit = branch.token_ids + tokenizer.encode(" 世界 🎉\n", add_special_tokens=False)
    ids = (unit * (LONG // len(unit) + 1))[:LONG]
    assert _one_pass_ends(tokenizer, ids) == _ends_reference(tokenizer, ids)


def test_lover_vllm_cuts_a_decoded_continuation_where_the_per_prefix_scan_does(tokenizer):
    """vllm_engine.cut grows one list instead of copying every prefix: on a real sentence continued past the stop
    string "Question:", past an end token and up to the budget, it ends where the per-prefix scan ends, with the
    same Branch."""
    from lover_lmeval.core.decode.branch import finish_reason_of
    from lover_lmeval.harness.vllm.engine import cut

    eos = {tokenizer.eos_token_id}
    text = tokenizer.encode("Add 2 and 3 to get 5. The answer is 5.\n\nQuestion: what is 6 + 1?",
                            add_special_tokens=False)
    for ids, stop, budget in ((text, ["Question:"], 64), (text[:6] + [tokenizer.eos_token_id] + text, [], 64),
                              (text, [], 5)):
        end = next((k for k in range(1, len(ids) + 1)
                    if finish_reason_of(tokenizer, ids[:k], stop, eos, budget) is not None), len(ids))
        reason = finish_reason_of(tokenizer, ids[:end], stop, eos, budget) or "length"
        assert cut(tokenizer, ids, stop, eos, budget) == make_branch(tokenizer, ids[:end], [], stop, reason)
