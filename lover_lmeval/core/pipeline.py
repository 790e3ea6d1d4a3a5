"""The LoVer pipeline on plain data: decode -> featurise -> fit/score -> select, for prompts as token ids.

`Pipeline` holds a transformers causal LM, its tokenizer and a `LoverConfig`; the lm-eval adapter
(`harness.model.LoverLM`), `lover train`, `lover compare` and the benchmarks all call it, and so can a user
with no lm-eval installed:

    pipe = Pipeline(model, tokenizer, LoverConfig())
    spec = RunSpec(pipe.config.decoding, until=["Question:"], max_gen_toks=256)
    results = pipe.run([tokenizer.encode(q) for q in questions], spec)
    pipe.fit(results, extract="number")    # label-free test-time fit, scores stored on the results
    answers = pipe.select(results, "lover_sum", extract="number")

Branches come from an engine (decode/engine.py: the HF model by default, a bank in front of it with bank=); the
pipeline never looks behind it. What a run did (each task's fit, the decodings its requests asked for) is kept in
`record`, which `provenance()` reads.

Dimensions: N branches, L feature layers, D hidden size.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from functools import cached_property

import numpy as np
import torch

from .. import __version__
from .select.answers import get_extractor
from .store.bank import DEFAULT_FEATURE_CACHE, BranchBank, FeatureCache, record_key, record_settings
from .store.banked import BankedEngine
from .store.complete import StoreStep, pass_is_full
from .verify.checkpoints import gold_labels_used, label_tag, load_checkpoint, tensors_sha256
from .config import LoverConfig
from .decode.decoding import DecodingConfig
from .decode.engine import Decoded, Engine, HFEngine, RunSpec, eos_ids
from .decode.static import check_static
from .decode.ptrue import FALSE_WORDS, TRUE_WORDS, ptrue_from_tokens, word_tokens
from .loading import cache_dir, model_identity
from .results import STORED_DTYPES, LoverResult
from .verify.probes import PROBES, fit_probes, neutral_probes
from .verify.scoring import (fit_on_results, rank_checks, task_batch, unparsed_counts, warn_if_constant_answer,
                             warn_if_one_sided, warn_if_reversed)
from .select.selection import select

from ..log import log, model_name


@dataclass
class RunRecord:
    """What a run did, for its results file (`Pipeline.provenance`)."""

    fits: dict[str, dict] = field(default_factory=dict)
    """task -> what its test-time fit saw and made."""
    decodings: list[dict] = field(default_factory=list)
    """Every decoding the run's requests asked for (lm-eval's generation kwargs can adapt model_args')."""
    ptrue: dict = field(default_factory=lambda: {"questions": 0, "seconds": 0.0})
    """What the opt-in P(True) pass scored and cost (ptrue=true)."""

    def decoded_with(self, decoding: DecodingConfig) -> None:
        if asdict(decoding) not in self.decodings:
            self.decodings.append(asdict(decoding))


