"""KV-cache plumbing shared by decoding and features: the cache kwarg, per-branch snapshots, a batch of rows of
different lengths (continuous batching), and running new tokens on top of kept caches.

Dimensions: B rows, H kv heads, S sequence length (the batch's common width), E head dim, U new tokens.
"""

from __future__ import annotations

import functools
import inspect
from dataclasses import dataclass, field
from types import SimpleNamespace

import torch
from transformers import DynamicCache
from transformers.cache_utils import DynamicLayer


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


def snapshot(cache, row: int, prompt_length: int, start: int = 0, end: int | None = None,
             n_blocks: int | None = None) -> BranchCache:
    """Copy one batch row's keys/values [start:end) (skipping left padding, dropping right padding)."""
    layers = cache.layers[:n_blocks]
    return BranchCache(prompt_length, [layer.keys[row, :, start:end].clone() for layer in layers],
                       [layer.values[row, :, start:end].clone() for layer in layers])


def _pad_left(t: torch.Tensor, width: int) -> torch.Tensor:
    """(B, ..., S, E) -> (B, ..., width, E) with zeros in front (the columns a row's attention mask hides)."""
    missing = width - t.shape[-2]
    return t if missing == 0 else torch.cat([t.new_zeros((*t.shape[:-2], missing, t.shape[-1])), t], dim=-2)


class ColumnBuffer(DynamicLayer):
    """A `DynamicLayer` whose steps write into spare columns instead of concatenating.

    transformers' layer appends a step's key and value by `torch.cat`, which copies every row's whole cache each step
    of each layer: with N branches of a long few-shot prompt (64 rows of an 800-token prompt) the copies cost more than
    the attention that reads them (lm-eval's `gsm8k_cot_self_consistency`: 19 of 31 s of decoding). Here the cache
    lives in a buffer of `SPARE` more columns than it holds, `keys`/`values` are views of its first columns, and a step
    writes its column in place; the buffer is copied once per `SPARE` steps, or when a caller has replaced `keys`
    (RowBatch's select, extend and trim assign new tensors: the next step adopts them into a new buffer). The values
    the model reads are the same numbers; only how they are stored changes.
    """

    #: columns a buffer holds beyond what it was (re)made for: one copy every SPARE steps instead of every step
    SPARE = 64

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        # empty: transformers' own update starts the layer (4.56 marks that by keys None, 5.x by is_initialized)
        if getattr(self, "keys", None) is None or not getattr(self, "is_initialized", True) or self.keys.numel() == 0:
            return super().update(key_states, value_states, *args, **kwargs)
        held, new = self.keys.shape[-2], key_states.shape[-2]
        if not self._views_buffer(held + new):
            self._buffers = tuple(self._buffer_of(t, held + new + self.SPARE) for t in (self.keys, self.values))
        keys, values = self._buffers
        keys[..., held:held + new, :] = key_states
        values[..., held:held + new, :] = value_states
        self.keys, self.values = keys[..., :held + new, :], values[..., :held + new, :]
        return self.keys, self.values

    def _views_buffer(self, needed: int) -> bool:
        """Whether `keys`/`values` are still the first columns of this layer's buffers, which hold `needed`."""
        buffers = getattr(self, "_buffers", None)
        return buffers is not None and all(
            t.data_ptr() == b.data_ptr() and t.shape[:-2] == b.shape[:-2] and t.stride() == b.stride()
            and b.shape[-2] >= needed for t, b in zip((self.keys, self.values), buffers))

    @staticmethod
    def _buffer_of(held: torch.Tensor, columns: int) -> torch.Tensor:
        """(B, H, columns, E) with `held`'s columns first (the rest is written before it is read)."""
        buffer = held.new_empty((*held.shape[:-2], columns, held.shape[-1]))
        buffer[..., :held.shape[-2], :] = held
        return buffer


def buffered(cache):
    """`cache` with its plain growing layers turned into `ColumnBuffer`s (sliding-window or quantised ones as they
    are); returns it."""
    for layer in cache.layers:
        if type(layer) is DynamicLayer:
            layer.__class__ = ColumnBuffer  # the same state; only `update` differs
    return cache


