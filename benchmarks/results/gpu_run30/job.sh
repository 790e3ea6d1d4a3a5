#!/bin/bash
# Run 30 on a GPU (benchmarks/runs/run30_gpu_lover_vllm.md): lover_vllm beside lover_hf and lm-eval's own vllm backend,
# each step alone on the card, in the plan's order of priority, each capped and every cap cut to what is left of JOB_S.
# Qwen2.5-Coder-1.5B bf16, GSM8K test from question 0 (LOVER_Q of them; the lm-eval and ceiling rows VLLM_Q), chat
# template, max_gen_toks 256, N = 10. lover_* runs log their samples and bank their branches, for
# engines_agreement.py. nvidia-smi samples the card's memory and use every second into smi.csv.
set -u
PY=${PY:-python3}; STEPS=${STEPS:-vllm_cot vllm_phases hf_default hf_static lmeval_vllm ceiling vllm_sample profile}
JOB_S=${JOB_S:-540}; LOVER_Q=${LOVER_Q:-100}; VLLM_Q=${VLLM_Q:-100}
M=${M:-qwen2.5-coder-1.5b-instruct}
source "$R/benchmarks/gpu_job_lib.sh" && start_job run30
LOVER="--tasks lover_gsm8k --limit $LOVER_Q --apply_chat_template --log_samples --gen_kwargs max_gen_toks=256"
want vllm_cot && run vllm_cot 150 $PY -m lm_eval --model lover_vllm --model_args \
  "gguf_file=$G,dtype=bfloat16,bank=$B/run30/vllm_cot.jsonl.gz" $LOVER --output_path "$O/vllm_cot"
# The same run in phases (Scale): vLLM decodes, the engine is shut down, the HF copy reads the branches; the plan picks
# beside for 1.5B on one card, so phases is forced, to time both layouts on the same questions.
want vllm_phases && run vllm_phases 150 $PY -m lm_eval --model lover_vllm --model_args \
  "gguf_file=$G,dtype=bfloat16,memory_plan=phases,bank=$B/run30/vllm_phases.jsonl.gz" $LOVER \
  --output_path "$O/vllm_phases"
want hf_default && run hf_default 150 $PY -m lm_eval --model lover_hf --model_args \
  "gguf_file=$G,dtype=bfloat16,bank=$B/run30/hf_default.jsonl.gz" $LOVER --batch_size auto --output_path "$O/hf_default"
want hf_static && run hf_static 170 $PY -m lm_eval --model lover_hf --model_args \
  "gguf_file=$G,dtype=bfloat16,static_cache=true,compile_step=true" $LOVER --batch_size auto \
  --output_path "$O/hf_static"
want lmeval_vllm && run lmeval_vllm 110 $PY -m lm_eval --model vllm --model_args \
  "pretrained=$F,dtype=bfloat16,gpu_memory_utilization=0.6,max_model_len=2048,seed=0" --tasks bench_gsm8k_sc10 \
  --include_path benchmarks/tasks --limit "$VLLM_Q" --apply_chat_template --output_path "$O/lmeval_vllm"
want ceiling && run ceiling 150 $PY -m benchmarks.performance.vllm_ceiling --model-dir "$F" --questions "$VLLM_Q" \
  --features-questions "$LOVER_Q" --out "$O/vllm_ceiling.json"
want vllm_sample && run vllm_sample 150 $PY -m lm_eval --model lover_vllm --model_args \
  "gguf_file=$G,dtype=bfloat16,decoding=sample,bank=$B/run30/vllm_sample.jsonl.gz" $LOVER --output_path "$O/vllm_sample"
want profile && run profile 120 $PY -m benchmarks.performance.loop_ab --model $M --gguf "$G" --device cuda \
  --dtype bfloat16 --questions 10 --rows 100 --max-new-tokens 128 --rounds 1 --compile --profile --profile-tokens 32 \
  --output "$O/loop_ab_$M.json"
# If the lease has time left (On the card II, item 4; not in the default STEPS): the 1.5B on MATH-500 through lover_vllm,
# N = 10, a budget that lets solutions finish, banked, for every selector's row with paired intervals against majority.
want vllm_math500 && run vllm_math500 300 $PY -m lm_eval --model lover_vllm --model_args \
  "gguf_file=$G,dtype=bfloat16,bank=$B/run30/vllm_math500.jsonl.gz" --tasks lover_math500 --limit "${MATH_Q:-500}" \
  --apply_chat_template --log_samples --gen_kwargs max_gen_toks=1024 --output_path "$O/vllm_math500"
kill $SMI
step done
