"""kv.RowBatch: rows of different lengths in one KV cache, left-padded, as continuous batching joins and drops them."""

from __future__ import annotations

import torch
from transformers import DynamicCache

from lover_lmeval.core.decode.kv import RowBatch


def _batch(own: list[list[float]], width: int) -> RowBatch:
    """One layer, one head, head dim 1: row i's own keys are `own[i]`, left-padded with zeros to `width`."""
    keys = torch.zeros((len(own), 1, width, 1))  # (B, H, S, E)
    mask = torch.zeros((len(own), width), dtype=torch.long)
    for i, values in enumerate(own):
        keys[i, 0, width - len(values):, 0] = torch.tensor(values)
        mask[i, width - len(values):] = 1
    cache = DynamicCache()
    cache.update(keys, keys.clone(), 0)
    return RowBatch(cache, mask)


def test_rows_join_and_leave_with_their_own_columns():
    """Rows a = [1, 2] and b = [3, 4, 5] (width 3); b leaves, so column 0 is padding in every row. A prompt row
    c = [6, 7, 8, 9] joins: the all-padding column is dropped first (width 2), then a is padded to c's width 4:

        keys  a: [0, 0, 1, 2]   mask a: [0, 0, 1, 1]
              c: [6, 7, 8, 9]           [1, 1, 1, 1]

    One step later (`grow`) each row has one more own column; snapshots are each row's own tokens, nothing else."""
    batch = _batch([[1, 2], [3, 4, 5]], width=3)
    batch.select([0])
    batch.extend(_batch([[6, 7, 8, 9]], width=4))
    assert batch.cache.layers[0].keys[:, 0, :, 0].tolist() == [[0, 0, 1, 2], [6, 7, 8, 9]]
    assert batch.mask.tolist() == [[0, 0, 1, 1], [1, 1, 1, 1]]
    assert batch.grow().tolist() == [[0, 0, 1, 1, 1], [1, 1, 1, 1, 1]]
    batch.cache.update(torch.tensor([10.0, 11.0]).reshape(2, 1, 1, 1), torch.zeros((2, 1, 1, 1)), 0)
    a, c = batch.snapshot(0, prompt_length=2), batch.snapshot(1, prompt_length=4)
    assert a.keys[0][0, :, 0].tolist() == [1, 2, 10] and c.keys[0][0, :, 0].tolist() == [6, 7, 8, 9, 11]
    assert (a.prompt_length, c.length) == (2, 5)


def test_a_narrower_joining_row_is_padded_and_nothing_is_trimmed_while_every_column_is_used():
    """a = [1, 2, 3] stays; d = [4] joins: d is padded to width 3, a keeps all its columns."""
    batch = _batch([[1, 2, 3]], width=3)
    batch.extend(_batch([[4]], width=1))
    assert batch.cache.layers[0].keys[:, 0, :, 0].tolist() == [[1, 2, 3], [0, 0, 4]]
    assert batch.mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert batch.can_extend()


def test_column_buffer_steps_hold_what_concatenation_holds_through_leaves_joins_and_refills():
    """The same steps on a RowBatch (its layer a `ColumnBuffer`) and on a plain `DynamicLayer` that concatenates:
    after every step the keys and values are equal, element for element, while rows leave (`select`), a row joins
    (`extend`, which trims and pads) and the spare columns run out (the 20-column join holds 20 + 1 + `SPARE`
    columns, full after 65 more steps: the buffer is remade).
    Steps between those write in place: the keys stay views of one buffer. Every step's keys are held, so no buffer is
    freed and its address handed to the next (the allocator reuses freed blocks: counting addresses of freed buffers
    once found 3 buffers where 4 were made)."""
    from transformers.cache_utils import DynamicLayer

    from lover_lmeval.core.decode.kv import ColumnBuffer

    torch.manual_seed(0)
    batch = _batch([[1, 2], [3, 4, 5], [6]], width=3)
    plain = DynamicLayer()
    plain.update(batch.cache.layers[0].keys.clone(), batch.cache.layers[0].values.clone())
    layer = batch.cache.layers[0]
    assert type(layer) is ColumnBuffer and batch.can_extend()
    held, buffers = [], set()
    for step in range(80):
        if step == 5:  # a row leaves: both keep rows 0 and 2
            batch.select([0, 2])
            plain.batch_select_indices(torch.tensor([0, 2]))
        if step == 9:  # a row of another width joins; RowBatch trims and pads, the reference takes its result
            batch.extend(_batch([[7.0] * 20], width=20))
            plain.keys, plain.values = layer.keys.clone(), layer.values.clone()
        rows = layer.keys.shape[0]
        new_keys, new_values = torch.randn((rows, 1, 1, 1)), torch.randn((rows, 1, 1, 1))
        keys, values = batch.cache.update(new_keys, new_values, 0)
        expected_keys, expected_values = plain.update(new_keys, new_values)
        assert torch.equal(keys, expected_keys) and torch.equal(values, expected_values)
        held.append(keys)
        buffers.add(keys.untyped_storage().data_ptr())
    assert len(buffers) == 4  # made at the first step, after the leave and the join, and once the spare ran out
