"""`lover train` as a recipe: decode (through the bank) a task's split, fit a verifier on it and write a checkpoint.

The task, its prompts and its extractor come from lm-eval (the YAML's `lover_select` filters name the extractor);
the model comes from `lover_hf`, so prompts are tokenized exactly as an evaluation tokenizes them; everything
after that is the core pipeline. The label-free fit never touches a document's answer; only `--supervised` (the
ceiling baseline) and `--select dev:K` (the K dev questions only) read gold targets, all through `gold_answers`.

The steps: `load_split` and `load_fit_config` (the task, its documents and the fit config checked before the model
loads), `decode` (the training questions, then any dev questions), `fit_probe` and `orientation`, `checkpoint_metadata`
and `write_checkpoint`; `train` runs them. The command
line is train_cli.py, which imports this module only when the command runs: lm-eval, transformers and torch take
seconds to import.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from lm_eval.tasks import TaskManager
from lm_eval.utils import simple_parse_args_string

from ..core.files import write_text
from ..core.loading import cache_dir
from ..core.select.answers import n_answer_groups
from ..core.verify.checkpoints import save_checkpoint
from ..core.verify.dev_select import fit_with_dev, parse_select, selection_from_string
from ..core.verify.scoring import answer_ids, batch_results, gold_labels, orient_fit
from ..core.verify.verifier import FitResult, fit
from ..core.verify.verifier_config import VerifierConfig, config_from_string
from ..harness.model import LoverLM
from .plots import plot_history
from .samples import task_extractor
from .settings import TrainSettings

from ..log import log


@dataclass
class TrainingSplit:
    """The task and the documents a training run reads, checked before the model loads."""

    task: object
    """lm-eval's Task."""
    extract: str
    """The extractor its lover_select filters name."""
    docs: list
    """The first `limit` documents of the split: the questions the verifier is fit on."""
    dev_docs: list
    """The K documents after them with select="dev:K", else none."""


@dataclass
class Decoded:
    """Questions decoded (through the bank), as the fit reads them."""

    results: list
    docs: list
    """The documents kept, in the results' order."""
    kept: list[int]
    """Their indices among the documents asked for."""
    features: torch.Tensor
    """(Q, N, 2, D)."""
    mask: torch.Tensor
    """(Q, N): real branches."""
    groups: torch.Tensor
    """(Q, N): each branch's answer group."""
    answers: list

    def answer_ids(self) -> torch.Tensor:
        return answer_ids(self.answers, self.mask.shape[1])


@dataclass
class Fitted:
    """A fit and what it read."""

    result: FitResult
    losses: str
    """The loss terms it minimised ("supervised" for BCE on gold labels)."""
    gold_labels_used: int
    """Every gold label the fit saw (0 for a label-free one)."""
    selection_report: dict
    """The dev selection's tries and accuracy (select="dev:K" without `supervised`), else empty."""
    orientation: dict | None = None
    """Its label-free sign (`orientation`), once read."""


def load_split(settings: TrainSettings) -> TrainingSplit:
    n_dev = parse_select(settings.select)
    task = TaskManager(include_path=settings.include_path).load([settings.task])["tasks"][settings.task]
    extract = task_extractor(task)
    split, limit = settings.split, settings.limit
    if split not in task.dataset:
        raise ValueError(f"--split {split!r} not in task {settings.task!r}; it has {sorted(task.dataset)}")
    if n_dev and not limit:
        raise ValueError("--select dev:K needs --limit N: the dev questions are documents N .. N+K-1 of the split")
    if n_dev and split == task.config.test_split:
        raise ValueError(f"--select dev:K reads gold labels: take the dev questions from a training split, not "
                         f"{settings.task}'s test split {split!r} (the questions it is evaluated on).")
    every_doc = list(task.dataset[split])
    docs, dev_docs = every_doc[: limit or None], every_doc[limit: limit + n_dev] if n_dev else []
    if len(dev_docs) < n_dev:
        raise ValueError(f"--select dev:{n_dev}: split {split!r} has only {len(dev_docs)} documents after the first "
                         f"{limit}; lower K or --limit.")
    return TrainingSplit(task, extract, docs, dev_docs)


