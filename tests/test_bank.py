"""The branch bank keeps every whole record: a torn or corrupt one costs only itself, two writers lose nothing, and
a path that cannot be a bank is refused before any decoding."""

from __future__ import annotations

import logging
import sqlite3
import subprocess
import sys
import textwrap

import pytest

from lover_lmeval.core.store.bank import BankConfig, BranchBank
from lover_lmeval.core.store.bank_store import convert
from lover_lmeval.core.decode.branch import Branch


def _branches(k: int) -> list[Branch]:
    return [Branch(f"answer {k}", [k, k + 1], [0.5, 0.25], [(0, 6), (6, 8)], "eos")]


def test_records_appended_after_a_torn_one_stay_readable(tmp_path, caplog):
    """A kill mid-write: 3 records, the last torn by a kill mid-write, reopen, append q2..q5, reopen:
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
    assert sorted(final.keys()) == [f"q{k}" for k in range(6)]
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
    assert sorted(BranchBank(path).keys()) == [f"q{k}" for k in range(8) if k != 3]


WRITER = textwrap.dedent("""
    import sys
    from lover_lmeval.core.store.bank import BranchBank
    from lover_lmeval.core.decode.branch import Branch
    bank = BranchBank(sys.argv[1])
    sys.stdin.readline()  # both writers start together
    for k in range(100):
        bank.add(f"{sys.argv[2]}{k}", [Branch("x" * (k * 37 % 500), [k], [0.5], [(0, 1)], "eos")], prompt_ids=[k])
