"""`lover_hf` as lm-eval sees it: registration, generate_until, and its input errors."""

from __future__ import annotations

import logging
import subprocess
import sys

import numpy as np
import torch
import pytest
from lm_eval.api.instance import Instance

from lover_lmeval.core.store.bank import NotInBank
from tests.conftest import REPO
from lover_lmeval.core.decode.features import features_from_tokens
from lover_lmeval.harness.model import LoverLM
from lover_lmeval.core.results import LoverResult


class LabelTrap(dict):
    """A doc that fails the test if the model reads it: it holds the gold answer."""

    def __getitem__(self, key):
        raise AssertionError(f"lover_hf read doc[{key!r}]: label leakage")

    get = keys = items = values = __iter__ = __getitem__


def _request(context, max_gen_toks=6, until=("\n\n",), task="task_a"):
    return Instance("generate_until", LabelTrap(answer="42"), (context, {"until": list(until), "max_gen_toks": max_gen_toks}),
                    0, metadata=(task, 0, 1))


@torch.no_grad()
def _greedy_reference(lm: LoverLM, context: str, max_gen_toks: int) -> list[int]:
    """Plain `generate` greedy continuation of the model under `lm`: the baseline branch 0 must reproduce."""
    ids = torch.tensor([lm.tok_encode(context)], device=lm.device)
    out = lm.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=max_gen_toks,
                            pad_token_id=lm.tokenizer.pad_token_id)
    return out[0, ids.shape[1]:].tolist()


@pytest.fixture(scope="module")
def lover_lm(tiny_model_dir):
    return LoverLM(pretrained=str(tiny_model_dir), n_branches=3, layer=-2, batch_size=2, verifier=None)


def test_generate_until_returns_n_branches_with_features_and_never_reads_docs(lover_lm):
    contexts = ["Question: 2 + 2?\nAnswer:", "Question: name a colour.\nAnswer:", "Hi"]
    results = lover_lm.generate_until([_request(c) for c in contexts], disable_tqdm=True)
    assert len(results) == 3
    for context, result in zip(contexts, results):
        assert isinstance(result, LoverResult) and len(result.branches) == 3
        assert result.features.shape == (3, 2, 64)
        assert result.layer == 3  # hidden_states has 5 entries (embeddings + 4 blocks); -2 is block 3
        greedy = _greedy_reference(lover_lm, context, 6)
        assert result.branches[0].token_ids == greedy[: len(result.branches[0].token_ids)]


def test_extra_layers_ride_along_and_equal_features_recomputed_from_tokens(tiny_model_dir, tmp_path):
    """extra_layers keeps more layers' features for a sweep; they must equal what a sweep would recompute from the
    branches' tokens, also for results served from the bank (no KV cache there)."""
    lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=3, extra_layers="1;-1", batch_size=2, verifier=None,
                 bank=str(tmp_path / "bank.sqlite"), feature_cache="none")
    assert lm.pipeline.layers[1:] == [1, 4]
    contexts = ["Question: 2 + 2?\nAnswer:", "Question: name a colour.\nAnswer:"]
    live = lm.generate_until([_request(c) for c in contexts], disable_tqdm=True)
    banked = lm.generate_until([_request(c) for c in contexts], disable_tqdm=True)
    for a, b in zip(live, banked):
        assert set(a.layer_features) == {1, 4} and a.layer_features[1].shape == (3, 2, 64)
        again = features_from_tokens(lm.model, a.prompt_ids, a.branches, lm.pipeline.template_ids, [1, 4])  # (N, 2, L, D)
        for k, layer in enumerate((1, 4)):
            assert np.abs(a.layer_features[layer] - again[:, :, k].numpy()).max() < 1e-4
            assert np.abs(b.layer_features[layer] - again[:, :, k].numpy()).max() < 1e-4
        assert np.abs(a.features - b.features).max() < 1e-4
    with pytest.raises(ValueError, match="extra_layers=7 is out of range"):
        LoverLM(pretrained=str(tiny_model_dir), extra_layers="7", verifier=None)
    with pytest.raises(ValueError, match="curiculum=0.2"):  # a typo in the test-time fit's config, before decoding
        LoverLM(pretrained=str(tiny_model_dir), fit_config="curiculum=0.2")
    assert LoverLM(pretrained=str(tiny_model_dir), fit_config="curriculum=0.2;epochs=3").pipeline.config.fit.epochs == 3


