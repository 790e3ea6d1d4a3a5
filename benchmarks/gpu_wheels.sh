#!/bin/bash
# The wheels a GPU run carries (benchmarks/gpu_device.sh installs them with --no-deps on the device, whose image holds
# torch and most of the rest): this venv's versions of lm-eval, transformers, datasets and gguf, and what the image
# lacks of their needs (datasets: multiprocess, dill; lm-eval's results table: pytablewriter and its own needs), for
# the device's Python 3.12 on x86-64, into .whl/ (ignored; name it in the device call's carry); more_itertools for
# lm-eval's vllm backend; math-verify and its LaTeX parser for extract=math (lover_math500). SKIP="NAME ..." leaves some out (run 29: transformers, the image's 5.17 being what vLLM 0.26
# was built against). Run from the repo root.
set -euo pipefail
version() { .venv/bin/python -c "import importlib.metadata as m; print(m.version('$1'))"; }
names=(lm_eval transformers datasets gguf multiprocess dill pytablewriter DataProperty mbstrdecoder pathvalidate tabledata
       tcolorpy typepy chardet pytz more_itertools math_verify latex2sympy2_extended antlr4-python3-runtime)
specs=(); for n in "${names[@]}"; do [[ " ${SKIP:-} " == *" $n "* ]] || specs+=("$n==$(version "$n")"); done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 -d .whl "${specs[@]}"
ls .whl && du -sh .whl
