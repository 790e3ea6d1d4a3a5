"""`lover_vllm`: lm-eval's VLLM, except that `generate_until` runs the LoVer pipeline with vLLM as its engine.

Every vLLM model_arg lm-eval's VLLM takes works (`tensor_parallel_size`, `data_parallel_size`, `gpu_memory_utilization`,
`max_model_len`, ...), and lover's own come from the same table as `lover_hf`'s (core/config.py): one definition, two
models; lover_hf's batching args, settings that would make vLLM decode another model than the HF copy reads, and a
`max_logprobs` below N are refused by name (harness/vllm/settings.py). vLLM decodes the branches
(harness/vllm/engine.py); an HF copy of the same weights reads them once, teacher-forced, for the margins, the token
statistics and LoVer's features, so every row means what it means under `lover_hf`. Before anything loads, a memory
plan (harness/vllm/memory_plan.py, logged in one line and kept in the provenance) decides where the two copies go: `beside`
(the engine in its share, gpu_memory_utilization, the HF copy in the rest: on the GPU with `tensor_parallel_size` 1,
spread over the visible GPUs otherwise), `phases` (harness/vllm/phases.py: the engine decodes alone, is freed, then the
copy reads) or refused with the numbers and the fix; `memory_plan=beside|phases` overrides it. Questions go to vLLM
in chunks (`chunk_questions`, default sized by the engine's batch), each banked as it returns; with
`data_parallel_size` > 1 the replicas start once a run and decode whole questions (harness/vllm/replicas.py). A
failed engine start is one line with vLLM's root cause and its fix (harness/vllm/start.py).
"""

from __future__ import annotations

import torch

from ...core import loading
from ...core.decode.engine import eos_ids
from ...core.pipeline import Pipeline
from ...log import log, running
from ..adapter import LoverRequests
from ..model_args import LoverUsageError, hub_error, one_line_errors, usage_errors
from .engine import VLLMEngine, chunk_size, running_batch, shut_down
from .hf_copy import features_model, meta_copy
from .memory import alone_share, choose_placement
from .memory_plan import MemoryPlan
from .phases import PhasedEngine
from .replicas import ReplicaEngine
from .settings import check_planned_branches, model_changes, parse_vllm_args
from .start import OutputTail, start_error

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


def missing_vllm() -> LoverUsageError:
    return LoverUsageError(f"lover_vllm needs vLLM, which cannot be imported here ({MISSING}); install it with "
                           'pip install "lover-lmeval[vllm]" (GPUs), or use --model lover_hf.')