def load_fit_config(settings: TrainSettings) -> VerifierConfig:
    """The fit's config: `losses` and `seed` over `fit_config`."""
    losses = [f"losses={settings.losses}"] if settings.losses else []
    return config_from_string(";".join([*losses, f"seed={settings.seed}", settings.fit_config]))


def load_model(settings: TrainSettings) -> LoverLM:
    """lover_hf without a verifier of its own, decoding through the run's bank."""
    args = {"verifier": None, **simple_parse_args_string(settings.model_args)}
    default_bank = cache_dir() / "banks" / f"{settings.task}-{settings.split}.jsonl.gz"
    args.setdefault("bank", str(settings.bank or default_bank))
    return LoverLM(**args)


def decode(lm: LoverLM, split: TrainingSplit, docs: list, settings: TrainSettings, gen_kwargs: dict,
           what: str) -> Decoded:
    """`docs` decoded (through the bank) and batched for the fit; the documents themselves never reach the model."""
    template = settings.apply_chat_template
    chat = lm.apply_chat_template if template else None
    contexts = [split.task.fewshot_context(d, 0, apply_chat_template=template, chat_template=chat) for d in docs]
    kept = list(range(len(docs)))
    if settings.banked_only:  # train on what a (still growing) bank holds; the metadata names the questions used
        kept = [i for i, banked in enumerate(lm.in_bank(contexts, gen_kwargs)) if banked]
        if not kept:
            raise ValueError(f"--banked_only: none of the {len(docs)} {what} questions is in the bank "
                             f"{lm.pipeline.bank.path}; decode some first (drop --banked_only).")
        log.info("--banked_only: %d of the %d %s questions are banked; using those", len(kept), len(docs), what)
    # training reads features only: no full-model pass for the selectors' statistics
    results = lm.run_contexts([contexts[i] for i in kept], gen_kwargs, stats=False)
    return Decoded(results, [docs[i] for i in kept], kept, *batch_results(results, split.extract))


def gold_answers(split: TrainingSplit, docs: list, settings: TrainSettings) -> list[str]:
    """The gold targets of `docs`: the only place `lover train` reads one."""
    gold = [str(split.task.doc_to_target(d)).strip() for d in docs]
    if not all(gold):
        raise ValueError(f"gold labels are needed, but split {settings.split!r} of {settings.task!r} has "
                         f"{sum(not g for g in gold)} empty targets (an unlabeled split); "
                         "drop --supervised / --select.")
    return gold


def fit_probe(settings: TrainSettings, split: TrainingSplit, training: Decoded, dev: Decoded | None,
              config: VerifierConfig, device) -> Fitted:
    """The label-free fit on the training questions; with `supervised` the fit on their gold labels; with dev
    questions, those K labels choose the probe, or (with `supervised`) train it alone: supervised[devK]."""
    def on_model(*tensors):  # the fit runs where the model does (a GPU's minutes are a CPU's hours); None stays None
        return [None if t is None else t.to(device) for t in tensors]

    losses = "supervised" if settings.supervised else config.losses
    if dev is None:
        labels = (gold_labels(training.answers, gold_answers(split, training.docs, settings), training.mask.shape[1],
                              split.extract)
                  if settings.supervised else None)
        result = fit(*on_model(training.features, training.mask, training.groups), config,
                     *on_model(labels, training.answer_ids()))
        return Fitted(result, losses, len(training.docs) if settings.supervised else 0, {})
    dev_labels = gold_labels(dev.answers, gold_answers(split, dev.docs, settings), dev.mask.shape[1], split.extract)
    if settings.supervised:
        result = fit(*on_model(dev.features, dev.mask, dev.groups), config, *on_model(dev_labels, dev.answer_ids()))
        return Fitted(result, losses, len(dev.docs), {})
    result, report = fit_with_dev(*on_model(training.features, training.mask, training.groups, dev.features, dev.mask,
                                            dev_labels), config, selection_from_string(settings.dev_selection),
                                  *on_model(training.answer_ids()))
    return Fitted(result, losses, len(dev.docs), report)


