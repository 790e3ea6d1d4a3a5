"""The HF copy of the weights that lover_vllm reads the branches with (margins, token statistics, LoVer's features):
loaded in vLLM's dtype with the model changes vLLM decodes with, or as a skeleton on the meta device (no memory) that
stands in for it until `phases` loads it."""

from __future__ import annotations

import torch

from ..model_args import LoverUsageError
from .settings import ModelChanges


def meta_copy(pretrained: str, vllm_args: dict, overrides: dict):
    """The HF model's skeleton on the meta device (no memory), with the checkpoint's generation config (its end
    tokens): what the pipeline reads until the real copy loads."""
    from transformers import AutoConfig, AutoModelForCausalLM, GenerationConfig

    revision, remote = vllm_args.get("revision"), bool(vllm_args.get("trust_remote_code"))
    config = AutoConfig.from_pretrained(pretrained, revision=revision, trust_remote_code=remote)
    config.update(overrides)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(config, dtype=getattr(torch, vllm_args["dtype"]),
                                                 trust_remote_code=remote)
    try:
        model.generation_config = GenerationConfig.from_pretrained(pretrained, revision=revision)
    except OSError:  # no generation_config.json: the one derived from the config stands
        pass
    return model.eval()


def features_model(pretrained: str, vllm_args: dict, gpu: bool, changes: ModelChanges | None = None):
    """The HF copy of the weights that reads the branches (features, margins, statistics), in vLLM's dtype, with
    the model changes vLLM decodes with (a LoRA adapter, config overrides)."""
    from transformers import AutoConfig, AutoModelForCausalLM

    changes = changes or ModelChanges()
    dtype = vllm_args.get("dtype", "auto")
    revision, remote = vllm_args.get("revision"), bool(vllm_args.get("trust_remote_code"))
    extra = {"device_map": "auto"} if gpu and int(vllm_args.get("tensor_parallel_size", 1)) > 1 else {}
    if changes.overrides:  # vLLM's hf_overrides, given to the copy's config as well
        config = AutoConfig.from_pretrained(pretrained, revision=revision, trust_remote_code=remote)
        config.update(changes.overrides)
        extra["config"] = config
    try:
        model = AutoModelForCausalLM.from_pretrained(pretrained, dtype=dtype, revision=revision,
                                                     trust_remote_code=remote, **extra)
        if changes.lora is not None:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, changes.lora).merge_and_unload()
        return (model if "device_map" in extra else model.to("cuda" if gpu else "cpu")).eval()
    except torch.OutOfMemoryError as error:
        first = str(error).strip().splitlines()[0][:200]
        raise LoverUsageError(
            f"the HF copy of {pretrained} that reads the branches does not fit beside vLLM's engine ({first}); "
            "pass memory_plan=phases (the engine decodes first and is freed before the copy loads), a lower "
            f"gpu_memory_utilization (now {vllm_args.get('gpu_memory_utilization')}: the engine's share), or a "
            "larger tensor_parallel_size.") from None

