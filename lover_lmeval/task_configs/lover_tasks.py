"""lm-eval resolves `!function lover_tasks.X` next to the YAML files; the loaders live in the package."""

from lover_lmeval.data.tasks import load_bbh, load_gsm8k, load_hotpotqa_yesno, load_igsm, load_mmlu_pro  # noqa: F401
