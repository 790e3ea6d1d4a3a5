"""N-branch decoding: CoT-decoding (top-N first tokens, then greedy), sampling, or beam search.

Each question's prompt is prefilled once; its KV cache is then repeated for the N branches, which
continue in one batch. A branch stops on its own (stop string, EOS or the token budget) and leaves the
batch at once; its slice of the KV cache is kept so that the assertion features (features.py) can be
computed on top of it without re-encoding question and solution.

Dimensions: Q questions, N branches per question, R = Q*N rows, P padded prompt length, V vocabulary,
L layers, H kv heads, S sequence length, E head dim.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from transformers import DynamicCache, StoppingCriteriaList, StopStringCriteria

MODES = ("cot", "sample", "beam")


@dataclass
class DecodingConfig:
    n_branches: int = 10
    """N, solutions per question. With `cot`, branch k starts with the k-th most likely first token."""
    mode: str = "cot"
    """`cot` (CoT-decoding: top-N first tokens, then greedy), `sample` (temperature / top-p), `beam`."""
    temperature: float = 0.7
    """Sampling temperature (`sample` only)."""
    top_p: float = 0.95
    """Nucleus mass kept when sampling (`sample` only)."""
    seed: int = 1234
    """Seed of the sampling generator (`sample` only); the other modes are deterministic."""

    def __post_init__(self):
        if self.mode not in MODES:
            raise ValueError(f"decoding={self.mode!r} is not supported; use one of {', '.join(MODES)}.")
        if int(self.n_branches) < 1:
            raise ValueError(f"n_branches={self.n_branches} must be >= 1 (e.g. n_branches=10).")
        self.n_branches = int(self.n_branches)
        if self.mode == "sample" and not self.temperature > 0:  # the other modes never read it
            raise ValueError(f"temperature={self.temperature:g} must be > 0 for decoding=sample (e.g. 0.7).")
        if self.mode == "sample" and not 0 < self.top_p <= 1:
            raise ValueError(f"top_p={self.top_p:g} must be in (0, 1] for decoding=sample (e.g. 0.95).")


@dataclass
class Branch:
    """One decoded solution."""

    text: str
    """Generated text, cut at the first stop string (as lm-eval's HFLM does)."""
    token_ids: list[int]
    """Generated tokens kept in `text` (no EOS, nothing after a stop string)."""
    margins: list[float]
    """p(top1) - p(top2) of the model's next-token distribution at each kept token."""
    offsets: list[tuple[int, int]]
    """Character span [start, end) of each kept token in `text` (clipped to the text)."""
    finish_reason: str
    """`stop` (a stop string), `eos`, or `length` (token budget spent)."""


@dataclass
class BranchCache:
    """KV cache of prompt + the branch's tokens fed so far, left padding removed."""

    prompt_length: int
    """Tokens of the prompt at the start of the cache; the rest are generated tokens."""
    keys: list[torch.Tensor] = field(default_factory=list)  # per layer (H, S, E)
    values: list[torch.Tensor] = field(default_factory=list)

    @property
    def length(self) -> int:
        return self.keys[0].shape[1]


def input_device(model) -> torch.device:
    """Where input ids go: the device of the token embeddings. With `parallelize=True` (one model split over several
    GPUs by `device_map`) `model.device` is merely the first parameter's device; the embeddings' is the one that
    must receive the inputs."""
    embeddings = model.get_input_embeddings()
    return embeddings.weight.device if embeddings is not None else model.device


@functools.cache
def _cache_argument(model_class: type) -> str:
    """Looked up once per model class: `with_cache` runs at every decoding step."""
    return "cache" if "cache" in inspect.signature(model_class.forward).parameters else "past_key_values"


def with_cache(model, cache) -> dict:
    """The forward kwarg carrying a KV cache: transformers 5.x renamed `past_key_values` to `cache` (the old name
    warns and is removed in 5.40); older releases know only `past_key_values`."""
    return {_cache_argument(type(model)): cache}


def cache_of(output):
    """The KV cache an output carries, under the name of either transformers generation (see `with_cache`)."""
    cache = getattr(output, "cache", None)
    return cache if cache is not None else output.past_key_values


def top1_top2_margin(probs: torch.Tensor) -> torch.Tensor:
    """(..., V) probabilities -> (...,) p(top1) - p(top2)."""
    top2 = probs.topk(2, dim=-1).values
    return top2[..., 0] - top2[..., 1]


def _nucleus_sample(probs: torch.Tensor, top_p: float, n: int, generator) -> torch.Tensor:
    """(B, V) probabilities -> (B, n) tokens sampled from the top-p nucleus."""
    sorted_probs, order = probs.sort(dim=-1, descending=True)
    outside = sorted_probs.cumsum(-1) - sorted_probs > top_p  # always keeps the top token
    sorted_probs = sorted_probs.masked_fill(outside, 0.0)
    picks = torch.multinomial(sorted_probs, n, replacement=True, generator=generator)
    return order.gather(-1, picks)


def snapshot(cache, row: int, prompt_length: int, start: int = 0, end: int | None = None,
             n_blocks: int | None = None) -> BranchCache:
    """Copy one batch row's keys/values [start:end) (skipping left padding, dropping right padding)."""
    layers = cache.layers[:n_blocks]
    return BranchCache(prompt_length, [layer.keys[row, :, start:end].clone() for layer in layers],
                       [layer.values[row, :, start:end].clone() for layer in layers])


def _finish_reason(tokenizer, ids: list[int], stop: list[str], eos_ids: set[int], budget: int) -> str | None:
    """Why the branch is done, or None. Called every step, so it only decodes a short tail window:
    a stop string that appears now must end in the newest token (it was absent one step ago)."""
    if ids[-1] in eos_ids:
        return "eos"
    window = max((len(s) for s in stop), default=0) + 8
    tail = tokenizer.decode(ids[-window:], skip_special_tokens=True)
    if any(s and s in tail for s in stop):
        return "stop"
    return "length" if len(ids) >= budget else None


def make_branch(tokenizer, ids: list[int], margins: list[float], stop: list[str], reason: str) -> Branch:
    """Cut the text at the first stop string and keep the tokens (with offsets) that lie in it."""
    body = ids[:-1] if reason == "eos" else ids
    text = tokenizer.decode(body, skip_special_tokens=True)
    cut = min((i for i in (text.find(s) for s in stop if s) if i >= 0), default=len(text))
    text = text[:cut]
    # Offsets from decoding growing prefixes: robust to multi-token characters and merges.
    ends = [len(tokenizer.decode(body[: k + 1], skip_special_tokens=True)) for k in range(len(body))]
    starts = [0] + ends[:-1]
    kept = sum(1 for s in starts if s < len(text))
    offsets = [(min(s, len(text)), min(e, len(text))) for s, e in zip(starts[:kept], ends[:kept])]
    return Branch(text, body[:kept], margins[:kept], offsets, reason)


@torch.inference_mode()
def decode_branches(model, tokenizer, prompts: list[list[int]], config: DecodingConfig, max_new_tokens: int,
                    stop: list[str], eos_ids: set[int], pad_id: int,
                    on_question: Callable[[int, list[Branch]], None] | None = None,
                    ) -> tuple[list[list[Branch]], list[list[BranchCache]]]:
    """Decode N branches for each of Q prompts (lists of token ids). Returns branches and their caches.

    `on_question(q, branches)` is called as soon as all N branches of prompt q are done (the bank writes it then,
    so a kill loses only the questions still decoding, not the whole batch)."""
    if config.mode == "beam":
        return _decode_beam(model, tokenizer, prompts, config, max_new_tokens, stop, eos_ids, pad_id, on_question)
    device = input_device(model)
    n, q_count = config.n_branches, len(prompts)
    lengths = torch.tensor([len(p) for p in prompts], device=device)
    width = int(lengths.max())
    input_ids = torch.full((q_count, width), pad_id, dtype=torch.long, device=device)  # (Q, P) left-padded
    mask = torch.zeros((q_count, width), dtype=torch.long, device=device)
    for q, prompt in enumerate(prompts):
        input_ids[q, width - len(prompt):] = torch.tensor(prompt, device=device)
        mask[q, width - len(prompt):] = 1
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    # Only the last position's logits are needed: the LM head over every prompt token would cost P times more.
    out = model(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True, logits_to_keep=1)
    cache = cache_of(out)
    probs = out.logits[:, -1].float().softmax(-1)  # (Q, V)
    generator = torch.Generator(device=device).manual_seed(config.seed)
    if config.mode == "cot":
        if n > probs.shape[-1]:
            raise ValueError(f"n_branches={n} exceeds the vocabulary size {probs.shape[-1]}.")
        first = probs.topk(n, dim=-1).indices  # (Q, N)
    else:
        first = _nucleus_sample((probs.log() / config.temperature).softmax(-1), config.top_p, n, generator)
    first_margin = top1_top2_margin(probs)  # (Q,)

    cache.batch_repeat_interleave(n)  # rows r = q * N + k
    mask = mask.repeat_interleave(n, dim=0)  # (R, P)
    pads = (width - lengths).repeat_interleave(n).tolist()
    row_lengths = lengths.repeat_interleave(n)  # (R,) true prompt lengths
    tokens = first.reshape(-1, 1)  # (R, 1)
    ids = [[t] for t in first.reshape(-1).tolist()]
    margins = [[m] for m in first_margin.repeat_interleave(n).tolist()]
    active = list(range(q_count * n))  # original row of each row still in the batch
    branches: list[list[Branch | None]] = [[None] * n for _ in range(q_count)]
    caches: list[list[BranchCache | None]] = [[None] * n for _ in range(q_count)]
    unfinished = [n] * q_count

    while active:
        keep = []
        for i, row in enumerate(active):
            reason = _finish_reason(tokenizer, ids[row], stop, eos_ids, max_new_tokens)
            if reason is None:
                keep.append(i)
                continue
            q, k = divmod(row, n)
            branches[q][k] = make_branch(tokenizer, ids[row], margins[row], stop, reason)
            caches[q][k] = snapshot(cache, i, len(prompts[q]), start=pads[row])
            unfinished[q] -= 1
            if unfinished[q] == 0 and on_question is not None:
                on_question(q, branches[q])
        if len(keep) < len(active):
            # On the CPU: with parallelize=True the cache's layers live on several GPUs, and a CPU index serves all.
            index = torch.tensor(keep, dtype=torch.long)
            cache.batch_select_indices(index)
            index = index.to(device)
            mask, tokens = mask[index], tokens[index]
            active = [active[i] for i in keep]
        if not active:
            break
        rows = torch.tensor(active, device=device)
        mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)  # (A, P + t)
        position = (row_lengths[rows] + len(ids[active[0]]) - 1).unsqueeze(1)  # (A, 1)
        out = model(input_ids=tokens, attention_mask=mask, position_ids=position, use_cache=True,
                    **with_cache(model, cache))
        probs = out.logits[:, -1].float().softmax(-1)  # (A, V)
        if config.mode == "cot":
            tokens = probs.argmax(-1, keepdim=True)  # (A, 1)
        else:
            tempered = (probs.log() / config.temperature).softmax(-1)
            tokens = _nucleus_sample(tempered, config.top_p, 1, generator)
        for row, token, margin in zip(active, tokens[:, 0].tolist(), top1_top2_margin(probs).tolist()):
            ids[row].append(token)
            margins[row].append(margin)
    return branches, caches


