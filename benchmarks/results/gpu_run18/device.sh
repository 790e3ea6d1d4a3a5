#!/bin/bash
# The device side of RESULTS run 18 A, one verb a tool call (benchmarks/gpu_device.sh): setup, piece NAME, launch
# SECONDS, wait SECONDS. STEPS (job.sh's) passes through: `STEPS=arms bash .../device.sh launch 480` runs only the
# test-time arms.
JOB=benchmarks/results/gpu_run18/job.sh GGUFS=qwen2.5-coder-1.5b-instruct:cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046 \
  DEFAULT_STEPS="decode arms train" BANKS_BACK="lover_gsm8k-test.jsonl.gz lover_gsm8k-train.jsonl.gz" \
  exec bash "$(dirname "$0")/../../gpu_device.sh" "$@"
