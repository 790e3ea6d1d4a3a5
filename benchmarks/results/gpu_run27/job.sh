#!/bin/bash
# Run 27 on a GPU (benchmarks/runs/run27_gpu_loop_selectors.md). Both models are converted at once; the 0.5B work
# (the sampled GSM8K bank, run 19 B's four 0.5B sets) starts as soon as its model is ready and is paused (SIGSTOP)
# while run 26's loop_ab times the 1.5B decoding loop alone on the card, then resumes beside the 1.5B set. Every
# step logs into $O; the sampled bank keeps each finished question; a set's JSON is written only when whole.
# Needs R (a copy of the repository), MD (the assembled GGUFs, MODEL.gguf), B (the banks, MODEL/FILE), O (outputs).
set -u
PY=${PY:-python3}; STEPS=${STEPS:-loop sample selectors}; LOOP_S=${LOOP_S:-300}
Q15=qwen2.5-coder-1.5b-instruct; Q05=qwen2.5-coder-0.5b-instruct
want() { [[ " $STEPS " == *" $1 "* ]]; }
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
cd "$R" || exit 1
# The banks travel apart from the tree (64 MiB a call) and are copied where the scripts read them. Linking them failed
# on the device: the synced tree held folders there, and `ln -sfn` then links inside a folder (run 27's first launch).
rm -rf benchmarks/banks && mkdir -p benchmarks/banks "$O/selectors" && cp -r "$B/." benchmarks/banks/
step convert  # once per model, side by side; every later process loads the converted folder in seconds
for m in $Q15 $Q05; do
  $PY -c "from pathlib import Path; from lover_lmeval.core.loading import convert_gguf; print(convert_gguf(Path('$MD/$m.gguf')))" \
    > "$O/convert_$m.log" 2>&1 &
  eval "conv_${m//[.-]/_}=$!"
done
wait "$conv_qwen2_5_coder_0_5b_instruct" || { step "CONVERT 0.5b FAILED"; exit 1; }
step "0.5b converted"
GROUP=()  # the 0.5B processes, each its own process group (setsid) so that it can be paused whole
export OMP_NUM_THREADS=3
want sample && {
  setsid $PY -m lm_eval --model lover_hf --model_args \
    "gguf_file=$MD/$Q05.gguf,dtype=float32,decoding=sample,bank=$B/$Q05/lover_gsm8k-test-sample.jsonl.gz" \
    --batch_size 100 --tasks lover_gsm8k --limit 400 --apply_chat_template --output_path "$O/sample_run" \
    > "$O/sample.log" 2>&1 &
  GROUP+=($!)
}
want selectors && for s in hotpotqa_yesno gsm8k igsm mmlu_pro; do
  setsid $PY benchmarks/selectors/selectors_run.py --set "0.5b/$s" --out-dir "$O/selectors" > "$O/sel_0.5b_$s.log" 2>&1 &
  GROUP+=($!)
done
wait "$conv_qwen2_5_coder_1_5b_instruct" || { step "CONVERT 1.5b FAILED"; exit 1; }
step "1.5b converted"
want loop && {
  for p in "${GROUP[@]}"; do kill -STOP -- "-$p" 2>/dev/null; done
  step "loop_ab 1.5b (0.5B work paused)"
  OMP_NUM_THREADS=16 timeout "$LOOP_S" $PY benchmarks/performance/loop_ab.py --model $Q15 --gguf "$MD/$Q15.gguf" \
    --device cuda --dtype bfloat16 --questions 10 --rows 100 --max-new-tokens 128 --rounds 2 --compile --profile \
    --output "$O/loop_ab_1.5b.json" > "$O/loop_ab_1.5b.log" 2>&1 || step "loop_ab ended with $?"
  for p in "${GROUP[@]}"; do kill -CONT -- "-$p" 2>/dev/null; done
}
step "1.5b set"
want selectors && $PY benchmarks/selectors/selectors_run.py --set 1.5b/gsm8k --out-dir "$O/selectors" \
  > "$O/sel_1.5b_gsm8k.log" 2>&1
step "waiting for the 0.5B work"
wait
step done
