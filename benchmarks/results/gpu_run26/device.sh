#!/bin/bash
# The device side of run 26 (GPU decode), one verb a tool call (benchmarks/gpu_device.sh): setup, piece NAME, launch
# SECONDS, wait SECONDS. STEPS (job.sh's): the model sizes, default 1.5b (the 1.5B GGUF in pieces, as in run 18).
JOB=benchmarks/results/gpu_run26/job.sh GGUFS=qwen2.5-coder-1.5b-instruct:cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 \
  DEFAULT_STEPS="1.5b" exec bash "$(dirname "$0")/../../gpu_device.sh" "$@"