""")


@pytest.mark.parametrize("name", ["bank.sqlite", "bank.jsonl.gz"])
def test_two_writer_processes_lose_nothing(tmp_path, name):
    """Two processes append 100 records each to one bank at the same time: 200 records read back, none torn."""
    path = tmp_path / name
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), prefix], stdin=subprocess.PIPE, text=True)
               for prefix in ("a", "b")]
    for writer in writers:
        writer.stdin.write("go\n")
        writer.stdin.flush()
    assert [w.wait(timeout=120) for w in writers] == [0, 0]
    bank = BranchBank(path)
    assert bank.keys() == {f"{p}{k}" for p in "ab" for k in range(100)}
    assert bank.get("b57")[0].text == "x" * (57 * 37 % 500)


def test_sqlite_bank_reads_back_and_ignores_a_second_copy(tmp_path):
    path = tmp_path / "bank.sqlite"
    bank = BranchBank(path)
    bank.add("q0", _branches(0), prompt_ids=[1, 2])
    bank.add("q0", _branches(9))  # a concurrent writer decoded the same question: the first copy stays
    reopened = BranchBank(path)
    assert len(reopened) == 1 and "q0" in reopened and "q1" not in reopened
    assert reopened.get("q0") == _branches(0)


def test_discarded_sqlite_records_are_gone_for_every_reader_and_a_gzip_bank_refuses(tmp_path):
    """lover_vllm's staging store drops a call's questions once they are complete: q0 and q2 of three go, q1 stays,
    for this bank and a reopened one (another process); a key never written is no error. A gzip bank is append-only."""
    bank = BranchBank(tmp_path / "staged.sqlite")
    for k in range(3):
        bank.add(f"q{k}", _branches(k))
    bank.discard(["q0", "q2", "never"])
    assert bank.keys() == BranchBank(tmp_path / "staged.sqlite").keys() == {"q1"}
    assert bank.get("q1") == _branches(1)
    gzip_bank = BranchBank(tmp_path / "bank.jsonl.gz")
    gzip_bank.add("q0", _branches(0))
    with pytest.raises(ValueError, match="gzip bank: records are appended, never removed"):
        gzip_bank.discard(["q0"])


def test_a_corrupt_sqlite_record_costs_only_itself(tmp_path, caplog):
    path = tmp_path / "bank.sqlite"
    bank = BranchBank(path)
    for k in range(4):
        bank.add(f"q{k}", _branches(k))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE records SET record = ? WHERE key = 'q2'", (b"not zlib",))
    with caplog.at_level(logging.WARNING):
        reopened = BranchBank(path)
        assert [reopened.get(f"q{k}") is not None for k in range(4)] == [True, True, False, True]
    assert any("q2" in r.message and str(path) in r.message for r in caplog.records)


def test_convert_between_stores_and_to_json_lines(tmp_path):
    """Committed gzip banks convert to SQLite and back, and export to plain JSON lines, record for record."""
    gz = tmp_path / "bank.jsonl.gz"
    bank = BranchBank(gz)
    for k in range(5):
        bank.add(f"q{k}", _branches(k), prompt_ids=[k])
    assert convert(gz, tmp_path / "bank.sqlite") == 5
    assert convert(tmp_path / "bank.sqlite", tmp_path / "back.jsonl.gz") == 5
    assert convert(tmp_path / "back.jsonl.gz", tmp_path / "plain.jsonl") == 5
    assert BranchBank(tmp_path / "back.jsonl.gz").get("q3") == _branches(3)
    lines = (tmp_path / "plain.jsonl").read_text().splitlines()
    assert len(lines) == 5 and all(line.startswith('{"key":"q') for line in lines)


@pytest.mark.parametrize("setup, message", [
    (lambda d: d / "folder", "is a directory"),
    (lambda d: (d / "notes.txt").write_text("hello") and d / "notes.txt", "is not a lover-lmeval bank"),
    (lambda d: _foreign_sqlite(d / "other.db"), "database of another program"),
])
def test_a_path_that_cannot_be_a_bank_is_refused_with_its_name(tmp_path, setup, message):
    (tmp_path / "folder").mkdir()
    path = setup(tmp_path)
    with pytest.raises(ValueError, match=message) as error:
        BankConfig(path=str(path))
    assert str(path) in str(error.value)


def _foreign_sqlite(path):
    with sqlite3.connect(path) as db:
        db.execute("CREATE TABLE users (name TEXT)")
    return path


def test_lover_bank_cli_reports_and_converts(tmp_path, capsys):
    from lover_lmeval.apps.cli import main

    gz = tmp_path / "bank.jsonl.gz"
    BranchBank(gz).add("q0", _branches(0), prompt_ids=[1])
    assert main(["bank", "convert", str(gz), str(tmp_path / "bank.sqlite")]) == 0
    assert main(["bank", "info", str(tmp_path / "bank.sqlite")]) == 0
    assert "sqlite bank, 1 questions (1 distinct), 1 branches; finish reasons {'eos': 1}" in capsys.readouterr().out


def test_a_corrupt_sqlite_record_is_replaced_when_decoded_again(tmp_path):
    path = tmp_path / "bank.sqlite"
    BranchBank(path).add("q0", _branches(0))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE records SET record = ? WHERE key = 'q0'", (b"not zlib",))
    bank = BranchBank(path)
    assert "q0" not in bank  # so lover_hf decodes it again ...
    bank.add("q0", _branches(0))
    assert BranchBank(path).get("q0") == _branches(0)  # ... and the new copy replaces the corrupt one


def test_a_gzip_data_file_is_not_taken_for_a_bank(tmp_path):
    import gzip

    data = tmp_path / "train.jsonl.gz"
    data.write_bytes(gzip.compress(b'{"question": "1+1?", "answer": "2"}\n'))
    with pytest.raises(ValueError, match="gzip file but not a lover-lmeval bank"):
        BankConfig(path=str(data))


@pytest.mark.parametrize("name", ["bank.sqlite", "bank.jsonl.gz"])
def test_token_stats_survive_the_bank_within_float16_precision(tmp_path, name):
    """A branch with stats is stored with them, as float16 base64 per statistic, and reads back within float16's
    rounding (relative 2^-11); a branch without them (an older record) is stored without the field and reads back
    with stats=None; a committed record (no stats) reads as before. The bank already open gives the float16 values
    too, as a reopened one does."""
    import base64
    import gzip
    import json
    from pathlib import Path

    from lover_lmeval.core.decode.token_stats import STAT_NAMES

    stats = {"logprob": [-0.0123456, -3.25], "topk_logprob": [-1.5, -2.75], "entropy": [0.4321, 9.87654],
             "kl_uniform": [12.3456, 0.001]}
    with_stats = Branch("answer 7", [7, 8], [0.5, 0.25], [(0, 6), (6, 8)], "eos", stats)
    path = tmp_path / name
    bank = BranchBank(path)
    bank.add("new", [with_stats], prompt_ids=[1])
    bank.add("old", _branches(1), prompt_ids=[1])
    for reader in (BranchBank(path), bank):
        (back,) = reader.get("new")
        assert (back.text, back.token_ids, back.margins, back.offsets) == ("answer 7", [7, 8], [0.5, 0.25],
                                                                          [(0, 6), (6, 8)])
        assert list(back.stats) == list(STAT_NAMES)
        for stat in STAT_NAMES:
            assert back.stats[stat] == pytest.approx(stats[stat], rel=2 ** -11)
        assert back.stats["logprob"][0] != stats["logprob"][0]  # -0.0123456 is not a float16: it was rounded
        assert reader.get("old") == _branches(1) and reader.get("old")[0].stats is None
    stored = {r["key"]: r for r in BranchBank(path).store.records()}
    assert "stats" not in stored["old"]["branches"][0]
    encoded = stored["new"]["branches"][0]["stats"]
    assert set(encoded) == set(STAT_NAMES) and all(len(base64.b64decode(text)) == 4 for text in encoded.values())
    committed = Path(__file__).resolve().parents[1] / "benchmarks/banks/smollm2-135m-instruct/lover_gsm8k-test.jsonl.gz"
    with gzip.open(committed, "rt") as handle:
        first = json.loads(handle.readline())
    assert "stats" not in first["branches"][0]
    assert BranchBank(committed).get(first["key"])[0].stats is None
