"""Select: one answer per question from its branches.

- answers.py    extractors (registry) and the one answer-grouping rule;
- selection.py  the strategies (registry): greedy, majority, CoT-decoding's confidence, LoVer's scores, oracles;
- selectors.py  the strategies that read the branches' per-token statistics (self-certainty, DeepConf, CISC,
                log-likelihood, short-m@k, inverse-entropy voting, Soft Self-Consistency's min);
- rpc.py        RPC: reasoning pruning by a Weibull mixture, then a vote by path probability;
- rows.py       the selection table's rows in display order, which the task YAMLs' filters are generated from.

Reads branches duck-typed: imports no other stage.
"""

# The token-statistics selectors register themselves next to the base strategies: imported here, every strategy is
# registered wherever any select module is used, whatever was imported first.
from . import rpc, selectors  # noqa: E402,F401
