"""The memory plan (harness/vllm/memory_plan.py) on four model sizes, from the real configs' numbers, worked by hand.

Cards: a 24 GB card as torch reports an RTX 4090 (25,393,692,672 bytes = 23.65 GiB: a 14.2 GiB share is
0.6 of it); an 80 GB card as nvidia-smi reports an H100 (81,559 MiB = 79.65 GiB: a 47.8 GiB share).
"""

from __future__ import annotations

import json

import pytest

from lover_lmeval.harness.vllm.memory_plan import (GiB, MemoryPlan, count_parameters, hf_pass_bytes, kv_bytes_per_token,
                                           safetensors_bytes)

QWEN_1_5B = {"model_type": "qwen2", "hidden_size": 1536, "num_hidden_layers": 28, "num_attention_heads": 12,
             "num_key_value_heads": 2, "intermediate_size": 8960, "vocab_size": 151936, "tie_word_embeddings": True,
             "max_position_embeddings": 32768}
QWEN_7B = {"model_type": "qwen2", "hidden_size": 3584, "num_hidden_layers": 28, "num_attention_heads": 28,
           "num_key_value_heads": 4, "intermediate_size": 18944, "vocab_size": 152064, "tie_word_embeddings": False,
           "max_position_embeddings": 32768}
LLAMA_70B = {"model_type": "llama", "hidden_size": 8192, "num_hidden_layers": 80, "num_attention_heads": 64,
             "num_key_value_heads": 8, "intermediate_size": 28672, "vocab_size": 128256, "tie_word_embeddings": False,
             "attention_bias": False, "mlp_bias": False, "max_position_embeddings": 8192}
CARD_24GB = 25_393_692_672
CARD_80GB = 81_559 * 2**20
BF16 = 2


def plan(config, devices, card, utilization=0.6, n_branches=10, **more) -> MemoryPlan:
    """A bfloat16 run at the model's own context window (vLLM's default max_model_len), N = 10."""
    weights = count_parameters(config) * BF16
    length = config["max_position_embeddings"]
    return MemoryPlan(weights, kv_bytes_per_token(config, BF16, devices), length,
                      hf_pass_bytes(config, BF16, n_branches, length), "cuda", devices, card, utilization, **more)


@pytest.mark.parametrize("config, published", [(QWEN_1_5B, 1.54e9), (QWEN_7B, 7.62e9), (LLAMA_70B, 70.6e9)])
def test_parameters_counted_from_the_config_match_the_published_totals(config, published):
    """Qwen2.5-1.5B: embed 151936 x 1536 = 233,373,696 (tied: no head); a layer: q 1536^2 + 1536 (bias) = 2,360,832,
    k and v 1536 x 256 + 256 = 393,472 each, o 2,359,296, MLP 3 x 1536 x 8960 = 41,287,680, norms 3,072: 46,797,824,
    x 28 = 1,310,339,072; + final norm 1,536 = 1,543,714,304. Qwen2.5-7B: 2 x 152064 x 3584 = 1,089,994,752 (untied)
    + 28 x 233,057,792 + 3,584 = 7,615,616,512. Llama-3-70B: 2 x 128256 x 8192 = 2,101,346,304 + 80 x 855,654,400
    (no biases) + 8,192 = 70,553,706,496. Each within 1% of its model card's total."""
    expected = {id(QWEN_1_5B): 1_543_714_304, id(QWEN_7B): 7_615_616_512, id(LLAMA_70B): 70_553_706_496}
    assert count_parameters(config) == expected[id(config)]
    assert count_parameters(config) == pytest.approx(published, rel=0.01)


def test_a_7b_model_in_bf16_on_one_24gb_card_runs_in_phases():
    """Weights 7,615,616,512 x 2 = 15,231,233,024 bytes = 14.19 GiB; KV 2 x 28 layers x 4 kv heads x 128 x 2 bytes =
    57,344 bytes a token, x 32,768 = 1.75 GiB; non-KV 2 GiB: the engine needs 17.94 GiB, more than its share 0.6 x
    23.65 = 14.19 GiB, so not beside. Alone it has 0.9 x 23.65 = 21.28 GiB (17.94 fits), and the HF copy 14.19 +
    pass (57,344 x 10 x 2048 = 1.09 GiB, + 1 GiB) = 16.28 GiB of 21.28: phases."""
    p = plan(QWEN_7B, 1, CARD_24GB)
    assert p.engine_bytes() == 15_231_233_024 + 2 * GiB + 57_344 * 32_768
    assert p.engine_bytes() / GiB == pytest.approx(17.94, abs=0.01)
    assert p.hf_bytes / GiB == pytest.approx(16.28, abs=0.01)
    assert (p.fits_beside(), p.mode) == (False, "phases")
    assert "memory plan: phases" in p.describe() and "\n" not in p.describe()


