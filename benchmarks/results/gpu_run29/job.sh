#!/bin/bash
# Run 29 on a GPU (benchmarks/runs/run29_gpu_engines.md), steps in this order, each alone on the card: ceiling (plain
# vLLM: n=10 sampling, CoT-decoding in two requests, greedy, then the project's features pass beside the engine),
# lover_static and lover_default (`lm_eval --model lover_hf`, the compiled static step and the default growing rows,
# banked), lmeval_vllm (lm-eval `--model vllm`, 10 sampled repeats voted by majority_vote: what a user does today),
# profile (loop_ab's arms once, with the profile). Qwen2.5-Coder-1.5B bf16, GSM8K test, chat template, max_gen_toks
# 256, N = 10. Each step is capped, and every cap is cut to what is left of JOB_S (the whole job), so the job ends
# before the launch call does. nvidia-smi samples the card's memory every second into smi.csv.
set -u
PY=${PY:-python3}; STEPS=${STEPS:-ceiling lmeval_vllm lover_static lover_default profile}
JOB_S=${JOB_S:-540}; CEIL_S=${CEIL_S:-180}; LMEVAL_S=${LMEVAL_S:-100}; LOVER_S=${LOVER_S:-110}; PROFILE_S=${PROFILE_S:-120}
VLLM_Q=${VLLM_Q:-400}; LOVER_Q=${LOVER_Q:-100}
M=${M:-qwen2.5-coder-1.5b-instruct}
source "$R/benchmarks/gpu_job_lib.sh" && start_job run29
ARGS="--tasks lover_gsm8k --limit $LOVER_Q --apply_chat_template --batch_size auto --gen_kwargs max_gen_toks=256"
want ceiling && run ceiling "$CEIL_S" $PY -m benchmarks.performance.vllm_ceiling --model-dir "$F" \
  --questions "$VLLM_Q" --features-questions "$LOVER_Q" --out "$O/vllm_ceiling.json"
want lover_static && run lover_static "$LOVER_S" $PY -m lm_eval --model lover_hf --model_args \
  "gguf_file=$G,dtype=bfloat16,static_cache=true,compile_step=true,bank=$B/run29/bank_static.jsonl.gz" $ARGS \
  --output_path "$O/lover_static"
want lover_default && run lover_default "$LOVER_S" $PY -m lm_eval --model lover_hf --model_args \
  "gguf_file=$G,dtype=bfloat16,bank=$B/run29/bank_default.jsonl.gz" $ARGS --output_path "$O/lover_default"
want lmeval_vllm && run lmeval_vllm "$LMEVAL_S" $PY -m lm_eval --model vllm --model_args \
  "pretrained=$F,dtype=bfloat16,gpu_memory_utilization=0.6,max_model_len=2048,seed=0" --tasks bench_gsm8k_sc10 \
  --include_path benchmarks/tasks --limit "$VLLM_Q" --apply_chat_template --batch_size auto --output_path "$O/lmeval_vllm"
want profile && run profile "$PROFILE_S" $PY -m benchmarks.performance.loop_ab --model $M --gguf "$G" --device cuda \
  --dtype bfloat16 --questions 10 --rows 100 --max-new-tokens 128 --rounds 1 --compile --profile --profile-tokens 32 \
  --output "$O/loop_ab_$M.json"
kill $SMI
step done
