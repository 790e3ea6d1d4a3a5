#!/bin/bash
# Run 28 on a GPU (benchmarks/runs/run28_gpu_rows_next_lease.md), steps in this order, each alone on the card so the
# timings are a quiet card's: loop (run 26's arms on the 1.5B, 2 rounds, and the profile), bench (bench_decode's rows:
# our branches against lm-eval `hf` greedy, `repeats: 10` and HF generate, 1.5B bf16), selectors (run 19 B's sets
# still unscored when the lease comes, SETS, side by side). Each step is capped (LOOP_S, BENCH_S, SEL_S) and logs into
# $O; a set's JSON is written only when whole. Needs R (a copy of the repository), MD (MODEL.gguf files), B (the
# banks, MODEL/FILE), O (outputs); run from gpu_device.sh, which puts lm-eval etc. on PYTHONPATH and PATH.
set -u
PY=${PY:-python3}; STEPS=${STEPS:-loop bench selectors}
SETS=${SETS:-}  # every set was scored in session 29 (this job, STEPS=selectors): name sets to read them again
# Caps: with ~2 min of conversion they sum to ~10.5 min, what a lease leaves after a start and 28 transfers (~3.5 min)
LOOP_S=${LOOP_S:-150}; BENCH_S=${BENCH_S:-180}; SEL_S=${SEL_S:-200}
M=${M:-qwen2.5-coder-1.5b-instruct}; DEVICE=${DEVICE:-cuda}; DTYPE=${DTYPE:-bfloat16}  # others: a CPU dry run
want() { [[ " $STEPS " == *" $1 "* ]]; }
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
cd "$R" || exit 1
# The banks travel apart from the tree (64 MiB a call) and are copied where the scripts read them (run 27: linking
# them failed, the synced tree held folders of those names).
rm -rf benchmarks/banks && mkdir -p benchmarks/banks "$O/selectors" && cp -r "$B/." benchmarks/banks/
step convert
for m in "$MD"/*.gguf; do
  $PY -c "from pathlib import Path; from lover_lmeval.core.loading import convert_gguf; print(convert_gguf(Path('$m')))" \
    > "$O/convert_$(basename "$m" .gguf).log" 2>&1 &
done
wait
want loop && {
  step "loop_ab $M"
  timeout "$LOOP_S" $PY benchmarks/performance/loop_ab.py --model $M --gguf "$MD/$M.gguf" --device $DEVICE \
    --dtype $DTYPE --questions 10 --rows 100 --max-new-tokens 128 --rounds 2 --compile --profile --profile-tokens 32 \
    --output "$O/loop_ab_$M.json" > "$O/loop_ab_$M.log" 2>&1 || step "loop_ab ended with $?"
}
want bench && {
  step "bench_decode $M"
  timeout "$BENCH_S" $PY benchmarks/performance/bench_decode.py --model $M --gguf "$MD/$M.gguf" --device $DEVICE \
    --dtype $DTYPE --n-questions 10 --batch-size 10 --lm-eval-questions 10 --lm-eval-batch-size 10 --skip-reencode \
    --output "$O/decode_$M.json" > "$O/bench_decode_$M.log" 2>&1 || step "bench_decode ended with $?"
}
want selectors && [ -n "$SETS" ] && {
  step "selectors: $SETS"
  for s in $SETS; do
    OMP_NUM_THREADS=3 timeout "$SEL_S" $PY benchmarks/selectors/selectors_run.py --set "$s" --out-dir "$O/selectors" \
      > "$O/sel_${s/\//_}.log" 2>&1 &
  done
  wait
}
step done
