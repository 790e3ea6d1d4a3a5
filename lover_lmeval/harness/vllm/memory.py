"""lover_vllm's memory plan (harness/vllm/memory_plan.py) from what is known before anything loads: the checkpoint's config
or files, vLLM's model_args, and the devices' memory as vLLM itself will read it."""

from __future__ import annotations


import torch

from ..model_args import LoverUsageError
from .memory_plan import (ALONE_UTILIZATION, MemoryPlan, count_parameters, dtype_bytes, hf_pass_bytes,
                          kv_bytes_per_token, safetensors_bytes)

from ...log import log

#: the config fields vLLM takes the default max_model_len from (the smallest present), as its ModelConfig does
CONTEXT_FIELDS = ("max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length",
                  "max_seq_length", "seq_len")
#: lover_vllm's model_arg that chooses the layout: `auto` follows the plan, the others override it
PLACEMENTS = ("auto", "beside", "phases")


def gpu_memory(devices: int) -> tuple[int, int]:
    """(total memory of the smallest, free memory of the fullest) of the first `devices` visible GPUs. Read through
    NVML as vLLM reads them, so that this process holds no CUDA context when vLLM starts its workers; through torch
    where NVML cannot be used."""
    visible = torch.cuda.device_count()  # NVML-based: no CUDA context either
    if devices > visible:
        raise LoverUsageError(f"tensor_parallel_size={devices} needs {devices} GPUs but {visible} are visible; pass "
                              f"tensor_parallel_size={visible} or less, or make more GPUs visible "
                              "(CUDA_VISIBLE_DEVICES).")
    try:
        import pynvml
        from vllm.platforms import current_platform

        pynvml.nvmlInit()
        try:
            infos = [pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(
                current_platform.device_id_to_physical_device_id(i))) for i in range(devices)]
        finally:
            pynvml.nvmlShutdown()
        return min(int(info.total) for info in infos), min(int(info.free) for info in infos)
    except (ImportError, AttributeError, OSError, RuntimeError):  # no NVML bindings or library: torch reads it
        infos = [torch.cuda.mem_get_info(i) for i in range(devices)]
        return min(total for _, total in infos), min(free for free, _ in infos)


def ram() -> tuple[int, int]:
    """(total, available) memory of the node vLLM's CPU backend reserves its share of (node 0, as its worker reads
    it; the whole machine's where vLLM cannot say)."""
    try:
        from vllm.utils.cpu_resource_utils import get_memory_node_info

        info = get_memory_node_info(0)
        return int(info.total_memory), int(info.available_memory)
    except ImportError:
        import psutil

        memory = psutil.virtual_memory()
        return int(memory.total), int(memory.available)


def context_length(config: dict, vllm_args: dict) -> int:
    """The engine's max_model_len: the model_arg (max_model_len, or lm-eval's max_length), else the config's."""
    given = vllm_args.get("max_model_len") or vllm_args.get("max_length")
    if given:
        return int(given)
    fields = config.get("text_config") or config
    found = [int(fields[k]) for k in CONTEXT_FIELDS if isinstance(fields.get(k), int) and fields[k] > 0]
    return min(found) if found else 2048


def weight_bytes(pretrained: str, config: dict, element_bytes: int) -> int | str:
    """The weights' bytes in the run's dtype: from a local folder's safetensors headers, else counted from the
    config's fields; a string saying why when neither can size them."""
    from_files = safetensors_bytes(pretrained, element_bytes)
    if from_files is not None:
        return from_files
    if config.get("quantization_config"):
        return (f"{pretrained} is quantized in its files ({config['quantization_config'].get('quant_method')}) and "
                "no local safetensors file says how large")
    try:
        return count_parameters(config) * element_bytes
    except (KeyError, ValueError) as error:
        return str(error)


def plan_memory(pretrained: str, config: dict, vllm_args: dict, n_branches: int, gpu: bool,
                explicit_utilization: bool, model: str) -> MemoryPlan | str:
    """The plan for this run (`vllm_args` as the engine will get them: dtype resolved, gpu_memory_utilization set),
    or a string saying why none can be made (the run then goes ahead beside, as before plans existed)."""
    element = dtype_bytes(vllm_args["dtype"])
    weights = weight_bytes(pretrained, config, element)
    if isinstance(weights, str):
        return weights
    kv_dtype = str(vllm_args.get("kv_cache_dtype") or "auto")
    kv_element = element if kv_dtype == "auto" else dtype_bytes(kv_dtype)
    devices = int(vllm_args.get("tensor_parallel_size", 1)) if gpu else 1
    total, free = gpu_memory(devices) if gpu else ram()
    length = context_length(config, vllm_args)
    utilization = float(vllm_args["gpu_memory_utilization"])
    # Alone, the engine takes vLLM's default share unless the user chose one; never more than 0.9 of what is free
    # now (this process keeps the rest), or vLLM refuses to start.
    alone = utilization if explicit_utilization else max(utilization, min(ALONE_UTILIZATION, 0.9 * free / total))
    return MemoryPlan(weights, kv_bytes_per_token(config, kv_element, devices), length,
                      hf_pass_bytes(config, element, n_branches, length), "cuda" if gpu else "cpu", devices, total,
                      utilization, int(alone * 100) / 100, free, model=model)


def alone_share(plan: MemoryPlan, explicit_utilization: bool) -> float:
    """The engine's share in phases, where it runs alone: the user's gpu_memory_utilization when they chose one, else
    the plan's larger share."""
    return plan.utilization if explicit_utilization else plan.phase_utilization


def choose_placement(pretrained: str, hf_config: dict, vllm_args: dict, n_branches: int, gpu: bool,
                     explicit_utilization: bool, name: str, asked: str) -> tuple[str, MemoryPlan | str]:
    """(the layout this run takes, the memory plan or why none could be made), logged in one line; a plan that
    cannot run even in phases is refused here, before anything loads (unless memory_plan= names a layout)."""
    plan = plan_memory(pretrained, hf_config, vllm_args, n_branches, gpu, explicit_utilization, name)
    if not isinstance(plan, MemoryPlan):
        log.info("lover_vllm memory plan: none (%s); the engine and the HF copy load beside each other.", plan)
        return ("beside" if asked == "auto" else asked), plan
    log.info(plan.describe())
    if asked != "auto":
        if asked != plan.mode:  # the plan's line above names its own layout: say which one runs
            share = alone_share(plan, explicit_utilization) if asked == "phases" else plan.utilization
            log.info("lover_vllm runs memory_plan=%s as asked, not the plan's %s (the engine's share %g).", asked,
                     plan.mode, share)
        return asked, plan
    if plan.mode == "refused":
        raise LoverUsageError(f"{plan.reason} (memory_plan=beside or phases runs it anyway.)")
    return plan.mode, plan

