"""The real `lm_eval` CLI with `--model lover_hf`: SmolLM2 end to end, and two CPU ranks."""

from __future__ import annotations

import glob
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STRATEGIES = {"greedy", "majority", "cot_max", "cot_sum", "lover_max", "lover_sum", "pass_at_n"}


def _run(command: list[str], tmp_path: Path, **env) -> subprocess.CompletedProcess:
    environment = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env}
    done = subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-5000:]
    return done


def _samples(out: Path) -> list[dict]:
    (path,) = glob.glob(str(out / "*" / "samples_lover_gsm8k_*.jsonl"))
    return [json.loads(line) for line in open(path)]


def test_lm_eval_cli_on_embedded_smollm2_prints_every_strategy(tmp_path, smollm2_dir):
    out = tmp_path / "out"
    _run([sys.executable, "-m", "lm_eval", "--model", "lover_hf", "--model_args", "n_branches=3",
          "--gen_kwargs", "max_gen_toks=24", "--tasks", "lover_gsm8k", "--limit", "2", "--log_samples",
          "--output_path", str(out)], tmp_path)  # no --include_path: the packaged tasks resolve by themselves
    (results_file,) = glob.glob(str(out / "*" / "results_*.json"))
    results = json.load(open(results_file))
    metrics = results["results"]["lover_gsm8k"]
    assert {key.split(",")[1] for key in metrics if key.startswith("exact_match,")} == STRATEGIES
    provenance = results["config"]["lover"]  # what made the scores, in the results file itself
    fit = provenance["test_time_fits"]["lover_gsm8k"]
    assert provenance["plugin_version"] and provenance["world_size"] == 1 and fit["questions"] == 2
    assert len(fit["verifier_tensors_sha256"]) == 64 and fit["fit_config"]["regime"] == "ours"
    samples = _samples(out)
    assert len(samples) == 2 * len(STRATEGIES)
    for sample in samples:
        logged = json.loads(sample["resps"][0][0])
        assert len(logged["texts"]) == 3 and len(logged["finish"]) == 3
        assert logged["features"] == [3, 2, 576]  # SmolLM2-135M: hidden size 576
        assert len(logged["scores"]["lover"]) == 3  # default verifier=fit scored every branch
        assert logged["scored_by"]["lover"].endswith(fit["verifier_tensors_sha256"])
        assert isinstance(sample["filtered_resps"][0][0], str)


def test_two_cpu_ranks_each_decode_their_share(tmp_path, tiny_model_dir):
    torchrun = shutil.which("torchrun", path=str(Path(sys.executable).parent)) or "torchrun"
    out = tmp_path / "out"
    done = _run([torchrun, "--nproc_per_node", "2", "-m", "lm_eval", "--model", "lover_hf", "--model_args",
                 f"pretrained={tiny_model_dir},n_branches=2", "--gen_kwargs", "max_gen_toks=4", "--tasks",
                 "lover_gsm8k", "--include_path", str(REPO / "task_configs"), "--limit", "4", "--log_samples",
                 "--output_path", str(out)], tmp_path, ACCELERATE_USE_CPU="1")
    log = done.stdout + done.stderr
    assert "lover_hf rank 0/2: 2 questions" in log and "lover_hf rank 1/2: 2 questions" in log
    assert sorted(s["doc_id"] for s in _samples(out) if s["filter"] == "greedy") == [0, 1, 2, 3]


def test_lm_eval_scores_with_a_checkpoint_trained_by_lover_train(tmp_path, tiny_model_dir):
    """The README's `verifier=CKPT` under the real lm_eval CLI, with a checkpoint `lover train` made in this test
    (chat-templated prompts, recorded in its metadata): the lover rows are scored by it, and a run on plain prompts
    is warned that the checkpoint expects --apply_chat_template."""
    lover = str(Path(sys.executable).parent / "lover")
    checkpoint = tmp_path / "gsm8k.safetensors"
    _run([lover, "train", "--model_args", f"pretrained={tiny_model_dir},n_branches=2", "--task", "lover_gsm8k",
          "--split", "train", "--limit", "3", "--gen_kwargs", "max_gen_toks=6", "--apply_chat_template",
          "--fit_config", "epochs=2;restarts=1", "--bank", str(tmp_path / "bank.sqlite"), "--out", str(checkpoint)],
         tmp_path)
    assert json.loads(checkpoint.with_suffix(".json").read_text())["chat_template"] is True
    for chat in (True, False):
        out = tmp_path / f"out-{chat}"
        done = _run([sys.executable, "-m", "lm_eval", "--model", "lover_hf", "--model_args",
                     f"pretrained={tiny_model_dir},n_branches=2,verifier={checkpoint}", "--gen_kwargs",
                     "max_gen_toks=6", "--tasks", "lover_gsm8k", "--limit", "2", "--log_samples", "--output_path",
                     str(out), *(["--apply_chat_template"] if chat else [])], tmp_path)
        (results_file,) = glob.glob(str(out / "*" / "results_*.json"))
        metrics = json.load(open(results_file))["results"]["lover_gsm8k"]
        assert {"exact_match,lover_max", "exact_match,lover_sum"} <= set(metrics)
        assert all(len(json.loads(s["resps"][0][0])["scores"]["lover"]) == 2 for s in _samples(out))
        warned = "was trained on chat-templated prompts" in done.stdout + done.stderr
        assert warned is not chat, "the prompt-format warning fires exactly when the run differs from the checkpoint"
