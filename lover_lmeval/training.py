"""From lover_hf results to a fitted verifier: `lover train` and the test-time fit (`verifier=fit`).

Answer groups come from the extractor that the task's own filter_list names. The unsupervised path
never touches a document's answer; only `--supervised` (the ceiling baseline) reads gold targets.

Dimensions: Q questions, N branches (padded to the largest), D hidden size.
"""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import numpy as np
import torch

from .answers import get_extractor, span_confidence
from .checkpoints import save_checkpoint
from .verifier import VerifierConfig, config_from_string, fit

log = logging.getLogger(__name__)


def batch_results(results, extract: str):
    """Stack results into (features (Q, N, 2, D), mask (Q, N), groups (Q, N), answers per question).

    Branches with the same extracted answer share a group id; all branches without an answer form
    one more group of their own (as the reference implementation does).
    """
    extractor = get_extractor(extract)
    n_max = max(len(r.branches) for r in results)
    dim = results[0].features.shape[-1]
    features = torch.zeros((len(results), n_max, 2, dim))  # (Q, N, 2, D)
    mask = torch.zeros((len(results), n_max), dtype=torch.bool)
    groups = torch.zeros((len(results), n_max), dtype=torch.long)
    answers = []
    for q, result in enumerate(results):
        n = len(result.branches)
        features[q, :n] = torch.from_numpy(result.features)
        mask[q, :n] = True
        values = [a.value if (a := extractor(b.text)) is not None else None for b in result.branches]
        ids: dict[str | None, int] = {}
        groups[q, :n] = torch.tensor([ids.setdefault(v, len(ids)) for v in values])
        answers.append(values)
    return features, mask, groups, answers


def answer_ids(answers: list[list[str | None]], width: int) -> torch.Tensor:
    """(Q, width) long: the same id for the same answer string in every question, -1 for no answer and padding."""
    ids: dict[str, int] = {}
    out = torch.full((len(answers), width), -1, dtype=torch.long)
    for q, row in enumerate(answers):
        for i, value in enumerate(row):
            if value is not None:
                out[q, i] = ids.setdefault(value, len(ids))
    return out


def gold_labels(answers: list[list[str | None]], gold: list[str], width: int) -> torch.Tensor:
    """(Q, N) 1.0 where a branch's extracted answer equals the gold answer, 0.0 elsewhere and on padding."""
    return torch.tensor([[float(a == g) for a in row] + [0.0] * (width - len(row)) for row, g in zip(answers, gold)])


def store_scores(results, verifier, features: torch.Tensor, name: str) -> None:
    """Score the results' padded features (Q, N, 2, D) and keep p+ / p- as `result.verifier_probs[name]`."""
    with torch.no_grad():
        p_pos, p_neg = verifier(features)  # (Q, N) each
    for q, result in enumerate(results):
        n = len(result.branches)
        result.verifier_probs[name] = torch.stack([p_pos[q, :n], p_neg[q, :n]], dim=-1).numpy()  # (N, 2)


def vote_shares(answers: list[list[str | None]], width: int) -> torch.Tensor:
    """(Q, N) share of its question's branches that give a branch's answer; 0 without an answer and on padding."""
    return torch.tensor([[row.count(a) / len(row) if a is not None else 0.0 for a in row] + [0.0] * (width - len(row))
                         for row in answers])


def _average_ranks(values: torch.Tensor) -> torch.Tensor:
    """(R,) ranks 0..R-1 of a 1-D tensor, tied values sharing their mean rank (as Spearman's correlation needs)."""
    _, inverse, counts = torch.unique(values, sorted=True, return_inverse=True, return_counts=True)
    block_end = counts.cumsum(0).double()  # a block of c ties ending at e holds ranks e-c .. e-1
    return (block_end - (counts.double() + 1) / 2)[inverse]


def spearman(x: torch.Tensor, y: torch.Tensor) -> float:
    """Spearman rank correlation of 1-D tensors (Pearson correlation of their average ranks); 0 if one is constant."""
    rx, ry = _average_ranks(x) - (len(x) - 1) / 2, _average_ranks(y) - (len(y) - 1) / 2
    denominator = float(rx.norm() * ry.norm())
    return float((rx * ry).sum()) / denominator if denominator > 0 else 0.0


