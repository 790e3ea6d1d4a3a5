"""The stages `bench_scaling.py` times and their synthetic inputs. Each stage is a builder: given one size (and the
inputs shared by every stage at that size) it builds what the stage reads, untimed, and returns the call to time.

Three axes, each size grown alone (the others fixed at the values below):

- tokens per branch: cutting a branch (`branch.make_branch`, the embedded SmolLM2's tokenizer), a bank record's write
  and read (`bank.BranchBank.add` / `.get`, SQLite and gzip stores), the per-token statistics from a branch's logits
  (`features._stats_of_row`, the rescoring path), the features pass (`features.features_from_tokens`, a tiny random
  llama);
- branches per question N: every selection strategy (`selection.select` over `STRATEGIES`), LoVer's fit, CCS, PCA;
- questions Q: the same fits and strategies, and `lover compare`'s intervals (`stats.bootstrap_interval`,
  `stats.paired_bootstrap`).

Dimensions: Q questions, N branches, T tokens of a branch, D hidden size, V vocabulary.
"""

from __future__ import annotations

import itertools
import json
import tempfile
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import torch

from benchmarks.bench_common import UNTIL

#: The 1.5B model's width (Qwen2.5-Coder-1.5B): the questions and branches axes' features.
DIM = 1536
#: Branches a question: the questions axis and the tokens axis' bank records and features pass.
BRANCHES = 10
#: Tokens of each synthetic branch the strategies read (GSM8K branches are ~100-300 tokens).
BRANCH_TOKENS = 256
#: Questions of the branches axis: the strategies' (QUESTIONS_N) and the fits' (QUESTIONS_N_FIT).
QUESTIONS_N, QUESTIONS_N_FIT = 10, 32
#: Answer values of the synthetic branches (None: a branch that states no answer), with their weights.
ANSWERS = ("18", "20", "24", "12", "7", "36", None)
ANSWER_WEIGHTS = (0.35, 0.2, 0.12, 0.1, 0.08, 0.05, 0.1)
#: A line of real text with digits, CJK and an emoji: the `text` branches' ids, tiled to the length.
TEXT = ("Janet's ducks lay 16 eggs per day. She eats three for breakfast every morning and bakes muffins for her "
        "friends every day with four. She sells the remainder at the farmers' market daily for $2 per fresh duck egg. "
        "16 - 3 - 4 = 9 eggs, and 9 * 2 = 18 dollars. The answer is 18.\n\n世界 🎉 naïve café\n\n")


# ---------------------------------------------------------------------------------------------------- synthetic data

def synthetic_branch(rng: np.random.Generator, tokens: int, answer: str | None, vocab: int = 49152):
    """A `Branch` of `tokens` tokens: random 3-letter words (one a token, offsets exact), ending in "The answer is
    ANSWER." when `answer` is given (the number extractor's marker), random ids, margins and the 4 token statistics
    (token_stats.STAT_NAMES) as plain float lists, as a decoded or banked branch holds them."""
    from lover_lmeval.core.decode.branch import Branch

    tail = ["The", " answer", " is", f" {answer}", "."] if answer is not None else []
    body = max(0, tokens - len(tail))
    letters = rng.integers(97, 123, size=(body, 3), dtype=np.uint8)
    pieces = [" " + row.tobytes().decode() for row in letters] + tail
    ends = list(itertools.accumulate(len(p) for p in pieces))
    offsets = list(zip([0] + ends[:-1], ends))
    n = len(pieces)
    stats = {"logprob": (-rng.exponential(0.3, n)).tolist(), "topk_logprob": (-2 - rng.exponential(1.0, n)).tolist(),
             "entropy": rng.exponential(0.5, n).tolist(), "kl_uniform": (8 + rng.normal(0, 1, n)).tolist()}
    return Branch("".join(pieces), rng.integers(0, vocab, n).tolist(), rng.random(n).tolist(), offsets, "stop",
                  stats)


def branch_pool(size: int, tokens: int = BRANCH_TOKENS, seed: int = 0) -> list:
    """`size` distinct synthetic branches; questions draw theirs from it (sharing Branch objects between questions
    changes no strategy's work, and keeps 10,000 questions' branches in memory)."""
    rng = np.random.default_rng(seed)
    answers = rng.choice(len(ANSWERS), size=size, p=ANSWER_WEIGHTS)
    return [synthetic_branch(rng, tokens, ANSWERS[a]) for a in answers]