def checkpoint_config(pretrained: str, vllm_args: dict) -> dict:
    """The checkpoint's HF config as a dict (its dtype, its sizes for the memory plan, its own quantization)."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(pretrained, revision=vllm_args.get("revision"),
                                      trust_remote_code=bool(vllm_args.get("trust_remote_code"))).to_dict()


def checkpoint_dtype(config: dict) -> str:
    """The checkpoint's own dtype (a converted GGUF: float32), for the engine and the HF copy alike: the features and
    margins are then read in the precision the branches were decoded in."""
    dtype = config.get("dtype") or config.get("torch_dtype") or "float32"
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

    def __init__(self, pretrained=None, gguf_file=None, memory_plan: str = "auto", chunk_questions="auto", **kwargs):
        self._check_vllm()
        one_line_errors(self.NAME)
        running(self.NAME)  # the package's messages name this model from now on (lover_lmeval/log.py)
        self._logged: set[str] = set()
        config, vllm_args, self.explicit, chunk_questions = parse_vllm_args(memory_plan, chunk_questions, kwargs)
        pretrained, gguf_sha256 = loading.resolve_model(pretrained, gguf_file)
        try:
            hf_config = checkpoint_config(pretrained, vllm_args)
        except OSError as error:
            raise hub_error(error, pretrained) from None
        self.changes = model_changes(hf_config, vllm_args)
        gpu = torch.cuda.is_available()
        explicit_utilization = "gpu_memory_utilization" in vllm_args
        vllm_args.setdefault("gpu_memory_utilization", GPU_MEMORY_UTILIZATION if gpu else CPU_MEMORY_UTILIZATION)
        if vllm_args.get("dtype", "auto") == "auto":  # vLLM's "auto" runs float32 checkpoints in half precision
            vllm_args["dtype"] = checkpoint_dtype(hf_config)
        name = loading.model_identity(str(pretrained), gguf_sha256, vllm_args.get("revision")) + self.changes.identity
        self.placement, self.plan = choose_placement(pretrained, hf_config, vllm_args, config.decoding.n_branches, gpu,
                                               explicit_utilization, name, memory_plan)
        self._copy_args = (pretrained, vllm_args, gpu, self.changes)
        if self.placement == "phases" and isinstance(self.plan, MemoryPlan):
            vllm_args["gpu_memory_utilization"] = alone_share(self.plan, explicit_utilization)
        self._start(lambda: super(LoverVLLM, self).__init__(pretrained=pretrained, **vllm_args))
        if self.placement == "phases" and self.data_parallel_size <= 1:  # VLLM reads it from the engine, freed later
            self._max_length = self._max_length or self.model.llm_engine.model_config.max_model_len
        skeleton = meta_copy(pretrained, vllm_args, self.changes.overrides) if self.placement == "phases" else None
        reader = skeleton if skeleton is not None else self.load_copy()
        chunk = chunk_questions or chunk_size(running_batch(getattr(self, "model", None), vllm_args),
                                              config.decoding.n_branches)
        log.info("lover_vllm: %d questions a vLLM call (chunk_questions); each call's questions are banked (bank=, or "
                 "staged in phases) as it returns", chunk)
        self.vllm_engine = VLLMEngine(lambda prompts, params: self._model_generate(prompts, True, params),
                                      self.tokenizer, eos_ids(reader, self.tokenizer), chunk,
                                      name=VLLMEngine.NAME + self.changes.engine)
        if self.data_parallel_size > 1:  # replicas started once, whole questions each (lm-eval's: per call)
            self.vllm_engine = ReplicaEngine(self.vllm_engine, self.model_args, self.data_parallel_size,
                                             self.tensor_parallel_size if gpu else 0, self.lora_request)
        self.phases = PhasedEngine(self.vllm_engine, self.ensure_engine, self.free_engine, self.load_copy,
                                   skeleton) if skeleton is not None else None
        with usage_errors():
            self.pipeline = Pipeline(reader, self.tokenizer, config, model_name=name,
                                     engine=self.phases or self.vllm_engine)

    @property
    def hf_model(self):
        """The HF copy the pipeline reads the branches with (in phases: its meta skeleton until vLLM is freed)."""
        return self.pipeline.model

    def _start(self, start) -> None:
        """Run `start` (the engine's start), its failure one line with the root cause from the engine's output."""
        tail = OutputTail()
        try:
            with tail:
                start()
        except (OSError, RuntimeError, ValueError) as error:  # the engine's start: its root cause, and the way out
            pretrained, vllm_args = self._copy_args[:2]
            if isinstance(error, OSError):
                raise hub_error(error, pretrained) from None
            raise start_error(error, tail.lines(), pretrained, vllm_args,
                              self.plan if isinstance(self.plan, MemoryPlan) else None) from None

    def ensure_engine(self) -> None:
        """vLLM's engine started again if it was freed, with the arguments it first started with (phases: a later
        call); data-parallel replicas start as they decode."""
        if getattr(self, "model", None) is None and self.data_parallel_size <= 1:  # (data parallel: no self.model)
            from vllm import LLM

            self._start(lambda: setattr(self, "model", LLM(**self.model_args)))

    def free_engine(self) -> None:
        """vLLM's engine shut down, or its data-parallel replicas (their processes exit, their memory with them)."""
        shut_down(self.vllm_engine, getattr(self, "model", None))
        self.model = None

    def load_copy(self):
        """The HF copy that reads the branches, loaded (`_features_model`)."""
        return features_model(*self._copy_args)

    def check_branches(self, questions: list, n_of: list[int]) -> None:
        check_planned_branches(self.pipeline.config.decoding.n_branches, questions, n_of)

    def before_decoding(self, groups: list[tuple[list[str], dict]]) -> None:
        """In phases: every group decoded by vLLM first, the engine freed, the HF copy loaded (phases.py)."""
        if self.phases is not None:
            self.phases.stage(self.pipeline, [self.prompts(contexts, gen_kwargs) for contexts, gen_kwargs in groups])

    def after_decoding(self) -> None:
        """In phases: the call's staged records discarded, its questions complete (phases.py)."""
        if self.phases is not None:
            self.phases.discard_staged()

    def get_model_info(self) -> dict:
        """lm-eval's model info plus the LoVer provenance (lm-eval writes it into the results file's config)."""
        own = getattr(super(), "get_model_info", dict)()  # lm-eval's VLLM has none (HFLM has)
        plan = self.plan.as_dict() if isinstance(self.plan, MemoryPlan) else {"none": self.plan}
        return {**own, "lover": {**self.pipeline.provenance(), "world_size": self.world_size,
                                 "memory_plan": {**plan, "placement": self.placement}}}
