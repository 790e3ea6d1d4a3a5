#!/bin/bash
# The device side of run 29 (benchmarks/runs/run29_gpu_engines.md: Engines on the card before `lover_vllm` exists),
# one verb a tool call (benchmarks/gpu_device.sh): setup, piece NAME, convert, wheel NAME SECONDS, launch SECONDS.
# The 1.5B GGUF travels in pieces (.gpu/MODEL.pNN), vLLM's wheel too (.gpu/WHEEL.pNN); its smoke test is a tiny random
# Qwen2 with the real tokenizer (.gpu/tok), through the same script as the job's ceiling row.
JOB=benchmarks/results/gpu_run29/job.sh \
  GGUFS="qwen2.5-coder-1.5b-instruct:cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046" \
  DEFAULT_STEPS="ceiling lmeval_vllm lover_static lover_default profile" \
  BANKS_BACK="run29/bank_static.jsonl.gz run29/bank_default.jsonl.gz" \
  SMOKE="python3 -m benchmarks.performance.vllm_ceiling --smoke /root/w/tok --out /root/w/smoke/smoke.json" \
  exec bash "$(dirname "$0")/../../gpu_device.sh" "$@"
