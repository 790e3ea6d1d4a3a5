"""lm-eval resolves `!function lover_tasks.X` next to the YAML files: the loaders (which live in the package) and the
few-shot sampler."""

from lm_eval.api.samplers import FirstNSampler

from lover_lmeval.data.tasks import (  # noqa: F401
    load_bbh, load_gsm8k, load_hotpotqa_yesno, load_igsm, load_math500, load_mmlu_pro)


class FixedExemplars(FirstNSampler):
    """`--num_fewshot K`: the first K docs of the task's `fewshot` split, the same K for every question (lm-eval's
    default sampler draws per question, so a prompt would depend on the order, --limit and rank, and banked branches
    are keyed by prompt tokens), with an error that names the task's exemplar count and where they come from."""

    def sample(self, n, eval_doc=None, df=None, **kwargs):
        available = len(self.df)
        if n > available:
            raise ValueError(
                f"--num_fewshot {n}: this task has {available} few-shot exemplars (its `fewshot` split; "
                "lover_lmeval/data/fewshot.py says where each task's come from: BBH's from "
                "$LOVER_DATA_DIR/bbh/cot-prompts/<task>.txt, none without LOVER_DATA_DIR). "
                f"Ask for at most {available}, or run zero-shot (--num_fewshot 0).")
        return super().sample(n, eval_doc=eval_doc, df=df, **kwargs)