class RowBatch:
    """The rows being decoded together: a KV cache plus its attention mask, rows left-padded to a common width S.

    Row i's own tokens are the last `lengths[i]` columns of every layer; the mask hides the columns before them and
    the caller passes each row's own position ids, so a row attends to exactly what it would alone. Rows can leave
    (`select`) and join (`extend`, with rows of another length): continuous batching refills finished rows with the
    next question's branches instead of idling until the batch's longest branch ends.
    """

    def __init__(self, cache, mask: torch.Tensor):
        self.cache, self.mask = buffered(cache), mask  # mask: (B, S), 1 on each row's own columns

    @property
    def width(self) -> int:
        return self.mask.shape[1]

    def can_extend(self) -> bool:
        """Rows of another length can join only plain growing layers (not sliding windows or quantised ones)."""
        return all(type(layer) in (DynamicLayer, ColumnBuffer) for layer in self.cache.layers)

    def snapshot(self, row: int, prompt_length: int, length: int | None = None) -> BranchCache:
        """Row `row`'s own columns (the first `length` of them: a row decoded on past its end keeps more), padding
        dropped."""
        pad = self.width - int(self.mask[row].sum())
        return snapshot(self.cache, row, prompt_length, start=pad, end=None if length is None else pad + length)

    def select(self, keep: list[int]) -> None:
        """Keep only rows `keep`, in that order."""
        # On the CPU: with parallelize=True the cache's layers live on several GPUs, and a CPU index serves all.
        index = torch.tensor(keep, dtype=torch.long)
        self.cache.batch_select_indices(index)
        self.mask = self.mask[index.to(self.mask.device)]

    def grow(self) -> torch.Tensor:
        """The mask for one more step of every row (the fed token is each row's own): (B, S + 1)."""
        self.mask = torch.cat([self.mask, self.mask.new_ones((self.mask.shape[0], 1))], dim=1)
        return self.mask

    def extend(self, other: RowBatch) -> None:
        """Append `other`'s rows. Columns that are padding in every row are dropped first (the rows that needed
        them have left), then the narrower side is left-padded to the wider. Only here: a batch nobody joins keeps
        its columns and computes exactly what the batch-by-batch decoder did."""
        self._trim()
        width = max(self.width, other.width)
        for mine, theirs in zip(self.cache.layers, other.cache.layers):
            mine.keys = torch.cat([_pad_left(mine.keys, width), _pad_left(theirs.keys, width)], dim=0)
            mine.values = torch.cat([_pad_left(mine.values, width), _pad_left(theirs.values, width)], dim=0)
        # The (B, S) masks viewed as (B, S, 1), so that _pad_left's (..., S, E) layout pads their columns too.
        self.mask = torch.cat([_pad_left(self.mask[..., None], width)[..., 0],
                               _pad_left(other.mask[..., None], width)[..., 0]], dim=0)  # (B + B', width)

    def _trim(self) -> None:
        common = int((self.mask == 0).all(dim=0).to(torch.long).cumprod(0).sum())  # leading all-padding columns
        if common:
            for layer in self.cache.layers:
                layer.keys, layer.values = layer.keys[..., common:, :], layer.values[..., common:, :]
            self.mask = self.mask[:, common:]


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


def _forward_final(model, **inputs):
    """Every block, the LM head on the last column only (`logits_to_keep=1`), and the decoder's final (normed)
    hidden state of every position kept as `final_hidden` (B, U, D): token statistics of every position need the
    logits everywhere, and (B, U, V) at once would be gigabytes for long branches and large vocabularies, so the
    caller applies the head chunk by chunk. Caught by a hook on the decoder's output: `output_hidden_states` would
    keep every layer's states, (L + 1) x (B, U, D), to use the last."""
    decoder = model.get_decoder() or model.base_model
    captured = []
    handle = decoder.register_forward_hook(lambda module, args, output: captured.append(output[0]))
    try:
        out = model(**inputs, logits_to_keep=1)
    finally:
        handle.remove()
    return SimpleNamespace(logits=out.logits, cache=cache_of(out), final_hidden=captured[-1], hidden_states=None)


def extend_with_tokens(model, cache_rows: list[BranchCache], tokens: list[list[int]], upto_layer: int | None = None,
                       final_hidden: bool = False):
    """Run `tokens[i]` on top of `cache_rows[i]` in one batch.

    Caches are right-padded to a common length and the new tokens right-padded too; the attention
    mask hides both paddings and explicit position ids continue each row's own sequence, so every row
    sees exactly what a single unpadded forward would. Returns (outputs, last index of each row).
    With `upto_layer` < the number of blocks, only hidden states up to that index are computed (no
    later blocks, no logits): features need one middle layer, and the rest of the model is most of
    the cost. The caches then only need (and only get) the first `upto_layer` blocks. With `upto_layer` = the
    number of blocks, every block runs but the logits are only those of the last column. With `final_hidden`
    (`upto_layer` is then ignored), every block runs and the output carries the decoder's final hidden state of every
    position instead of per-layer ones (`_forward_final`).
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
    if final_hidden:
        out = _forward_final(model, **inputs)
    elif upto_layer is not None and upto_layer < model.config.num_hidden_layers:
        out = _forward_until(model, upto_layer, **inputs)
    elif upto_layer is not None:  # the last layer: every block, but no LM head (~1/4 of a 0.5B model's work)
        out = model(**inputs, output_hidden_states=True, logits_to_keep=1)
    else:
        out = model(**inputs, output_hidden_states=True)
    last = torch.tensor([len(t) - 1 for t in tokens], device=device)
    return out, last


