"""The LoVer method on plain data (token ids, tensors, strings); imports no lm-eval.

Stages, in pipeline order (pipeline.py runs them):

- decoding.py   N branches per question (CoT-decoding, sampling; beam search in beam.py), KV cache shared by
                the branches, questions joining the running batch as others end (continuous batching);
- features.py   phi(x+/-): hidden states of the assertion templates on top of each branch;
- answers.py    extractors (registry) and the one answer-grouping rule;
- losses.py     the paper's logic constraints as pure functions (registry of loss terms; variants in
                losses_variants.py, the authors' reductions in losses_authors.py);
- verifier.py   the MLP probe and its label-free fit (its `VerifierConfig` and regimes: verifier_config.py);
- scoring.py    results -> batched tensors -> the test-time fit's scores, orientation and warnings;
- selection.py  strategies (registry) that pick one answer per question; selectors.py adds those that read the
                branches' per-token statistics (self-certainty, DeepConf, CISC, log-likelihood, short-m@k);

with branch.py (a decoded solution: `Branch`, its margins, why it ended, where its text is cut), kv.py (the
KV-cache plumbing of decoding and features), results.py (what a question yields), bank.py
(decoded branches kept across runs), checkpoints.py, loading.py (GGUF -> HF folder), stats.py, and config.py (one
config per component, from model_args).
"""

# The loss variants, the authors' reductions and the token-statistics selectors register themselves next to the
# paper's terms and the base strategies; importing them here makes them available wherever any core module is used,
# whatever was imported first.
from . import losses_authors, losses_variants, selectors  # noqa: E402,F401
