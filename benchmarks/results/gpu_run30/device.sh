#!/bin/bash
# The device side of run 30 (benchmarks/runs/run30_gpu_lover_vllm.md: Engines on the card with lover_vllm), one verb a
# tool call (benchmarks/gpu_device.sh): setup, piece NAME, convert, wheel NAME SECONDS, launch SECONDS. As run 29: the
# 1.5B GGUF and vLLM's wheel travel in pieces (.gpu/), the smoke test (a tiny random Qwen2, .gpu/tok) runs with the
# wheel's install; the small wheels come from gpu_wheels.sh (SKIP=transformers) and gpu_vllm_wheels.py.
JOB=benchmarks/results/gpu_run30/job.sh \
  GGUFS="qwen2.5-coder-1.5b-instruct:cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046" \
  DEFAULT_STEPS="vllm_cot vllm_phases hf_default hf_static lmeval_vllm ceiling vllm_sample profile" \
  BANKS_BACK="run30/vllm_cot.jsonl.gz run30/vllm_phases.jsonl.gz run30/hf_default.jsonl.gz run30/vllm_sample.jsonl.gz" \
  SMOKE="VLLM_HOST_IP=127.0.0.1 VLLM_USE_FLASHINFER_SAMPLER=0 python3 -m benchmarks.performance.vllm_ceiling \
--smoke /root/w/tok --out /root/w/smoke/smoke.json" \
  exec bash "$(dirname "$0")/../../gpu_device.sh" "$@"
