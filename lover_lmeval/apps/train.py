"""`lover train`: decode (through the bank) a task's split, fit a verifier on it and write a checkpoint.

The task, its prompts and its extractor come from lm-eval (the YAML's `lover_select` filters name the extractor);
the model comes from `lover_hf`, so prompts are tokenized exactly as an evaluation tokenizes them; everything
after that is the core pipeline. The label-free fit never touches a document's answer; only `--supervised` (the
ceiling baseline) reads gold targets.
"""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import numpy as np

log = logging.getLogger(__name__)

# VerifierConfig's losses and seed defaults and the loss terms a user may name (core.verify.loss_spec.allowed_terms()
# but "supervised"), repeated because any core import loads torch (core/__init__.py) and `lover train --help` must not
# wait for it; tests/test_cli_help.py checks them against the core.
DEFAULT_LOSSES = "nega+intra+inter"
DEFAULT_SEED = 0
LOSS_TERMS = ("nega", "intra", "inter", "inter_raw", "inter_logic", "balance")


def task_extractor(task) -> str:
    """The extractor named by the task's lover_select filters (its one source of truth)."""
    names = {step.get("extract") for entry in (task.config.filter_list or []) for step in entry.get("filter", [])
             if step.get("function") == "lover_select"}
    if len(names) != 1 or None in names:
        raise ValueError(f"task {task.config.task!r} must name exactly one extractor in its lover_select "
                         f"filters (found {sorted(map(str, names))}); include one of the _lover_<extractor>.yaml bases.")
    return names.pop()


def _decode(lm, task, docs: list, apply_chat_template: bool, gen_kwargs: dict, banked_only: bool, what: str):
    """Results of `docs` (through the bank) and the indices kept; the documents themselves never reach the model."""
    chat = lm.apply_chat_template if apply_chat_template else None
    contexts = [task.fewshot_context(d, 0, apply_chat_template=apply_chat_template, chat_template=chat) for d in docs]
    keep = list(range(len(docs)))
    if banked_only:  # train on what a (still growing) bank holds; the metadata names the questions used
        keep = [i for i, banked in enumerate(lm.in_bank(contexts, gen_kwargs)) if banked]
        if not keep:
            raise ValueError(f"--banked_only: none of the {len(docs)} {what} questions is in the bank "
                             f"{lm.pipeline.bank.path}; decode some first (drop --banked_only).")
        log.info("--banked_only: %d of the %d %s questions are banked; using those", len(keep), len(docs), what)
    # training reads features only: no full-model pass for the selectors' statistics
    return lm.run_contexts([contexts[i] for i in keep], gen_kwargs, stats=False), keep


def _gold(task, docs: list, split: str, task_name: str) -> list[str]:
    gold = [str(task.doc_to_target(d)).strip() for d in docs]
    if not all(gold):
        raise ValueError(f"gold labels are needed, but split {split!r} of {task_name!r} has {sum(not g for g in gold)} "
                         "empty targets (an unlabeled split); drop --supervised / --select.")
    return gold


