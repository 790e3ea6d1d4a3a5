"""LoVer for lm-evaluation-harness.

`lm_eval --model lover_hf ...` decodes N chain-of-thought branches per question and returns them with
contrastive "true/false answer" features; the `lover_select` filter picks one answer per question by
greedy, majority vote, CoT-decoding confidence or the unsupervised LoVer verifier.

The folders are the pipeline's layers (docs/architecture.md); each imports only those below it:

- `core/`    the method on plain data, no lm-eval: decoding -> features -> scoring (fit) -> selection,
             with the bank, checkpoints, statistics and one `Pipeline` that runs them in order;
- `data/`    the datasets behind the tasks (loaders, our iGSM generator);
- `harness/` the lm-eval adapter: `lover_hf`, the `lover_select` filter, the start-up registration hook;
- `apps/`    the `lover` command line: train, compare, diagnostics, igsm.

This package is imported at every interpreter start-up by `lover_lmeval_autoload.pth` (through
`harness.autoload`), so this file and `harness/__init__.py` must stay free of heavy imports.
"""

__version__ = "0.1.0"
