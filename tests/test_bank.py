"""The branch bank keeps every whole record: a torn or corrupt one costs only itself."""

from __future__ import annotations

import logging

from lover_lmeval.core.bank import BranchBank
from lover_lmeval.core.decoding import Branch


def _branches(k: int) -> list[Branch]:
    return [Branch(f"answer {k}", [k, k + 1], [0.5, 0.25], [(0, 6), (6, 8)], "eos")]


def test_records_appended_after_a_torn_one_stay_readable(tmp_path, caplog):
    """Issue Nothing lost's reproduction: 3 records, the last torn by a kill mid-write, reopen, append q2..q5, reopen:
    all 6 questions read back (q2's torn copy is skipped, its re-decoded copy kept), with one warning naming the
    file and the byte offset."""
    path = tmp_path / "bank.jsonl.gz"
    bank = BranchBank(path)
    for k in range(3):
        bank.add(f"q{k}", _branches(k))
    whole = path.read_bytes()
    path.write_bytes(whole[: len(whole) - 15])  # tear the last member
    reopened = BranchBank(path)
    assert len(reopened) == 2
    for k in range(2, 6):
        reopened.add(f"q{k}", _branches(k))
    with caplog.at_level(logging.WARNING):
        final = BranchBank(path)
    assert sorted(final.records) == [f"q{k}" for k in range(6)]
    assert final.get("q2")[0].text == "answer 2"
    assert any(str(path) in r.message and "at byte" in r.message for r in caplog.records)


def test_a_corrupt_record_in_the_middle_costs_only_itself(tmp_path):
    path = tmp_path / "bank.jsonl.gz"
    bank = BranchBank(path)
    sizes = []
    for k in range(8):
        before = path.stat().st_size if path.exists() else 0
        bank.add(f"q{k}", _branches(k))
        sizes.append((before, path.stat().st_size))
    data = bytearray(path.read_bytes())
    start, end = sizes[3]
    for i in range(start + 12, start + 20):  # flip bytes inside record 3's compressed body
        data[i] ^= 0xFF
    path.write_bytes(bytes(data))
    assert sorted(BranchBank(path).records) == [f"q{k}" for k in range(8) if k != 3]
