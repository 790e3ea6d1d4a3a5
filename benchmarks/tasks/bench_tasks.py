"""lm-eval resolves `!function bench_tasks.X` next to the YAML files; the loaders live in the package."""

from lover_lmeval.data.tasks import load_gsm8k  # noqa: F401
