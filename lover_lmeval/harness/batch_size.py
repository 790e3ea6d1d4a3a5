"""`--batch_size auto` (and `auto:N`) for lover_hf: questions decoded together, found once and logged.

HFLM's `auto` probes the largest batch of prompt-length rows that fits the GPU. lover_hf decodes N rows a question,
each growing to prompt + max_gen_toks tokens of KV cache, so the probe here runs that shape: `q * N` rows of the
longest prompt plus the token budget, halving `q` on out-of-memory from `max_batch_size` (HFLM's bound, default 64).
On a CPU nothing runs out of memory first; speed decides: a 50-row step costs ~1.9x a 10-row one on our 2-core CPUs
(benchmarks/RESULTS.md, continuous-batching run), so `auto` there is 50 rows, `CPU_ROWS` // N questions.
lm-eval's `auto:N` re-detects N times over a run; the best size for lover_hf does not change as questions go by (rows
are refilled as they finish), so it is detected once and `:N` is accepted and ignored, which the log line says.
"""

from __future__ import annotations


import torch

from ..log import log, model_name

#: rows a decoding step holds on a CPU when batch_size=auto (measured best on our 2-core machines, see above)
CPU_ROWS = 50


def is_auto(batch_size) -> bool:
    return str(batch_size).startswith("auto")


def _fits(model, rows: int, length: int) -> bool:
    """Whether one forward of `rows` x `length` tokens with a KV cache runs without running out of GPU memory."""
    try:
        with torch.inference_mode():
            ids = torch.ones((rows, length), dtype=torch.long, device=model.device)
            model(input_ids=ids, use_cache=True, logits_to_keep=1)
        return True
    except torch.cuda.OutOfMemoryError:
        return False
    finally:
        torch.cuda.empty_cache()


def auto_batch_size(model, requested, n_branches: int, longest_prompt: int, max_gen_toks: int,
                    max_batch_size: int) -> int:
    """Questions per decoding batch for `batch_size=auto[:N]` on the model's device; logged once by the caller."""
    if model.device.type != "cuda":
        found = max(1, CPU_ROWS // n_branches)
        how = f"{CPU_ROWS} rows, the measured best on a CPU"
    else:
        found, length = max(1, int(max_batch_size)), longest_prompt + max_gen_toks
        while found > 1 and not _fits(model, found * n_branches, length):
            found //= 2
        how = f"the largest of {max_batch_size} halved that fits {n_branches} rows a question x {length} tokens"
    log.info("%s: batch_size=%s -> %d questions (%d rows) per decoding batch: %s%s", model_name(), requested, found,
             found * n_branches, how, "; detected once (the :N re-detections of HFLM do not apply)"
             if ":" in str(requested) else "")
    return found


def questions_per_batch(lm, longest_prompt: int, max_gen_toks: int) -> int:
    """lm-eval's `batch_size` for a lover_hf model `lm`: an int as given, `auto` found (with the first group's longest
    prompt and budget): LoverLM keeps the found value, which the results file records, and asks once."""
    if not is_auto(lm.batch_size):
        return int(lm.batch_size)
    return auto_batch_size(lm.model, lm.batch_size, lm.pipeline.config.decoding.n_branches, longest_prompt,
                           max_gen_toks, lm.max_batch_size)
