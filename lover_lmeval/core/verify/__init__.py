"""Verify: LoVer's label-free verifier, fitted and applied.

- losses.py            the paper's logic constraints as pure functions (registry of loss terms; variants in
                       losses_variants.py, the authors' reductions in losses_authors.py);
- loss_spec.py         a loss spec ("nega+intra+inter") parsed, evaluated and summed, with the curriculum;
- verifier.py          the MLP probe and its fit (its `VerifierConfig` and regimes: verifier_config.py);
- fit_inputs.py        results -> the fit's batched tensors;
- scoring.py           the test-time fit on results: scores, orientation and warnings;
- dev_select.py        the authors' probe selection on disclosed dev labels (`lover train` only);
- checkpoints.py       a fitted verifier on disk, with the labels it used in its metadata.

Imports the select stage (the constraints read the answer groups), never decode or store.
"""

# The loss variants and the authors' reductions register themselves next to the paper's terms: imported here, every
# loss term is registered wherever any verify module is used, whatever was imported first.
from . import losses_authors, losses_variants  # noqa: E402,F401
