"""lover_vllm's checks that run before anything loads (harness/vllm/settings.py) and its engine-start error line
(harness/vllm/start.py). They need no vLLM: they run in the main venv; tests/test_vllm.py runs them through
LoverVLLM on vLLM's CPU backend."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lover_lmeval.harness.vllm.memory_plan import GiB, MemoryPlan
from lover_lmeval.harness.model_args import LoverUsageError
from lover_lmeval.harness.vllm.settings import (HF_ENGINE_ARGS, VLLM_MAX_LOGPROBS, cap_logprobs,
                                                check_planned_branches, model_changes, refuse_hf_engine_args)
from lover_lmeval.harness.vllm.start import OutputTail, root_cause, start_error

#: the lines a failed start logged on a 10.84 GiB CPU machine (a max_model_len too long for it), as vLLM's engine
#: process prefixes them
FAILED_START_LOG = [
    "(EngineCore pid=4242) INFO 05-02 10:01:02 [cpu_worker.py:252] Auto set (0.28/10.84) GiB for KV cache on node 0, "
    "with 2.17 GiB requested memory for the worker. 1.89 GiB memory was consumed by non-kv usages.",
    "(EngineCore pid=4242) ERROR 05-02 10:01:02 [core.py:1510] EngineCore failed to start.",
    "(EngineCore pid=4242) Traceback (most recent call last):",
    "(EngineCore pid=4242) ValueError: To serve at least one request with the model's max seq len (8192), (0.35 GiB KV "
    "cache is needed, which is larger than the available KV cache memory (0.28 GiB). Based on the available memory, "
    "the estimated maximum model length is 6528. Try increasing `gpu_memory_utilization` (which also controls CPU "
    "memory on the CPU backend) or decreasing `max_model_len` when initializing the engine.",
]


def test_lover_hfs_batching_args_are_listed_as_hf_only():
    assert {"max_rows", "sync_every", "static_cache", "compile_step"} <= set(HF_ENGINE_ARGS)


@pytest.mark.parametrize("arg", HF_ENGINE_ARGS)
def test_lover_hf_batching_args_are_refused_by_name(arg):
    with pytest.raises(LoverUsageError, match=f"model_arg {arg}=7 is lover_hf's .* drop {arg}"):
        refuse_hf_engine_args({arg: 7, "n_branches": 5})
    refuse_hf_engine_args({"n_branches": 5, "max_num_seqs": 8})  # vLLM's own batching: its business


def test_max_logprobs_is_raised_to_n_beyond_vllms_cap_and_a_lower_one_refused():
    """vLLM refuses a request for more than max_logprobs (20) log-probabilities; CoT-decoding asks for N."""
    args = {}
    cap_logprobs(args, VLLM_MAX_LOGPROBS)
    assert args == {}  # within vLLM's default: nothing to raise
    cap_logprobs(args, 32)
    assert args == {"max_logprobs": 32}
    cap_logprobs({"max_logprobs": -1}, 64)  # vLLM's "no cap"
    with pytest.raises(LoverUsageError, match="max_logprobs=25 is below n_branches=32.*max_logprobs=32 or more"):
        cap_logprobs({"max_logprobs": 25}, 32)


def test_quantization_the_hf_copy_cannot_load_the_same_way_is_refused():
    with pytest.raises(LoverUsageError, match="quantization=fp8: vLLM would decode a fp8-quantized model, but the "
                                              "HF copy .* loads the checkpoint's unquantized weights"):
        model_changes({"model_type": "llama"}, {"quantization": "fp8"})
    quantized = {"model_type": "llama", "quantization_config": {"quant_method": "awq"}}
    assert model_changes(quantized, {"quantization": "awq"}).identity == ""  # both copies load the same files


def test_a_lora_adapter_must_be_a_folder(tmp_path):
    with pytest.raises(LoverUsageError, match="lora_local_path=.*nowhere is not a folder"):
        model_changes({}, {"lora_local_path": str(tmp_path / "nowhere")})


def test_without_peft_a_lora_adapter_is_refused_by_name(tmp_path):
    import importlib.util

    if importlib.util.find_spec("peft") is not None:
        pytest.skip("peft is installed here: the HF copy applies the adapter")
    (tmp_path / "adapter_config.json").write_text("{}")
    with pytest.raises(LoverUsageError, match="lora_local_path=.*needs peft"):
        model_changes({}, {"lora_local_path": str(tmp_path)})


def test_overrides_and_kv_cache_dtype_join_the_bank_key():
    """hf_overrides change the model: its identity (bank keys and checkpoints' match) names them, and a JSON string
    from the command line becomes the dict vLLM takes; kv_cache_dtype changes only how vLLM decodes: the engine's
    name in the key."""
    args = {"hf_overrides": '{"rope_theta": 1000000}', "kv_cache_dtype": "fp8"}
    changes = model_changes({}, args)
    assert args["hf_overrides"] == {"rope_theta": 1000000} and changes.overrides == {"rope_theta": 1000000}
    assert changes.identity == ' hf_overrides:{"rope_theta": 1000000}' and changes.engine == "[kv_cache_dtype=fp8]"
    assert model_changes({}, {"kv_cache_dtype": "auto"}).engine == ""
    with pytest.raises(LoverUsageError, match="hf_overrides='rope':.* must be a dict"):
        model_changes({}, {"hf_overrides": "rope"})


def test_a_start_short_of_kv_memory_says_its_root_cause_in_one_line_with_its_fix():
    """A start short of KV memory: vLLM's own error and its KV report, then the fix with the numbers:
    max_model_len 8192 of SmolLM2 in float32 is 2 x 30 x 3 x 64 x 4 = 46,080 bytes a token x 8192 = 0.35 GiB of KV."""
    plan = MemoryPlan(538_060_032, 46_080, 8192, GiB, "cpu", 1, 11_639_000_000, 0.2)
    error = start_error(RuntimeError("Engine core initialization failed. See root cause above. Failed core proc(s): "
                                     "{}"), FAILED_START_LOG, "smollm2", {"gpu_memory_utilization": 0.2}, plan)
    message = str(error)
    assert "\n" not in message and "See root cause above" not in message
    assert message.startswith("vLLM could not start smollm2: ValueError: To serve at least one request with the "
                              "model's max seq len (8192), (0.35 GiB KV cache is needed")
    assert "Auto set (0.28/10.84) GiB for KV cache" in message and "1.89 GiB memory was consumed by non-kv" in message
    assert ("Fix: its share leaves the KV cache too little room: raise gpu_memory_utilization (now 0.2) or lower "
            "max_model_len=8192 (0.35 GiB of KV for one full-length sequence)") in message
    assert root_cause(["nothing to see"]) is None


def test_the_engines_processes_output_is_forwarded_and_its_tail_kept(capfd):
    """A child process (as vLLM's engine is one) writes to the stdout and stderr it inherits: the lines reach this
    process's streams unchanged, and the tail keeps them for the root cause."""
    child = "import sys; print('INFO starting'); print('(EngineCore pid=1) ValueError: boom', file=sys.stderr)"
    with OutputTail() as tail:
        subprocess.run([sys.executable, "-c", child], check=True)
    lines = tail.lines()
    assert "INFO starting" in lines and "(EngineCore pid=1) ValueError: boom" in lines
    assert root_cause(lines) == "ValueError: boom"
    out, err = capfd.readouterr()
    assert "INFO starting" in out and "ValueError: boom" in err
    print("after")  # this process writes to its own stdout again
    assert capfd.readouterr().out == "after\n"


class _Request:
    def __init__(self, task: str):
        self.task_name = task


def test_a_tasks_repeats_above_the_n_the_engine_started_for_are_refused_naming_the_fix():
    """An engine started for n_branches=10 serves a repeats-8 task (8 <= 10) and refuses gsm8k_cot_self_consistency's
    64 before decoding, naming the task and n_branches=64 (vLLM's max_logprobs and the memory plan were sized for 10
    when the model loaded)."""
    check_planned_branches(10, [_Request("boolq_rep8")], [8])
    with pytest.raises(LoverUsageError, match=r"task gsm8k_cot_self_consistency has repeats: 64.*started for "
                                              r"n_branches=10.*pass n_branches=64"):
        check_planned_branches(10, [_Request("lover_gsm8k"), _Request("gsm8k_cot_self_consistency")], [10, 64])
