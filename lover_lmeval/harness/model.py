"""`lover_hf`: lm-eval's HFLM, except that `generate_until` runs the LoVer pipeline and returns its evidence.

Loading, tokenization, chat templates, batching knobs and data parallelism are HFLM's; turning requests into prompts
and a `RunSpec` and back is the adapter's (harness/adapter.py, shared with `lover_vllm`); decoding, features, the
test-time fit and scoring are `core.pipeline.Pipeline`'s, with the HF model as its engine (in the spirit of lm-eval's
own `models/hf_steered.py`).
"""

from __future__ import annotations

import torch
from lm_eval.models.huggingface import HFLM

from ..core import loading
from ..core.decode.engine import RunSpec
from ..core.pipeline import Pipeline
from ..log import running
from .adapter import LoverRequests, check_truncation_side
from .batch_size import questions_per_batch
from .model_args import check_before_loading, hub_error, loader_error, one_line_errors, parse_model_args, usage_errors


class LoverLM(LoverRequests, HFLM):
    """HFLM that returns a `LoverResult` (N branches, features, verifier scores) per request.

    Model args beyond HFLM's are those of `core.config.MODEL_ARGS` plus `fit_config` (README: lover_hf model args).
    `pretrained` may be omitted (the embedded SmolLM2-135M-Instruct is used); `gguf_file` is converted once to a
    cached HF folder.
    """

    NAME = "lover_hf"

    def __init__(self, pretrained=None, gguf_file=None, device=None, truncation_side="left", **kwargs):
        one_line_errors(self.NAME)  # on the lm_eval / lover CLI, a bad setting is one line, not a traceback
        running(self.NAME)  # the package's messages name this model from now on (lover_lmeval/log.py)
        self._logged: set[str] = set()
        side = check_truncation_side(truncation_side)  # lm-eval's VLLM's argument, honoured here too
        config, hf_args, self.explicit = parse_model_args(kwargs)  # bad values fail before the model loads
        pretrained, gguf_sha256 = loading.resolve_model(pretrained, gguf_file)
        # HFLM's own default is "cuda", which fails on CPU-only machines: pick what is there.
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        check_before_loading(hf_args)
        try:
            super().__init__(pretrained=pretrained, device=device, **hf_args)
        except TypeError as error:
            raise loader_error(error, hf_args) from None
        except OSError as error:  # a hub id that cannot be reached (offline, a typo): name the ways out
            raise hub_error(error, pretrained) from None
        # HFLM shards requests across ranks only when there are several GPUs; a multi-process CPU launch
        # (ACCELERATE_USE_CPU=1 torchrun/accelerate launch) should split the work the same way.
        accelerator = getattr(self, "accelerator", None)
        if accelerator is not None and accelerator.num_processes > 1 and self.world_size == 1:
            self._rank, self._world_size = accelerator.local_process_index, accelerator.num_processes
        self.truncation_side = side
        name = loading.model_identity(str(pretrained), gguf_sha256, hf_args.get("revision"))
        with usage_errors():  # a checkpoint that does not fit this model, a layer out of range
            self.pipeline = Pipeline(self.model, self.tokenizer, config, model_name=name)

    def row_budget(self, prompts: list[list[int]], spec: RunSpec) -> int:
        """lm-eval's batch size (`auto`: found once) times N rows, unless model_args set max_rows."""
        if getattr(self, "found_batch_size", None) is None:  # `auto`: detected once, on the first group
            self.found_batch_size = questions_per_batch(self, max(map(len, prompts)), spec.max_gen_toks)
        batch_size = self.found_batch_size
        return self.pipeline.config.batching.rows(batch_size, spec.decoding.n_branches)

    def get_model_info(self) -> dict:
        """HFLM's model info plus the LoVer provenance (lm-eval writes it into the results file's config)."""
        return {**super().get_model_info(), "lover": {**self.pipeline.provenance(), "world_size": self.world_size,
                                                      "batch_size": getattr(self, "found_batch_size", self.batch_size)}}
