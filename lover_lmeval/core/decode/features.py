"""Contrastive assertion features: phi(x+/-) for x+/- = prompt + branch + " This is a true/false answer."

Only the template tokens are run, on top of each branch's KV cache from decoding (decoding.py), so the
question and solution are never encoded twice. The token sequence is prompt ids + the branch's kept ids
+ the template's ids (the template is tokenized on its own, without special tokens); a full forward pass
over that same sequence gives the same hidden states (tested to 1e-4 in fp32).

Banked branches have no KV cache: `features_from_tokens` runs their tokens once on top of the prompt's prefill, and
can compute their per-token statistics (token_stats) in the same pass; `stats_from_tokens` computes those alone.

Dimensions: N branches, D hidden size, B rows of one forward pass, U tokens of a row, V vocabulary.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .branch import Branch, top1_top2_margin
from .kv import BranchCache, cache_of, extend_with_tokens, input_device, snapshot
from .token_stats import stats_dict, step_stats

TRUE_TEMPLATE = " This is a true answer."
FALSE_TEMPLATE = " This is a false answer."


@dataclass
class FeatureConfig:
    """Which hidden state is phi(x), and the two assertion templates."""

    layer: int | None = None
    """Index into hidden_states (1 = first block, L = last block, negative from the end); None = the middle."""
    extra_layers: tuple[int, ...] = ()
    """More layers whose features ride along on each result (layer sweeps), for the price of the template tokens."""
    true_template: str = TRUE_TEMPLATE
    """Appended to question + solution for x+."""
    false_template: str = FALSE_TEMPLATE
    """Appended for x-."""

    def __post_init__(self) -> None:
        self.extra_layers = tuple(self.extra_layers)
        for name in ("true_template", "false_template"):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"{name}={getattr(self, name)!r} is empty: phi(x) would be read from the solution's "
                                 f"last token, not the assertion; pass a sentence (default {TRUE_TEMPLATE!r} / "
                                 f"{FALSE_TEMPLATE!r}).")

    @property
    def templates(self) -> tuple[str, str]:
        return self.true_template, self.false_template

    def layers(self, n_layers: int) -> list[int]:
        """[layer, *extra_layers] resolved for a model with `n_layers` blocks."""
        return [check_layer(self.layer, n_layers), *(check_layer(x, n_layers, "extra_layers") for x in self.extra_layers)]


def check_layer(layer: int | None, n_layers: int, name: str = "layer") -> int:
    """Resolve `layer` (None = middle) to an index into hidden_states (1 = first block, n_layers = last).

    Index 0, the token embeddings, is refused: phi(x) is read at the template's last token, whose embedding is the
    same vector for every branch, so a verifier could learn nothing from it (and banked branches never run it)."""
    if layer is None:
        return max(1, n_layers // 2)
    allowed = f"use 1..{n_layers} (1 = first block, {n_layers} = last) or a negative index down to {-n_layers}"
    if not -(n_layers + 1) <= layer <= n_layers:
        raise ValueError(f"{name}={layer} is out of range for this model: {allowed}.")
    if layer % (n_layers + 1) == 0:
        raise ValueError(f"{name}={layer} is the token embeddings: every x+ (and every x-) ends in the same template "
                         f"token, so phi(x) there is one vector for every branch and carries nothing; {allowed}.")
    return layer % (n_layers + 1)


def _trim(cache: BranchCache, keep: int) -> BranchCache:
    return BranchCache(cache.prompt_length, [k[:, :keep] for k in cache.keys], [v[:, :keep] for v in cache.values])


@torch.inference_mode()
def assertion_features(model, branches: list[Branch], caches: list[BranchCache], template_ids: list[list[int]],
                       layer: int | list[int], rows_per_pass: int = 16) -> torch.Tensor:
    """Features of one question's branches: (N, T, D) with T = len(template_ids) (x+, x-), float32, CPU.

    With a list of layers (a layer sweep costs one pass), the result is (N, T, L, D) in that order."""
    layers = [layer] if isinstance(layer, int) else list(layer)
    jobs = []  # one row per (branch, template)
    for branch, cache in zip(branches, caches, strict=True):
        in_cache = cache.length - cache.prompt_length
        kept = len(branch.token_ids)
        # The last sampled token of a branch is never fed during decoding; feed what the cache lacks.
        base = _trim(cache, cache.prompt_length + min(kept, in_cache))
        missing = branch.token_ids[in_cache:]
        for ids in template_ids:
            jobs.append((base, missing + ids))
    hidden = []
    for start in range(0, len(jobs), rows_per_pass):
        chunk = jobs[start: start + rows_per_pass]
        out, last = extend_with_tokens(model, [c for c, _ in chunk], [t for _, t in chunk], upto_layer=max(layers))
        states = torch.stack([out.hidden_states[i] for i in layers], dim=2)  # (B, U, L, D)
        hidden.append(states[torch.arange(len(chunk)), last].float().cpu())  # (B, L, D)
    features = torch.cat(hidden).reshape(len(branches), len(template_ids), len(layers), -1)  # (N, T, L, D)
    return features[:, :, 0] if isinstance(layer, int) else features


def length_buckets(lengths: list[int], slack: float = 1.25) -> list[list[int]]:
    """Indices of `lengths`, shortest first, cut into runs that one padded pass can share.

    A pass pads every row to its longest, so its cost is rows x longest; a run grows while that stays within
    `slack` x the tokens it holds. Banked branches vary a lot in length (a few hit the budget, most stop early:
    one padded pass over a bank's branches computed 1.7-4.9x their tokens), so this bounds the waste.
    """
    order = sorted(range(len(lengths)), key=lambda i: lengths[i])
    runs, run, held = [], [], 0
    for i in order:
        if run and (len(run) + 1) * lengths[i] > slack * (held + lengths[i]):
            runs.append(run)
            run, held = [], 0
        run.append(i)
        held += lengths[i]
    return runs + [run] if run else runs


def _head(model, hidden: torch.Tensor) -> torch.Tensor:
    """(..., D) final hidden states -> (..., V) logits, as the model's own forward computes them from the decoder's
    output: the output embeddings, then Gemma-2/3's soft cap. `_check_head` refuses a model that does more."""
    logits = model.get_output_embeddings()(hidden)
    cap = getattr(model.config, "final_logit_softcapping", None)
    return torch.tanh(logits / cap) * cap if cap else logits


def _check_head(model, out) -> None:
    """The model's own logits of the pass's last column (`logits_to_keep=1`) against `_head` of the same states: a
    model whose forward scales or caps its logits in a way `_head` does not know would otherwise get wrong
    statistics silently. Costs one (B, V) product a pass."""
    theirs = out.logits[:, -1].float()
    mine = _head(model, out.final_hidden[:, -1]).float()
    if not torch.allclose(mine, theirs, rtol=1e-3, atol=1e-3 * float(theirs.abs().max())):
        raise ValueError(f"{type(model).__name__}'s logits are not its output embeddings applied to the decoder's "
                         f"final hidden state (max |difference| {float((mine - theirs).abs().max()):.3g}), so token "
                         "statistics cannot be computed from banked branches for it; extend features._head with what "
                         "its forward does after the decoder, or decode the questions again (decoding computes them).")


def _positions_per_chunk(vocab: int) -> int:
    """Positions whose logits one chunk holds: ~2^24 floats (64 MB in float32, times a few temporaries)."""
    return max(1, (1 << 24) // vocab)


def _stats_of_row(model, final_hidden: torch.Tensor, ids: list[int], first_logits: torch.Tensor,
                  margins: bool) -> dict:
    """Token statistics of one branch: token 0 from the prompt's last logits, token j > 0 from row position j - 1
    (the position fed token j - 1). `final_hidden`: (U, D), U >= len(ids) - 1. With `margins`, also "margin"."""

    def columns(logits: torch.Tensor, chosen: list[int]) -> torch.Tensor:  # (T, V) -> (T, 4 or 5)
        found = step_stats(logits, torch.tensor(chosen, device=logits.device))
        if margins:
            found = torch.cat([found, top1_top2_margin(logits.float().softmax(-1))[:, None]], dim=-1)
        return found.to(first_logits.device)

    parts = [columns(first_logits[None], ids[:1])]
    chunk = _positions_per_chunk(first_logits.shape[-1])
    for start in range(0, len(ids) - 1, chunk):
        end = min(start + chunk, len(ids) - 1)
        parts.append(columns(_head(model, final_hidden[start:end]), ids[start + 1: end + 1]))  # <= chunk x V
    rows = torch.cat(parts).tolist()
    found = stats_dict([row[:4] for row in rows])
    return {**found, "margin": [row[4] for row in rows]} if margins else found


#: Rows of one shared pass over several questions' banked branches (`question_passes`): wide enough to keep an
#: accelerator busy with short branches, bounded so that a pass's padded states stay a few hundred MB.
MAX_PASS_ROWS = 64

Question = tuple[list[int], list[Branch]]
"""A question's prompt ids and its branches."""


def _row_cache(out, row: int, base: BranchCache, longest: int, kept: int, n_blocks: int) -> BranchCache:
    """Row `row`'s cache after `extend_with_tokens`: its prompt's columns [0, P) and its own tokens [S, S + kept),
    where S = `longest` is the widest prompt of the pass (the columns between are padding), joined."""
    layers = cache_of(out).layers[:n_blocks]
    return BranchCache(base.prompt_length,
                       [torch.cat([layer.keys[row, :, :base.length], layer.keys[row, :, longest:longest + kept]], 1)
                        for layer in layers],
                       [torch.cat([layer.values[row, :, :base.length],
                                   layer.values[row, :, longest:longest + kept]], 1) for layer in layers])


@torch.inference_mode()
def question_passes(model, questions: list[Question], upto: int | None, stats: bool, margins: bool = False,
                    max_rows: int = MAX_PASS_ROWS) -> list[tuple[list[BranchCache | None], list[dict | None]]]:
    """Per question (prompt ids, branches): each prompt prefilled once, then passes over the branches' tokens on top
    of their own prompt's cache, shared by branches of similar length whatever their question (`length_buckets`, at
    most `max_rows` rows a pass). Per question, per branch: the KV cache of its first `upto` blocks (None without
    `upto`), and with `stats` its token statistics (else None). One question alone gets the passes it got before
    questions were batched: its branches' buckets, on its one prompt.

    Features alone stop at the feature layer: no later block, no LM head (the cheap path). Statistics need the final
    logits of every position, so then ONE pass runs every block, keeps the decoder's final hidden states, and the
    feature caches are its first `upto` blocks; the LM head runs on those states chunk by chunk afterwards. Two
    passes (to the feature layer, then a full one for the statistics) would run blocks 1..upto twice."""
    bases, firsts = [], []
    for prompt_ids, _ in questions:
        prefill = model(input_ids=torch.tensor([prompt_ids], device=input_device(model)), use_cache=True,
                        logits_to_keep=1)
        bases.append(snapshot(cache_of(prefill), 0, len(prompt_ids)))
        firsts.append(prefill.logits[0, -1])  # (V,): the distribution of every branch's token 0
        del prefill
    # A branch without tokens (EOS first) is the prompt alone: it needs no pass of its own, and has no statistics.
    caches = [[None if upto is None else BranchCache(base.prompt_length, base.keys[:upto], base.values[:upto])]
              * len(branches) for base, (_, branches) in zip(bases, questions)]
    found = [[({**stats_dict([]), "margin": []} if margins else stats_dict([])) if stats else None for _ in branches]
             for _, branches in questions]
    rows = [(q, i) for q, (_, branches) in enumerate(questions) for i, b in enumerate(branches) if b.token_ids]
    for bucket in length_buckets([len(questions[q][1][i].token_ids) for q, i in rows]):
        for start in range(0, len(bucket), max_rows):
            run = [rows[j] for j in bucket[start:start + max_rows]]
            tokens = [questions[q][1][i].token_ids for q, i in run]
            out, _ = extend_with_tokens(model, [bases[q] for q, _ in run], tokens, upto_layer=upto,
                                        final_hidden=stats)
            if stats:
                _check_head(model, out)
            longest = max(bases[q].length for q, _ in run)
            for k, (q, i) in enumerate(run):
                if stats:
                    found[q][i] = _stats_of_row(model, out.final_hidden[k], tokens[k], firsts[q], margins)
                if upto is not None:
                    caches[q][i] = _row_cache(out, k, bases[q], longest, len(tokens[k]), upto)
            del out  # the next pass must not hold this one's states and cache too
    return list(zip(caches, found))


def stats_from_tokens(model, prompt_ids: list[int], branches: list[Branch],
                      margins: bool = False) -> list[dict[str, list[float]]]:
    """Per branch, its token statistics ({name in STAT_NAMES: one float per kept token}, as `Branch.stats`), from
    the full model run over its tokens (no features): what decoding computed, rebuilt for banked branches (equal to
    float rounding in float32, tests/test_features.py). With `margins`, each dict also holds "margin", p(top1) -
    p(top2) per token as decoding banked it: how a rescoring checks that the model, precision and tokens are the
    record's."""
    return question_passes(model, [(prompt_ids, branches)], None, stats=True, margins=margins)[0][1]


@torch.inference_mode()
def features_from_tokens(model, prompt_ids: list[int], branches: list[Branch], template_ids: list[list[int]],
                         layer: int | list[int], stats: bool = False, margins: bool = False):
    """Features of banked branches (no KV cache at hand): one prefill of the prompt, passes over the branches'
    tokens on top of it (branches of similar length share one, `length_buckets`), then the templates. Same
    values as `assertion_features`.

    With `stats`, returns (features, per-branch token statistics) from the same passes, run through every block
    (`question_passes`; with `margins` each dict also holds "margin", as `stats_from_tokens`); without, the features
    alone from passes that stop at the deepest feature layer."""
    return questions_features(model, [(prompt_ids, branches)], template_ids, layer, stats, margins)[0]


def questions_features(model, questions: list[Question], template_ids: list[list[int]], layer: int | list[int],
                       stats: bool = False, margins: bool = False, max_rows: int = MAX_PASS_ROWS) -> list:
    """`features_from_tokens` of several questions in shared passes (`question_passes`; the templates read on
    every question's branch caches `max_rows` rows at a time): one item per question, as that function returns."""
    upto = max([layer] if isinstance(layer, int) else layer)
    passes = question_passes(model, questions, upto, stats, margins, max_rows)
    branches = [b for _, question_branches in questions for b in question_branches]
    # one question alone: its template rows a pass as before (16), so its features are what they were
    rows = 16 if len(questions) == 1 else max_rows
    features = assertion_features(model, branches, [c for caches, _ in passes for c in caches], template_ids,
                                  layer, rows_per_pass=rows)  # (sum N, T, [L,] D)
    split = features.split([len(b) for _, b in questions])
    return [(f, found) if stats else f for f, (_, found) in zip(split, passes)]
