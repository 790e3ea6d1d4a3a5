"""The LoVer method on plain data (token ids, tensors, strings); imports no lm-eval.

The folders are the pipeline's stages, which `pipeline.py` runs in order:

- decode/   N branches per question (CoT-decoding, sampling, beam), their per-token statistics, and the features
            phi(x+/-) read off their KV caches;
- verify/   LoVer's logic constraints, the MLP probe and its label-free fit, the test-time scoring, checkpoints;
- select/   answer extraction and grouping, and every strategy that picks one answer per question;
- store/    the branch bank and the feature cache (decoded branches survive a kill);

beside them `pipeline.py` (one object that runs the stages), `config.py` (one config per component, from
model_args), `results.py` (what a question yields), and the stage-free helpers `loading.py` (GGUF -> HF folder),
`stats.py` (bootstrap, AUROC) and `files.py` (atomic writes).

Imports go downward only (import-linter, pyproject.toml): pipeline > config, results > store, verify > select,
decode > files, loading, stats; the stages of one line do not import each other.

A registry's package imports every module that registers with it (select/ its selectors, verify/ its loss variants),
so a registry is complete wherever it is read; this file imports nothing, so that reading plain data such as
`select/rows.py` loads no torch.
"""