class Pipeline:
    def __init__(self, model, tokenizer, config: LoverConfig | None = None, model_name: str | None = None,
                 engine: Engine | None = None):
        """`engine` decodes (default: `HFEngine` on this model, with the config's batching); with a bank in the
        config, the bank is read first and written as questions complete. `model` computes the features either way."""
        self.model, self.tokenizer = model, tokenizer
        self.config = config or LoverConfig()
        self.layers = self.config.features.layers(model.config.num_hidden_layers)  # [layer, *extra_layers]
        if self.config.batching.static_cache and engine is None:  # a cache static rows cannot hold: said now
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
        self.store = StoreStep(self.bank, self.feature_cache, self.template_ids, self.layers)
        decoder = engine or HFEngine(model, tokenizer, self.config.batching)
        self.engine: Engine = decoder if self.bank is None else BankedEngine(
            self.bank, None if bank.bank_only else decoder, self.record_keys, decoder.name)
        # Features are kept as computed: in a half-precision model's own dtype, otherwise float32 (results.py).
        self.stored_dtype = model.dtype if model.dtype in STORED_DTYPES else torch.float32
        self.record = RunRecord()
        self.verifiers, self.verifier_meta, self.verifier_ids = {}, {}, {}
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

    def eos_ids(self) -> set[int]:
        return eos_ids(self.model, self.tokenizer)

    def record_keys(self, prompts: list[list[int]], spec: RunSpec, dtype: torch.dtype | None = None) -> list[str]:
        """Bank keys: everything that determines a question's branches; `dtype` (default: model_args' bank_dtype, else
        the model's) names the precision whose records to look up."""
        precision = str(dtype or self.config.bank.key_dtype or self.model.dtype).removeprefix("torch.")
        engine = self.config.bank.key_engine or self.engine.name
        settings = record_settings(spec.decoding, spec.until, spec.max_gen_toks, precision, engine)
        return [record_key(self.identity["model"], p, settings) for p in prompts]

    def banked(self, prompts: list[list[int]], spec: RunSpec) -> list[bool]:
        """Whether each prompt's branches are in the bank (a lookup: it changes nothing)."""
        if self.bank is None:
            return [False] * len(prompts)
        return [k in self.bank for k in self.record_keys(prompts, spec)]

    def run(self, prompts: list[list[int]], spec: RunSpec, lengths: list[int] | None = None,
            on_done: Callable[[list[int], list[LoverResult]], None] | None = None) -> list[LoverResult]:
        """Results for prompts decoded as `spec` asks, in input order; `on_done(indices, results)` as each comes.

        Longest first (by `lengths`, default the token count), so a batch's rows end at similar steps. A question
        decoded with its KV caches is banked, featurised and scored as soon as its own branches are done (a kill
        loses only the questions still decoding), its caches then freed; questions without (an engine of tokens only,
        the bank) wait for one pass shared by several questions (store/complete.py: `pass_is_full`)."""
        self.record.decoded_with(spec.decoding)
        keys = self.record_keys(prompts, spec)
        if self.bank is not None:
            banked = sum(k in self.bank for k in keys)
            log.info("%s: %d of %d questions read from the bank %s, %d to decode", model_name(), banked, len(prompts),
                     self.bank.path, len(prompts) - banked)
        lengths = lengths if lengths is not None else [len(p) for p in prompts]
        order = sorted(range(len(prompts)), key=lambda i: -lengths[i])
        results: list[LoverResult | None] = [None] * len(prompts)
        waiting: list[tuple[int, Decoded]] = []  # questions without KV caches, for one shared pass

        def complete() -> None:
            indices = [i for i, _ in waiting]
            for i, result in zip(indices, self._complete(waiting, prompts, keys, spec.stats)):
                results[i] = result
            waiting.clear()  # their KV caches: freed before the next question's branches end, not after
            if on_done is not None and indices:
                on_done(indices, [results[i] for i in indices])

        for decoded in self.engine.decode([prompts[i] for i in order], spec):
            waiting.append((order[decoded.q], decoded))
            del decoded
            if waiting[-1][1].caches is not None or pass_is_full([(prompts[i], d) for i, d in waiting],
                                                                 spec.decoding.n_branches):
                complete()
        complete()
        read = self.store.record
        if read.passes:
            log.info("lover: the model read %d questions' tokens in %d shared passes: %d tokens in %.1f s, %.0f "
                     "tokens/s so far", read.questions, read.passes, read.tokens, read.seconds, read.tokens_per_second)
        return results

    def _complete(self, items: list[tuple[int, Decoded]], prompts: list[list[int]], keys: list[str], stats: bool
                  ) -> list[LoverResult]:
        """Decoded questions (index into `prompts`, its branches) to results: the store step (store/complete.py)
        reads what the bank and the feature cache hold, fills in features, margins and statistics (one pass shared by
        the questions that need one) and writes the bank and the cache; loaded verifiers then score each."""
        done = self.store.complete(self.model, [(prompts[i], keys[i], decoded) for i, decoded in items], stats)
        results = []
        for (i, _), (branches, features) in zip(items, done):
            results.append(self._result(prompts[i], branches, features))
            if self.config.ptrue.enabled:
                self._score_ptrue(prompts[i], results[-1])
        return results

    @cached_property
    def _ptrue_tokens(self) -> tuple[list[int], list[int], list[int]]:
        """The P(True) pass's query ids and its true and false words' first tokens, tokenized once a run."""
        query = self.tokenizer.encode(self.config.ptrue.query, add_special_tokens=False)
        return query, word_tokens(self.tokenizer, TRUE_WORDS), word_tokens(self.tokenizer, FALSE_WORDS)

    def _score_ptrue(self, prompt: list[int], result: LoverResult) -> None:
        """P(True) per branch (decode/ptrue.py), one more pass, kept as verifier_probs["ptrue"] = (P, 1 - P) so that
        its score (p+ + 1 - p-) / 2 is P; its time per question is logged and kept in the record."""
        began = time.perf_counter()
        p = ptrue_from_tokens(self.model, prompt, result.branches, *self._ptrue_tokens)
        result.verifier_probs["ptrue"] = np.stack([p, 1 - p], axis=-1)
        result.scored_by["ptrue"] = f"P(True) pass, query {self.config.ptrue.query!r}"
        seconds = time.perf_counter() - began
        self.record.ptrue["questions"] += 1
        self.record.ptrue["seconds"] += seconds
        log.info("%s: P(True) pass over %d branches: %.2f s", model_name(), len(result.branches), seconds)

    def _result(self, prompt: list[int], q_branches, q_features: torch.Tensor) -> LoverResult:
        """One question's result from its branches and (N, 2, L, D) features; loaded verifiers score it."""
        at_layer = q_features[:, :, 0]  # (N, 2, L, D) -> (N, 2, D) at the main layer
        with torch.no_grad():  # scoring only: a loaded verifier's parameters require grad
            probs = {name: torch.stack(v(at_layer), dim=-1).numpy() for name, v in self.verifiers.items()}
        # Stored in the model's precision (results.py): exact, since the features were computed in it.
        more = {layer: q_features[:, :, k].to(self.stored_dtype) for k, layer in enumerate(self.layers) if k}
        return LoverResult(q_branches, at_layer.to(self.stored_dtype), probs, self.layer, prompt, more,
                           scored_by={name: self.verifier_ids[name] for name in probs})

    @property
    def fitted_scorers(self) -> tuple[str, ...]:
        """The scorers fitted on each task's own branches once it is decoded (finish_task): LoVer with verifier=fit,
        and the plain probes whenever LoVer scores at all (fitted, or from a checkpoint)."""
        selection = self.config.selection
        return (("lover",) if selection.fit_at_test_time else ()) + (PROBES if selection.verifier is not None else ())

    def finish_task(self, results: list[LoverResult], task: str | None = None, extract: str | None = None) -> None:
        """After a task's questions are decoded: report unparsable branches; fit at test time if configured. One
        fit per task, grouping answers with the task's own extractor (`extract`, default model_args'): the
        inter-group constraint compares answers to the same kind of question, and a run of several tasks must score
        each exactly as a run of that task alone would."""
        extract = extract or self.config.selection.extract
        unparsed, without = unparsed_counts(results, extract)
        if unparsed:
            total = sum(len(r.branches) for r in results)
            log.warning("%s: %d of %d branches (%.0f%%) gave no answer the %r extractor can parse; %d of %d "
                        "questions have none in any branch (every selector scores them wrong)", task or "this run",
                        unparsed, total, 100 * unparsed / total, extract, without, len(results))
        if self.config.selection.fit_at_test_time and self.config.decoding.n_branches == 1:
            self.skip_fit(results, task, extract)
        elif self.config.selection.fit_at_test_time:
            self.fit(results, task, extract)
        elif self.config.selection.verifier is not None:  # LoVer from a checkpoint: the plain probes have none
            self.fit_probes_only(results, task, extract)

    def fit_probes_only(self, results: list[LoverResult], task: str | None = None, extract: str | None = None) -> None:
        """The plain probes alone (verify/probes.py), fitted at test time beside a loaded LoVer checkpoint."""
        extract, name = extract or self.config.selection.extract, task or "this run"
        record = self.record.fits[name] = {"questions": len(results), "extract": extract}
        if self.config.decoding.n_branches == 1:
            neutral_probes(results, "no fit: n_branches=1 leaves one branch per question, nothing to choose among")
            return
        self._probes_and_checks(record, results, task, extract, self.fitted_scorers)

    def _probes_and_checks(self, record: dict, results: list[LoverResult], task: str | None, extract: str,
                           scorers, batch: tuple | None = None) -> None:
        """Fit the plain probes; then, label-free, whether each of `scorers` ranks its branches against both the vote
        and CoT-decoding's confidence (the correlations into `record`, a warning for each fit that does). `batch`:
        the task's `task_batch` on the model's device, if LoVer's fit made it already."""
        batch = batch or task_batch(results, extract, self.model.device)
        record["probes"] = fit_probes(results, extract, self.config.fit, self.model.device, batch)
        checks = rank_checks(results, extract, scorers, batch[3])
        record["rank_checks"] = {**checks, "reversed": warn_if_reversed(checks, task, len(results))}

    def skip_fit(self, results: list[LoverResult], task: str | None = None, extract: str | None = None) -> None:
        """With one branch a question there is nothing to choose among and no group to contrast: no fit. Every
        branch gets the neutral score 0.5, so the lover_* rows report that branch's answer (greedy's) instead of
        failing, and the provenance says why."""
        extract = extract or self.config.selection.extract
        name, why = task or "this run", "no fit: n_branches=1 leaves one branch per question, nothing to choose among"
        self.record.fits[name] = {"questions": len(results), "extract": extract, "skipped": why}
        for result in results:
            result.verifier_probs["lover"] = np.full((len(result.branches), 2), 0.5, dtype=np.float32)
            result.scored_by["lover"] = why
            result.fit_extract = extract
        neutral_probes(results, why)

    def fit(self, results: list[LoverResult], task: str | None = None, extract: str | None = None):
        """Test-time fit: label-free on these results' own branches, their answers grouped by `extract` (default
        model_args'); stores the `lover` scores and warns when the fit is degenerate. Returns the verifier."""
        extract = extract or self.config.selection.extract
        batch = task_batch(results, extract, self.model.device)  # stacked once for LoVer, the probes and the checks
        fitted = fit_on_results(results, extract=extract, config=self.config.fit, device=self.model.device,
                                batch=batch)
        verifier = fitted.verifier
        digest, name = tensors_sha256(verifier.state_dict()), task or "this run"
        self.record.fits[name] = {"questions": len(results), "extract": extract,
                                  "fit_config": asdict(self.config.fit), "final_losses": fitted.final_losses,
                                  "verifier_tensors_sha256": digest}
        for result in results:
            result.scored_by["lover"] = f"test-time fit on {len(results)} questions of {name} tensors_sha256:{digest}"
        warn_if_one_sided(results, task)
        warn_if_constant_answer(results, task, extract)
        self._probes_and_checks(self.record.fits[name], results, task, extract, self.fitted_scorers, batch)
        return verifier

    def provenance(self) -> dict:
        """What made this run's scores, for the results file: plugin version, each task's fit, each checkpoint."""
        used = self.record.decodings or [asdict(self.config.decoding)]
        ptrue = self.record.ptrue
        return {"plugin_version": __version__, "test_time_fits": self.record.fits, "checkpoints": self.verifier_ids,
                "layer": self.layer, "decoding": used[0] if len(used) == 1 else used, "dtype": str(self.model.dtype),
                "engine": self.engine.name, "pass": self.store.record.as_dict(),
                **({"ptrue": {**ptrue, "seconds_per_question": ptrue["seconds"] / max(ptrue["questions"], 1),
                              "query": self.config.ptrue.query}} if self.config.ptrue.enabled else {})}

    def select(self, results: list[LoverResult], strategy: str, extract: str | None = None,
               verifier: str = "lover") -> list[str]:
        """One answer per question by a selection strategy (selection.STRATEGIES; oracles need gold, not here)."""
        extractor = get_extractor(extract or self.config.selection.extract)
        return [select(r, strategy, extractor, verifier=verifier) for r in results]