def test_a_1_5b_model_on_an_80gb_card_runs_beside():
    """Weights 1,543,714,304 x 2 = 2.88 GiB; KV 2 x 28 x 2 x 128 x 2 = 28,672 bytes a token, x 32,768 = 0.88 GiB;
    the engine needs 2.88 + 0.88 + 2 = 5.75 GiB of its 0.6 x 79.65 = 47.79 GiB; the HF copy 2.88 + 0.55 + 1 = 4.42 GiB
    of the other 31.86 GiB: beside."""
    p = plan(QWEN_1_5B, 1, CARD_80GB)
    assert p.engine_bytes() / GiB == pytest.approx(5.75, abs=0.01)
    assert p.hf_bytes / GiB == pytest.approx(4.42, abs=0.01)
    assert p.mode == "beside"
    assert p.as_dict()["mode"] == "beside" and p.as_dict()["weight_bytes"] == 3_087_428_608


def test_70b_over_four_80gb_cards_runs_in_phases():
    """Weights 70,553,706,496 x 2 = 131.42 GiB, 32.85 per GPU; KV per GPU 2 x 80 x (8 / 4 = 2 heads) x 128 x 2 =
    81,920 bytes a token, x 8192 = 0.63 GiB: the engine needs 35.48 GiB of its 47.79 GiB share. The HF copy needs
    131.42 + pass (327,680 x 10 x 2048 = 6.25 GiB, + 1) = 138.67 GiB, more than the 4 x 0.4 x 79.65 = 127.44 GiB the
    engines leave (today device_map=auto spills its last layers to the CPU). Alone it has 0.9 x 4 x 79.65 = 286.7
    GiB: phases."""
    p = plan(LLAMA_70B, 4, CARD_80GB)
    assert p.engine_bytes() / GiB == pytest.approx(35.48, abs=0.01)
    assert p.hf_bytes / GiB == pytest.approx(138.67, abs=0.01)
    assert p.mode == "phases"


def test_70b_on_one_80gb_card_is_refused_naming_the_numbers_and_the_fix():
    """The engine alone needs 131.42 + KV 327,680 x 8192 = 2.5 + 2 = 135.92 GiB, more than 0.9 x 79.65 = 71.69 GiB.
    Over 2 GPUs it needs 65.71 + 1.25 + 2 = 68.96 GiB of each: the fix is tensor_parallel_size=2. No max_model_len
    helps (the weights alone exceed the share)."""
    p = plan(LLAMA_70B, 1, CARD_80GB)
    assert p.mode == "refused"
    assert "135.9 GiB of each GPU (weights 131.4 GiB + KV 2.5 GiB for max_model_len=8192 + non-KV 2.0 GiB)" in p.reason
    assert "0.9 x 79.6 GiB = 71.7 GiB" in p.reason
    assert "tensor_parallel_size=2 (over 2 GPUs the engine needs 69.0 GiB of each)" in p.reason
    assert "or less (the KV" not in p.reason and "quantized in its files" in p.reason


def test_a_long_context_is_refused_with_the_max_model_len_that_fits():
    """Qwen2.5-7B at max_model_len 131,072 on one 24 GB card: KV 57,344 x 131,072 = 7 GiB; the engine alone needs
    14.19 + 7 + 2 = 23.19 GiB > 21.28. The share leaves 0.9 x 25,393,692,672 - 15,231,233,024 - 2 x 2^30 =
    5,475,606,733 bytes of KV: / 57,344 bytes a token = 95,487 tokens."""
    weights = count_parameters(QWEN_7B) * BF16
    p = MemoryPlan(weights, kv_bytes_per_token(QWEN_7B, BF16), 131_072, hf_pass_bytes(QWEN_7B, BF16, 10, 131_072),
                   "cuda", 1, CARD_24GB, 0.6)
    assert p.mode == "refused"
    assert f"max_model_len={int((0.9 * CARD_24GB - weights - 2 * GiB) // 57_344)} or less" in p.reason
    assert "max_model_len=95487 or less" in p.reason


def test_memory_held_by_another_process_is_named():
    """A share larger than the free memory: 0.6 x 23.65 GiB asked while 10 GiB is free: vLLM would refuse its
    share. Refused, with the utilization that fits the free memory (10 / 23.65 = 0.42)."""
    p = plan(QWEN_1_5B, 1, CARD_24GB, free_bytes=10 * GiB, phase_utilization=0.6)
    assert p.mode == "refused"
    assert "10.0 GiB is free" in p.reason and "gpu_memory_utilization=0.42 or less" in p.reason