def synthetic_results(questions: int, branches: int, pool: list, seed: int = 0) -> tuple[list, list[str]]:
    """(`questions` LoverResults of `branches` distinct pool branches each, with random p+/p- for every scorer the
    strategies read (lover, ccs, pca, ptrue); a gold answer per question for the oracle)."""
    from lover_lmeval.core.results import LoverResult

    rng = np.random.default_rng(seed)
    results, golds = [], []
    for _ in range(questions):
        chosen = rng.choice(len(pool), size=branches, replace=False)
        probs = {name: rng.random((branches, 2)) for name in ("lover", "ccs", "pca", "ptrue")}
        results.append(LoverResult([pool[i] for i in chosen], verifier_probs=probs))
        golds.append(ANSWERS[int(rng.integers(0, len(ANSWERS) - 1))])
    return results, golds


def fit_problem(questions: int, branches: int, dim: int = DIM, seed: int = 0):
    """(features (Q, N, 2, D), mask (Q, N), groups (Q, N), answer ids (Q, N)): benchmarks/performance/bench_fit.py's
    real-shaped problem (LLM-like offsets of norm 50 per set, answers over up to 5 groups, fewer under 5 branches);
    answer ids = group ids."""
    g = torch.Generator().manual_seed(seed)
    offsets = 50 * torch.nn.functional.normalize(torch.randn(2, dim, generator=g), dim=1)  # (2, D)
    features = torch.randn(questions, branches, 2, dim, generator=g).add_(offsets)  # (Q, N, 2, D)
    mask = torch.ones(questions, branches, dtype=torch.bool)
    groups = torch.randint(0, min(5, branches), (questions, branches), generator=g)
    return features, mask, groups, groups.clone()


# ------------------------------------------------------------------------------------------------------- tokens axis

