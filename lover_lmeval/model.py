"""`lover_hf`: lm-eval's HFLM, except that `generate_until` decodes N branches and returns evidence.

Everything else (loading, tokenization, chat templates, batching knobs, data parallelism) is HFLM's.
Stages live in their own modules: decoding.py (branches), features.py (assertion features),
results.py (what is returned), verifier.py (scores).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from dataclasses import asdict

import torch
from lm_eval.models.huggingface import HFLM
from lm_eval.models.utils import handle_stop_sequences, normalize_gen_kwargs
from tqdm import tqdm

from . import loading
from .answers import get_extractor
from .bank import BranchBank, FeatureCache, NotInBank, record_key
from .decoding import DecodingConfig, decode_branches
from .features import FALSE_TEMPLATE, TRUE_TEMPLATE, assertion_features, check_layer, features_from_tokens
from .results import LoverResult

log = logging.getLogger("lm_eval.lover_hf")  # under lm-eval's logger so its CLI shows our messages


def _optional_int(value):
    return None if value in (None, "", "None") else int(value)


class LoverLM(HFLM):
    """HFLM that returns a `LoverResult` (N branches, features, verifier scores) per request.

    Extra model_args: n_branches (10), decoding (cot|sample|beam), temperature, top_p, seed, layer
    (default: middle), true_template / false_template, verifier=PATH|fit, supervised_verifier=PATH,
    extract (answer extractor used by verifier=fit), bank=PATH (reuse/append decoded branches),
    extra_layers="3;6;9" (features of more layers kept on the result for layer sweeps),
    fit_config="losses=...;curriculum=..." (VerifierConfig of the test-time fit), bank_only=true (never
    decode: a question missing from the bank is an error), feature_cache=DIR|none (with a bank: features per
    question and layer, so banked questions are not re-run through the model; default: the lover-lmeval cache dir).
    The default verifier=fit fits a verifier label-free on the evaluated questions' own branches
    (test-time fit), so the LoVer rows never need a separate training step. `pretrained` may be omitted: the embedded
    SmolLM2-135M-Instruct is used. `gguf_file` is converted once to a cached HF folder.
    """

    def __init__(self, pretrained=None, gguf_file=None, n_branches=10, decoding="cot", temperature=0.7,
                 top_p=0.95, seed=1234, layer=None, true_template=TRUE_TEMPLATE, false_template=FALSE_TEMPLATE,
                 verifier="fit", supervised_verifier=None, extract="number", bank=None, extra_layers=None,
                 feature_cache="default", fit_config="", bank_only=False, device=None, **kwargs):
        self.decoding = DecodingConfig(n_branches=int(n_branches), mode=str(decoding),
                                       temperature=float(temperature), top_p=float(top_p), seed=int(seed))
        self.gguf_sha256 = None
        if pretrained is None and gguf_file is None:
            gguf_file = str(loading.default_gguf())
        if gguf_file is not None and isinstance(pretrained, (str, type(None))):
            gguf_path = loading.resolve_gguf(pretrained, str(gguf_file))
            pretrained = str(loading.convert_gguf(gguf_path))
            self.gguf_sha256 = loading.sha256_file(gguf_path)
        # HFLM's own default is "cuda", which fails on CPU-only machines: pick what is there.
        if device is None:
            device = "cuda" if torch.cuda.is_available() else "cpu"
        super().__init__(pretrained=pretrained, device=device, **kwargs)
        # HFLM shards requests across ranks only when there are several GPUs; a multi-process CPU launch
        # (ACCELERATE_USE_CPU=1 torchrun/accelerate launch) should split the work the same way.
        accelerator = getattr(self, "accelerator", None)
        if accelerator is not None and accelerator.num_processes > 1 and self.world_size == 1:
            self._rank, self._world_size = accelerator.local_process_index, accelerator.num_processes
        n_layers = self.model.config.num_hidden_layers
        self.layer = check_layer(_optional_int(layer), n_layers)
        # Layer sweeps: features of these layers ride along (`result.layer_features`) for the price of the
        # template tokens, instead of re-running every branch through the model afterwards.
        self.extra_layers = [check_layer(int(x), n_layers) for x in str(extra_layers or "").replace(";", " ").split()]
        self.templates = (str(true_template), str(false_template))
        self.template_ids = [self.tokenizer.encode(t, add_special_tokens=False) for t in self.templates]
        self.extract = str(extract)
        get_extractor(self.extract)  # fail before decoding, not after, on a bad extract=
        self.identity = {
            "model": loading.model_identity(str(pretrained), self.gguf_sha256, kwargs.get("revision")),
            "hidden_size": int(self.model.config.hidden_size),
            "layer": self.layer,
            "templates": list(self.templates),
        }
        self.bank = BranchBank(bank) if bank not in (None, "", "None") else None
        self.bank_only = str(bank_only).lower() in ("true", "1", "yes")
        if self.bank_only and self.bank is None:
            raise ValueError("bank_only=true needs bank=PATH (the bank to read every question from)")
        self.feature_cache = None
        if self.bank is not None and str(feature_cache).lower() not in ("", "none", "false", "off"):
            where = loading.cache_dir() / "features" if feature_cache == "default" else feature_cache
            self.feature_cache = FeatureCache(where, salt=f"{self.model.dtype}/{self.device.type}")
        self.verifiers = {}
        self.fit_at_test_time = str(verifier) == "fit"
        from .checkpoints import load_checkpoint
        from .verifier import config_from_string

        self.fit_config = config_from_string(fit_config or "")  # fails here, before decoding, on a bad value

        for name, path in (("lover", verifier), ("supervised", supervised_verifier)):
            if path not in (None, "", "None", "fit"):
                self.verifiers[name], _ = load_checkpoint(str(path), expect=self.identity)

    def _prompt_ids(self, context: str, max_ctx_len: int) -> list[int]:
        ids = self.tok_encode(context)
        if len(ids) > max_ctx_len:
            log.warning("prompt of %d tokens exceeds the context window: keeping its last %d tokens "
                        "(left truncation, as HFLM does).", len(ids), max_ctx_len)
            ids = ids[-max_ctx_len:]
        return ids

    def _eos_ids(self) -> set[int]:
        ids = {self.eot_token_id}
        configured = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update(configured if isinstance(configured, list) else [configured] if configured is not None else [])
        return ids

    def _keyed_prompts(self, contexts: list[str], gen_kwargs: dict):
        """Prompt ids, bank record keys, stop strings and token budget of contexts sharing generation kwargs."""
        kwargs = normalize_gen_kwargs(dict(gen_kwargs), self.max_gen_toks)
        eos_text = self.tok_decode(self.eot_token_id, skip_special_tokens=False)
        until = handle_stop_sequences(kwargs.pop("until", None), eos=eos_text)
        max_gen_toks = int(kwargs.pop("max_gen_toks"))
        max_ctx_len = self.max_length - max_gen_toks
        if max_ctx_len <= 0:
            raise ValueError(f"max_gen_toks={max_gen_toks} leaves no room for the prompt in this model's "
                             f"context window of {self.max_length} tokens; lower max_gen_toks.")
        prompts = [self._prompt_ids(c, max_ctx_len) for c in contexts]
        settings = {"decoding": asdict(self.decoding), "until": until, "max_gen_toks": max_gen_toks}
        # Greedy branches in bf16 differ from fp32 ones (benchmarks/RESULTS.md), so they never share a record;
        # fp32 keys stay as they were, keeping every bank decoded before dtype was part of the key valid.
        if self.model.dtype != torch.float32:
            settings["dtype"] = str(self.model.dtype).removeprefix("torch.")
        keys = [record_key(self.identity["model"], p, settings) for p in prompts]
        return prompts, keys, until, max_gen_toks

    def in_bank(self, contexts: list[str], gen_kwargs: dict) -> list[bool]:
        """Whether each context's branches are already in the bank (decoding would skip it)."""
        if self.bank is None:  # nothing to look up: skip tokenizing every prompt
            return [False] * len(contexts)
        return self._banked(self._keyed_prompts(contexts, gen_kwargs)[1])

    def _banked(self, keys: list[str]) -> list[bool]:
        return [self.bank is not None and self.bank.get(k) is not None for k in keys]

    def decode_requests(self, contexts: list[str], gen_kwargs: dict) -> list[LoverResult]:
        """Decode (or take from the bank) and featurise a batch of contexts that share generation kwargs."""
        return self._decode_keyed(*self._keyed_prompts(contexts, gen_kwargs))

    def _decode_keyed(self, prompts: list[list[int]], keys: list[str], until: list[str],
                      max_gen_toks: int) -> list[LoverResult]:
        """`decode_requests` on prompts already tokenized and keyed by `_keyed_prompts`."""
        branches = [self.bank.get(k) if self.bank is not None else None for k in keys]
        layers = [self.layer, *self.extra_layers]
        features = [self.feature_cache.get(k, layers, self.template_ids)
                    if self.feature_cache is not None and b is not None else None for k, b in zip(keys, branches)]
        computed = [f is None for f in features]  # these go into the feature cache once computed
        todo = [i for i, b in enumerate(branches) if b is None]
        if todo and self.bank_only:
            raise NotInBank(f"{len(todo)} of {len(prompts)} questions are not in the bank {self.bank.path} "
                            f"({len(self.bank)} records) and bank_only=true forbids decoding them; check the bank "
                            "path, task, limit and generation settings, or drop bank_only to decode them.")
        if todo:
            pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.eot_token_id
            decoded, caches = decode_branches(self.model, self.tokenizer, [prompts[i] for i in todo], self.decoding,
                                              max_gen_toks, until, self._eos_ids(), pad_id)
            for i, q_branches, q_caches in zip(todo, decoded, caches):
                branches[i] = q_branches
                features[i] = assertion_features(self.model, q_branches, q_caches, self.template_ids, layers)
                if self.bank is not None:
                    self.bank.add(keys[i], q_branches, prompt_ids=prompts[i])
        results = []
        for i, q_branches in enumerate(branches):
            if features[i] is None:  # from the bank: no KV cache, one prefill per question
                features[i] = features_from_tokens(self.model, prompts[i], q_branches, self.template_ids, layers)
            if self.feature_cache is not None and computed[i]:
                self.feature_cache.put(keys[i], layers, self.template_ids, features[i])
            at_layer = features[i][:, :, 0]  # (N, 2, L, D) -> (N, 2, D) at self.layer
            probs = {name: torch.stack(v(at_layer), dim=-1).numpy() for name, v in self.verifiers.items()}
            more = {layer: features[i][:, :, k].numpy() for k, layer in enumerate(layers) if k}
            results.append(LoverResult(q_branches, at_layer.numpy(), probs, self.layer, prompts[i], more))
        return results

    def generate_until(self, requests, disable_tqdm: bool = False) -> list[LoverResult]:
        # Questions sharing generation kwargs are decoded together, longest prompt first (as HFLM).
        batch_size = self.batch_size if isinstance(self.batch_size, int) else 1
        groups = defaultdict(list)
        for index, request in enumerate(requests):
            context, gen_kwargs = request.args
            groups[repr(sorted(gen_kwargs.items()))].append(index)
        results: list[LoverResult | None] = [None] * len(requests)
        log.info("lover_hf rank %d/%d: %d questions x %d branches", self.rank, self.world_size, len(requests),
                 self.decoding.n_branches)
        bar = tqdm(total=len(requests), disable=disable_tqdm or self.rank != 0,
                   desc=f"lover_hf: {self.decoding.n_branches} branches per question")
        for indices in groups.values():
            gen_kwargs = requests[indices[0]].args[1]
            # Tokenized and keyed once per group: the bank lookup and the decoding batches share the result.
            prompts, keys, until, max_gen_toks = self._keyed_prompts([requests[i].args[0] for i in indices],
                                                                     gen_kwargs)
            position = {index: k for k, index in enumerate(indices)}
            banked = dict(zip(indices, self._banked(keys)))
            indices.sort(key=lambda i: -len(requests[i].args[0]))
            # Banked and unbanked questions are batched apart, so a decoding batch holds only questions that need
            # decoding and a grown bank leaves no half-empty batches (a 20-row step costs about a 50-row one on CPU).
            chunks = [part[start: start + batch_size] for part in ([i for i in indices if banked[i]],
                                                                   [i for i in indices if not banked[i]])
                      for start in range(0, len(part), batch_size)]
            for chunk in chunks:
                at = [position[i] for i in chunk]
                decoded = self._decode_keyed([prompts[k] for k in at], [keys[k] for k in at], until, max_gen_toks)
                for i, result in zip(chunk, decoded):
                    results[i] = result
                    self.cache_hook.add_partial("generate_until", requests[i].args, result)
                bar.update(len(chunk))
        bar.close()
        if self.fit_at_test_time:
            from .training import fit_on_results, warn_if_constant_answer, warn_if_one_sided

            # One fit per task: the inter-group constraint compares answers to the same kind of question, and
            # a run of several tasks must score each exactly as a run of that task alone would.
            by_task = defaultdict(list)
            for request, result in zip(requests, results):
                by_task[getattr(request, "task_name", None)].append(result)
            for task, task_results in by_task.items():
                fit_on_results(task_results, extract=self.extract, config=self.fit_config)
                warn_if_one_sided(task_results, task)
                warn_if_constant_answer(task_results, task, self.extract)
        return results

    @torch.no_grad()
    def greedy_reference(self, context: str, max_gen_toks: int) -> list[int]:
        """Plain `generate` greedy continuation (used by tests and benchmarks as the baseline)."""
        ids = torch.tensor([self.tok_encode(context)], device=self.device)
        out = self.model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                  max_new_tokens=max_gen_toks, pad_token_id=self.tokenizer.pad_token_id)
        return out[0, ids.shape[1]:].tolist()
