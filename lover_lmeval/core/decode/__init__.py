"""Decode: N branches per question and what they carry.

- engine.py       what the pipeline calls: `Engine.decode(prompts, RunSpec)` hands each question's branches over whole;
                  `HFEngine` decodes with the transformers model (a bank in front: store/banked.py; vLLM: lover_vllm),
                  the one way into HF decoding; `row_store` picks its rows; `decode_all` collects a decode;
- scheduler.py    the one decoding loop: questions join free rows (continuous batching), steps run in blocks, new
                  tokens reach the host once a block, each question handed over as its branches end;
- decoding.py     the decoding and batching configs;
- growing.py      the default row store: a growing batch (any mode);
- static.py       the other row store: fixed rows of a preallocated cache (no step changes a shape: a CUDA graph can
                  capture it; `cot`);
- rows.py         what both stores share: a branch being decoded, the prefill, the packed per-step transfer;
- beam.py         `decoding=beam`: the N best beams of `generate`;
- sampling.py     how a step's next tokens are chosen (greedy, or nucleus sampling seeded per question);
- branch.py       a decoded solution (`Branch`): tokens, margins, per-token statistics, why it ended, where it is cut;
- token_stats.py  the per-step statistics of the 2025 selectors, computed inside the decoding step;
- features.py     phi(x+/-): hidden states of the assertion templates on top of each branch's cache (and the same,
                  teacher-forced, for banked branches);
- kv.py           the KV-cache plumbing of decoding and features.

Imports no other stage.
"""