def test_feature_cache_serves_banked_questions_without_running_the_model(tiny_model_dir, tmp_path, monkeypatch):
    """With a bank, features are kept per (question, layer): a second run (a fresh process in practice) reads them
    instead of re-running every branch, gets the same values, and recomputes only a layer it has not seen."""
    kwargs = dict(pretrained=str(tiny_model_dir), n_branches=3, batch_size=2, verifier=None,
                  bank=str(tmp_path / "bank.sqlite"), feature_cache=str(tmp_path / "features"))
    contexts = ["Question: 2 + 2?\nAnswer:", "Question: name a colour.\nAnswer:"]
    live = LoverLM(extra_layers="1", **kwargs).generate_until([_request(c) for c in contexts], disable_tqdm=True)
    assert len(list((tmp_path / "features").rglob("*.npy"))) == 2 * 2  # 2 questions x 2 layers

    def no_model_runs(*args, **kw):
        raise AssertionError("ran the model although every feature is cached")

    monkeypatch.setattr("lover_lmeval.core.store.complete.questions_features", no_model_runs)
    monkeypatch.setattr("lover_lmeval.core.store.complete.stats_from_tokens", no_model_runs)
    monkeypatch.setattr("lover_lmeval.core.decode.engine.HFEngine.decode", no_model_runs)
    cached = LoverLM(extra_layers="1", **kwargs).generate_until([_request(c) for c in contexts], disable_tqdm=True)
    for a, b in zip(live, cached):
        assert [x.token_ids for x in a.branches] == [x.token_ids for x in b.branches]
        np.testing.assert_array_equal(a.features, b.features)
        np.testing.assert_array_equal(a.layer_features[1], b.layer_features[1])
    with pytest.raises(AssertionError, match="every feature is cached"):  # layer 3 was never cached
        LoverLM(extra_layers="3", **kwargs).generate_until([_request(contexts[0])], disable_tqdm=True)
    with pytest.raises(NotInBank, match="1 of 1 questions are not in the bank"):
        LoverLM(bank_only="true", **kwargs).generate_until([_request("Never decoded")], disable_tqdm=True)
    with pytest.raises(ValueError, match="bank_only=true needs bank=PATH"):
        LoverLM(pretrained=str(tiny_model_dir), bank_only=True)
    monkeypatch.setenv("LOVER_CACHE_DIR", str(tmp_path / "cache"))  # the default place, unless switched off
    del kwargs["feature_cache"]
    assert LoverLM(**kwargs).pipeline.feature_cache.directory == tmp_path / "cache" / "features"
    assert LoverLM(**kwargs, feature_cache="none").pipeline.feature_cache is None


@pytest.mark.parametrize("continuous", ["false", "true"])
def test_unbanked_questions_fill_whole_decoding_batches(tiny_model_dir, tmp_path, monkeypatch, continuous):
    """With one of three questions banked and batch_size=2, the two others are decoded in one batch of 2, not in
    two half-empty batches (which is what longest-prompt-first order alone gives here), batch by batch as well as
    with continuous batching (where every unbanked question goes to one call)."""
    import lover_lmeval.core.decode.engine as engine_module

    kwargs = dict(pretrained=str(tiny_model_dir), n_branches=2, batch_size=2, verifier=None,
                  bank=str(tmp_path / "bank.sqlite"), feature_cache="none", continuous_batching=continuous)
    contexts = ["Question: a long question about apples and pears?\nAnswer:", "Q: medium one?\nA:", "Q: x?"]
    LoverLM(**kwargs).generate_until([_request(contexts[1])], disable_tqdm=True)
    sizes, real_decode = [], engine_module.schedule

    def counting(store, model, tokenizer, prompts, *args, **kwargs):
        sizes.append(len(prompts))
        return real_decode(store, model, tokenizer, prompts, *args, **kwargs)

    monkeypatch.setattr(engine_module, "schedule", counting)
    lm = LoverLM(**kwargs)
    encoded, real_encode = [], lm.tok_encode
    monkeypatch.setattr(lm, "tok_encode", lambda text, **kw: encoded.append(text) or real_encode(text, **kw))
    results = lm.generate_until([_request(c) for c in contexts], disable_tqdm=True)
    assert sizes == [2] and all(len(r.branches) == 2 for r in results)
    assert sorted(encoded) == sorted(contexts), "each prompt is tokenized once, for the bank lookup and decoding"


