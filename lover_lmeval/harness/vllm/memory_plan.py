"""Where lover_vllm's two copies of the model go, decided from sizes before anything loads.

lover_vllm holds the weights twice: vLLM's engine decodes the branches and an HF copy reads them once (features,
margins, statistics). From the checkpoint (its config's fields, or its safetensors headers) and the devices' sizes,
`MemoryPlan` decides one of:

- `beside`: the engine in its share (gpu_memory_utilization x each device) and the HF copy in the rest, both held for
  the whole run;
- `phases`: the engine alone (in a larger share) decodes, is freed, then the HF copy reads the branches;
- `refused`: not even one copy alone fits; `reason` is one line with the numbers and the fix.

The KV rule: the plan reserves KV for ONE sequence of max_model_len tokens, bytes/token x max_model_len. That is
vLLM's own floor (it refuses to start with less: "To serve at least one request with the model's max seq len"), and
it is enough for lover: a question's N branches share its prompt's KV blocks (prefix caching), so N branches of a
P-token prompt with budget B hold P + N x B tokens, within the floor whenever that fits in max_model_len; beyond it
vLLM runs fewer branches at once (slower, never wrong). More KV than the floor only speeds decoding up.

On vLLM's CPU backend the same plan holds in RAM: there gpu_memory_utilization is the engine process's share of the
memory node (weights, its non-KV use and the KV cache, exactly as on a GPU: vllm/v1/worker/cpu_worker.py), and the HF
copy sits in this process's memory.

Sizes are in bytes; GiB = 2^30 bytes, as vLLM and nvidia-smi print them.
"""

from __future__ import annotations

import json
import math
import struct
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from ...core.store.complete import PASS_CONTEXT

GiB = 1 << 30
#: bytes per element of the dtypes a run may take (dtype model_arg, kv_cache_dtype)
DTYPE_BYTES = {"float32": 4, "float": 4, "bfloat16": 2, "float16": 2, "half": 2, "fp8": 1, "fp8_e4m3": 1,
               "fp8_e5m2": 1}
