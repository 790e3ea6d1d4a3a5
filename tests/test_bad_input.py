"""Every bad input to lover_hf gets a named error before any decoding: the message names the argument, the bad
value and the fix. One table walks every model_arg (core.config.MODEL_ARGS, fit_config, an unknown key) and every
way a checkpoint can be bad; a test below checks that the table covers every model_arg there is."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import save_file

from lover_lmeval.core.config import MODEL_ARGS
from lover_lmeval.harness.model import LoverLM


def _checkpoint(folder, tiny_model_dir) -> str:
    """A real checkpoint for the tiny llama (one supervised fit on 2 random questions), written once."""
    from lover_lmeval.core.verify.checkpoints import save_checkpoint
    from lover_lmeval.core.verify.verifier import Verifier

    path = folder / "ok.safetensors"
    if not path.exists():
        lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, verifier=None)
        save_checkpoint(path, Verifier(64), lm.pipeline.identity)
    return str(path)


def _flipped(folder, tiny_model_dir) -> str:
    data = bytearray(open(_checkpoint(folder, tiny_model_dir), "rb").read())
    data[-7] ^= 0xFF  # inside the last tensor's bytes: the header still parses
    path = folder / "flipped.safetensors"
    path.write_bytes(bytes(data))
    return str(path)


def _truncated(folder, tiny_model_dir) -> str:
    data = open(_checkpoint(folder, tiny_model_dir), "rb").read()
    (folder / "truncated.safetensors").write_bytes(data[: len(data) // 2])
    return str(folder / "truncated.safetensors")


def _foreign(folder, tiny_model_dir) -> str:
    save_file({"weight": torch.zeros(2)}, str(folder / "foreign.safetensors"))
    return str(folder / "foreign.safetensors")


def _garbage(folder, tiny_model_dir) -> str:
    (folder / "garbage.safetensors").write_bytes(b"\xff" * 64)
    return str(folder / "garbage.safetensors")


def _text_file(folder, tiny_model_dir) -> str:
    (folder / "notes.txt").write_text("not a bank")
    return str(folder / "notes.txt")


# (model_args, strings the message must contain: the argument, the bad value, and a word of the fix)
TABLE = [
    ({"n_branches": "abc"}, ["n_branches", "'abc'", "integer"]),
    ({"n_branches": "0"}, ["n_branches=0", ">= 1"]),
    ({"decoding": "greedyx"}, ["decoding='greedyx'", "cot"]),
    ({"decoding": "sample", "temperature": "-1"}, ["temperature=-1", "> 0"]),
    ({"temperature": "warm"}, ["temperature", "'warm'", "a number"]),
    ({"decoding": "sample", "top_p": "1.5"}, ["top_p=1.5", "(0, 1]"]),
    ({"top_p": "x"}, ["top_p", "'x'", "a number"]),
    ({"seed": "1.5"}, ["seed", "'1.5'", "integer"]),
    ({"continuous_batching": "sometimes"}, ["continuous_batching", "'sometimes'", "true or false"]),
    ({"max_rows": "5"}, ["max_rows=5 is fewer than n_branches=10", "max_rows >= 10"]),
    ({"max_rows": "many"}, ["max_rows", "'many'", "integer"]),
    ({"sync_every": "0"}, ["sync_every=0", ">= 1"]),
    ({"sync_every": "often"}, ["sync_every", "'often'", "integer"]),
    ({"static_cache": "true", "decoding": "sample"}, ["static_cache=true", "decoding=cot only", "decoding=sample"]),
    ({"static_cache": "yes please"}, ["static_cache", "'yes please'", "true or false"]),
    ({"compile_step": "true"}, ["compile_step=true", "add static_cache=true"]),
    ({"layer": "99"}, ["layer=99", "out of range", "1..4"]),
    ({"layer": "0"}, ["layer=0", "token embeddings", "1..4"]),
    ({"layer": "middle"}, ["layer", "'middle'", "integer"]),
    ({"extra_layers": "1;x"}, ["extra_layers", "'1;x'", "15;18"]),
    ({"extra_layers": "-9"}, ["extra_layers=-9", "out of range"]),
    ({"true_template": ""}, ["true_template=''", "empty", "pass a sentence"]),
    ({"false_template": "  "}, ["false_template='  '", "empty", "pass a sentence"]),
    ({"extract": "numbr"}, ["extract", "'numbr'", "number"]),
    ({"verifier": "{tmp}/missing.safetensors"}, ["verifier=", "missing.safetensors", "does not exist", "lover train"]),
    ({"verifier": _truncated}, ["verifier=", "truncated.safetensors", "not a readable", "lover train"]),
    ({"verifier": _garbage}, ["verifier=", "garbage.safetensors", "not a readable", "lover train"]),
    ({"verifier": _foreign}, ["verifier=", "foreign.safetensors", "not a LoVer checkpoint", "lover train"]),
    ({"verifier": _flipped}, ["verifier=", "flipped.safetensors", "checksum", "lover train"]),
    ({"supervised_verifier": "{tmp}/nope.safetensors"}, ["supervised_verifier=", "nope.safetensors", "does not exist"]),
    ({"bank": "{tmp}"}, ["bank=", "is a directory", "bank.sqlite"]),
    ({"bank": _text_file}, ["bank=", "notes.txt", "not a lover-lmeval bank", "new file path"]),
    ({"bank": lambda d, m: _text_file(d, m) + "/sub/bank.sqlite"}, ["bank=", "notes.txt", "writable folder"]),
    ({"bank_only": "true"}, ["bank_only=true", "bank=PATH"]),
    ({"bank_only": "maybe", "bank": "{tmp}/b.sqlite"}, ["bank_only", "'maybe'", "true or false"]),
    ({"bank_dtype": "bf17", "bank": "{tmp}/b.sqlite"}, ["bank_dtype=bf17", "not a torch dtype", "bfloat16"]),
    ({"bank_engine": "tgi", "bank": "{tmp}/b.sqlite"}, ["bank_engine=tgi", "not an engine", "vllm"]),
    ({"feature_cache": _text_file}, ["feature_cache=", "notes.txt", "not a folder"]),
    ({"ptrue": "sometimes"}, ["ptrue", "'sometimes'", "true or false"]),
    ({"fit_config": "epochz=3"}, ["fit config", "'epochz=3'", "epochs"]),
    ({"fit_config": "lr=fast"}, ["fit config", "lr='fast'", "float"]),
    ({"fit_config": "regime=paper"}, ["regime", "'paper'", "authors"]),
    ({"foo": "1"}, ["foo=1", "neither a lover_hf argument", "n_branches", "model loader"]),
    ({"n_branche": "4"}, ["n_branche=4", "did you mean n_branches"]),
]


def _resolve(value, folder, tiny_model_dir):
    if callable(value):
        return value(folder, tiny_model_dir)
    return value.replace("{tmp}", str(folder))


@pytest.mark.parametrize("args, needles", TABLE, ids=[",".join(a) + f"#{i}" for i, (a, _) in enumerate(TABLE)])
def test_bad_model_arg_is_named_before_any_decoding(args, needles, tiny_model_dir, tmp_path, monkeypatch):
    def no_decoding(*a, **k):
        raise AssertionError("decoding started before the bad input was reported")

    monkeypatch.setattr("lover_lmeval.core.decode.engine.HFEngine.decode", no_decoding)
    resolved = {k: _resolve(v, tmp_path, tiny_model_dir) for k, v in args.items()}
    with pytest.raises(ValueError) as error:
        LoverLM(pretrained=str(tiny_model_dir), **resolved)
    message = str(error.value)
    for needle in needles:
        assert needle in message, f"{needle!r} missing from: {message}"


def test_the_table_covers_every_model_arg():
    covered = {key for args, _ in TABLE for key in args}
    assert set(MODEL_ARGS) | {"fit_config"} <= covered, sorted(set(MODEL_ARGS) | {"fit_config"} - covered)


def test_arguments_a_decoding_mode_does_not_use_are_not_checked(tiny_model_dir):
    """temperature and top_p matter only to decoding=sample: cot with temperature=-1 is not an error."""
    lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, verifier=None, temperature="-1", top_p="7")
    assert lm.pipeline.config.decoding.mode == "cot"


def test_a_checkpoint_records_and_checks_its_checksum(tiny_model_dir, tmp_path):
    from safetensors import safe_open

    path = _checkpoint(tmp_path, tiny_model_dir)
    with safe_open(path, framework="pt") as f:
        meta = json.loads(f.metadata()["lover"])
    assert len(meta["tensors_sha256"]) == 64
    assert LoverLM(pretrained=str(tiny_model_dir), n_branches=2, verifier=path).pipeline.verifiers["lover"].module


FILTER_TASK = """task: {name}
include: _lover_base.yaml
custom_dataset: !function lover_tasks.load_gsm8k
test_split: test
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
filter_list:
  - name: pick
    filter:
      - function: lover_select
        strategy: {strategy}
        extract: {extract}
