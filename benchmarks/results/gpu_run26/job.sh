#!/bin/bash
# Run 26 on a GPU (issue GPU decode items 1 and 5): the decoding loop's arms (loop_ab.py) on the 1.5B model in bf16,
# compiled arm and torch.profiler included, one JSON and one profile file into $O. Needs R (a copy of the repository
# outside the device's synced folder, the committed banks in it), G (the GGUF), O (outputs); python with lm-eval etc.
# on PYTHONPATH. Launched by ./device.sh (run 18's harness: wheels, data and the GGUF in pieces).
set -u
PY=${PY:-python}; STEPS=${STEPS:-1.5b}; Q=${Q:-20}; ROWS=${ROWS:-100}
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
cd "$R" || exit 1
step convert  # once; the arms then load the converted folder in seconds
$PY -c "from pathlib import Path; from lover_lmeval.core.loading import convert_gguf; print(convert_gguf(Path('$G')))" \
  > "$O/convert.log" 2>&1 || { step CONVERT FAILED; exit 1; }
for size in $STEPS; do
  step "loop_ab $size"
  $PY benchmarks/performance/loop_ab.py --model "qwen2.5-coder-$size-instruct" --gguf "$G" --device cuda \
    --dtype bfloat16 --questions "$Q" --rows "$ROWS" --rounds 2 --compile --profile \
    --output "$O/loop_ab_$size.json" > "$O/loop_ab_$size.log" 2>&1 || { step "loop_ab $size FAILED"; exit 1; }
done
step done
