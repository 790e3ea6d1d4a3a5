"""`lm_eval --model lover_hf` end to end: the real command on SmolLM2 (the one CLI smoke test) and on two CPU ranks
(torchrun's processes are the subject), the rest through lm-eval's entry point in this process (tests/in_process.py)."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import in_process
from lover_lmeval.core.select.rows import TASK_ROWS
from lover_lmeval.harness.sampling_rows import row_names

REPO = Path(__file__).resolve().parents[1]
# Every test here runs an LLM end to end.
pytestmark = pytest.mark.slow

STRATEGIES = set(TASK_ROWS)  # every task YAML has one metric row per task row (a strategy each)


def _run(command: list[str], tmp_path: Path, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env}
    done = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


def _samples(out: Path) -> list[dict]:
    (path,) = glob.glob(str(out / "*" / "samples_lover_gsm8k_*.jsonl"))
    return [json.loads(line) for line in open(path)]


def test_lm_eval_cli_on_embedded_smollm2_prints_every_strategy(tmp_path, smollm2_dir):
    """The embedded model named as a user names their own GGUF: lm-eval's hint that an instruct model runs without
    its chat template names that file, not `pretrained=None`; lover_hf's first line names the task's metric."""
    from lover_lmeval.core.loading import default_gguf

    out, gguf = tmp_path / "out", default_gguf()  # SmolLM2-135M-Instruct...gguf: "instruct" draws lm-eval's hint
    done = _run([sys.executable, "-m", "lm_eval", "--model", "lover_hf", "--model_args",
                 f"gguf_file={gguf},n_branches=3", "--gen_kwargs", "max_gen_toks=24", "--tasks", "lover_gsm8k", "--limit", "2", "--log_samples",
                 "--output_path", str(out)], tmp_path)  # no --include_path: the packaged tasks resolve by themselves
    log = done.stdout + done.stderr
    assert f"gguf_file={gguf} appears to be an" in log and "pretrained=None" not in log, log[-3000:]
    assert "The table at the end has one exact_match row per selector" in log
    (results_file,) = glob.glob(str(out / "*" / "results_*.json"))
    results = json.load(open(results_file))
    metrics = results["results"]["lover_gsm8k"]
    provenance = results["config"]["lover"]  # what made the scores, in the results file itself
    sampling = provenance["sampling_rows"]["lover_gsm8k"]  # the references over the 3 branches, beside the selectors
    assert sampling == ["avg@3", "pass@1", "pass@2", "pass@3", "maj@1", "maj@2", "maj@3"]
    assert {key.split(",")[1] for key in metrics if key.startswith("exact_match,")} == STRATEGIES | set(sampling)
    assert metrics["exact_match,maj@3"] == metrics["exact_match,majority"]
    assert metrics["exact_match,pass@3"] == metrics["exact_match,pass_at_n"]
    fit = provenance["test_time_fits"]["lover_gsm8k"]
    assert provenance["plugin_version"] and provenance["world_size"] == 1 and fit["questions"] == 2
    assert len(fit["verifier_tensors_sha256"]) == 64 and fit["fit_config"]["regime"] == "ours"
    samples = _samples(out)
    assert len(samples) == 2 * (len(STRATEGIES) + len(sampling))
    for sample in samples:
        logged = sample["lover"]
        assert len(logged["texts"]) == 3 and len(logged["finish"]) == 3
        assert logged["features"] == [3, 2, 576]  # SmolLM2-135M: hidden size 576
        assert len(logged["scores"]["lover"]) == 3  # default verifier=fit scored every branch
        assert logged["scored_by"]["lover"].endswith(fit["verifier_tensors_sha256"])
        read = sample["filtered_resps"][0]  # a reference: each branch's answer as the task reads it
        assert len(read) == 3 if sample["filter"] in sampling else isinstance(read[0], str)


BBH_EXTRACTORS = {"lover_bbh_boolean_expressions": "true_false", "lover_bbh_web_of_lies": "yes_no",
                  "lover_bbh_object_counting": "number", "lover_bbh_navigate": "yes_no",
                  "lover_bbh_multistep_arithmetic_two": "number", "lover_bbh_causal_judgement": "yes_no"}


def test_lm_eval_cli_runs_the_lover_bbh_group_in_one_call(tmp_path, smollm2_dir):
    """The group the project ships, `--tasks lover_bbh`: its six subsets extract true/false, yes/no and numbers, and
    one lm_eval call runs them all, each task's test-time fit grouping answers with its own filters' extractor (a run
    used to have one extractor, and refused the group)."""
    out = tmp_path / "out"
    in_process.lm_eval(["--model", "lover_hf", "--model_args", "n_branches=2", "--gen_kwargs", "max_gen_toks=8",
                        "--tasks", "lover_bbh", "--limit", "2", "--output_path", str(out)], tmp_path)
    (results_file,) = glob.glob(str(out / "*" / "results_*.json"))
    results = json.load(open(results_file))
    assert set(BBH_EXTRACTORS) <= set(results["results"])
    fits = results["config"]["lover"]["test_time_fits"]
    assert {task: fit["extract"] for task, fit in fits.items()} == BBH_EXTRACTORS
    assert all(fit["questions"] == 2 for fit in fits.values())


# The golden run's bank: the first 8 GSM8K test questions of the committed SmolLM2 bank (N = 10, chat template), each
# branch with its token statistics (tests/test_golden.py), so these runs compute features but no statistics pass.
BANK = REPO / "tests" / "data" / "golden" / "smollm2_bank.jsonl.gz"


LIMIT = 5  # questions of the rank tests: an uneven split over two ranks


def _bank_run(tmp_path: Path, name: str, ranks: int, limit: int = LIMIT, feature_cache: Path | None = None
              ) -> tuple[dict, dict]:
    """lm_eval over a SmolLM2 bank (embedded model, N = 10, chat template, never decoding) on `ranks` CPU processes
    (torchrun's), or one rank in this process; returns (metrics, {(filter, doc_id): pick}) and checks that every rank
    decoded its share."""
    out = tmp_path / name
    args = ["lm_eval", "--model", "lover_hf", "--model_args",
            f"bank={BANK},bank_only=true,feature_cache={feature_cache or 'none'}", "--apply_chat_template",
            "--tasks", "lover_gsm8k", "--limit", str(limit), "--log_samples", "--output_path", str(out)]
    if ranks > 1:
        torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
        done = _run([torchrun, "--nproc_per_node", str(ranks), "-m", *args], tmp_path, ACCELERATE_USE_CPU="1")
    else:
        done = in_process.lm_eval(args[1:], tmp_path)
    log = done.stdout + done.stderr
    shares = [limit // ranks + (rank < limit % ranks) for rank in range(ranks)]
    assert all(f"lover_hf rank {r}/{ranks}: " in log for r in range(ranks)), log[-3000:]
    (results_file,) = glob.glob(str(out / "*" / "results_*.json"))
    results = json.load(open(results_file))
    assert results["config"]["lover"]["world_size"] == ranks
    assert results["config"]["lover"]["test_time_fits"]["lover_gsm8k"]["questions"] == limit == sum(shares)
    # lm-eval appends a padding copy's response to its question's sample (its own behaviour, for every model; the
    # metric reads the first): compare the first.
    picks = {(s["filter"], s["doc_id"]): (s["filtered_resps"][0][0], s["exact_match"]) for s in _samples(out)}
    return results["results"]["lover_gsm8k"], picks


def test_one_and_two_cpu_ranks_give_identical_picks_and_metrics(tmp_path):
    """5 questions on 2 ranks (an uneven split, 3 and 2: lm-eval pads rank 1 with a copy of its last request): one
    fit over all 5 questions, so every strategy row picks the same answer on every question as one process does;
    `lover compare` on the same bank scores every question of every row as lm_eval does. Both lm_eval runs compute
    their features (the banked branches carry their token statistics); `compare` reads those the two ranks wrote to
    a feature cache instead of computing them a third time."""
    one_metrics, one_picks = _bank_run(tmp_path, "one", 1)
    cache = tmp_path / "features"
    cache.mkdir()
    two_metrics, two_picks = _bank_run(tmp_path, "two", 2, feature_cache=cache)
    rows = STRATEGIES | set(row_names(10))  # every selector, and the references over the 10 branches
    assert len(one_picks) == LIMIT * len(rows) and {f for f, _ in one_picks} == rows and one_picks == two_picks
    assert len(list(cache.iterdir())) >= LIMIT, "the ranks wrote no feature cache for compare to read"
    values = lambda metrics: {k: v for k, v in metrics.items() if k.startswith("exact_match,")}  # noqa: E731
    assert values(one_metrics) == values(two_metrics)
    for key, value in one_metrics.items():  # lm-eval sums the stderr in another order across ranks: last-bit noise
        if key.startswith("exact_match_stderr,"):
            assert abs(value - two_metrics[key]) < 1e-12, key
    in_process.lover(["compare", "--model_args", f"bank={BANK},bank_only=true,feature_cache={cache}",
                      "--apply_chat_template", "--tasks", "lover_gsm8k", "--limit", str(LIMIT), "--n_boot", "10",
                      "--cv_folds", "0", "--out", str(tmp_path / "compare")], tmp_path)
    rows = [json.loads(line) for line in open(tmp_path / "compare" / "per_question.jsonl")]
    assert len(rows) == LIMIT
    assert all(row[strategy] == one_picks[(strategy, row["doc_id"])][1] for row in rows for strategy in STRATEGIES)


def test_lm_eval_scores_with_a_checkpoint_trained_by_lover_train(tmp_path, tiny_model_dir):
    """The README's `verifier=CKPT` under lm_eval's command line, with a checkpoint `lover train` made in this test
    (chat-templated prompts, recorded in its metadata): the lover rows are scored by it, and a run on plain prompts
    is warned that the checkpoint expects --apply_chat_template."""
    checkpoint = tmp_path / "gsm8k.safetensors"
    in_process.lover(["train", "--model_args", f"pretrained={tiny_model_dir},n_branches=2", "--task", "lover_gsm8k",
                      "--split", "train", "--limit", "3", "--gen_kwargs", "max_gen_toks=6", "--apply_chat_template",
                      "--fit_config", "epochs=2;restarts=1", "--bank", str(tmp_path / "bank.sqlite"), "--out",
                      str(checkpoint)], tmp_path)
    assert json.loads(checkpoint.with_suffix(".json").read_text())["chat_template"] is True
    for chat in (True, False):
        out = tmp_path / f"out-{chat}"
        done = in_process.lm_eval(["--model", "lover_hf", "--model_args",
                                   f"pretrained={tiny_model_dir},n_branches=2,verifier={checkpoint}", "--gen_kwargs",
                                   "max_gen_toks=6", "--tasks", "lover_gsm8k", "--limit", "2", "--log_samples",
                                   "--output_path", str(out), *(["--apply_chat_template"] if chat else [])], tmp_path)
        (results_file,) = glob.glob(str(out / "*" / "results_*.json"))
        metrics = json.load(open(results_file))["results"]["lover_gsm8k"]
        assert {"exact_match,lover_max", "exact_match,lover_sum"} <= set(metrics)
        assert all(len(s["lover"]["scores"]["lover"]) == 2 for s in _samples(out))
        warned = "was trained on chat-templated prompts" in done.stdout + done.stderr
        assert warned is not chat, "the prompt-format warning fires exactly when the run differs from the checkpoint"


def test_use_cache_is_refused_before_any_request_runs(tmp_path, tiny_model_dir, monkeypatch):
    """lm-eval's request cache would serve one question's answer from an earlier run's fit (or other model_args): two
    runs sharing one cache, with different limits and model_args, are each refused with the reason and the fix,
    before decoding anything (so neither can serve the other a stale answer)."""
    def no_decoding(*args, **kwargs):
        raise AssertionError("a request ran before the refusal")

    monkeypatch.setattr("lover_lmeval.core.decode.engine.HFEngine.decode", no_decoding)
    for limit, n_branches in ((1, 2), (2, 3)):
        with pytest.raises(ValueError) as error:  # the model's set_cache_hook refuses
            in_process.lm_eval(["--model", "lover_hf", "--model_args",
                                f"pretrained={tiny_model_dir},n_branches={n_branches}", "--tasks", "lover_gsm8k",
                                "--limit", str(limit), "--use_cache", str(tmp_path / "cache")], tmp_path)
        assert "--use_cache cannot hold lover_hf's results" in str(error.value) and "bank=PATH" in str(error.value)