"""


@pytest.mark.parametrize("strategy, extract, needles", [
    ("lover_maxx", "number", ["strategy='lover_maxx'", "is unknown", "lover_max"]),
    ("lover_sum", "yes_no", ["extract=number", "extracts yes_no", "pass extract=yes_no"]),
    ("ptrue_max", "number", ["reads the scores of verifier 'ptrue'", "pass ptrue=true"]),  # opt-in, not asked for
])
def test_a_bad_filter_is_named_before_any_decoding(strategy, extract, needles, tiny_model_dir, tmp_path,
                                                   monkeypatch):
    """Through lm-eval itself (simple_evaluate on a task YAML): an unknown strategy, or a filter whose extractor
    differs from the one model_args set for the test-time fit, fails before the first question is decoded, not after
    all of them."""
    import shutil

    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from tests.conftest import REPO

    folder = tmp_path / "tasks"
    shutil.copytree(REPO / "task_configs", folder)
    (folder / "my_task.yaml").write_text(FILTER_TASK.format(name="my_task", strategy=strategy, extract=extract))

    def no_decoding(*a, **k):
        raise AssertionError("decoding started before the bad filter was reported")

    monkeypatch.setattr("lover_lmeval.core.decode.engine.HFEngine.decode", no_decoding)
    lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, extract="number")
    with pytest.raises(ValueError) as error:
        simple_evaluate(model=lm, tasks=["my_task"], limit=1, task_manager=TaskManager(include_path=str(folder)))
    for needle in needles:
        assert needle in str(error.value), str(error.value)


def test_without_extract_the_fit_groups_answers_as_the_tasks_filters_do(tiny_model_dir, tmp_path, caplog):
    """model_args without `extract`, a task whose lover_* filter extracts yes_no: the fit adopts yes_no (logged)
    instead of refusing the run, since every filter that reads the fit agrees."""
    import shutil

    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    from tests.conftest import REPO

    folder = tmp_path / "tasks"
    shutil.copytree(REPO / "task_configs", folder)
    (folder / "my_task.yaml").write_text(FILTER_TASK.format(name="my_task", strategy="lover_sum", extract="yes_no"))
    lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=2)
    with caplog.at_level("INFO", logger="lm_eval.lover_hf"):
        simple_evaluate(model=lm, tasks=["my_task"], limit=1, gen_kwargs="max_gen_toks=4",
                        task_manager=TaskManager(include_path=str(folder)))
    assert lm.pipeline.config.selection.extract == "number"  # model_args' default is left as it was
    assert lm.pipeline.record.fits["my_task"]["extract"] == "yes_no"
    assert "task my_task: extract=yes_no, as its lover_select filters group answers" in caplog.text


def test_lover_rows_without_any_verifier_are_refused_before_decoding(tiny_model_dir, monkeypatch):
    """verifier=None on a task with lover_* rows would fail only after the whole decode (no scores to read); its
    first such row is the plain probes' (ccs_max, fitted only where LoVer scores)."""
    from lm_eval import simple_evaluate

    def no_decoding(*a, **k):
        raise AssertionError("decoding started before the missing verifier was reported")

    monkeypatch.setattr("lover_lmeval.core.decode.engine.HFEngine.decode", no_decoding)
    lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, verifier="None")
    with pytest.raises(ValueError, match="reads the scores of verifier 'ccs'.*pass verifier=fit"):
        simple_evaluate(model=lm, tasks=["lover_gsm8k"], limit=1)
