"""Every lm-eval flag a user passes to lover_hf is honoured or refused by name, on the real `lm_eval` CLI.

Each honoured row runs `lm_eval --model lover_hf` on the embedded SmolLM2 (1 question, 2 branches, 8 tokens) with one
flag, through lm-eval's command-line entry point in this process, and asserts what the run recorded (the results
file's provenance, the log, the logged prompt). Each refused row runs the same entry point and asserts that it stopped
before decoding with an error naming the value; one of them runs the real command, whose output is the subject: one
line `lover_hf: error: ...` and no traceback.
"""

from __future__ import annotations

import glob
import json
import os
import subprocess
import sys

import pytest

import in_process

BASE_ARGS = "n_branches=2"


def _arguments(tmp_path, model_args: str, *flags: str) -> list[str]:
    gen_kwargs = [] if "--gen_kwargs" in flags else ["--gen_kwargs", "max_gen_toks=8"]
    return ["--model", "lover_hf", "--model_args", model_args, "--tasks", "lover_gsm8k", "--limit", "1",
            "--output_path", str(tmp_path / "out"), "--log_samples", *flags, *gen_kwargs]


def _outputs(tmp_path) -> tuple[dict | None, list]:
    out = tmp_path / "out"
    results = glob.glob(str(out / "*" / "results_*.json"))
    samples = glob.glob(str(out / "*" / "samples_lover_gsm8k_*.jsonl"))
    return (json.load(open(results[0])) if results else None,
            [json.loads(line) for line in open(samples[0])] if samples else [])


def _sampling(results, samples, log):
    decoding = results["config"]["lover"]["decoding"]
    assert decoding["mode"] == "sample" and decoding["temperature"] == 0.8 and decoding["top_p"] == 0.95
    # the task's `greedy` row then scores a sampled path: the run says so, once
    assert log.count("the greedy row scores branch 0, one sampled path, not a greedy decode") == 1


def _auto(results, samples, log):
    # a CPU: 50 rows (benchmarks' measured best) / 2 branches = 25 questions a batch, logged and recorded
    assert "batch_size=auto -> 25 questions (50 rows)" in log
    assert results["config"]["lover"]["batch_size"] == 25


def _fewshot(results, samples, log):
    context = samples[0]["arguments"]["gen_args_0"]["arg_0"]
    # two worked exemplars, each ending in the answer sentence the instruction asks for, then the question
    assert context.count("Question:") == 3 and context.count("The answer is") >= 2
    assert "Answer: 6\n" not in context  # no bare-number target


def _one_branch(results, samples, log):
    assert "n_branches=1 decodes one branch a question" in log
    fit = results["config"]["lover"]["test_time_fits"]["lover_gsm8k"]
    assert fit["skipped"].startswith("no fit: n_branches=1")
    rows = results["results"]["lover_gsm8k"]
    assert rows["exact_match,lover_sum"] == rows["exact_match,greedy"]


HONOURED = {
    "gen_kwargs do_sample=true,temperature=0.8": (BASE_ARGS, ["--gen_kwargs", "do_sample=true,temperature=0.8,"
                                                              "max_gen_toks=8"], _sampling),
    "batch_size auto": (BASE_ARGS, ["--batch_size", "auto"], _auto),
    "num_fewshot 2": (BASE_ARGS, ["--num_fewshot", "2"], _fewshot),
    "n_branches=1": ("n_branches=1", [], _one_branch),
}

REFUSED = {
    "do_sample against decoding=cot": (f"{BASE_ARGS},decoding=cot", ["--gen_kwargs", "do_sample=true"],
                                       "gen_kwargs do_sample=true asks for sampled branches, but model_args "
                                       "decoding=cot"),
    "a gen_kwarg lover_hf lacks": (BASE_ARGS, ["--gen_kwargs", "top_k=5"], "gen_kwargs top_k=5"),
    "n_branches=0": ("n_branches=0", [], "n_branches=0 must be >= 1"),
    "temperature=0 when sampling": ("decoding=sample,temperature=0", [], "temperature=0 must be > 0"),
    "a hub id offline": ("pretrained=HuggingFaceTB/SmolLM2-135M-Instruct", [], "pass gguf_file=PATH"),
    "extract unlike the task's filters": (f"{BASE_ARGS},extract=yes_no", [], "extracts number: pass extract=number"),
}