def test_prompt_longer_than_context_is_left_truncated_with_a_warning(tiny_model_dir, caplog):
    lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, max_length=40, verifier=None)
    with caplog.at_level(logging.WARNING):
        (result,) = lm.generate_until([_request("word " * 200, max_gen_toks=4)], disable_tqdm=True)
    assert "left truncation" in caplog.text
    assert len(result.branches) == 2


@pytest.mark.parametrize("kwargs, error, message", [
    ({"decoding": "nucleus"}, ValueError, "decoding='nucleus'.*cot, sample, beam"),
    ({"n_branches": 0}, ValueError, "n_branches=0 must be >= 1"),
    ({"layer": 9}, ValueError, r"layer=9 is out of range.*1\.\.4"),
    ({"gguf_file": "missing.gguf"}, FileNotFoundError, "gguf_file='missing.gguf' not found"),
    ({"extract": "digits"}, ValueError, "extract='digits' is not a known answer extractor"),
])
def test_bad_model_args_name_the_argument_and_the_fix(tiny_model_dir, kwargs, error, message):
    with pytest.raises(error, match=message):
        LoverLM(pretrained=str(tiny_model_dir), **kwargs)


def _python(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout


def test_plain_lm_eval_registry_resolves_ours_and_the_builtins():
    # lm-eval registers its own filters when lm_eval.filters is imported (task loading does that).
    out = _python("import lm_eval.filters\nfrom lm_eval.api.registry import get_model, get_filter\n"
                  "print(get_model('hf').__name__, get_model('lover_hf').__name__,"
                  " get_filter('lover_select').__name__, get_filter('regex').__name__)")
    assert out.split() == ["HFLM", "LoverLM", "LoverSelect", "RegexFilter"]


def test_packaged_tasks_resolve_without_include_path_and_a_users_folder_overrides_them(tmp_path):
    """A fresh interpreter (the .pth hook, as after `pip install`): TaskManager() finds every lover_* task with no
    include path; naming the packaged folder too indexes it once; a user's own folder overrides a task by name."""
    (tmp_path / "mine.yaml").write_text("task: lover_gsm8k\ninclude: " + str(REPO / "lover_lmeval/task_configs/lover_gsm8k.yaml")
                                        + "\ntest_split: train\n")
    out = _python("from lm_eval.tasks import TaskManager\n"
                  "plain = [t for t in TaskManager().all_tasks if t.startswith('lover_')]\n"
                  f"again = TaskManager(include_path={str(REPO / 'task_configs')!r})\n"
                  f"mine = TaskManager(include_path={str(tmp_path)!r}).task_index['lover_gsm8k']\n"
                  "print(len(plain), 'lover_gsm8k' in plain, len(again.include_path), mine.yaml_path)")
    count, found, paths, source = out.split()
    assert int(count) >= 19 and found == "True" and paths == "1" and source == str(tmp_path / "mine.yaml")


def test_interpreter_start_up_stays_light():
    out = _python("import sys; print(sorted(m for m in ('torch', 'lm_eval', 'transformers') if m in sys.modules))")
    assert out.strip() == "[]"


def test_fitting_and_checkpoints_need_no_lm_eval():
    # training uses CoT-decoding's span confidence (orient=confidence); it lives in answers.py, not in the lm-eval filter
    out = _python("import sys\nimport lover_lmeval.core.verify.scoring, lover_lmeval.core.verify.checkpoints\n"
                  "print(sorted(m for m in sys.modules if m.split('.')[0] == 'lm_eval'))")
    assert out.strip() == "[]"


def test_lover_cli_help():
    out = subprocess.run([sys.executable, "-m", "lover_lmeval.apps.cli", "--help"], check=True, capture_output=True, text=True)
    assert "igsm" in out.stdout and "train" in out.stdout


def test_subcommand_help_shows_meaningful_defaults_only(capsys):
    from lover_lmeval.apps.cli import main

    with pytest.raises(SystemExit):
        main(["igsm", "--help"])
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    assert "irrelevant sentences (0..10) (default: 0)" in text  # a 0 default is shown (0 == False in Python)
    assert "output .jsonl path (default" not in text  # a required option has no "(default: None)"


def test_gguf_is_converted_once_and_identified_by_its_sha256(smollm2_dir, monkeypatch):
    import json

    from lover_lmeval.core import loading
    from lover_lmeval.core.loading import convert_gguf, default_gguf, model_identity, sha256_file

    def no_dequantization(*args, **kwargs):
        raise AssertionError("the GGUF was loaded again: the converted folder was not reused")

    monkeypatch.setattr(loading.AutoModelForCausalLM, "from_pretrained", no_dequantization)
    assert convert_gguf(default_gguf()) == smollm2_dir  # cached: no second dequantization
    sha = sha256_file(default_gguf())
    assert json.loads((smollm2_dir / "lover_source.json").read_text())["sha256"] == sha
    assert model_identity(str(smollm2_dir), None, None) == f"gguf-sha256:{sha}"


def test_a_process_waiting_on_the_conversion_lock_reads_the_folder_the_first_one_made(tmp_path, monkeypatch):
    """Two processes convert the same GGUF at once (torchrun's ranks): the second waits on the lock the first holds,
    then finds the finished folder and converts nothing. Here the test holds the lock, a thread calls convert_gguf
    and is seen waiting on it (no sleep: the lock's acquire says so), the folder is completed, the lock released."""
    import threading

    from filelock import FileLock

    from lover_lmeval.core import loading

    monkeypatch.setenv("LOVER_CACHE_DIR", str(tmp_path / "cache"))
    gguf = tmp_path / "model.gguf"
    gguf.write_bytes(b"GGUF stand-in: only its sha256 is read before the lock")
    out = loading.cache_dir() / "converted" / loading.sha256_file(gguf)[:16]
    conversions, waiting = [], threading.Event()

    class SeenWaiting(FileLock):
        def acquire(self, *args, **kwargs):
            waiting.set()
            return super().acquire(*args, **kwargs)

    monkeypatch.setattr(loading, "_convert", lambda *args: conversions.append(args))
    monkeypatch.setattr(loading, "FileLock", SeenWaiting)
    got = []
    out.parent.mkdir(parents=True)
    with FileLock(str(out) + ".lock"):
        second = threading.Thread(target=lambda: got.append(loading.convert_gguf(gguf)))
        second.start()
        assert waiting.wait(timeout=60)
        out.mkdir()
        (out / "lover_source.json").write_text("{}")  # the first process's conversion, complete
    second.join(timeout=60)
    assert got == [out] and conversions == []


def test_test_time_fit_runs_once_per_task(tiny_model_dir, monkeypatch):
    """Two tasks in one run: each is fitted on its own questions, exactly as a run of that task alone."""
    from lover_lmeval.core.verify import test_time

    fitted = []
    real_fit = test_time.fit_on_results
    monkeypatch.setattr(test_time, "fit_on_results",
                        lambda results, **kw: fitted.append(len(results)) or real_fit(results, **kw))
    lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, batch_size=4, fit_config="epochs=1;restarts=1")
    requests = [_request(c, task=t) for c, t in [("Q: 1+1?", "task_a"), ("Q: 2+2?", "task_b"), ("Q: 3+3?", "task_a")]]
    results = lm.generate_until(requests, disable_tqdm=True)
    assert sorted(fitted) == [1, 2]
    assert all("lover" in r.verifier_probs and r.fit_extract == "number" for r in results)
    alone = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, batch_size=4, fit_config="epochs=1;restarts=1")
    (solo,) = alone.generate_until([requests[1]], disable_tqdm=True)
    np.testing.assert_allclose(solo.verifier_probs["lover"], results[1].verifier_probs["lover"], atol=1e-6)


