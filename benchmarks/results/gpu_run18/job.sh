#!/bin/bash
# RESULTS run 18 A (Regime item 7 on a GPU): the 1.5B GSM8K banks to test 0-399 / train 0-265, then the arms at
# n = 400 (test-time fits) and on the training split (lover train + scoring). Every step is resumable (banked
# questions are skipped) and logs into $O; what it finishes is copied back by the tool call that waits on it.
# Needs: R (a copy of the repository outside the device's synced folder), G (the GGUF), B (bank folder, the
# committed 1.5B banks in it), O (outputs); python with lm-eval etc. on PYTHONPATH. Sizes are variables so that a
# CPU dry run on the 135M model can take the same path (see the run 18 notes).
set -u
M=${M:-qwen2.5-coder-1.5b-instruct}; DT=${DT:-bfloat16}; BATCH=${BATCH:-64}; LAYERS=${LAYERS:-14,28}
TEST=${TEST:-150:400}; TRAIN=${TRAIN:-0:200}; ALLTEST=${ALLTEST:-0:400}; DEV=${DEV:-200:266}
LIMIT=${LIMIT:-200}; K=${K:-66}; THREADS=${THREADS:-2}; PY=${PY:-python}
STEPS=${STEPS:-decode arms train}  # e.g. STEPS=arms: only the test-time arms (the banks and checkpoints are committed)
want() { [[ " $STEPS " == *" $1 "* ]]; }
for s in $STEPS; do [[ " decode arms train " == *" $s "* ]] || { echo "STEPS=$STEPS: '$s' is not a step (decode arms train, space-separated)"; exit 2; }; done
step() { echo "=== $(date -u +%H:%M:%S) $*"; }
cd "$R" || exit 1
mkdir -p "$O/ckpt"
MA="gguf_file=$G,dtype=$DT,batch_size=$BATCH"
step convert  # one process converts the GGUF once; the others then load the converted folder in seconds
$PY -c "from pathlib import Path; from lover_lmeval.core.loading import convert_gguf; print(convert_gguf(Path('$G')))" \
  > "$O/convert.log" 2>&1 || { step CONVERT FAILED; exit 1; }
want decode && {
step decode
$PY benchmarks/decode_bank.py --model_args "$MA" --task lover_gsm8k --split test --docs "$TEST" \
  --bank "$B/lover_gsm8k-test.jsonl.gz" > "$O/decode_test.log" 2>&1 &
$PY benchmarks/decode_bank.py --model_args "$MA" --task lover_gsm8k --split train --docs "$TRAIN" \
  --bank "$B/lover_gsm8k-train.jsonl.gz" > "$O/decode_train.log" 2>&1 &
wait; step decoded
grep -h "banked\|decoded .*/" "$O"/decode_*.log | tail -4
}
want arms && {
step arms  # the test-time arms at n = 400, beside the six train-split fits
OMP_NUM_THREADS=$((THREADS * 2)) $PY benchmarks/regime_arms.py --model "$M" --gguf "$G" --dtype "$DT" --banks "$B" \
  --test-docs "$ALLTEST" --dev-docs "$DEV" --layers "$LAYERS" --out "$O/arms_test.json" > "$O/arms_test.log" 2>&1 &
}
want train && {
T="$PY -m lover_lmeval.apps.cli train"
C="--task lover_gsm8k --apply_chat_template --banked_only --limit $LIMIT --fit_config regime=authors"
for L in ${LAYERS//,/ }; do
  A="--model_args gguf_file=$G,dtype=$DT,bank=$B/lover_gsm8k-train.jsonl.gz,bank_only=True,layer=$L"
  OMP_NUM_THREADS=$THREADS $T $A $C --out "$O/ckpt/gsm8k-train$LIMIT-authors-L$L.safetensors" > "$O/train_B_L$L.log" 2>&1 &
  OMP_NUM_THREADS=$THREADS $T $A $C --select dev:$K --out "$O/ckpt/gsm8k-train$LIMIT-authors-dev$K-L$L.safetensors" \
    > "$O/train_A_L$L.log" 2>&1 &
  OMP_NUM_THREADS=$THREADS $T $A $C --supervised --select dev:$K --out "$O/ckpt/gsm8k-supervised-dev$K-L$L.safetensors" \
    > "$O/train_E_L$L.log" 2>&1 &
done
wait; step score
S=""
for f in "$O"/ckpt/*.safetensors; do n=$(basename "$f" .safetensors); S="$S,$n=$f"; done
$PY benchmarks/regime_arms.py --model "$M" --gguf "$G" --dtype "$DT" --banks "$B" --test-docs "$ALLTEST" \
  --dev-docs "$DEV" --layers "$LAYERS" --checkpoints "${S#,}" --checkpoints-only --out "$O/arms_trainsplit.json" \
  > "$O/arms_trainsplit.log" 2>&1 || step SCORE FAILED
}
wait
step done
