"""The rows of the selection table, in display order: the one list a new selector is added to.

Every lover_* task carries one `lover_select` filter per row of `TASK_ROWS` (lm-eval prints one metric row each):
the extractor bases `task_configs/_lover_{number,choice,yes_no,true_false,math}.yaml` are generated from it
(`python -m lover_lmeval.harness.task_filters`), and `lover compare`'s leaderboard (apps/leaderboard.py) lists
`ROWS` in this order. A row names a strategy (`@register_strategy`, selection.py / selectors.py) unless
`NO_FILTER` says why the tasks carry no filter for it. tests/test_task_filters.py fails when a registered strategy is
no row, a task row is no strategy, or a generated YAML is out of date.

A new selector: register its strategy, put its name in `ROWS` where the table should show it, run
`python -m lover_lmeval.harness.task_filters`, and give it a line in README's Rows table (tests/test_readme.py
checks that the legend names every task row).

Plain data that imports nothing, so `lover compare --help` reads it without loading torch.
"""

ROWS = (
    # baselines
    "greedy", "majority", "cot_max", "cot_sum",
    # the field's label-free selectors from per-token statistics or token counts (selectors.py, rpc.py)
    "self_certainty", "self_certainty_borda", "deepconf10_w32", "deepconf90_w32", "cisc_t0.1", "loglik_max",
    "loglik_vote", "short3", "rpc", "inv_entropy_full", "softsc_min",
    # the model asked whether each branch's answer is true: one more pass per branch, opt-in (NO_FILTER)
    "ptrue_max",
    # the plain unsupervised probes LoVer extends, fitted beside it on the same features (verify/probes.py)
    "ccs_max", "ccs_sum", "pca_max", "pca_sum",
    # LoVer: the verifier's scores
    "lover_max", "lover_sum",
    # verifiers made with gold labels: ceilings that `lover compare` adds (NO_FILTER)
    "supervised_max", "supervised_sum", "supervised_cv_max", "supervised_cv_sum",
    # the oracle: it reads the gold answer, every row's ceiling
    "pass_at_n",
)

_SUPERVISED = "with the scores of the supervised_verifier= checkpoint (trained on gold labels), when lover_hf has one"
_CROSS_FIT = "with a verifier cross-fitted on the other folds' gold labels (`lover compare --cv_folds`)"
#: Rows the lover_* tasks carry no filter for, and why: the supervised ones `lover compare` computes from the results;
#: ptrue_max costs one more pass per branch, so a default run does not pay for it.
NO_FILTER = {
    "ptrue_max": "P(True), opt-in: lover_hf scores it with ptrue=true (one more teacher-forced pass per branch); add a "
                 "lover_select filter with strategy: ptrue_max to a task to report it",
    "supervised_max": f"lover_max {_SUPERVISED}",
    "supervised_sum": f"lover_sum {_SUPERVISED}",
    "supervised_cv_max": f"lover_max {_CROSS_FIT}",
    "supervised_cv_sum": f"lover_sum {_CROSS_FIT}",
}

#: The lover_* tasks' filters, one per row but those, in display order.
TASK_ROWS = tuple(row for row in ROWS if row not in NO_FILTER)