def branch_confidences(results, extract: str, width: int) -> torch.Tensor:
    """(Q, N) CoT-decoding's confidence in each branch's answer (mean top1-top2 margin over the answer span; 0 without
    an answer and on padding)."""
    extractor = get_extractor(extract)
    return torch.tensor([[span_confidence(b.margins, b.offsets, extractor(b.text)) for b in r.branches]
                         + [0.0] * (width - len(r.branches)) for r in results])


def orient_fit(verifier, by: str, results, extract: str, features: torch.Tensor, mask: torch.Tensor,
               answers: list[list[str | None]]) -> float:
    """`orient_by` with the signal VerifierConfig.orient=`by` names (vote shares or CoT-decoding confidences), from
    `batch_results`' outputs."""
    width = mask.shape[1]
    signal = vote_shares(answers, width) if by == "vote" else branch_confidences(results, extract, width)  # (Q, N)
    return orient_by(verifier, features, mask, signal)


def orient_by(verifier, features: torch.Tensor, mask: torch.Tensor, signal: torch.Tensor) -> float:
    """Label-free orientation (VerifierConfig.orient): flip the verifier when, over the real branches of `features`
    (Q, N, 2, D), its scores fall as the per-branch `signal` (Q, N) rises (vote share, or CoT-decoding confidence).

    Returns the Spearman correlation of the unflipped scores with the signal (flipped when < 0).
    """
    verifier.orientation.fill_(1.0)
    with torch.no_grad():
        scores = verifier.scores(features)  # (Q, N)
    correlation = spearman(scores[mask], signal[mask])
    if correlation < 0:
        verifier.orientation.fill_(-1.0)
    return correlation


def one_sided(scores: np.ndarray, edge: float = 0.05, share: float = 0.95) -> str | None:
    """'false' / 'true' when at least `share` of the branch scores lie within `edge` of 0 / of 1, else None.

    A label-free sign of a degenerate fit: with every branch called false (or true), which answer wins is decided by
    differences deep in the sigmoid's tail, not by a learnt notion of correctness (benchmarks/RESULTS.md).
    """
    if scores.size == 0:
        return None
    if (scores < edge).mean() >= share:
        return "false"
    if (scores > 1 - edge).mean() >= share:
        return "true"
    return None


def constant_answer(picks: list[str], share: float = 0.95, min_questions: int = 20) -> str | None:
    """The answer picked in at least `share` of the questions with an answer ("" = no branch gave one; at least
    `min_questions` of them), else None.

    A label-free sign of a fit that separated the answers' texts instead of right from wrong: on a task with few
    possible answers (yes/no, True/False) it then gives the same answer to every question, and scores that
    answer's base rate (benchmarks/RESULTS.md run 10: every binary test-time fit at full size did).
    """
    answered = [pick for pick in picks if pick]
    if len(answered) < min_questions:
        return None
    answer, top_share = top_pick(answered)
    return answer if top_share >= share else None


def top_pick(picks: list[str]) -> tuple[str, float] | None:
    """The most common of the questions' picks and its share among the answered questions ("" = no branch gave an
    answer); None when no question was answered."""
    answered = Counter(pick for pick in picks if pick)
    if not answered:
        return None
    answer, count = answered.most_common(1)[0]
    return answer, count / answered.total()


def fit_on_results(results, extract: str, config: VerifierConfig | None = None):
    """Test-time fit: train label-free on these results' own branches, then score them in place."""
    config = config or VerifierConfig()
    features, mask, groups, answers = batch_results(results, extract)
    verifier = fit(features, mask, groups, config, answer_ids=answer_ids(answers, mask.shape[1])).verifier
    if config.orient != "none":
        correlation = orient_fit(verifier, config.orient, results, extract, features, mask, answers)
        log.info("test-time fit: Spearman(score, %s) = %+.3f -> %s", config.orient, correlation,
                 "flipped" if correlation < 0 else "kept")
    store_scores(results, verifier, features, "lover")
    for result in results:  # lover_select checks it against the task's own extractor
        result.fit_extract = extract
    return verifier


def warn_if_one_sided(results, task: str | None) -> None:
    """Log a warning when the test-time fit of a task called (almost) every branch false or true."""
    corner = one_sided(np.concatenate([r.scores("lover") for r in results]))
    if corner is not None:
        log.warning("the test-time fit on %d questions of %s called almost every branch %s (>= 95%% of scores "
                    "within 0.05 of %d): LoVer's pick among the answers is then close to arbitrary; compare it with "
                    "majority voting before trusting it (lover compare), or use a verifier trained with "
                    "`lover train`.", len(results), task or "this run", corner, corner == "true")


