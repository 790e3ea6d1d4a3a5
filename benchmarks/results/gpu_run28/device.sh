#!/bin/bash
# The device side of run 28 (the GPU rows run 27 did not reach, and run 19 B's rescoring), one verb a tool call
# (benchmarks/gpu_device.sh): setup, piece NAME, launch SECONDS, wait SECONDS. Both GGUFs travel in pieces
# (.gpu/MODEL.pNN), the 0.5B banks as one folder piece (.gpu/banks05).
JOB=benchmarks/results/gpu_run28/job.sh \
  GGUFS="qwen2.5-coder-1.5b-instruct:cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 qwen2.5-coder-0.5b-instruct:1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32" \
  DEFAULT_STEPS="loop bench selectors" \
  exec bash "$(dirname "$0")/../../gpu_device.sh" "$@"