#: safetensors dtypes held as floats: loaded in the run's dtype; any other (packed ints, fp8 scales) as stored
FLOAT_TENSORS = {"F64", "F32", "F16", "BF16"}
#: the decoders whose parameters `count_parameters` can count from their config's fields
COUNTED_MODEL_TYPES = ("llama", "mistral", "qwen2", "qwen3")
#: vLLM's own default share: what the engine takes when it runs alone (phases), and the most either copy plans to fill
ALONE_UTILIZATION = 0.9
#: The engine's memory per device beyond weights and KV. GPU: its profile run's activation peak, CUDA graphs and the
#: CUDA context (1-2 GiB for 0.5B-70B models). CPU: the engine process's Python, torch and vLLM: vLLM's CPU log said
#: "1.89 GiB memory was consumed by non-kv usages" beside SmolLM2-135M's 0.5 GiB of float32 weights.
ENGINE_OVERHEAD = {"cuda": 2 * GiB, "cpu": 3 * GiB // 2}
#: The HF side's memory beyond its weights and those KV caches: this process's CUDA context and the LM head's logits,
#: computed in chunks of 2^24 floats (features._positions_per_chunk), times a few temporaries.
HF_OVERHEAD = GiB
MODES = ("beside", "phases", "refused")


def dtype_bytes(dtype: str) -> int:
    """Bytes per element of `dtype` ("bfloat16", "torch.float32", ...); ValueError naming the known ones."""
    name = str(dtype).removeprefix("torch.")
    if name not in DTYPE_BYTES:
        raise ValueError(f"dtype={dtype} has no known size; pass one of {', '.join(DTYPE_BYTES)}.")
    return DTYPE_BYTES[name]


def decoder_fields(config: Mapping) -> Mapping:
    """The decoder's own fields (a multimodal config keeps them under text_config)."""
    return config.get("text_config") or config


def count_parameters(config: Mapping) -> int:
    """Parameters of a llama/qwen2-like decoder from its HF config's fields (a config.json as a dict).

    Per layer: attention q, o (hidden x heads x head_dim each) and k, v (hidden x kv_heads x head_dim each: GQA), their
    biases (qwen2: q, k, v; llama's attention_bias: all four), qwen3's q/k norms, the gated MLP (3 x hidden x
    intermediate, llama's mlp_bias), two norms; then the embeddings, the final norm and the LM head unless tied.
    ValueError for another architecture (a mixture of experts, an unknown model_type): size it from its files."""
    fields = decoder_fields(config)
    kind = fields.get("model_type")
    experts = [k for k in ("num_local_experts", "num_experts", "n_routed_experts") if fields.get(k)]
    if kind not in COUNTED_MODEL_TYPES or experts:
        what = f"a mixture of experts ({experts[0]})" if experts else f"model_type={kind}"
        raise ValueError(f"{what}: parameters are counted from the config for {', '.join(COUNTED_MODEL_TYPES)} "
                         "only; a local checkpoint folder is sized from its safetensors files instead.")
    hidden, layers, vocab = int(fields["hidden_size"]), int(fields["num_hidden_layers"]), int(fields["vocab_size"])
    heads = int(fields["num_attention_heads"])
    kv_heads = int(fields.get("num_key_value_heads") or heads)
    head_dim = int(fields.get("head_dim") or hidden // heads)
    q, kv = heads * head_dim, kv_heads * head_dim
    attention = hidden * q + 2 * hidden * kv + q * hidden
    if kind == "qwen2":  # q, k and v carry biases in every Qwen2 (no config field says so)
        attention += q + 2 * kv
    elif fields.get("attention_bias"):
        attention += q + 2 * kv + hidden
    if kind == "qwen3":
        attention += 2 * head_dim
    inter = int(fields["intermediate_size"])
    mlp = 3 * hidden * inter + ((2 * inter + hidden) if fields.get("mlp_bias") else 0)
    per_layer = attention + mlp + 2 * hidden
    tied = bool(fields.get("tie_word_embeddings", config.get("tie_word_embeddings", False)))
    return vocab * hidden * (1 if tied else 2) + layers * per_layer + hidden


def safetensors_bytes(folder: str | Path, element_bytes: int) -> int | None:
    """The weights' bytes once loaded, from a checkpoint folder's safetensors headers (8-byte length, then JSON):
    float tensors in the run's `element_bytes` per element, any other (a quantized checkpoint's packed integers and
    their scales) as stored. None when the folder holds no safetensors file."""
    files = sorted(Path(folder).glob("*.safetensors")) if Path(folder).is_dir() else []
    if not files:
        return None
    total = 0
    for file in files:
        with open(file, "rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(length))
        for name, tensor in header.items():
            if name == "__metadata__":
                continue
            if tensor["dtype"] in FLOAT_TENSORS:
                total += math.prod(tensor["shape"]) * element_bytes
            else:
                total += tensor["data_offsets"][1] - tensor["data_offsets"][0]
    return total


def kv_bytes_per_token(config: Mapping, element_bytes: int, devices: int = 1) -> int:
    """One token's KV cache on one of `devices` GPUs: 2 (K and V) x layers x kv_heads x head_dim x `element_bytes`.
    Tensor parallelism splits the KV heads over the GPUs; with fewer heads than GPUs vLLM replicates them (one each)."""
    fields = decoder_fields(config)
    heads = int(fields["num_attention_heads"])
    kv_heads = int(fields.get("num_key_value_heads") or heads)
    head_dim = int(fields.get("head_dim") or int(fields["hidden_size"]) // heads)
    per_device = max(1, kv_heads // devices)
    return 2 * int(fields["num_hidden_layers"]) * per_device * head_dim * element_bytes


def hf_pass_bytes(config: Mapping, element_bytes: int, n_branches: int, max_model_len: int) -> int:
    """What the HF copy's teacher-forced pass holds beside its weights: the whole model's KV caches (its dtype) of N
    branches of min(max_model_len, PASS_CONTEXT) tokens, plus HF_OVERHEAD."""
    return (kv_bytes_per_token(config, element_bytes) * n_branches * min(max_model_len, PASS_CONTEXT)
            + HF_OVERHEAD)


def _gib(size: float) -> str:
    return f"{size / GiB:.1f} GiB"


@dataclass(frozen=True)
class MemoryPlan:
    """Where the engine and the HF copy go, from sizes alone (see the module's docstring for the rules)."""

    weight_bytes: int
    """The whole model's weights in the run's dtype: each copy holds this much (the engine 1/devices per GPU)."""
    kv_bytes_per_token: int
    """One token's KV cache on one device, in the engine's KV dtype (`kv_bytes_per_token`)."""
    max_model_len: int
    """The engine's context window: the plan reserves KV for one sequence this long (the KV rule)."""
    hf_pass_bytes: int
    """What the HF copy's pass needs beside its weights (`hf_pass_bytes`: N branches' caches, logits)."""
    device: str
    """"cuda" (GPUs) or "cpu" (vLLM's CPU backend: the devices' memory is RAM)."""
    devices: int
    """Devices the engine spreads over (tensor_parallel_size; 1 on the CPU); the HF copy spreads over the same."""
    device_bytes: int
    """Memory of one device: a GPU's total, or the memory node's RAM."""
    utilization: float
    """The engine's share of each device beside the HF copy (gpu_memory_utilization)."""
    phase_utilization: float = ALONE_UTILIZATION
    """The engine's share when it runs alone (phases): the user's gpu_memory_utilization, else vLLM's default."""
    free_bytes: int | None = None
    """Free now on the fullest device (None: unknown, taken as all of it): vLLM refuses a share larger than this."""
    engine_overhead_bytes: int | None = None
    """The engine's non-weight, non-KV memory per device (None: ENGINE_OVERHEAD of `device`)."""
    model: str = "the model"
    """The model's name, for the messages."""

    def __post_init__(self) -> None:
        if self.device not in ENGINE_OVERHEAD:
            raise ValueError(f"device={self.device!r}: pass one of {', '.join(ENGINE_OVERHEAD)}.")
        for name in ("weight_bytes", "kv_bytes_per_token", "max_model_len", "devices", "device_bytes"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1 (a size in bytes, a count).")
        for name in ("hf_pass_bytes", "engine_overhead_bytes", "free_bytes"):
            if getattr(self, name) is not None and int(getattr(self, name)) < 0:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 0 bytes.")
        for name in ("utilization", "phase_utilization"):
            if not 0 < float(getattr(self, name)) <= 1:
                arg = "gpu_memory_utilization"
                raise ValueError(f"{arg}={getattr(self, name)} is a share of each device's memory: pass a number in "
                                 "(0, 1], e.g. 0.6.")

    @property
    def overhead(self) -> int:
        return ENGINE_OVERHEAD[self.device] if self.engine_overhead_bytes is None else self.engine_overhead_bytes

    @property
    def kv_bytes(self) -> int:
        """The KV the plan reserves on each device: one sequence of max_model_len tokens."""
        return self.kv_bytes_per_token * self.max_model_len

    def engine_bytes(self, devices: int | None = None) -> int:
        """The engine's need on each of `devices` (default: the plan's): its weights' share, non-KV use and KV."""
        devices = devices or self.devices
        kv = self.kv_bytes if devices == self.devices else self.kv_bytes * self.devices // devices
        return math.ceil(self.weight_bytes / devices) + self.overhead + kv

    def smallest_share(self, margin_bytes: int = 0) -> float:
        """The smallest gpu_memory_utilization, in hundredths rounded up, whose share of one device holds the engine
        (`engine_bytes`) and `margin_bytes` more: the share the plan's rule accepts for this model and context."""
        return math.ceil(100 * (self.engine_bytes() + margin_bytes) / self.device_bytes) / 100

    @property
    def hf_bytes(self) -> int:
        """The HF copy's need, over all devices: weights and its pass."""
        return self.weight_bytes + self.hf_pass_bytes

    @property
    def room(self) -> int:
        """What one device has for this run: its free memory when known, else all of it."""
        return self.device_bytes if self.free_bytes is None else min(self.free_bytes, self.device_bytes)

    def fits_beside(self) -> bool:
        share = self.utilization * self.device_bytes
        return share <= self.room and self.engine_bytes() <= share and \
            self.hf_bytes <= (self.room - share) * self.devices

    def fits_alone(self) -> bool:
        share = self.phase_utilization * self.device_bytes
        return share <= self.room and self.engine_bytes() <= share and \
            self.hf_bytes <= ALONE_UTILIZATION * self.room * self.devices

    @property
    def mode(self) -> str:
        """`beside`, `phases` or `refused` (MODES)."""
        return "beside" if self.fits_beside() else "phases" if self.fits_alone() else "refused"

    @property
    def unit(self) -> str:
        return "GPU" if self.device == "cuda" else "memory node (RAM)"

    def _engine_parts(self) -> str:
        return (f"{_gib(self.engine_bytes())} of each {self.unit} (weights {_gib(self.weight_bytes / self.devices)} "
                f"+ KV {_gib(self.kv_bytes)} for max_model_len={self.max_model_len} + non-KV {_gib(self.overhead)})")

    def describe(self) -> str:
        """The plan as one log line: the mode and the numbers behind it."""
        if self.mode == "refused":
            return f"lover_vllm memory plan: refused. {self.reason}"
        share = self.utilization * self.device_bytes
        where = (f"{self.devices} x {_gib(self.device_bytes)}" if self.devices > 1 else _gib(self.device_bytes))
        free = "" if self.free_bytes is None else f", {_gib(self.room)} free"
        line = (f"lover_vllm memory plan: {self.mode}. {self.model}: weights {_gib(self.weight_bytes)} per copy; "
                f"{self.device} {where}{free}; the engine needs {self._engine_parts()}, its share "
                f"{self.utilization:g} x {_gib(self.device_bytes)} = {_gib(share)}; the HF copy needs "
                f"{_gib(self.hf_bytes)} (pass {_gib(self.hf_pass_bytes)})")
        if self.mode == "beside":
            return line + f", beside the engine in the other {_gib((self.room - share) * self.devices)}."
        return line + (f": they do not fit together, so the engine decodes alone (share {self.phase_utilization:g}"
                       f"), is freed, then the HF copy reads the branches.")

    @property
    def reason(self) -> str:
        """Why the run cannot go ahead, with the numbers and what to change (empty unless `refused`)."""
        if self.mode != "refused":
            return ""
        share = self.phase_utilization * self.device_bytes
        head = f"lover_vllm cannot run {self.model} here, even in phases"
        if share > self.room:
            return (f"{head}: gpu_memory_utilization={self.phase_utilization:g} asks {_gib(share)} of each {self.unit} "
                    f"but {_gib(self.room)} is free (other processes hold the rest); free that memory, or pass "
                    f"gpu_memory_utilization={self.room / self.device_bytes:.2f} or less.")
        tp = next((t for t in range(self.devices + 1, 65) if self.engine_bytes(t) <= share
                   and self.hf_bytes <= ALONE_UTILIZATION * self.room * t), None) if self.device == "cuda" else None
        fixes = [f"tensor_parallel_size={tp} (over {tp} GPUs the engine needs {_gib(self.engine_bytes(tp))} of "
                 "each)"] if tp is not None else []
        if self.engine_bytes() <= share:
            return (f"{head}: the HF copy that reads the branches needs {_gib(self.hf_bytes)} (weights and its pass), "
                    f"more than {ALONE_UTILIZATION:g} x the {_gib(self.room * self.devices)} there is; pass "
                    + "; or ".join(fixes + ["a smaller model"]) + ".")
        needed = self.smallest_share()
        if needed <= min(ALONE_UTILIZATION, self.room / self.device_bytes):  # the user's share is what is too small
            fixes.insert(0, f"gpu_memory_utilization={needed:g} or more (now {self.phase_utilization:g})")
        room_for_kv = share - math.ceil(self.weight_bytes / self.devices) - self.overhead
        if room_for_kv >= self.kv_bytes_per_token * 256:  # a shorter context would do
            fixes.append(f"max_model_len={int(room_for_kv // self.kv_bytes_per_token)} or less (the KV the share "
                         "leaves room for)")
        fixes.append("a smaller model, or a checkpoint quantized in its files (AWQ, GPTQ: both copies load it)")
        return (f"{head}: the engine alone needs {self._engine_parts()}, more than its share "
                f"{self.phase_utilization:g} x {_gib(self.device_bytes)} = {_gib(share)}; pass " + "; or ".join(fixes)
                + ".")

    def as_dict(self) -> dict:
        """The plan for the run's provenance: its inputs, the mode and the needs it compared (bytes)."""
        return {**asdict(self), "mode": self.mode, "engine_bytes_per_device": self.engine_bytes(),
                "kv_bytes_per_device": self.kv_bytes, "hf_bytes": self.hf_bytes,
                "engine_overhead_bytes": self.overhead}