def warn_if_constant_answer(results, task: str | None, extract: str) -> None:
    """Log a warning when LoVer(sum) with the test-time fit gives (almost) every question the same answer."""
    from .selection import select  # selection is an lm-eval filter; fitting and checkpoints work without lm-eval

    extract_answer = get_extractor(extract)
    picks = [select(r, "lover_sum", extract_answer) for r in results]
    answer = constant_answer(picks)
    if answer is not None:
        share = top_pick(picks)[1]
        log.warning("the test-time fit on %d questions of %s picks the answer %r in %.0f%% of them: it has separated "
                    "the answers' texts, not right from wrong, so LoVer scores that answer's base rate; compare it "
                    "with majority voting and greedy decoding before trusting it (lover compare).",
                    len(results), task or "this run", answer, 100 * share)


def task_extractor(task) -> str:
    """The extractor named by the task's lover_select filters (its one source of truth)."""
    names = {step.get("extract") for entry in (task.config.filter_list or []) for step in entry.get("filter", [])
             if step.get("function") == "lover_select"}
    if len(names) != 1 or None in names:
        raise ValueError(f"task {task.config.task!r} must name exactly one extractor in its lover_select "
                         f"filters (found {sorted(map(str, names))}); include one of the _lover_<extractor>.yaml bases.")
    return names.pop()


