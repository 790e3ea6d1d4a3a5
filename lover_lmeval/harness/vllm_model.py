"""`lover_vllm`: lm-eval's VLLM, except that `generate_until` runs the LoVer pipeline with vLLM as its engine.

Every vLLM model_arg lm-eval's VLLM takes works (`tensor_parallel_size`, `data_parallel_size`, `gpu_memory_utilization`,
`max_model_len`, `quantization`, ...), and lover's own come from the same table as `lover_hf`'s (core/config.py): one
definition, two models. vLLM decodes the branches (harness/vllm_engine.py); an HF copy of the same weights reads them
once, teacher-forced, for the margins, the token statistics and LoVer's features, so every row means what it means
under `lover_hf`. That copy sits beside the engine (on the GPU with `tensor_parallel_size` 1, spread over the visible
GPUs otherwise), which is why `gpu_memory_utilization` defaults lower here than in lm-eval's `vllm`.
"""

from __future__ import annotations

import torch

from ..core import loading
from ..core.decode.engine import eos_ids
from ..core.pipeline import Pipeline
from .adapter import LoverRequests
from .model_args import LoverUsageError, hub_error, one_line_errors, parse_model_args, usage_errors
from .vllm_engine import VLLMEngine

try:
    from lm_eval.models.vllm_causallms import VLLM
except ImportError as error:  # said in one line when the model is asked for, not when lm-eval lists its models
    VLLM, MISSING = object, error
else:
    MISSING = None

#: The share of GPU memory the engine takes unless model_args say: the rest holds the HF copy and its passes.
GPU_MEMORY_UTILIZATION = 0.6
#: On vLLM's CPU backend the same argument is the share of RAM for the KV cache (its default, 0.92, is refused there).
CPU_MEMORY_UTILIZATION = 0.2
#: vLLM args lover sets itself: the user's would contradict N branches or their decoding.
REFUSED = {"n": "n_branches", "best_of": "n_branches", "use_beam_search": "decoding"}


def missing_vllm() -> LoverUsageError:
    return LoverUsageError(f"lover_vllm needs vLLM, which cannot be imported here ({MISSING}); install it with "
                           'pip install "lover-lmeval[vllm]" (GPUs), or use --model lover_hf.')


def checkpoint_dtype(pretrained: str, revision: str | None) -> str:
    """The checkpoint's own dtype (a converted GGUF: float32), for the engine and the HF copy alike: the features and
    margins are then read in the precision the branches were decoded in."""
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(pretrained, revision=revision)
    dtype = getattr(config, "dtype", None) or getattr(config, "torch_dtype", None) or torch.float32
    return str(dtype).removeprefix("torch.")


class LoverVLLM(LoverRequests, VLLM):
    """VLLM that returns a `LoverResult` (N branches, features, verifier scores) per request."""

    NAME = "lover_vllm"

    @classmethod
    def create_from_arg_string(cls, arg_string: str, additional_config: dict | None = None):
        cls._check_vllm()
        return super().create_from_arg_string(arg_string, additional_config)

    @classmethod
    def create_from_arg_obj(cls, arg_dict: dict, additional_config: dict | None = None):
        cls._check_vllm()
        return super().create_from_arg_obj(arg_dict, additional_config)

    @classmethod
    def _check_vllm(cls) -> None:
        """Without vLLM the class has lm-eval's LM methods only through this refusal: one line on the CLI."""
        if MISSING is not None:
            one_line_errors(cls.NAME)
            raise missing_vllm()

    def __init__(self, pretrained=None, gguf_file=None, **kwargs):
        self._check_vllm()
        one_line_errors(self.NAME)
        self._logged: set[str] = set()
        config, vllm_args, self.explicit = parse_model_args(kwargs)
        if config.decoding.mode == "beam":
            raise LoverUsageError("decoding=beam is lover_hf's (beam search through transformers' generate); "
                                  "lover_vllm decodes cot or sample: use --model lover_hf for beams.")
        for name, ours in REFUSED.items():
            if name in vllm_args:
                raise LoverUsageError(f"model_arg {name}={vllm_args[name]} is vLLM's, but lover_vllm sets it from "
                                      f"{ours}; pass {ours}= instead.")
        gguf_sha256 = None
        if pretrained is None and gguf_file is None:
            gguf_file = str(loading.default_gguf())
        if gguf_file is not None:
            gguf_path = loading.resolve_gguf(pretrained, str(gguf_file))
            pretrained, gguf_sha256 = str(loading.convert_gguf(gguf_path)), loading.sha256_file(gguf_path)
        gpu = torch.cuda.is_available()
        vllm_args.setdefault("gpu_memory_utilization", GPU_MEMORY_UTILIZATION if gpu else CPU_MEMORY_UTILIZATION)
        if vllm_args.get("dtype", "auto") == "auto":  # vLLM's "auto" runs float32 checkpoints in half precision
            vllm_args["dtype"] = checkpoint_dtype(pretrained, vllm_args.get("revision"))
        try:
            super().__init__(pretrained=pretrained, **vllm_args)
        except (OSError, RuntimeError, ValueError) as error:  # the engine's start: its reason, and the way out
            if isinstance(error, OSError):
                raise hub_error(error, pretrained) from None
            first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
            raise LoverUsageError(f"vLLM could not start {pretrained}: {first[:300]}; --model lover_hf decodes "
                                  "without vLLM.") from None
        name = loading.model_identity(str(pretrained), gguf_sha256, vllm_args.get("revision"))
        self.hf_model = self._features_model(pretrained, vllm_args, gpu)
        engine = VLLMEngine(lambda prompts, params: self._model_generate(prompts, True, params), self.tokenizer,
                            eos_ids(self.hf_model, self.tokenizer))
        with usage_errors():
            self.pipeline = Pipeline(self.hf_model, self.tokenizer, config, model_name=name, engine=engine)

    @staticmethod
    def _features_model(pretrained: str, vllm_args: dict, gpu: bool):
        """The HF copy of the weights that reads the branches (features, margins, statistics), in vLLM's dtype."""
        from transformers import AutoModelForCausalLM

        dtype = vllm_args.get("dtype", "auto")
        placement = {"device_map": "auto"} if gpu and int(vllm_args.get("tensor_parallel_size", 1)) > 1 else {}
        model = AutoModelForCausalLM.from_pretrained(pretrained, dtype=dtype, revision=vllm_args.get("revision"),
                                                     trust_remote_code=bool(vllm_args.get("trust_remote_code")),
                                                     **placement)
        return (model if placement else model.to("cuda" if gpu else "cpu")).eval()

    def get_model_info(self) -> dict:
        """lm-eval's model info plus the LoVer provenance (lm-eval writes it into the results file's config)."""
        own = getattr(super(), "get_model_info", dict)()  # lm-eval's VLLM has none (HFLM has)
        return {**own, "lover": {**self.pipeline.provenance(), "world_size": self.world_size}}