def test_the_cpu_backend_plans_in_ram(smollm2_dir):
    """SmolLM2-135M in float32 on a 16 GiB machine, the tests' max_model_len 1024: weights 134,515,008 x 4 = 0.50
    GiB; KV 2 x 30 x 3 x 64 x 4 = 46,080 bytes a token, x 1024 = 0.04 GiB; non-KV 1.5 GiB: the engine needs 2.04 GiB
    of its 0.2 x 16 = 3.2 GiB share, and the HF copy 0.50 + (46,080 x 10 x 1024 = 0.44 + 1) = 1.94 GiB of the other
    12.8: beside. The config's count equals the safetensors headers' (the real checkpoint)."""
    config = json.loads((smollm2_dir / "config.json").read_text())
    assert count_parameters(config) == 134_515_008
    assert safetensors_bytes(smollm2_dir, 4) == 134_515_008 * 4
    assert safetensors_bytes(smollm2_dir, 2) == 134_515_008 * 2  # float tensors count in the run's dtype
    p = MemoryPlan(134_515_008 * 4, kv_bytes_per_token(config, 4), 1024, hf_pass_bytes(config, 4, 10, 1024), "cpu", 1,
                   16 * GiB, 0.2)
    assert p.engine_bytes() / GiB == pytest.approx(2.04, abs=0.01)
    assert p.hf_bytes / GiB == pytest.approx(1.94, abs=0.01)
    assert p.mode == "beside" and "memory node (RAM)" in p.describe()


@pytest.mark.parametrize("change, needle", [
    ({"utilization": 1.5}, "gpu_memory_utilization=1.5"),
    ({"device": "tpu"}, "device='tpu'"),
    ({"devices": 0}, "devices=0 must be >= 1"),
    ({"free_bytes": -1}, "free_bytes=-1 must be >= 0"),
])
def test_bad_plan_inputs_are_refused_by_name(change, needle):
    args = dict(weight_bytes=GiB, kv_bytes_per_token=1024, max_model_len=1024, hf_pass_bytes=GiB, device="cuda",
                devices=1, device_bytes=8 * GiB, utilization=0.6)
    with pytest.raises(ValueError, match=needle.replace("(", r"\(")):
        MemoryPlan(**{**args, **change})


def test_an_architecture_the_config_cannot_size_is_named():
    with pytest.raises(ValueError, match="mixture of experts"):
        count_parameters({**QWEN_7B, "num_local_experts": 8})
    with pytest.raises(ValueError, match="model_type=gemma2"):
        count_parameters({**QWEN_7B, "model_type": "gemma2"})


def test_a_share_the_user_chose_too_small_is_refused_with_the_share_that_fits():
    """The user's gpu_memory_utilization=0.05 (also the share alone: they chose it) for Qwen2.5-1.5B on an 80 GB card:
    0.05 x 79.65 = 3.98 GiB, less than the engine's 5.75 GiB; 5.75 / 79.65 = 0.0722, rounded up: 0.08. Over 2 GPUs it
    would need 1.44 + 0.44 + 2 = 3.88 GiB of each, within 3.98. At 0.1 (7.96 GiB) it runs beside."""
    p = plan(QWEN_1_5B, 1, CARD_80GB, utilization=0.05, phase_utilization=0.05)
    assert p.mode == "refused"
    assert "pass gpu_memory_utilization=0.08 or more (now 0.05); or tensor_parallel_size=2" in p.reason
    assert plan(QWEN_1_5B, 1, CARD_80GB, utilization=0.1, phase_utilization=0.1).mode == "beside"


SMOLLM2_FP32 = dict(weight_bytes=134_515_008 * 4, kv_bytes_per_token=46_080, max_model_len=1024,
                    hf_pass_bytes=46_080 * 10 * 1024 + GiB, device="cpu", devices=1)
"""SmolLM2-135M in float32 on vLLM's CPU backend at the vLLM tests' max_model_len, N = 10 (the numbers of
test_the_cpu_backend_plans_in_ram): the engine needs 2.045 GiB, the HF copy 1.941 GiB."""
#: Readings of the RAM as vLLM reads it (total: the node's, or a cgroup's limit where lower): this machine's node
#: (24,683,792 kB), and the 17.1 GiB and 12 GiB totals CI's machines have read after the suite and the installs.
NODE_23_5 = 24_683_792 * 1024
NODE_17_1 = int(17.1 * GiB)
NODE_12 = 12 * GiB