class _EnoughLayers(Exception):
    """Raised by a forward hook once the last hidden state we need has been computed."""


def _forward_until(model, upto_layer: int, **inputs):
    """Run only blocks 0..upto_layer-1 of the decoder (no later blocks, no LM head).

    Returns an object with `hidden_states[i]` for i <= upto_layer (0 = embeddings; i = output of block
    i-1, as HF's own hidden_states below the final norm) and the cache, updated up to that block.
    """
    decoder = model.get_decoder() or model.base_model  # transformers < 5 returns None for some models
    captured = {}

    def keep(index):
        def hook(module, args, output):
            captured[index] = output[0] if isinstance(output, tuple) else output
            if index == upto_layer:
                raise _EnoughLayers

        return hook

    modules = [decoder.embed_tokens] + list(decoder.layers[:upto_layer])
    handles = [m.register_forward_hook(keep(i)) for i, m in enumerate(modules)]
    try:
        decoder(**inputs)
    except _EnoughLayers:
        pass
    finally:
        for handle in handles:
            handle.remove()
    return SimpleNamespace(hidden_states=[captured[i] for i in range(upto_layer + 1)],
                           cache=inputs.get("cache", inputs.get("past_key_values")), logits=None)


def extend_with_tokens(model, cache_rows: list[BranchCache], tokens: list[list[int]], upto_layer: int | None = None):
    """Run `tokens[i]` on top of `cache_rows[i]` in one batch.

    Caches are right-padded to a common length and the new tokens right-padded too; the attention
    mask hides both paddings and explicit position ids continue each row's own sequence, so every row
    sees exactly what a single unpadded forward would. Returns (outputs, last index of each row).
    With `upto_layer` < the number of blocks, only hidden states up to that index are computed (no
    later blocks, no logits): features need one middle layer, and the rest of the model is most of
    the cost. The caches then only need (and only get) the first `upto_layer` blocks.
    """
    device = input_device(model)
    rows, longest = len(cache_rows), max(c.length for c in cache_rows)
    new_width = max(len(t) for t in tokens)
    cache = DynamicCache(config=model.config)
    for layer in range(len(cache_rows[0].keys)):
        keys = cache_rows[0].keys[layer].new_zeros((rows, *cache_rows[0].keys[layer].shape[:1], longest,
                                                     cache_rows[0].keys[layer].shape[-1]))  # (B, H, S, E)
        values = torch.zeros_like(keys)
        for i, c in enumerate(cache_rows):
            keys[i, :, : c.length] = c.keys[layer]
            values[i, :, : c.length] = c.values[layer]
        cache.update(keys, values, layer)
    mask = torch.zeros((rows, longest + new_width), dtype=torch.long, device=device)  # (B, S + U)
    input_ids = torch.zeros((rows, new_width), dtype=torch.long, device=device)  # (B, U)
    positions = torch.zeros((rows, new_width), dtype=torch.long, device=device)
    for i, (c, t) in enumerate(zip(cache_rows, tokens)):
        mask[i, : c.length] = 1
        mask[i, longest: longest + len(t)] = 1
        input_ids[i, : len(t)] = torch.tensor(t, device=device)
        positions[i] = c.length + torch.arange(new_width, device=device)
    inputs = dict(input_ids=input_ids, attention_mask=mask, position_ids=positions, use_cache=True,
                  **with_cache(model, cache))
    if upto_layer is not None and upto_layer < model.config.num_hidden_layers:
        out = _forward_until(model, upto_layer, **inputs)
    else:
        out = model(**inputs, output_hidden_states=True)
    last = torch.tensor([len(t) - 1 for t in tokens], device=device)
    return out, last