def train(model_args: str, task_name: str, split: str, limit: int | None, out: str | Path,
          include_path: str | None, supervised: bool = False, losses: str | None = None, seed: int = 0,
          bank: str | None = None, apply_chat_template: bool = False, gen_kwargs: str = "", fit_config: str = "",
          banked_only: bool = False, select: str = "none", dev_selection: str = "") -> dict:
    """Decode (through the bank), extract, fit and write checkpoint + report; returns the metadata.

    `losses=None` keeps the fit config's own (VerifierConfig's default, or its regime's). `select="dev:K"`: the K documents after the first `limit` are
    labelled dev questions (dev_select.py); with `supervised` the probe is trained on their labels alone
    (supervised[devK]). The metadata's `gold_labels_used` counts every gold label the checkpoint saw."""
    # lazy: lm-eval, transformers and torch take seconds to import, and `lover train --help` must not wait for them
    from lm_eval.tasks import TaskManager
    from lm_eval.utils import simple_parse_args_string

    from ..core.select.answers import n_answer_groups
    from ..core.verify.checkpoints import save_checkpoint
    from ..core.verify.dev_select import fit_with_dev, parse_select, selection_from_string
    from ..core.files import write_text
    from ..core.loading import cache_dir
    from ..core.verify.scoring import answer_ids, batch_results, gold_labels, orient_fit
    from ..core.verify.verifier import fit
    from ..core.verify.verifier_config import config_from_string
    from ..harness.model import LoverLM
    from .plots import plot_history

    n_dev = parse_select(select)
    task = TaskManager(include_path=include_path).load([task_name])["tasks"][task_name]
    extract = task_extractor(task)
    if split not in task.dataset:
        raise ValueError(f"--split {split!r} not in task {task_name!r}; it has {sorted(task.dataset)}")
    if n_dev and not limit:
        raise ValueError("--select dev:K needs --limit N: the dev questions are documents N .. N+K-1 of the split")
    if n_dev and split == task.config.test_split:
        raise ValueError(f"--select dev:K reads gold labels: take the dev questions from a training split, not "
                         f"{task_name}'s test split {split!r} (the questions it is evaluated on).")
    every_doc = list(task.dataset[split])
    docs, dev_docs = every_doc[: limit or None], every_doc[limit: limit + n_dev] if n_dev else []
    if len(dev_docs) < n_dev:
        raise ValueError(f"--select dev:{n_dev}: split {split!r} has only {len(dev_docs)} documents after the first "
                         f"{limit}; lower K or --limit.")
    args = {"verifier": None, **simple_parse_args_string(model_args)}
    args.setdefault("bank", str(bank or cache_dir() / "banks" / f"{task_name}-{split}.jsonl.gz"))
    lm = LoverLM(**args)
    gen_kwargs = {**(task.config.generation_kwargs or {}), **simple_parse_args_string(gen_kwargs)}
    results, keep = _decode(lm, task, docs, apply_chat_template, gen_kwargs, banked_only, "training")
    docs = [docs[i] for i in keep]
    features, mask, groups, answers = batch_results(results, extract)

    def on_model(*tensors):  # the fit runs where the model does (a GPU's minutes are a CPU's hours); None stays None
        return [None if t is None else t.to(lm.model.device) for t in tensors]

    config = config_from_string(";".join([*([f"losses={losses}"] if losses else []), f"seed={seed}", fit_config]))
    losses = config.losses
    dev_ids, report_extra = None, {}
    if n_dev:  # only these K documents' gold answers are read
        dev_results, dev_keep = _decode(lm, task, dev_docs, apply_chat_template, gen_kwargs, banked_only, "dev")
        dev_docs, dev_ids = [dev_docs[i] for i in dev_keep], [limit + i for i in dev_keep]
        dev_features, dev_mask, dev_groups, dev_answers = batch_results(dev_results, extract)
        dev_labels = gold_labels(dev_answers, _gold(task, dev_docs, split, task_name), dev_mask.shape[1])
        if supervised:  # supervised[devK]: what the K labels buy when used directly
            result = fit(*on_model(dev_features, dev_mask, dev_groups), config,
                         *on_model(dev_labels, answer_ids(dev_answers, dev_mask.shape[1])))
        else:
            result, report_extra = fit_with_dev(*on_model(features, mask, groups, dev_features, dev_mask, dev_labels),
                                                config, selection_from_string(dev_selection),
                                                *on_model(answer_ids(answers, mask.shape[1])))
        gold_used = len(dev_docs)
    else:
        labels = gold_labels(answers, _gold(task, docs, split, task_name), mask.shape[1]) if supervised else None
        result = fit(*on_model(features, mask, groups), config,
                     *on_model(labels, answer_ids(answers, mask.shape[1])))
        gold_used = len(docs) if supervised else 0
    result.verifier.cpu()  # orientation, checkpoint and scores below read the CPU copies of the features
    orientation = None  # label-free, on the training branches; a supervised fit's sign is fixed by its labels
    if config.orient != "none" and not supervised and not n_dev:  # dev labels already chose the sign
        correlation = orient_fit(result.verifier, config.orient, results, extract, features, mask, answers)
        orientation = {"by": config.orient, "correlation": correlation, "flipped": correlation < 0}
    decoding = lm.pipeline.record.decodings[-1]  # as the generation kwargs resolved model_args'
    metadata = {**lm.pipeline.identity, "decoding": decoding, "n_branches": decoding["n_branches"],
                "losses": "supervised" if supervised else losses, "task": task_name, "split": split,
                "n_questions": len(dev_docs) if supervised and n_dev else len(docs),
                "question_indices": keep if banked_only else None, "seed": seed,
                "supervised": supervised, "extract": extract, "orientation": orientation,
                "final_losses": result.final_losses, "gold_labels_used": gold_used,
                "chat_template": apply_chat_template,
                **({"select": f"dev:{n_dev}", "dev_question_ids": dev_ids} if n_dev else {})}
    out = Path(out)
    save_checkpoint(out, result.verifier, metadata)
    report = {"metadata": metadata, "restart_losses": result.restart_losses,
              "mean_distinct_answers": float(np.mean([n_answer_groups(a) for a in answers])), **report_extra}
    write_text(out.with_suffix(".report.json"), json.dumps(report, indent=2) + "\n")
    plot_history(result.history, out.with_suffix(".losses.png"))
    return metadata


