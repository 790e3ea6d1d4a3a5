#!/bin/bash
# What a GPU run's job.sh shares (sourced, from the repository copy, after the job sets JOB_S, M and STEPS): its
# deadline, each step capped and timed, nvidia-smi sampling the card, and the converted model folder once the
# device side's detached conversion (gpu_device.sh convert) is done. Needs R, G, B, O and PY from gpu_device.sh.
END=$(( $(date +%s) + JOB_S ))
want() { [[ " $STEPS " == *" $1 "* ]]; }
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
cap() { local left=$(( END - $(date +%s) - 5 )); echo $(( $1 < left ? $1 : left )); }
run() {  # run NAME CAP CMD...: capped, timed, logged to $O/NAME.log; skipped when under 20 s are left
  local name=$1 limit; limit=$(cap "$2"); shift 2
  [ "$limit" -lt 20 ] && { step "$name not run: ${limit}s left"; return; }
  step "$name (cap ${limit}s)"; local began=$(date +%s%N)
  timeout "$limit" "$@" > "$O/$name.log" 2>&1; local rc=$?
  step "$name ended with $rc after $(( ($(date +%s%N) - began) / 1000000 )) ms"
}
start_job() {  # start_job RUN: banks folder, the GSM8K bank loop_ab reads, nvidia-smi, then the model folder in $F
  cd "$R" || exit 1
  mkdir -p "$B/$1" benchmarks/banks/$M && cp "$B/$M/lover_gsm8k-test.jsonl.gz" benchmarks/banks/$M/ 2>/dev/null
  nvidia-smi --query-gpu=timestamp,memory.used,utilization.gpu --format=csv,noheader -lms 1000 > "$O/smi.csv" &
  SMI=$!
  step "conversion: waiting"
  while pgrep -f convert_gguf > /dev/null; do sleep 1; done
  F=$($PY -c "from pathlib import Path; from lover_lmeval.core.loading import convert_gguf; print(convert_gguf(Path('$G')))" \
    2>> "$O/convert_wait.log" | tail -1)
  step "model folder $F"
  # no network: vLLM's processes meet on loopback; vLLM 0.26's sampler imports flashinfer, not carried (run 29)
  export VLLM_HOST_IP=127.0.0.1 VLLM_USE_FLASHINFER_SAMPLER=0
}