def test_a_loaded_checkpoint_scores_every_branch(tiny_model_dir, tmp_path):
    """verifier=CKPT and supervised_verifier=CKPT (the README's documented use) score each result when decoded; the
    plain probes, which have no checkpoint, are fitted at test time beside them (their rows are in every task)."""
    from lover_lmeval.core.verify.checkpoints import save_checkpoint
    from lover_lmeval.core.verify.verifier import Verifier

    probe = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, verifier=None)
    path = tmp_path / "probe.safetensors"
    torch.manual_seed(0)
    save_checkpoint(path, Verifier(int(probe.model.config.hidden_size)), dict(probe.pipeline.identity))
    lm = LoverLM(pretrained=str(tiny_model_dir), n_branches=2, verifier=str(path), supervised_verifier=str(path))
    (result,) = lm.generate_until([_request("Question: 2 + 2?\nAnswer:")], disable_tqdm=True)
    assert set(result.verifier_probs) == {"lover", "supervised", "ccs", "pca"}
    fits = lm.pipeline.record.fits["task_a"]
    assert fits["probes"].keys() == {"ccs", "pca"} and "fit_config" not in fits  # no LoVer fit: a checkpoint scores
    assert result.verifier_probs["lover"].shape == (2, 2)
    np.testing.assert_allclose(result.scores("lover"), result.scores("supervised"))
