"""`lover_hf`: lm-eval's HFLM, except that `generate_until` runs the LoVer pipeline and returns its evidence.

Loading, tokenization, chat templates, batching knobs and data parallelism are HFLM's; decoding, features,
the test-time fit and scoring are `core.pipeline.Pipeline`'s. This class only turns lm-eval requests into
prompts and back (in the spirit of lm-eval's own `models/hf_steered.py`).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import torch
from lm_eval.models.huggingface import HFLM
from lm_eval.models.utils import handle_stop_sequences
from tqdm import tqdm

from ..core import loading
from ..core.decode.engine import RunSpec
from ..core.pipeline import Pipeline, log
from ..core.results import LoverResult
from ..core.verify.probes import PROBES
from .batch_size import questions_per_batch
from .chat import warn_on_prompt_format
from .filter import check_filters_before_decoding
from .generation import check_requests, resolve_decoding, warn_once_if_greedy_row_is_drawn
from .model_args import check_before_loading, hub_error, loader_error, one_line_errors, parse_model_args, usage_errors
from .ranks import fit_every_task


#: Logged as decoding starts: what the table lm-eval prints at the end will mean.
HEADLINE = ("lover_hf rank %d/%d: %d questions x %d branches. The table at the end has one exact_match row per "
            "selector, each picking one answer per question from these same branches: compare each with majority "
            "(the vote) and greedy; pass_at_n, an oracle that reads the gold answer, is how often any branch is right")


class LoverLM(HFLM):
    """HFLM that returns a `LoverResult` (N branches, features, verifier scores) per request.

    Model args beyond HFLM's are those of `core.config.MODEL_ARGS` plus `fit_config` (README: lover_hf model args).
    `pretrained` may be omitted (the embedded SmolLM2-135M-Instruct is used); `gguf_file` is converted once to a
    cached HF folder.
    """

    def __init__(self, pretrained=None, gguf_file=None, device=None, **kwargs):
        one_line_errors()  # on the lm_eval / lover CLI, a bad setting is one line, not a traceback
        self._logged: set[str] = set()
        config, hf_args, self.explicit = parse_model_args(kwargs)  # bad values fail before the model loads
        gguf_sha256 = None
        if pretrained is None and gguf_file is None:
            gguf_file = str(loading.default_gguf())
        if gguf_file is not None and isinstance(pretrained, (str, type(None))):
            gguf_path = loading.resolve_gguf(pretrained, str(gguf_file))
            pretrained = str(loading.convert_gguf(gguf_path))
            gguf_sha256 = loading.sha256_file(gguf_path)
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
        name = loading.model_identity(str(pretrained), gguf_sha256, hf_args.get("revision"))
        with usage_errors():  # a checkpoint that does not fit this model, a layer out of range
            self.pipeline = Pipeline(self.model, self.tokenizer, config, model_name=name)

    def _prompt_ids(self, context: str, max_ctx_len: int) -> list[int]:
        ids = self.tok_encode(context)
        if len(ids) > max_ctx_len:
            log.warning("prompt of %d tokens exceeds the context window: keeping its last %d tokens "
                        "(left truncation, as HFLM does).", len(ids), max_ctx_len)
            ids = ids[-max_ctx_len:]
        return ids

    def prompts(self, contexts: list[str], gen_kwargs: dict) -> tuple[list[list[int]], RunSpec]:
        """Prompt ids of contexts sharing generation kwargs, and the `RunSpec` those kwargs ask for (stop strings and
        budget as HFLM reads them, the decoding as harness/generation.py resolves it). A lookup: changes nothing."""
        decoding, kwargs = resolve_decoding(self.pipeline.config.decoding, self.explicit, gen_kwargs,
                                            self.max_gen_toks)
        eos_text = self.tok_decode(self.eot_token_id, skip_special_tokens=False)
        until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
        max_gen_toks = int(kwargs.pop("max_gen_toks"))
        max_ctx_len = self.max_length - max_gen_toks
        if max_ctx_len <= 0:
            raise ValueError(f"max_gen_toks={max_gen_toks} leaves no room for the prompt in this model's "
                             f"context window of {self.max_length} tokens; lower max_gen_toks.")
        return [self._prompt_ids(c, max_ctx_len) for c in contexts], RunSpec(decoding, until, max_gen_toks)

    def in_bank(self, contexts: list[str], gen_kwargs: dict) -> list[bool]:
        """Whether each context's branches are already in the bank (decoding would skip it)."""
        if self.pipeline.bank is None:  # nothing to look up: skip tokenizing every prompt
            return [False] * len(contexts)
        return self.pipeline.banked(*self.prompts(contexts, gen_kwargs))

    def run_contexts(self, contexts: list[str], gen_kwargs: dict, on_done=None, stats: bool = True
                     ) -> list[LoverResult]:
        """The pipeline's results for contexts sharing generation kwargs, longest context first (as HFLM); `stats`:
        whether the selectors' token statistics are needed (RunSpec.stats)."""
        prompts, spec = self.prompts(contexts, gen_kwargs)
        warn_once_if_greedy_row_is_drawn(spec.decoding, self._logged)
        batch_size = questions_per_batch(self, max(map(len, prompts)), spec.max_gen_toks)
        rows = self.pipeline.config.batching.rows(batch_size, spec.decoding.n_branches)
        return self.pipeline.run(prompts, replace(spec, max_rows=rows, stats=stats), [len(c) for c in contexts],
                                 on_done)

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[LoverResult]:
        config = self.pipeline.config
        fitting = config.selection.fit_at_test_time
        # The plain probes are fitted at test time whenever LoVer scores (from a fit or a checkpoint); P(True) opt-in.
        scored = (set(self.pipeline.verifiers) | ({"lover"} if fitting else set())
                  | (set(PROBES) if config.selection.verifier is not None else set())
                  | ({"ptrue"} if config.ptrue.enabled else set()))
        with usage_errors():  # a filter or request lover_hf cannot serve: one line on the CLI, before any decoding
            extracts = check_filters_before_decoding(config.selection.extract if fitting else None, scored,
                                                     adopt="extract" not in self.explicit)
            check_requests(requests, config.decoding, self.explicit, self.max_gen_toks)
        warn_on_prompt_format([r.args[0] for r in requests[:1]], self.tokenizer, self.pipeline.verifier_meta)
        groups = defaultdict(list)  # questions sharing generation kwargs are decoded together
        for index, request in enumerate(requests):
            groups[repr(sorted(request.args[1].items()))].append(index)
        results: list[LoverResult | None] = [None] * len(requests)
        log.info(HEADLINE, self.rank, self.world_size, len(requests), config.decoding.n_branches)
        bar = tqdm(total=len(requests), disable=disable_tqdm or self.rank != 0,
                   desc=f"lover_hf: {config.decoding.n_branches} branches per question")
        for indices in groups.values():
            def done(chunk, chunk_results, indices=indices):
                for k, result in zip(chunk, chunk_results):
                    results[indices[k]] = result
                bar.update(len(chunk))

            self.run_contexts([requests[i].args[0] for i in indices], requests[indices[0]].args[1], done)
        bar.close()
        fit_every_task(self.pipeline, requests, results, self.world_size, extracts)  # one fit per task, across ranks
        return results

    def set_cache_hook(self, cache_hook) -> None:
        """lm-eval's `--use_cache` keys each request alone, but a LoVer answer depends on the task's whole fit."""
        if getattr(cache_hook, "dbdict", None) is not None:
            raise ValueError("--use_cache cannot hold lover_hf's results: each answer comes from a fit over all of a "
                             "task's questions, so a cached question would keep an earlier run's fit (and model_args). "
                             "Drop --use_cache; bank=PATH keeps the decoded branches, and a re-run from it takes seconds.")
        super().set_cache_hook(cache_hook)

    def get_model_info(self) -> dict:
        """HFLM's model info plus the LoVer provenance (lm-eval writes it into the results file's config)."""
        return {**super().get_model_info(), "lover": {**self.pipeline.provenance(), "world_size": self.world_size,
                                                      "batch_size": getattr(self, "auto_batch_size", self.batch_size)}}
