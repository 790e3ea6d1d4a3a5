"""The LoVer pipeline on plain data: decode -> featurise -> fit/score -> select, for prompts as token ids.

`Pipeline` holds a transformers causal LM, its tokenizer and a `LoverConfig`; the lm-eval adapter
(`harness.model.LoverLM`), `lover train`, `lover compare` and the benchmarks all call it, and so can a user
with no lm-eval installed:

    pipe = Pipeline(model, tokenizer, LoverConfig())
    results = pipe.run([tokenizer.encode(q) for q in questions], until=["Question:"], max_gen_toks=256)
    pipe.fit(results)                      # label-free test-time fit, scores stored on the results
    answers = pipe.select(results, "lover_sum")

Dimensions: N branches, L feature layers, D hidden size.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import asdict, replace

import numpy as np
import torch

from .. import __version__
from .select.answers import get_extractor
from .store.bank import DEFAULT_FEATURE_CACHE, BranchBank, FeatureCache, NotInBank, record_key, record_settings
from .verify.checkpoints import gold_labels_used, label_tag, load_checkpoint, tensors_sha256
from .config import LoverConfig
from .decode.decoding import DecodingConfig, iter_branches
from .decode.static import check_static
from .decode.features import assertion_features, features_from_tokens, stats_from_tokens
from .loading import cache_dir, model_identity
from .results import STORED_DTYPES, LoverResult
from .verify.scoring import fit_on_results, unparsed_counts, warn_if_constant_answer, warn_if_one_sided
from .select.selection import select
from .decode.token_stats import decode_stats, encode_stats

log = logging.getLogger("lm_eval.lover_hf")  # under lm-eval's logger, so its CLI shows our messages


class Pipeline:
    def __init__(self, model, tokenizer, config: LoverConfig | None = None, model_name: str | None = None):
        self.model, self.tokenizer = model, tokenizer
        self.config = config or LoverConfig()
        self.layers = self.config.features.layers(model.config.num_hidden_layers)  # [layer, *extra_layers]
        if self.config.batching.static_cache:  # a model whose cache static rows cannot hold: said before decoding
            check_static(model, self.config.decoding.mode)
        self.template_ids = [tokenizer.encode(t, add_special_tokens=False) for t in self.config.features.templates]
        self.identity = {  # what a checkpoint's features were taken from (checked when one is loaded)
            "model": model_name or model_identity(str(model.config.name_or_path), None, None),
            "hidden_size": int(model.config.hidden_size),
            "layer": self.layers[0],
            "templates": list(self.config.features.templates),
        }
        bank = self.config.bank
        self.bank = BranchBank(bank.path) if bank.path is not None else None
        self.feature_cache = None
        if self.bank is not None and bank.feature_cache is not None:
            where = cache_dir() / "features" if bank.feature_cache == DEFAULT_FEATURE_CACHE else bank.feature_cache
            self.feature_cache = FeatureCache(where, salt=f"{model.dtype}/{model.device.type}")
        # Features are kept as computed: in a half-precision model's own dtype, otherwise float32 (results.py).
        self.stored_dtype = model.dtype if model.dtype in STORED_DTYPES else torch.float32
        self.verifiers, self.verifier_meta, self.verifier_ids = {}, {}, {}
        self.fits: dict[str, dict] = {}  # task -> what its test-time fit saw and made (provenance in the results)
        self.decodings_used: list[dict] = []  # every decoding the run's requests asked for (use_decoding)
        self.base_decoding = self.config.decoding  # model_args' decoding, which requests may adapt (use_decoding)
        # Banked branches decoded before token statistics existed get them (the selectors of selectors.py read them)
        # at ~2x the cost of their features alone; a caller that selects nothing (`lover train`) turns this off.
        self.token_stats = True
        for name, path in self.config.selection.checkpoints().items():
            try:
                self.verifiers[name], meta = load_checkpoint(path, expect=self.identity)
            except ValueError as error:
                arg = "verifier" if name == "lover" else "supervised_verifier"
                raise ValueError(f"{arg}={path}: {error}") from None
            self.verifier_meta[name] = meta
            digest = meta.get("tensors_sha256") or tensors_sha256(self.verifiers[name].state_dict())
            self.verifier_ids[name] = f"checkpoint {path} tensors_sha256:{digest}"
            if label_tag(meta):  # the YAML names the metric rows; say here that these are not label-free
                log.warning("verifier %s was made with %d gold labels %s: the rows it scores (lover_*, or "
                            "supervised_*) are not label-free", path, gold_labels_used(meta), label_tag(meta))

    @property
    def layer(self) -> int:
        return self.layers[0]

    @property
    def extract(self) -> str:
        """The extractor grouping answers for the test-time fit (`lover compare` sets it per task)."""
        return self.config.selection.extract

    @extract.setter
    def extract(self, name: str) -> None:
        get_extractor(name)
        self.config.selection.extract = name

    def eos_ids(self) -> set[int]:
        ids = {self.tokenizer.eos_token_id}
        configured = getattr(self.model.generation_config, "eos_token_id", None)
        ids.update(configured if isinstance(configured, list) else [configured] if configured is not None else [])
        return ids

    def record_keys(self, prompts: list[list[int]], until: list[str], max_gen_toks: int,
                    dtype: torch.dtype | None = None) -> list[str]:
        """Bank keys: everything that determines a question's branches; `dtype` (default: the model's) names the
        precision whose records to look up."""
        precision = str(dtype or self.model.dtype).removeprefix("torch.")
        settings = record_settings(self.config.decoding, until, max_gen_toks, precision)
        return [record_key(self.identity["model"], p, settings) for p in prompts]

    def banked(self, keys: list[str]) -> list[bool]:
        return [self.bank is not None and k in self.bank for k in keys]

    def featurise(self, prompts: list[list[int]], keys: list[str], until: list[str], max_gen_toks: int,
                  max_rows: int | None = None,
                  on_result: Callable[[int, LoverResult], None] | None = None, stats: bool = True) -> list[LoverResult]:
        """Decode (or take from the bank) and featurise prompts; score with loaded verifiers. Prompts to decode
        share at most `max_rows` rows (default: all at once); `on_result(i, result)` comes as each is done.

        With `stats`, banked branches without token statistics (decoded before they existed; the selectors of
        selectors.py need them) get them: from the feature cache, else computed in the pass that computes their
        features (through every block instead of stopping at the feature layer), or in a pass of their own when the
        features were cached; then kept in the feature cache. Every result's statistics are rounded to float16 as
        the bank stores them, so a question selects the same whether decoded now or read back from a bank."""
        branches = [self.bank.get(k) if self.bank is not None else None for k in keys]
        features = [self.feature_cache.get(k, self.layers, self.template_ids)
                    if self.feature_cache is not None and b is not None else None for k, b in zip(keys, branches)]
        todo = [i for i, b in enumerate(branches) if b is None]
        if todo and self.config.bank.bank_only:
            raise NotInBank(f"{len(todo)} of {len(prompts)} questions are not in the bank {self.bank.path} "
                            f"({len(self.bank)} records) and bank_only=true forbids decoding them; check the bank "
                            "path, task, limit and generation settings, or drop bank_only to decode them.")
        results: list[LoverResult | None] = [None] * len(prompts)

        def finish(i: int, q_branches, q_features, computed: bool) -> None:
            lacking = stats and any(b.stats is None for b in q_branches)
            found = self.feature_cache.get_stats(keys[i]) if lacking and self.feature_cache is not None else None
            lacking = lacking and found is None
            if q_features is None:  # from the bank: no KV cache, one prefill per question
                q_features = features_from_tokens(self.model, prompts[i], q_branches, self.template_ids, self.layers,
                                                  stats=lacking)
                q_features, found = q_features if lacking else (q_features, found)
            elif lacking:  # features cached, statistics not: the whole model over the branches' tokens
                found = stats_from_tokens(self.model, prompts[i], q_branches)
            if self.feature_cache is not None and computed:
                self.feature_cache.put(keys[i], self.layers, self.template_ids, q_features)
            if self.feature_cache is not None and lacking:
                self.feature_cache.put_stats(keys[i], found)
            if found is not None:
                q_branches = [b if b.stats is not None else replace(b, stats=s) for b, s in zip(q_branches, found)]
            q_branches = [b if b.stats is None else replace(b, stats=decode_stats(encode_stats(b.stats)))
                          for b in q_branches]
            results[i] = self._result(prompts[i], q_branches, q_features)
            if on_result is not None:
                on_result(i, results[i])

        if todo:
            pad_id = self.tokenizer.pad_token_id
            pad_id = pad_id if pad_id is not None else self.tokenizer.eos_token_id
            # Each question as soon as its own branches are done: banked (a kill loses only the questions still
            # decoding), featurised from its KV caches, which are then freed.
            for q, q_branches, q_caches in iter_branches(self.model, self.tokenizer, [prompts[i] for i in todo],
                                                         self.config.decoding, max_gen_toks, until, self.eos_ids(),
                                                         pad_id, max_rows, self.config.batching.sync_every,
                                                         self.config.batching.static_cache,
                                                         self.config.batching.compile_step):
                if self.bank is not None:
                    self.bank.add(keys[todo[q]], q_branches, prompt_ids=prompts[todo[q]])
                q_features = assertion_features(self.model, q_branches, q_caches, self.template_ids, self.layers)
                del q_caches  # freed before the next question's branches end, not after
                finish(todo[q], q_branches, q_features, computed=True)
        for i, q_branches in enumerate(branches):  # the banked ones: the decoded ones were finished as they came
            if q_branches is not None:
                finish(i, q_branches, features[i], computed=features[i] is None)
        return results

    def _result(self, prompt: list[int], q_branches, q_features: torch.Tensor) -> LoverResult:
        """One question's result from its branches and (N, 2, L, D) features; loaded verifiers score it."""
        at_layer = q_features[:, :, 0]  # (N, 2, L, D) -> (N, 2, D) at the main layer
        with torch.no_grad():  # scoring only: a loaded verifier's parameters require grad
            probs = {name: torch.stack(v(at_layer), dim=-1).numpy() for name, v in self.verifiers.items()}
        # Stored in the model's precision (results.py): exact, since the features were computed in it.
        more = {layer: q_features[:, :, k].to(self.stored_dtype) for k, layer in enumerate(self.layers) if k}
        return LoverResult(q_branches, at_layer.to(self.stored_dtype), probs, self.layer, prompt, more,
                           scored_by={name: self.verifier_ids[name] for name in probs})

    def run(self, prompts: list[list[int]], until: list[str], max_gen_toks: int, batch_size: int = 1,
            lengths: list[int] | None = None,
            on_done: Callable[[list[int], list[LoverResult]], None] | None = None) -> list[LoverResult]:
        """Results for prompts sharing stop strings and budget, in input order.

        Longest first (by `lengths`, default the token count). Prompts to decode share `batch_size` x N rows
        (`BatchingConfig.max_rows`): with continuous batching, the next question takes the rows of one that ended;
        without, they go in batches of as many questions as the rows hold. Banked and unbanked prompts are handled
        apart, so a decoding batch holds only prompts that need decoding. `on_done(indices, results)` is called as
        results come."""
        keys = self.record_keys(prompts, until, max_gen_toks)
        banked = self.banked(keys)
        if self.bank is not None:
            log.info("lover_hf: %d of %d questions read from the bank %s, %d to decode", sum(banked), len(prompts),
                     self.bank.path, len(prompts) - sum(banked))
        lengths = lengths if lengths is not None else [len(p) for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: -lengths[i])
        batching = self.config.batching
        max_rows = batching.rows(batch_size, self.config.decoding.n_branches)
        to_decode = [i for i in order if not banked[i]]
        # Continuous: every prompt in one call, joining as rows free up; otherwise as many questions as the rows hold.
        per_call = (len(to_decode) or 1) if batching.continuous else max_rows // self.config.decoding.n_branches
        chunks = [[i for i in order if banked[i]]] + [to_decode[start: start + per_call]
                                                      for start in range(0, len(to_decode), per_call)]
        results: list[LoverResult | None] = [None] * len(prompts)
        for chunk in filter(None, chunks):
            def done(k: int, result: LoverResult, chunk=chunk) -> None:
                results[chunk[k]] = result
                if on_done is not None:
                    on_done([chunk[k]], [result])

            self.featurise([prompts[i] for i in chunk], [keys[i] for i in chunk], until, max_gen_toks, max_rows,
                           done, stats=self.token_stats)
        return results

    def finish_task(self, results: list[LoverResult], task: str | None = None) -> None:
        """After a task's questions are decoded: report unparsable branches; fit at test time if configured. One
        fit per task: the inter-group constraint compares answers to the same kind of question, and a run of
        several tasks must score each exactly as a run of that task alone would."""
        unparsed, without = unparsed_counts(results, self.extract)
        if unparsed:
            total = sum(len(r.branches) for r in results)
            log.warning("%s: %d of %d branches (%.0f%%) gave no answer the %r extractor can parse; %d of %d "
                        "questions have none in any branch (every selector scores them wrong)", task or "this run",
                        unparsed, total, 100 * unparsed / total, self.extract, without, len(results))
        if self.config.selection.fit_at_test_time and self.config.decoding.n_branches == 1:
            self.skip_fit(results, task)
        elif self.config.selection.fit_at_test_time:
            self.fit(results, task)

    def skip_fit(self, results: list[LoverResult], task: str | None = None) -> None:
        """With one branch a question there is nothing to choose among and no group to contrast: no fit. Every
        branch gets the neutral score 0.5, so the lover_* rows report that branch's answer (greedy's) instead of
        failing, and the provenance says why."""
        name, why = task or "this run", "no fit: n_branches=1 leaves one branch per question, nothing to choose among"
        self.fits[name] = {"questions": len(results), "extract": self.extract, "skipped": why}
        for result in results:
            result.verifier_probs["lover"] = np.full((len(result.branches), 2), 0.5, dtype=np.float32)
            result.scored_by["lover"] = why
            result.fit_extract = self.extract

    def fit(self, results: list[LoverResult], task: str | None = None):
        """Test-time fit: label-free on these results' own branches; stores the `lover` scores and warns when the
        fit is degenerate. Returns the verifier."""
        verifier = fit_on_results(results, extract=self.extract, config=self.config.fit, device=self.model.device)
        digest, name = tensors_sha256(verifier.state_dict()), task or "this run"
        self.fits[name] = {"questions": len(results), "extract": self.extract, "fit_config": asdict(self.config.fit),
                           "verifier_tensors_sha256": digest}
        for result in results:
            result.scored_by["lover"] = f"test-time fit on {len(results)} questions of {name} tensors_sha256:{digest}"
        warn_if_one_sided(results, task)
        warn_if_constant_answer(results, task, self.extract)
        return verifier

    def provenance(self) -> dict:
        """What made this run's scores, for the results file: plugin version, each task's fit, each checkpoint."""
        used = self.decodings_used or [asdict(self.config.decoding)]
        return {"plugin_version": __version__, "test_time_fits": self.fits, "checkpoints": self.verifier_ids,
                "layer": self.layer, "decoding": used[0] if len(used) == 1 else used, "dtype": str(self.model.dtype)}

    def use_decoding(self, decoding: DecodingConfig) -> None:
        """Decode the next prompts with `decoding` (lm-eval's generation settings, harness/generation.py); every
        decoding a run used is what its provenance records."""
        self.config.decoding = decoding
        if asdict(decoding) not in self.decodings_used:
            self.decodings_used.append(asdict(decoding))

    def select(self, results: list[LoverResult], strategy: str, verifier: str = "lover") -> list[str]:
        """One answer per question by a selection strategy (selection.STRATEGIES; oracles need gold, not here)."""
        extract = get_extractor(self.extract)
        return [select(r, strategy, extract, verifier=verifier) for r in results]
