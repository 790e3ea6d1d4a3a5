"""`lover_match`: exact match in the extractor's normal form, for tasks whose target is not normalised.

The packaged tasks carry a `target` already in the normal form of their extractor (data/tasks.py), so they use
lm-eval's `exact_match`. A user's own task usually has the raw answer (`doc_to_target: "{{answer}}"`, e.g. "51.0" or
"$1,200"), which `exact_match` would compare as text against the selected answer's normal form ("51", "1200") and
score 0. `lover_match` normalises the gold side with the same extractor the `lover_select` filters use:

    metric_list:
      - metric: lover_match
        extract: number
        aggregation: mean
        higher_is_better: true

An extractor whose answers have no normal form (`math`: `\\frac{1}{2}` and `0.5` are one answer) compares by its
equivalence instead, math-verify's for `math`, and its tasks score with `lover_match` (the generated
`_lover_math.yaml` says so; harness/task_filters.py).
"""

from __future__ import annotations

from ..core.select.answers import get_extractor, matches_gold
from ..data.tasks import normalise_target


def lover_match(references: list[str], predictions: list[str], extract: str = "number") -> dict[str, float]:
    """1.0 when the prediction (a lover_select pick, already in normal form) is the reference in the normal form of
    `extract`: equal, or by the extractor's equivalence (`math`: math-verify's, `answers.matches_gold`); a reference
    the extractor cannot read is compared as stripped text."""
    extractor = get_extractor(extract)  # names the allowed extractors
    gold, pick = str(references[0]), predictions[0]
    pick = pick[0] if isinstance(pick, list) else pick
    try:
        gold = normalise_target(gold, extract)
    except ValueError:
        gold = gold.strip()
    return {"lover_match": float(matches_gold(extractor, str(pick).strip(), gold))}
