"""The research scripts, one folder per study (benchmarks/README.md), and what they share: `benchmarks.bench_common`
(paths, model options, document ranges, prompts) and `benchmarks.bank_sets` (the committed banks as evaluation sets).

A script runs as a module from the repository root, `python -m benchmarks.<study>.NAME`; its study folder is found
inside this package. The study folders have no `__init__.py` on purpose (namespace packages): `benchmarks/selectors/`
must never become an importable top-level `selectors`, which would hide the standard library's module of that name.
"""
