"""One task's test-time fit: everything fitted on a task's own branches once they are decoded, label-free, as one
function (`fit_task`) returning the record the results file keeps under `test_time_fits[task]`.

What is fitted depends on what scores the run's lover rows:
- LoVer fitted now (verifier=fit): LoVer's verifier (scoring.fit_on_results), then the plain probes beside it;
- LoVer from a checkpoint: the plain probes alone (the checkpoint is not refitted);
- with one branch a question nothing is fitted: there is nothing to choose among and no group to contrast, so every
  branch scores the neutral 0.5 and the record says why.
Each fit then checks itself without labels: whether its scores rank branches against both the vote and CoT-decoding's
confidence (rank_checks), a warning for each that does, and for LoVer whether it called every branch one thing.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from .checkpoints import tensors_sha256
from .probes import fit_probes, neutral_probes
from .scoring import (fit_on_results, rank_checks, task_batch, warn_if_constant_answer, warn_if_one_sided,
                      warn_if_reversed)
from .verifier_config import VerifierConfig

#: Why one branch a question is not fitted (kept per result and in the record).
ONE_BRANCH = "no fit: n_branches=1 leaves one branch per question, nothing to choose among"


@dataclass
class TaskFit:
    """What `fit_task` made."""

    record: dict
    """What the results file keeps for the task: its questions, extractor, fit settings and final losses, the probes'
    records and the rank checks (or `skipped` and why)."""
    verifier: torch.nn.Module | None = None
    """LoVer's verifier fitted now (None: LoVer was not fitted)."""


def fit_task(results, extract: str, config: VerifierConfig, device, task: str | None = None, lover: bool = True,
             scorers: tuple[str, ...] = ()) -> TaskFit:
    """Fit a task's `results` label-free, their answers grouped by `extract`, on `device`: LoVer too when `lover`
    (else the probes alone, beside a loaded checkpoint), each result's scores stored on it. `scorers`: the scorers the
    rank checks read (the fitted ones and a loaded LoVer's)."""
    name = task or "this run"
    record = {"questions": len(results), "extract": extract}
    if all(len(r.branches) <= 1 for r in results):
        if lover:
            record["skipped"] = ONE_BRANCH
            for result in results:  # the lover_* rows report the one branch's answer (greedy's) instead of failing
                result.verifier_probs["lover"] = np.full((len(result.branches), 2), 0.5, dtype=np.float32)
                result.scored_by["lover"] = ONE_BRANCH
                result.fit_extract = extract
        neutral_probes(results, ONE_BRANCH)
        return TaskFit(record)
    batch = task_batch(results, extract, device)  # stacked once for LoVer, the probes and the checks
    verifier = None
    if lover:
        fitted = fit_on_results(results, extract=extract, config=config, device=device, batch=batch)
        verifier, digest = fitted.verifier, tensors_sha256(fitted.verifier.state_dict())
        record.update(fit_config=asdict(config), final_losses=fitted.final_losses, verifier_tensors_sha256=digest)
        for result in results:
            result.scored_by["lover"] = f"test-time fit on {len(results)} questions of {name} tensors_sha256:{digest}"
        warn_if_one_sided(results, task)
        warn_if_constant_answer(results, task, extract)
    record["probes"] = fit_probes(results, extract, config, device, batch)
    checks = rank_checks(results, extract, scorers, batch[3])
    record["rank_checks"] = {**checks, "reversed": warn_if_reversed(checks, task, len(results))}
    return TaskFit(record, verifier)
