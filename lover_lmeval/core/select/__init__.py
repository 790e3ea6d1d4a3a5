"""Select: one answer per question from its branches.

- answers.py    extractors (registry), their equivalences and the one answer-grouping rule;
- math_answers.py  `extract=math`: LaTeX answers grouped by math-verify (math_equivalence.py runs it, time-bounded);
- selection.py  the strategies (registry): greedy, majority, CoT-decoding's confidence, LoVer's scores, oracles;
- selectors.py  the strategies that read the branches' per-token statistics (self-certainty, DeepConf, CISC,
                log-likelihood, short-m@k, inverse-entropy voting, Soft Self-Consistency's min);
- rpc.py        RPC: reasoning pruning by a Weibull mixture, then a vote by path probability;
- rows.py       the selection table's rows in display order, which the task YAMLs' filters are generated from.

Reads branches duck-typed: imports no other stage.
"""

# The token-statistics selectors register themselves next to the base strategies, the math extractor next to the
# others: imported here, every strategy and extractor is registered wherever any select module is used, whatever was
# imported first.
from . import math_answers, rpc, selectors  # noqa: E402,F401
