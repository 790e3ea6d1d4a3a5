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

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from .. import __version__
from .select.answers import get_extractor
from .store.bank import DEFAULT_FEATURE_CACHE, BranchBank, FeatureCache, record_key, record_settings
from .store.banked import BankedEngine
from .store.complete import StoreStep, pass_is_full
from .store.ptrue_step import PTrueStep
from .verify.checkpoints import load_verifier
from .config import LoverConfig
from .decode.decoding import DecodingConfig
from .decode.engine import Decoded, Engine, HFEngine, RunSpec, eos_ids
from .decode.static import check_static
from .loading import cache_dir, model_identity
from .results import STORED_DTYPES, LoverResult
from .verify.probes import PROBES
from .verify.scoring import unparsed_counts
from .verify.test_time import fit_task
from .select.selection import select

from ..log import log, model_name


@dataclass
class RunRecord:
    """What a run did, for its results file (`Pipeline.provenance`)."""

    fits: dict[str, dict] = field(default_factory=dict)
    """task -> what its test-time fit saw and made."""
    decodings: list[dict] = field(default_factory=list)
    """Every decoding the run's requests asked for (lm-eval's generation kwargs can adapt model_args')."""
    sampling_rows: dict[str, list[str]] = field(default_factory=dict)
    """task -> its sampling rows' filter names (avg@N, pass@k, maj@k: references, harness/sampling_rows.py)."""

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
            self.feature_cache = FeatureCache(where)  # the store keys it by the copy that reads (read_by)
        self.store = StoreStep(self.bank, self.feature_cache, self.template_ids, self.layers)
        decoder = engine or HFEngine(model, tokenizer, self.config.batching)
        self.engine: Engine = decoder if self.bank is None else BankedEngine(
            self.bank, None if bank.bank_only else decoder, self.record_keys, decoder.name)
        # Features are kept as computed: in a half-precision model's own dtype, otherwise float32 (results.py).
        self.stored_dtype = model.dtype if model.dtype in STORED_DTYPES else torch.float32
        self.record = RunRecord()
        self.verifiers = {name: load_verifier(path, self.identity, "verifier" if name == "lover" else
                                              "supervised_verifier")
                          for name, path in self.config.selection.checkpoints().items()}
        """Verifier name -> the one loaded from its checkpoint (model_args' verifier=, supervised_verifier=)."""
        self.ptrue = PTrueStep(tokenizer, self.config.ptrue) if self.config.ptrue.enabled else None

    @property
    def layer(self) -> int:
        return self.layers[0]

    def read_with(self, model) -> None:
        """Read the branches (the pass's features, margins and statistics; the fits' device) with `model` from now
        on: a copy of the same checkpoint in the same dtype, for a pipeline whose engine decodes with weights of its
        own (lover_vllm's phases: the meta skeleton while vLLM decodes, the loaded copy after it is freed)."""
        decoder = self.engine.inner if isinstance(self.engine, BankedEngine) else self.engine
        if isinstance(decoder, HFEngine):
            raise ValueError("read_with: this pipeline's HF engine decodes with the model it reads with; build the "
                             "pipeline with the engine that decodes (engine=) to read with another copy")
        if model.dtype != self.model.dtype:
            raise ValueError(f"read_with: a {model.dtype} copy cannot replace the {self.model.dtype} one the "
                             "pipeline's features and bank keys were set up for")
        self.model = model

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
        results = [self._result(prompts[i], branches, features) for (i, _), (branches, features) in zip(items, done)]
        for (i, _), result in zip(items, results) if self.ptrue is not None else ():  # the opt-in P(True) pass
            result.verifier_probs["ptrue"] = self.ptrue.score(self.model, prompts[i], result.branches)
            result.scored_by["ptrue"] = self.ptrue.label
        return results

    def _result(self, prompt: list[int], q_branches, q_features: torch.Tensor) -> LoverResult:
        """One question's result from its branches and (N, 2, L, D) features; loaded verifiers score it."""
        at_layer = q_features[:, :, 0]  # (N, 2, L, D) -> (N, 2, D) at the main layer
        with torch.no_grad():  # scoring only: a loaded verifier's parameters require grad
            probs = {name: torch.stack(v.module(at_layer), dim=-1).numpy() for name, v in self.verifiers.items()}
        # Stored in the model's precision (results.py): exact, since the features were computed in it.
        more = {layer: q_features[:, :, k].to(self.stored_dtype) for k, layer in enumerate(self.layers) if k}
        return LoverResult(q_branches, at_layer.to(self.stored_dtype), probs, self.layer, prompt, more,
                           scored_by={name: self.verifiers[name].source for name in probs})

    @property
    def fitted_scorers(self) -> tuple[str, ...]:
        """The scorers fitted on each task's own branches once it is decoded (finish_task): LoVer with verifier=fit,
        and the plain probes whenever LoVer scores at all (fitted, or from a checkpoint)."""
        selection = self.config.selection
        return (("lover",) if selection.fit_at_test_time else ()) + (PROBES if selection.verifier is not None else ())

    def finish_task(self, results: list[LoverResult], task: str | None = None, extract: str | None = None) -> None:
        """After a task's questions are decoded: report unparsable branches; fit at test time what scores the
        run's rows (verify/test_time.py: LoVer with verifier=fit, the plain probes whenever LoVer scores at all). One
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
        selection = self.config.selection
        if selection.fit_at_test_time or selection.verifier is not None:  # a loaded LoVer: the probes beside it
            self._fit(results, task, extract, lover=selection.fit_at_test_time)

    def fit(self, results: list[LoverResult], task: str | None = None, extract: str | None = None):
        """LoVer's test-time fit now, whatever model_args say, and the probes beside it: label-free on these results'
        own branches, their answers grouped by `extract` (default model_args'); the scores stored on the results.
        Returns the verifier (None with one branch a question: nothing to fit)."""
        return self._fit(results, task, extract or self.config.selection.extract, lover=True)

    def _fit(self, results: list[LoverResult], task: str | None, extract: str, lover: bool):
        done = fit_task(results, extract, self.config.fit, self.model.device, task, lover, self.fitted_scorers)
        self.record.fits[task or "this run"] = done.record
        return done.verifier

    def provenance(self) -> dict:
        """What made this run's scores, for the results file: plugin version, each task's fit, each checkpoint."""
        used = self.record.decodings or [asdict(self.config.decoding)]
        checkpoints = {name: verifier.source for name, verifier in self.verifiers.items()}
        return {"plugin_version": __version__, "test_time_fits": self.record.fits, "checkpoints": checkpoints,
                "sampling_rows": self.record.sampling_rows,
                "layer": self.layer, "decoding": used[0] if len(used) == 1 else used, "dtype": str(self.model.dtype),
                "engine": self.engine.name, "pass": self.store.record.as_dict(),
                **({"ptrue": self.ptrue.record.as_dict(self.ptrue.query)} if self.ptrue is not None else {})}

    def select(self, results: list[LoverResult], strategy: str, extract: str | None = None,
               verifier: str = "lover") -> list[str]:
        """One answer per question by a selection strategy (selection.STRATEGIES; oracles need gold, not here)."""
        extractor = get_extractor(extract or self.config.selection.extract)
        return [select(r, strategy, extractor, verifier=verifier) for r in results]