@pytest.mark.parametrize("total, free, share, mode", [
    (NODE_23_5, 23 * GiB, 0.1, "beside"),  # 0.1 x 23.54 = 2.35 GiB >= 2.045; 23 - 2.35 >= 1.94
    (NODE_23_5, 12 * GiB, 0.1, "beside"),  # 12 - 2.35 = 9.65 GiB for the HF copy
    (NODE_17_1, 17 * GiB, 0.1, "refused"),  # 0.1 x 17.1 = 1.71 GiB < 2.045, alone too (the share was the user's)
    (NODE_12, 12 * GiB, 0.1, "refused"),  # 1.2 GiB
    (NODE_12, 12 * GiB, 0.2, "beside"),  # 2.4 GiB >= 2.045; 12 - 2.4 = 9.6 GiB for the HF copy
    (NODE_12, 4 * GiB, 0.22, "phases"),  # 2.64 GiB; 4 - 2.64 = 1.36 < 1.94 beside, but 1.94 <= 0.9 x 4 alone
    (NODE_12, 2 * GiB, 0.22, "refused"),  # the share (2.64 GiB) is more than is free: vLLM would refuse it
])
def test_the_plans_rule_on_recorded_readings_of_the_ram(total, free, share, mode):
    """The rule (engine <= share x total <= free; HF copy <= free - share x total beside, <= 0.9 x free alone) on
    readings CI's machines have taken, worked by hand in each case's comment. A fixed share of 0.1 runs beside on a
    23.5 GiB node and is refused on a 17.1 GiB one: why the vLLM tests take their share from the reading."""
    assert MemoryPlan(**SMOLLM2_FP32, device_bytes=total, utilization=share, phase_utilization=share,
                      free_bytes=free).mode == mode


@pytest.mark.parametrize("total, smallest, with_margin", [(NODE_23_5, 0.09, 0.11), (NODE_17_1, 0.12, 0.15),
                                                           (NODE_12, 0.18, 0.22)])
def test_the_smallest_share_holds_the_engine_and_is_what_a_refusal_names(total, smallest, with_margin):
    """smallest_share: 2.045 GiB / 23.54 = 0.0869 -> 0.09; / 17.1 = 0.1196 -> 0.12; / 12 = 0.1704 -> 0.18; with half a
    GiB more (the vLLM tests' margin) 2.545 GiB: 0.1081 -> 0.11, 0.1488 -> 0.15, 0.2121 -> 0.22. The engine fits the
    smallest share and not one hundredth less, and a refusal at 0.1 on the 17.1 GiB node names it as the fix ("pass
    gpu_memory_utilization=0.12 or more")."""
    plan = MemoryPlan(**SMOLLM2_FP32, device_bytes=total, utilization=0.5, free_bytes=total)
    assert (plan.smallest_share(), plan.smallest_share(GiB // 2)) == (smallest, with_margin)
    fits = [MemoryPlan(**SMOLLM2_FP32, device_bytes=total, utilization=share, phase_utilization=share,
                       free_bytes=total).mode != "refused" for share in (smallest, round(smallest - 0.01, 2))]
    assert fits == [True, False]
    if total == NODE_17_1:
        refused = MemoryPlan(**SMOLLM2_FP32, device_bytes=total, utilization=0.1, phase_utilization=0.1)
        assert "0.1 x 17.1 GiB = 1.7 GiB; pass gpu_memory_utilization=0.12 or more (now 0.1)" in refused.reason


@pytest.mark.parametrize("asked, logged", [
    ("phases", "lover_vllm runs memory_plan=phases as asked, not the plan's beside (the engine's share 0.2)."),
    ("beside", None),  # what the plan chose: its own line says it
    ("auto", None),
])
def test_a_layout_asked_over_the_plan_is_logged_as_the_one_that_runs(smollm2_dir, caplog, monkeypatch, asked,
                                                                      logged):
    """SmolLM2 on the CPU backend, 0.2 of the RAM chosen by the user (so the engine keeps 0.2 alone too), on a 16 GiB
    node with all of it free (the reading injected: the plan reads the RAM free now, which is this machine's state):
    the plan is beside; memory_plan=phases is taken as asked, and a second line says that phases runs (the plan's own
    line still says beside) with the engine's share."""
    import logging

    from lover_lmeval.harness.vllm import memory
    from lover_lmeval.harness.vllm.memory import choose_placement

    monkeypatch.setattr(memory, "ram", lambda: (16 * GiB, 16 * GiB))

    config = json.loads((smollm2_dir / "config.json").read_text())
    args = {"dtype": "float32", "gpu_memory_utilization": 0.2, "max_model_len": 1024}
    with caplog.at_level(logging.INFO, logger="lm_eval"):
        placement, plan = choose_placement(str(smollm2_dir), config, args, 10, False, True, "smollm2", asked)
    assert placement == ("beside" if asked == "auto" else asked) and plan.mode == "beside"
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("lover_vllm memory plan: beside.") for m in messages)
    assert (logged in messages) if logged else not any("as asked" in m for m in messages)