@pytest.mark.slow
@pytest.mark.parametrize("flag", list(HONOURED))
def test_flag_is_honoured(tmp_path, smollm2_dir, flag):
    model_args, flags, check = HONOURED[flag]
    done = in_process.lm_eval(_arguments(tmp_path, model_args, *flags), tmp_path)
    check(*_outputs(tmp_path), done.stdout + done.stderr)


@pytest.mark.slow
def test_a_refused_flag_stops_the_real_command_in_one_line(tmp_path, smollm2_dir):
    """The `lm_eval` command itself: a refusal is its last line, `lover_hf: error: ...`, with no traceback."""
    model_args, flags, message = REFUSED["a gen_kwarg lover_hf lacks"]
    done = subprocess.run([sys.executable, "-m", "lm_eval", *_arguments(tmp_path, model_args, *flags)], cwd=tmp_path,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"},
                          capture_output=True, text=True, timeout=900)
    assert done.returncode != 0 and _outputs(tmp_path)[0] is None
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("lover_hf: error: ") and message in last, done.stderr[-3000:]
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("flag", list(REFUSED))
def test_flag_is_refused_before_decoding(tmp_path, smollm2_dir, monkeypatch, flag):
    """Each refusal through lm-eval's own command-line entry point, in this process (the command's one-line output
    is the test above's): the run stops with a LoverUsageError naming the value, before any question is decoded and
    before any results file is written."""
    from lover_lmeval.harness.model_args import LoverUsageError

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoding started before the refusal")

    model_args, flags, message = REFUSED[flag]
    monkeypatch.setattr("lover_lmeval.core.decode.engine.HFEngine.decode", no_decoding)
    with pytest.raises(LoverUsageError) as error:
        in_process.lm_eval(_arguments(tmp_path, model_args, *flags), tmp_path)
    assert message in str(error.value), str(error.value)
    assert not (tmp_path / "out").exists()


def test_an_empty_prompt_is_refused_before_decoding_naming_its_document():
    """A doc whose prompt is empty would fail inside the prefill after the other questions decoded; it is refused
    first, with the task and doc id. The other request's kwargs are checked in the same pass."""
    from lm_eval.api.instance import Instance

    from lover_lmeval.core.decode.decoding import DecodingConfig
    from lover_lmeval.harness.generation import check_requests
    from lover_lmeval.harness.model_args import LoverUsageError

    def request(context: str, doc_id: int) -> Instance:
        return Instance("generate_until", {}, (context, {"until": ["Question:"], "do_sample": False}), 0,
                        metadata=("my_task", doc_id, 1))

    check_requests([request("Question: 2 + 2?", 0)], DecodingConfig(), set(), 256)
    with pytest.raises(LoverUsageError, match="task my_task doc 7 has an empty prompt"):
        check_requests([request("Question: 2 + 2?", 0), request("  ", 7)], DecodingConfig(), set(), 256)


def test_the_greedy_row_is_named_a_drawn_path_once_a_run(tiny_model_dir, caplog):
    """With decoding=sample the task's `greedy` row scores branch 0, a sampled path: lover_hf says so once, however
    many groups of requests it decodes; with decoding=cot (branch 0 is the greedy decode) it says nothing."""
    from lover_lmeval.harness.model import LoverLM

    note = "decoding=sample: the greedy row scores branch 0, one sampled path, not a greedy decode"
    kwargs = {"until": ["Question:"], "max_gen_toks": 4, "do_sample": False}
    for decoding, expected in (("sample", 1), ("cot", 0)):
        lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, verifier=None, decoding=decoding)
        caplog.clear()
        with caplog.at_level("WARNING", logger="lm_eval.lover_hf"):
            for context in ("Question: 2 + 2?", "Question: 3 + 3?"):  # two groups, each decoded apart
                lm.run_contexts([context], kwargs)
        assert sum(note in record.getMessage() for record in caplog.records) == expected
