"""LoVer for lm-evaluation-harness.

`lm_eval --model lover_hf ...` decodes N chain-of-thought branches per question and returns them with
contrastive "true/false answer" features; the `lover_select` filter picks one answer per question by
greedy, majority vote, CoT-decoding confidence or the unsupervised LoVer verifier.

This package is imported at every interpreter start-up by `lover_lmeval_autoload.pth`, so it must stay
free of heavy imports: everything below is imported lazily by the modules that need it.
"""

__version__ = "0.1.0"
