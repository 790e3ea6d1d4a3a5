#!/usr/bin/env bash
# Create .venv with the CPU build of torch and this package (editable).
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pip.sh
python3 -m venv .venv
# torch first and pinned: the CPU wheel this machine's index serves. Any looser spec may pull a
# multi-GB CUDA build; with it installed, the other requirements leave it alone.
pip_install .venv/bin/python torch==2.13.0
pip_install .venv/bin/python -e ".[test,plots]"
# The embedded default model (SmolLM2-135M-Instruct) is fetched on first use into the cache
# (lover_lmeval/core/loading.py), so nothing else is installed and `pip check` stays clean.
