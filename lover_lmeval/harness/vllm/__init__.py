"""`lover_vllm`: vLLM decodes the branches, an HF copy of the same weights reads them (docs/architecture.md lists
the modules). Nothing outside this package imports vLLM or Ray (pyproject.toml's import-linter contract)."""
