"""lm-eval's own task YAMLs as lm-eval ships them, with only their data pointed at `../shared/data`.

Users have the dataset hub; tests do not. Each override `include:`s the stock YAML from the installed lm_eval package
by its absolute path and sets nothing but `dataset_path` / `dataset_name` / `dataset_kwargs` (and the stock task's own
name, so `--tasks gsm8k_cot` means what users' CI names: lm-eval lets an `--include_path` task replace the built-in
of that name). Every other field (prompt, few-shot, filters, metric, repeats) is lm-eval's.
"""

from __future__ import annotations

import os
from pathlib import Path

import lm_eval

STOCK = Path(lm_eval.__file__).parent / "tasks"
DATA = Path(os.environ.get("LOVER_DATA_DIR", Path(__file__).resolve().parents[2] / "shared" / "data"))

#: task -> (the stock YAML under lm_eval/tasks, {split: data file under DATA})
TASKS = {
    "gsm8k_cot": ("gsm8k/gsm8k-cot.yaml", {"test": "gsm8k/test.jsonl"}),
    "gsm8k_cot_self_consistency": ("gsm8k/gsm8k-cot-self-consistency.yaml", {"test": "gsm8k/test.jsonl"}),
    "bbh_cot_fewshot_boolean_expressions": ("bbh/cot_fewshot/boolean_expressions.yaml",
                                            {"test": "bbh/boolean_expressions.jsonl"}),
    # its few-shot split is validation, which the offline copy lacks: the tests pass --num_fewshot 0
    "mmlu_pro_biology": ("mmlu_pro/mmlu_pro_biology.yaml",
                         {"test": "mmlu_pro/test.jsonl", "validation": "mmlu_pro/test.jsonl"}),
    # scored in process_results, no filter chain
    "hendrycks_math500": ("hendrycks_math/hendrycks_math500.yaml", {"test": "math500/test.jsonl"}),
    # the same, scored by math-verify and exact_match in process_results, Minerva's 4 exemplars
    "minerva_math500": ("minerva_math/minerva_math500.yaml", {"test": "math500/test.jsonl"}),
}


def write_overrides(folder: Path, names=tuple(TASKS)) -> Path:
    """One override YAML per task in `folder` (an `--include_path`); returns the folder."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        stock, files = TASKS[name]
        data = "".join(f"    {split}: {DATA / path}\n" for split, path in files.items())
        (folder / f"{name}.yaml").write_text(
            f"include: {STOCK / stock}\ntask: {name}\ndataset_path: json\ndataset_name: null\n"
            f"dataset_kwargs:\n  data_files:\n{data}", encoding="utf-8")
    return folder