def add_lm_eval_arguments(parser) -> None:
    """The options `lover train` and `lover compare` share with lm_eval."""
    parser.add_argument("--model_args", default="", help="lover_hf model args, e.g. gguf_file=...,layer=12,bank=...")
    parser.add_argument("--include_path", default=None,
                        help="another folder of task YAMLs, as lm_eval's (the packaged lover_* tasks are always found)")
    parser.add_argument("--apply_chat_template", action="store_true", help="as lm_eval's (match the bank's prompts)")
    parser.add_argument("--gen_kwargs", default="", help="override the task's generation kwargs, e.g. max_gen_toks=128")


def add_arguments(parser) -> None:
    add_lm_eval_arguments(parser)
    parser.add_argument("--task", required=True, help="task name, e.g. lover_gsm8k")
    parser.add_argument("--split", default="train", help="train or test (the task's own split names)")
    parser.add_argument("--limit", type=int, default=None, help="first N documents of the split")
    parser.add_argument("--out", required=True, help="checkpoint path (.safetensors); .json/.report.json/.losses.png beside it")
    parser.add_argument("--supervised", action="store_true", help="ceiling baseline: BCE on gold correctness")
    parser.add_argument("--losses", default=None, help="'+'-separated subset of the terms "
                        f"{', '.join(LOSS_TERMS)}: the paper's nega, intra, inter; "
                        "inter_raw, inter_logic: variants; balance: experimental cross-question prior (default: the "
                        f"fit config's, {DEFAULT_LOSSES} unless its regime says otherwise)")
    parser.add_argument("--seed", type=int, default=DEFAULT_SEED, help="seed of the fit (initialisation, batching, restarts)")
    parser.add_argument("--fit_config", default="", help="more VerifierConfig fields, ';'-separated, e.g. "
                        "'curriculum=0.2;epochs=60' (losses and seed have their own options)")
    parser.add_argument("--bank", default=None, help="branch bank file (default: in the lover-lmeval cache dir)")
    parser.add_argument("--select", default="none", help="none (label-free) or dev:K: documents --limit .. "
                        "--limit+K-1 of the split are gold-labelled dev questions that choose the probe (initial "
                        "probe, checkpoint, early stop, restart; the authors' protocol, dev:66 with --limit 200); "
                        "with --supervised the probe is trained on those K labels alone. Recorded as "
                        "gold_labels_used in the checkpoint")
    parser.add_argument("--dev_selection", default="", help="DevSelection fields for --select dev:K, ';'-separated, "
                        "e.g. 'init_tries=10;low_accuracy=0.05' (defaults: the authors' constants)")
    parser.add_argument("--banked_only", action="store_true", help="train on the banked questions among the first "
                        "--limit only (never decode), e.g. while the bank is still growing")


def run(args) -> int:
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:  # each process would fit its own checkpoint on the same questions
        raise SystemExit(f"lover train runs in one process (WORLD_SIZE={os.environ['WORLD_SIZE']}): start it with "
                         "`lover train ...`, not torchrun / accelerate launch; decoding a large split on several "
                         "GPUs first is `lm_eval --model lover_hf ... bank=PATH` under torchrun, then `lover train "
                         "--bank PATH`.")
    logging.basicConfig(level=logging.INFO)
    metadata = train(args.model_args, args.task, args.split, args.limit, args.out, args.include_path,
                     args.supervised, args.losses, args.seed, args.bank, args.apply_chat_template, args.gen_kwargs,
                     args.fit_config, args.banked_only, args.select, args.dev_selection)
    print(json.dumps({"checkpoint": args.out, "final_losses": metadata["final_losses"]}, indent=2))
    return 0