def orientation(settings: TrainSettings, split: TrainingSplit, config: VerifierConfig, fitted: Fitted,
                training: Decoded) -> dict | None:
    """The label-free sign of the fit, read on the training branches (config.orient); None when labels fixed the sign
    (a supervised fit, or dev labels that chose the probe) or orientation is off."""
    if config.orient == "none" or settings.supervised or split.dev_docs:
        return None
    correlation = orient_fit(fitted.result.verifier, config.orient, training.results, split.extract,
                             training.features, training.mask, training.answers)
    return {"by": config.orient, "correlation": correlation, "flipped": correlation < 0}


def checkpoint_metadata(settings: TrainSettings, lm: LoverLM, split: TrainingSplit, training: Decoded,
                        dev: Decoded | None, fitted: Fitted) -> dict:
    """What the checkpoint says of itself: the model's identity, the decoding, the fit and every question it read."""
    decoding = lm.pipeline.record.decodings[-1]  # as the generation kwargs resolved model_args'
    dev_fields = {} if dev is None else {"select": f"dev:{len(split.dev_docs)}",
                                         "dev_question_ids": [settings.limit + i for i in dev.kept]}
    return {**lm.pipeline.identity, "decoding": decoding, "n_branches": decoding["n_branches"],
            "losses": fitted.losses, "task": settings.task,
            "split": settings.split,
            "n_questions": len(dev.docs) if settings.supervised and dev else len(training.docs),
            "question_indices": training.kept if settings.banked_only else None, "seed": settings.seed,
            "supervised": settings.supervised, "extract": split.extract, "orientation": fitted.orientation,
            "final_losses": fitted.result.final_losses, "gold_labels_used": fitted.gold_labels_used,
            "chat_template": settings.apply_chat_template, **dev_fields}


def write_checkpoint(out: Path, fitted: Fitted, metadata: dict, training: Decoded) -> None:
    """The checkpoint with its metadata (.json), the report (.report.json) and the fit's losses (.losses.png)."""
    result = fitted.result
    save_checkpoint(out, result.verifier, metadata)
    report = {"metadata": metadata, "restart_losses": result.restart_losses,
              "mean_distinct_answers": float(np.mean([n_answer_groups(a) for a in training.answers])),
              **fitted.selection_report}
    write_text(out.with_suffix(".report.json"), json.dumps(report, indent=2) + "\n")
    plot_history(result.history, out.with_suffix(".losses.png"))


def train(settings: TrainSettings) -> dict:
    """Decode (through the bank), extract, fit and write checkpoint + report; returns the checkpoint's metadata,
    whose `gold_labels_used` counts every gold label the checkpoint saw."""
    split = load_split(settings)
    config = load_fit_config(settings)
    lm = load_model(settings)
    gen_kwargs = {**(split.task.config.generation_kwargs or {}), **simple_parse_args_string(settings.gen_kwargs)}
    training = decode(lm, split, split.docs, settings, gen_kwargs, "training")
    dev = decode(lm, split, split.dev_docs, settings, gen_kwargs, "dev") if split.dev_docs else None
    fitted = fit_probe(settings, split, training, dev, config, lm.model.device)
    fitted.result.verifier.cpu()  # orientation, checkpoint and scores below read the CPU copies of the features
    fitted.orientation = orientation(settings, split, config, fitted, training)
    metadata = checkpoint_metadata(settings, lm, split, training, dev, fitted)
    write_checkpoint(settings.out, fitted, metadata, training)
    return metadata