def cut_ids(tokenizer, kind: str, n: int) -> list[int]:
    """`random`: ids drawn uniformly from the whole vocabulary (special tokens and byte pieces included); `text`: the
    ids of TEXT tiled to `n`."""
    if kind == "random":
        return np.random.default_rng(n).integers(0, len(tokenizer), n).tolist()
    text = tokenizer.encode(TEXT, add_special_tokens=False)
    return (text * (n // len(text) + 1))[:n]


class _CountingBackend:
    """A tokenizers.Tokenizer whose `decode` adds the ids it decodes to `counts["ids"]`."""

    def __init__(self, backend, counts: dict) -> None:
        self._backend, self._counts = backend, counts

    def __getattr__(self, name: str):
        return getattr(self._backend, name)

    def decode(self, ids, *args, **kwargs):
        self._counts["ids"] += len(ids)
        return self._backend.decode(ids, *args, **kwargs)


class DecodeCounter:
    """`tokenizer`, counting the ids its `decode` and its backend's decode (`counts["ids"]`): how many ids a cut
    decodes says its order whatever the CPU's load (the prefix rule decodes n (n + 1) / 2 for n tokens)."""

    def __init__(self, tokenizer) -> None:
        self._tokenizer, self.counts = tokenizer, {"ids": 0}
        self.backend_tokenizer = _CountingBackend(tokenizer.backend_tokenizer, self.counts)

    def __getattr__(self, name: str):
        return getattr(self._tokenizer, name)

    def __len__(self) -> int:
        return len(self._tokenizer)

    def decode(self, ids, *args, **kwargs):
        self.counts["ids"] += len(ids)
        return self._tokenizer.decode(ids, *args, **kwargs)


def decoded_ids_per_token(tokenizer, ids: list[int]) -> float:
    """Ids `make_branch` decodes, over the branch's tokens (one counted cut)."""
    from lover_lmeval.core.decode.branch import make_branch

    counter = DecodeCounter(tokenizer)
    make_branch(counter, ids, [0.5] * len(ids), UNTIL, "length")
    return counter.counts["ids"] / max(1, len(ids))


def cut_stage(tokenizer_of, kind: str):
    """`tokenizer_of()`: the tokenizer (loaded at the first stage that needs it). The call carries, as `info`, the
    ids one cut decodes a token (`decoded_ids_per_token`, counted outside the timing)."""

    def build(n: int, shared: dict):
        from lover_lmeval.core.decode.branch import make_branch

        tokenizer = tokenizer_of()
        ids, margins = cut_ids(tokenizer, kind, n), [0.5] * n

        def call():
            return make_branch(tokenizer, ids, margins, UNTIL, "length")

        call.info = {"decoded_ids_per_token": round(decoded_ids_per_token(tokenizer, ids), 3)}
        return call
    return build


def bank_stage(store: str, operation: str, folder: Path):
    """A record of BRANCHES branches of n tokens each, with their statistics: `write` adds it (a new key each call, as
    each decoded question is), `read` gets it back (SQLite: from the open bank; gzip: opening the bank, which reads
    the file, a one-record file here, then getting it). The call carries, as `info`, the record's JSON bytes a token
    (`record_bytes_per_token`, measured outside the timing)."""
    suffix = ".sqlite" if store == "sqlite" else ".jsonl.gz"
    counter = itertools.count()

    def build(n: int, shared: dict):
        from lover_lmeval.core.store.bank import BranchBank, branch_record

        if "bank_branches" not in shared:
            rng = np.random.default_rng(n)
            shared["bank_branches"] = [synthetic_branch(rng, n, ANSWERS[k % 6]) for k in range(BRANCHES)]
            record = {"key": "q", "prompt_ids": [1, 2, 3],
                      "branches": [branch_record(b) for b in shared["bank_branches"]]}
            shared["bank_bytes_per_token"] = len(json.dumps(record, separators=(",", ":"))) / (BRANCHES * n)
        branches = shared["bank_branches"]
        path = Path(tempfile.mkdtemp(dir=folder)) / f"bank{suffix}"
        bank = BranchBank(path)
        if operation == "write":
            def call():
                bank.add(f"q{next(counter)}", branches, prompt_ids=[1, 2, 3])
        else:
            bank.add("q", branches, prompt_ids=[1, 2, 3])

            def call():
                return (bank if store == "sqlite" else BranchBank(path)).get("q")
        call.info = {"record_bytes_per_token": round(shared["bank_bytes_per_token"], 1)}
        return call
    return build


class _LogitRows(torch.nn.Module):
    """A stand-in LM head: the first rows of a fixed (rows, V) logit table, whatever the hidden states hold."""

    def __init__(self, table: torch.Tensor) -> None:
        super().__init__()
        self.table = table

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.table[: hidden.shape[0]]


def stats_stage(tokenizer_of):
    """`features._stats_of_row`, the statistics of one n-token branch from its logits (what rescoring a banked branch
    runs after the model's pass), with a stand-in head that returns random logits of SmolLM2's vocabulary (V =
    49,152) chunk by chunk: the statistics' own work (softmax, top-k, the 4 reductions, the lists), not the model's
    D x V product (linear in n too)."""
    made = {}

    def build(n: int, shared: dict):
        from lover_lmeval.core.decode.features import _positions_per_chunk, _stats_of_row

        vocab = len(tokenizer_of())
        if not made:  # once, at the stage's first size
            table = 3 * torch.randn(_positions_per_chunk(vocab), vocab, generator=torch.Generator().manual_seed(0))
            head = _LogitRows(table)
            made["model"] = SimpleNamespace(config=SimpleNamespace(final_logit_softcapping=None),
                                            get_output_embeddings=lambda: head)
            made["first"] = table[0]
        ids = np.random.default_rng(n).integers(0, vocab, n).tolist()
        final_hidden = torch.zeros(max(0, n - 1), 1)  # only its length is read: the head ignores its values
        return lambda: _stats_of_row(made["model"], final_hidden, ids, made["first"], margins=False)
    return build


def tiny_llama(vocab: int, max_positions: int):
    """tests/conftest.py's tiny_model (4 blocks, hidden 64, 4 heads, 2 KV heads, random init), positions enough."""
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=vocab, hidden_size=64, intermediate_size=128, num_hidden_layers=4,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=max_positions)
    return LlamaForCausalLM(config).eval()


FEATURE_BRANCHES = 4  # branches of one question in the features pass (4 x 4k tokens: one padded pass)


def features_stage(tokenizer_of, max_tokens: int):
    """`features.features_from_tokens` of one question: a 32-token prompt's prefill, FEATURE_BRANCHES branches of n
    random tokens in one padded pass to the middle block (2 of 4), then the two templates on their caches."""
    made = {}

    def build(n: int, shared: dict):
        from lover_lmeval.core.decode.branch import Branch
        from lover_lmeval.core.decode.features import FALSE_TEMPLATE, TRUE_TEMPLATE, features_from_tokens

        tokenizer = tokenizer_of()
        if not made:  # once, at the stage's first size
            made["model"] = tiny_llama(len(tokenizer), max_tokens + 64)
            made["templates"] = [tokenizer.encode(t, add_special_tokens=False) for t in (TRUE_TEMPLATE, FALSE_TEMPLATE)]
        model, templates = made["model"], made["templates"]
        rng = np.random.default_rng(n)
        branches = [Branch("", rng.integers(0, len(tokenizer), n).tolist(), [0.5] * n, [(0, 0)] * n, "length")
                    for _ in range(FEATURE_BRANCHES)]
        prompt = rng.integers(0, len(tokenizer), 32).tolist()
        return lambda: features_from_tokens(model, prompt, branches, templates, 2)
    return build


# ----------------------------------------------------------------------------------- branches and questions axes

def _results(shared: dict, questions: int, branches: int):
    if "results" not in shared:
        shared["results"] = synthetic_results(questions, branches, shared["pool"])
    return shared["results"]


def prefix_slope(stamps: list[tuple[int, float]]) -> float | None:
    """Log-log least-squares slope of a call's cumulative seconds against the questions done ((count, seconds)
    stamps): how its cost grows with the questions within one call, at one moment's load."""
    stamps = [(k, t) for k, t in stamps if t > 0]
    if len(stamps) < 2:
        return None
    x, y = np.log(np.array(stamps, dtype=float)).T
    return float(np.polyfit(x, y, 1)[0])


def selector_stage(strategy: str, axis: str):
    """Strategy `strategy` over every question: `selection.select` (each branch's stated answer, then the strategy),
    as `lover compare` and the `lover_select` filter run it. On the questions axis the call carries, as `info`, its
    own `prefix_slope` (stamps at every tenth of the questions; its last call's)."""

    def build(size: int, shared: dict):
        from lover_lmeval.core.select.answers import get_extractor
        from lover_lmeval.core.select.selection import select

        questions, branches = (QUESTIONS_N, size) if axis == "branches" else (size, BRANCHES)
        results, golds = _results(shared, questions, branches)
        extract = get_extractor("number")
        if axis == "branches":
            return lambda: [select(r, strategy, extract, gold=g) for r, g in zip(results, golds)]
        marks = {max(1, round(questions * tenth / 10)) for tenth in range(1, 11)}

        def call():
            began, stamps, picks = time.perf_counter(), [], []
            for k, (r, g) in enumerate(zip(results, golds), 1):
                picks.append(select(r, strategy, extract, gold=g))
                if k in marks:
                    stamps.append((k, time.perf_counter() - began))
            slope = prefix_slope(stamps)
            call.info["prefix_slope"] = None if slope is None else round(slope, 3)
            return picks

        call.info = {}
        return call
    return build


def _problem(shared: dict, questions: int, branches: int):
    if "problem" not in shared:
        shared["problem"] = fit_problem(questions, branches)
    return shared["problem"]


def fit_stage(name: str, axis: str):
    """`lover`: verifier.fit with VerifierConfig() (the test-time fit's default); `ccs`: verifier.fit with
    probes.ccs_config (10 tries x 1000 full-batch epochs of a linear probe); `pca`: probes.fit_pca. The fit itself,
    as fit_cache.FITS runs it on a miss (never served from the cache here)."""

    def build(size: int, shared: dict):
        from lover_lmeval.core.verify.probes import ccs_config, fit_pca
        from lover_lmeval.core.verify.verifier import VerifierConfig, fit

        questions, branches = (QUESTIONS_N_FIT, size) if axis == "branches" else (size, BRANCHES)
        features, mask, groups, ids = _problem(shared, questions, branches)
        config = VerifierConfig()
        if name == "pca":
            return lambda: fit_pca(features, mask, config)
        if name == "ccs":
            config = ccs_config(config)
        return lambda: fit(features, mask, groups, config, answer_ids=ids)
    return build


def compare_n_boot() -> int:
    """`lover compare`'s bootstrap resamples per interval (apps/settings.py CompareSettings.n_boot)."""
    from lover_lmeval.apps.settings import CompareSettings

    return CompareSettings.__dataclass_fields__["n_boot"].default


def interval_stage(kind: str):
    """One of `lover compare`'s intervals on Q questions' 0/1 outcomes, at its n_boot: `bootstrap_interval` (one per
    leaderboard row) or `paired_bootstrap` (LoVer(sum) against majority and cot_sum)."""
    n_boot = compare_n_boot()

    def build(q: int, shared: dict):
        from lover_lmeval.core.stats import bootstrap_interval, paired_bootstrap

        rng = np.random.default_rng(q)
        a, b = (rng.random(q) < 0.6).astype(float), (rng.random(q) < 0.55).astype(float)
        if kind == "row":
            return lambda: bootstrap_interval(a, n_boot, np.random.default_rng(0))
        return lambda: paired_bootstrap(a, b, n_boot, np.random.default_rng(0))
    return build
