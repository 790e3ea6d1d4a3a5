"""Decode: N branches per question and what they carry.

- decoding.py     CoT-decoding / sampling (beam search in beam.py), the prompt prefilled once and its KV cache shared
                  by the branches, questions joining the running batch as others end (continuous batching), new
                  tokens reaching the host a block of steps at a time;
- static.py       the same on fixed rows of a preallocated cache (no step changes a shape: a CUDA graph can capture it);
- rows.py         what both loops share: a branch being decoded, the prefill, the packed per-step transfer;
- sampling.py     how a step's next tokens are chosen (greedy, or nucleus sampling seeded per question);
- branch.py       a decoded solution (`Branch`): tokens, margins, per-token statistics, why it ended, where it is cut;
- token_stats.py  the per-step statistics of the 2025 selectors, computed inside the decoding step;
- features.py     phi(x+/-): hidden states of the assertion templates on top of each branch's cache (and the same,
                  teacher-forced, for banked branches);
- kv.py           the KV-cache plumbing of decoding and features.

Imports no other stage.
"""
