#!/usr/bin/env bash
# Create .venv with the CPU build of torch and this package (editable).
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
python3 -m venv .venv
# --no-compile: pip would byte-compile every module it installs (16k files with torch, transformers and lm-eval: 62 s
# of this script's 92 s of CPU here); Python compiles the few hundred a run imports on first import instead, as uv
# installs do. pip never fails an install on a file that does not compile, so no check is lost.
# torch first and pinned: the CPU wheel this machine's index serves. Any looser spec may pull a
# multi-GB CUDA build; with it installed, the other requirements leave it alone.
.venv/bin/pip install -q --no-compile torch==2.13.0
.venv/bin/pip install -q --no-compile -e ".[test,plots]"
# The embedded default model (SmolLM2-135M-Instruct) is fetched on first use into the cache
# (lover_lmeval/core/loading.py), so nothing else is installed and `pip check` stays clean.