def _strip_padding(seq: list[int], eos_ids: set[int], pad_id: int) -> list[int]:
    """`generate` pads finished beams: keep up to and including the first EOS, drop trailing pads."""
    for i, token in enumerate(seq):
        if token in eos_ids:
            return seq[: i + 1]
    while len(seq) > 1 and seq[-1] == pad_id:
        seq = seq[:-1]
    return seq


def _decode_beam(model, tokenizer, prompts, config, max_new_tokens, stop, eos_ids, pad_id, on_question=None):
    """Beam search via `generate` (N beams, N returned), then margins and caches in one extra pass.

    Beam search reorders its cache internally, so each beam's cache is rebuilt by running its tokens
    on top of the prompt's prefill (the question is still encoded once per prompt, not per beam).
    """
    device, n = input_device(model), config.n_branches
    stop_strings = [s for s in stop if s]
    branches, caches = [], []
    for prompt in prompts:
        input_ids = torch.tensor([prompt], device=device)  # (1, P)
        criteria = StoppingCriteriaList([StopStringCriteria(tokenizer, stop_strings)]) if stop_strings else None
        generated = model.generate(input_ids, attention_mask=torch.ones_like(input_ids), num_beams=n,
                                   num_return_sequences=n, do_sample=False, max_new_tokens=max_new_tokens,
                                   stopping_criteria=criteria, pad_token_id=pad_id)[:, len(prompt):]  # (N, T)
        prefill = model(input_ids=input_ids, use_cache=True)
        base = snapshot(cache_of(prefill), 0, len(prompt))
        first_probs = prefill.logits[0, -1].float().softmax(-1)  # (V,)
        row_ids = [_strip_padding(seq, eos_ids, pad_id) for seq in generated.tolist()]
        out, _ = extend_with_tokens(model, [base] * n, row_ids)
        step_margins = top1_top2_margin(out.logits.float().softmax(-1))  # (N, T): margin of the NEXT token
        q_branches, q_caches = [], []
        for k, ids in enumerate(row_ids):
            margins = [float(top1_top2_margin(first_probs))] + step_margins[k, : len(ids) - 1].tolist()
            reason = _finish_reason(tokenizer, ids, stop, eos_ids, budget=len(ids))
            q_branches.append(make_branch(tokenizer, ids, margins, stop, reason))
            q_caches.append(snapshot(cache_of(out), k, len(prompt), end=base.length + len(ids)))
        branches.append(q_branches)
        caches.append(q_caches)
        if on_question is not None:
            on_question(len(branches) - 1, q_branches)
    return branches, caches
