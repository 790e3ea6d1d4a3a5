"""lover_vllm's model_args that lover_hf's engine owns, that cap N, or that change the model vLLM decodes: each is
honoured or refused by name before anything loads, never dropped.

- lover_hf's batching args (how its HF engine fills rows) mean nothing to vLLM, which schedules its own batches.
- vLLM caps the log-probabilities a request may ask for (`max_logprobs`, 20 by default) and CoT-decoding asks for the
  first step's top N: with N > 20 the cap is raised to N, and a cap the user set below N is refused.
- What changes the model vLLM decodes must change the HF copy that reads its branches in the same way, and the bank
  key: a LoRA adapter (applied to the copy with peft; its files' hash joins the model's identity), `hf_overrides` (the
  copy's config gets them; they join the identity). `quantization` other than the checkpoint's own cannot be
  applied to the copy the same way (it would read other weights): refused. `kv_cache_dtype` changes how vLLM decodes,
  not the model: it joins the engine's name in the key (the copy reads in its own dtype either way).
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from dataclasses import dataclass, field
from pathlib import Path

from ...core.config import MODEL_ARGS
from ..adapter import check_truncation_side
from ..model_args import LoverUsageError, parse_model_args
from .engine import BEAM_REFUSAL
from .memory import PLACEMENTS

#: lover_hf's model_args for its own engine's batching (core/config.py's `batching` component)
HF_ENGINE_ARGS = tuple(arg for arg, (component, _, _) in MODEL_ARGS.items() if component == "batching")
#: vLLM's default cap on a request's log-probabilities (ModelConfig.max_logprobs)
VLLM_MAX_LOGPROBS = 20
#: vLLM args lover sets itself: the user's would contradict N branches or their decoding.
REFUSED = {"n": "n_branches", "best_of": "n_branches", "use_beam_search": "decoding"}


def parse_vllm_args(memory_plan: str, chunk_questions, kwargs: dict):
    """lover_vllm's model_args read and checked before anything loads: (LoverConfig, vLLM's args, the args the user
    set, questions per vLLM call or None for auto). Each arg lover_vllm cannot honour is refused by name."""
    if memory_plan not in PLACEMENTS:
        raise LoverUsageError(f"memory_plan={memory_plan} is not a layout; pass one of {', '.join(PLACEMENTS)} "
                              "(auto: the plan's, from the model's and the devices' sizes).")
    chunk = parse_chunk(chunk_questions)
    refuse_hf_engine_args(kwargs)
    check_truncation_side(kwargs.get("truncation_side", "left"))  # lm-eval's VLLM keeps it; the adapter cuts by it
    config, vllm_args, explicit = parse_model_args(kwargs)
    if config.decoding.mode == "beam":
        raise LoverUsageError(BEAM_REFUSAL)
    for name, ours in REFUSED.items():
        if name in vllm_args:
            raise LoverUsageError(f"model_arg {name}={vllm_args[name]} is vLLM's, but lover_vllm sets it from "
                                  f"{ours}; pass {ours}= instead.")
    cap_logprobs(vllm_args, config.decoding.n_branches)
    return config, vllm_args, explicit, chunk


def parse_chunk(value) -> int | None:
    """chunk_questions: a positive count of questions per vLLM call, or auto (None: sized by the engine's batch)."""
    if value in (None, "auto"):
        return None
    try:
        chunk = int(value)
    except (TypeError, ValueError):
        chunk = 0
    if chunk < 1 or str(value).strip() != str(chunk):
        raise LoverUsageError(f"chunk_questions={value} is not a count of questions; pass a positive integer (the "
                              "questions sent to vLLM in one call, each call's banked as it returns) or auto.")
    return chunk


def refuse_hf_engine_args(kwargs: dict) -> None:
    """lover_hf's batching args, by name: vLLM would ignore them."""
    for arg in HF_ENGINE_ARGS:
        if arg in kwargs:
            raise LoverUsageError(f"model_arg {arg}={kwargs[arg]} is lover_hf's (how its HF engine batches rows); "
                                  "lover_vllm decodes with vLLM, which schedules its own batches and would ignore "
                                  f"it: drop {arg} (vLLM's max_num_seqs and max_num_batched_tokens bound its batches).")


def cap_logprobs(vllm_args: dict, n_branches: int) -> None:
    """Raise vLLM's max_logprobs to N when N exceeds its default; refuse a cap the user set below N."""
    cap = vllm_args.get("max_logprobs")
    if cap is None:
        if n_branches > VLLM_MAX_LOGPROBS:
            vllm_args["max_logprobs"] = n_branches
    elif int(cap) != -1 and int(cap) < n_branches:
        raise LoverUsageError(f"max_logprobs={cap} is below n_branches={n_branches}: CoT-decoding asks vLLM for the "
                              f"first step's top {n_branches} tokens; pass max_logprobs={n_branches} or more, or "
                              "drop it (lover_vllm then sets it).")


def check_planned_branches(planned: int, questions, n_of: list[int]) -> None:
    """A task's `repeats: K` asks K branches a question (harness/repeats.py), but lover_vllm started its engine for
    model_args' n_branches, before any task was read: vLLM's max_logprobs (CoT-decoding's first step) and the memory
    plan (the HF copy's pass over N branches) are sized for it. More than that is refused before decoding, naming
    the task and the fix."""
    for question, n in zip(questions, n_of):
        if n > planned:
            task = getattr(question, "task_name", None) or "?"
            raise LoverUsageError(
                f"task {task} has repeats: {n}, which lover_vllm decodes as one question with {n} branches, but its "
                f"engine started for n_branches={planned} (vLLM's max_logprobs and the memory plan are sized for N "
                f"when the model loads, before any task is read): pass n_branches={n} in --model_args.")


@dataclass
class ModelChanges:
    """What lover_vllm's model_args change about the model vLLM decodes, for the HF copy and the bank key."""

    identity: str = ""
    """Appended to the model's identity (bank keys, verifier checkpoints' match): the LoRA's hash, the overrides."""
    engine: str = ""
    """Appended to the engine's name in bank keys: settings that change how vLLM decodes, not the model."""
    lora: str | None = None
    """The LoRA adapter folder the HF copy applies (peft), as vLLM does."""
    overrides: dict = field(default_factory=dict)
    """Config fields the HF copy's config gets, as vLLM's `hf_overrides` give its own."""


def _folder_sha256(path: Path) -> str:
    """One hash of an adapter folder's files (names and contents), so that another adapter is another key."""
    digest = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(str(file.relative_to(path)).encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()


def model_changes(config: dict, vllm_args: dict) -> ModelChanges:
    """Check the settings that change the model (refusals name the value and the fix) and say how the HF copy and
    the bank key follow them. A JSON `hf_overrides` string (from the command line) is parsed in `vllm_args`."""
    changes = ModelChanges()
    quantization = vllm_args.get("quantization")
    own = (config.get("quantization_config") or {}).get("quant_method")
    if quantization not in (None, "", "None") and str(quantization) != str(own):
        raise LoverUsageError(
            f"quantization={quantization}: vLLM would decode a {quantization}-quantized model, but the HF copy that "
            f"reads the branches (features, margins, statistics) loads the checkpoint's {own or 'unquantized'} "
            "weights, another model. Pass a checkpoint quantized in its files (its config names the method, and both "
            "copies load it), or drop quantization.")
    lora = vllm_args.get("lora_local_path")
    if lora:
        if not Path(lora).is_dir():
            raise LoverUsageError(f"lora_local_path={lora} is not a folder; pass the folder of a LoRA adapter "
                                  "(adapter_config.json and its weights).")
        if importlib.util.find_spec("peft") is None:
            raise LoverUsageError(f"lora_local_path={lora}: the HF copy that reads the branches must apply the same "
                                  "adapter, which needs peft (pip install peft); or drop lora_local_path.")
        changes.lora = str(lora)
        changes.identity += f" lora-sha256:{_folder_sha256(Path(lora))}"
    overrides = vllm_args.get("hf_overrides")
    if isinstance(overrides, str):
        try:
            overrides = vllm_args["hf_overrides"] = json.loads(overrides)
        except json.JSONDecodeError:
            overrides = None
    if vllm_args.get("hf_overrides") is not None:
        if not isinstance(overrides, dict):
            raise LoverUsageError(f"hf_overrides={vllm_args['hf_overrides']!r}: lover_vllm applies the same overrides "
                                  "to the HF copy that reads the branches, so they must be a dict of config fields "
                                  '(e.g. hf_overrides=\'{"rope_theta": 1000000}\').')
        changes.overrides = overrides
        changes.identity += f" hf_overrides:{json.dumps(overrides, sort_keys=True)}"
    kv_dtype = vllm_args.get("kv_cache_dtype")
    if kv_dtype not in (None, "", "auto"):
        changes.engine = f"[kv_cache_dtype={kv_dtype}]"
    return changes
