#!/usr/bin/env bash
# Grow the GSM8K branch banks of Qwen2.5-Coder-0.5B-Instruct in steps, alternating test and train split,
# and write a `lover compare` leaderboard after every test step (test-time fit, the verifier trained on the
# train bank so far, cross-fitted supervised ceiling, diagnostics, layer sweep over $LAYERS). Resumable: every question is appended to
# its bank as soon as it is decoded, so re-running this script continues where it stopped. Banked questions
# are not decoded again, and their features at every layer of $LAYERS come from lover_hf's local feature
# cache (~/.cache/lover-lmeval/features; recomputing them costs ~1/3 of the decode time), so small test
# steps cost only their new questions.
#
#   nohup bash benchmarks/paper/grow_gsm8k_banks.sh > /tmp/grow_banks.log 2>&1 &
#
# Steps (override with STEPS="train:50 test:120 ..."): the test subset is the first K questions of
# ../shared/data/gsm8k/test.jsonl in file order (fixed, no sampling), the train subset the first K of train.
# BATCH questions are decoded together (BATCH x 10 rows): on a 2-core CPU a 50-row step costs about as
# much as a 10-row one, so batching is nearly free throughput (benchmarks/runs/perf2_batched_questions.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
STEPS=${STEPS:-"train:50 test:120 train:100 test:200 train:200 test:300"}
BATCH=${BATCH:-5}
LAYERS=${LAYERS:-3,6,9,12,15,18,21}
MODEL=qwen2.5-coder-0.5b-instruct
GGUF=$(../shared/bin/get-model "$MODEL" | tail -1)
BANKS=benchmarks/banks/$MODEL
CKPT=verifier_ckpts/$MODEL/gsm8k-train.safetensors
export LOVER_DATA_DIR=${LOVER_DATA_DIR:-$(cd .. && pwd)/shared/data} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
ARGS="gguf_file=$GGUF,batch_size=$BATCH,extra_layers=${LAYERS//,/;}"

for step in $STEPS; do
  split=${step%%:*}
  limit=${step##*:}
  echo "[grow] $(date -u +%H:%M:%S) $split $limit"
  if [ "$split" = train ]; then
    .venv/bin/lover train --model_args "$ARGS" --task lover_gsm8k --split train --limit "$limit" \
      --apply_chat_template --bank "$BANKS/lover_gsm8k-train.jsonl.gz" --out "$CKPT"
  else
    extra=()
    [ -f "$CKPT" ] && extra+=(--verifiers "trained=$CKPT")
    .venv/bin/lover compare --model_args "$ARGS,bank=$BANKS/lover_gsm8k-test.jsonl.gz" --tasks lover_gsm8k \
      --limit "$limit" --apply_chat_template --layers "$LAYERS" "${extra[@]}" --out "benchmarks/results/gsm8k_$MODEL/test$limit"
  fi
done
echo "[grow] $(date -u +%H:%M:%S) done"