def plot_history(history: list[dict], path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log.warning("matplotlib is not installed: no loss-curve PNG (pip install 'lover-lmeval[plots]')")
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    terms = [k for k in history[0] if k not in ("restart", "epoch")]
    for restart in sorted({row["restart"] for row in history}):
        rows = [r for r in history if r["restart"] == restart]
        for term in terms:
            ax.plot([r["epoch"] for r in rows], [r[term] for r in rows], label=f"r{restart} {term}")
    ax.set_xlabel("epoch")
    ax.set_ylabel("loss")
    ax.set_yscale("symlog", linthresh=1e-3)
    ax.legend(fontsize=6, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def train(model_args: str, task_name: str, split: str, limit: int | None, out: str | Path,
          include_path: str | None, supervised: bool = False, losses: str = "nega+intra+inter", seed: int = 0,
          bank: str | None = None, apply_chat_template: bool = False, gen_kwargs: str = "", fit_config: str = "",
          banked_only: bool = False) -> dict:
    """Decode (through the bank), extract, fit and write checkpoint + report; returns the metadata."""
    from lm_eval.api.instance import Instance
    from lm_eval.tasks import TaskManager, get_task_dict
    from lm_eval.utils import simple_parse_args_string

    from .model import LoverLM
    from .loading import cache_dir

    task = get_task_dict([task_name], TaskManager(include_path=include_path))[task_name]
    extract = task_extractor(task)
    if split not in task.dataset:
        raise ValueError(f"--split {split!r} not in task {task_name!r}; it has {sorted(task.dataset)}")
    docs = list(task.dataset[split])[: limit or None]
    args = {"verifier": None, **simple_parse_args_string(model_args)}
    args.setdefault("bank", str(bank or cache_dir() / "banks" / f"{task_name}-{split}.jsonl.gz"))
    lm = LoverLM(**args)
    chat = lm.apply_chat_template if apply_chat_template else None
    contexts = [task.fewshot_context(d, 0, apply_chat_template=apply_chat_template, chat_template=chat) for d in docs]
    gen_kwargs = {**(task.config.generation_kwargs or {}), **simple_parse_args_string(gen_kwargs)}
    keep = None  # question indices, when only the banked ones are used
    if banked_only:  # train on what a (still growing) bank holds; the metadata names the questions used
        keep = [i for i, banked in enumerate(lm.in_bank(contexts, gen_kwargs)) if banked]
        if not keep:
            raise ValueError(f"--banked_only: none of the first {len(docs)} questions of {split!r} is in the bank "
                             f"{lm.bank.path}; decode some first (drop --banked_only).")
        log.info("--banked_only: %d of the first %d questions are banked; training on those", len(keep), len(docs))
        docs, contexts = [docs[i] for i in keep], [contexts[i] for i in keep]
    # The documents (which hold the answers) are not handed to the model at all.
    requests = [Instance("generate_until", {}, (c, gen_kwargs), i) for i, c in enumerate(contexts)]
    results = lm.generate_until(requests)
    features, mask, groups, answers = batch_results(results, extract)
    labels = None
    if supervised:
        gold = [str(task.doc_to_target(d)).strip() for d in docs]
        if not all(gold):
            raise ValueError(f"--supervised needs gold answers, but split {split!r} of {task_name!r} has "
                             f"{sum(not g for g in gold)} empty targets (an unlabeled split); drop --supervised.")
        labels = gold_labels(answers, gold, mask.shape[1])
    config = config_from_string(";".join([f"losses={losses}", f"seed={seed}", fit_config]))
    result = fit(features, mask, groups, config, labels=labels, answer_ids=answer_ids(answers, mask.shape[1]))
    orientation = None  # label-free, on the training branches; a supervised fit's sign is fixed by its labels
    if config.orient != "none" and not supervised:
        correlation = orient_fit(result.verifier, config.orient, results, extract, features, mask, answers)
        orientation = {"by": config.orient, "correlation": correlation, "flipped": correlation < 0}
    metadata = {**lm.identity, "decoding": {**vars(lm.decoding)}, "n_branches": lm.decoding.n_branches,
                "losses": "supervised" if supervised else losses, "task": task_name, "split": split,
                "n_questions": len(docs), "question_indices": keep, "seed": seed,
                "supervised": supervised, "extract": extract, "orientation": orientation,
                "final_losses": result.final_losses}
    out = Path(out)
    save_checkpoint(out, result.verifier, metadata)
    report = {"metadata": metadata, "restart_losses": result.restart_losses,
              "mean_distinct_answers": float(np.mean([len(set(a)) for a in answers]))}
    out.with_suffix(".report.json").write_text(json.dumps(report, indent=2) + "\n")
    plot_history(result.history, out.with_suffix(".losses.png"))
    return metadata


def add_arguments(parser) -> None:
    parser.add_argument("--model_args", default="", help="lover_hf model args, e.g. pretrained=...,gguf_file=...,layer=12")
    parser.add_argument("--task", required=True, help="task name, e.g. lover_gsm8k")
    parser.add_argument("--split", default="train", help="train or test (the task's own split names)")
    parser.add_argument("--limit", type=int, default=None, help="first N documents of the split")
    parser.add_argument("--out", required=True, help="checkpoint path (.safetensors); .json/.report.json/.losses.png beside it")
    parser.add_argument("--include_path", default="task_configs", help="folder of task YAMLs, as lm_eval's")
    parser.add_argument("--supervised", action="store_true", help="ceiling baseline: BCE on gold correctness")
    parser.add_argument("--losses", default="nega+intra+inter", help="'+'-separated subset of the "
                        "terms in losses.ALLOWED_TERMS: the paper's nega, intra, inter; inter_raw, inter_logic: variants; "
                        "balance: experimental cross-question prior")
    parser.add_argument("--seed", type=int, default=0, help="seed of the fit (initialisation, batching, restarts)")
    parser.add_argument("--fit_config", default="", help="more VerifierConfig fields, ';'-separated, e.g. "
                        "'curriculum=0.2;epochs=60' (losses and seed have their own options)")
    parser.add_argument("--bank", default=None, help="branch bank file (default: in the lover-lmeval cache dir)")
    parser.add_argument("--apply_chat_template", action="store_true", help="as lm_eval's (match the bank's prompts)")
    parser.add_argument("--banked_only", action="store_true", help="train on the banked questions among the first "
                        "--limit only (never decode), e.g. while the bank is still growing")
    parser.add_argument("--gen_kwargs", default="", help="override the task's generation kwargs, e.g. max_gen_toks=128")


def run(args) -> int:
    logging.basicConfig(level=logging.INFO)
    metadata = train(args.model_args, args.task, args.split, args.limit, args.out, args.include_path,
                     args.supervised, args.losses, args.seed, args.bank, args.apply_chat_template, args.gen_kwargs,
                     args.fit_config, args.banked_only)
    print(json.dumps({"checkpoint": args.out, "final_losses": metadata["final_losses"]}, indent=2))
    return 0
