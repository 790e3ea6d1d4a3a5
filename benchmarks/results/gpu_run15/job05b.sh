#!/bin/bash
. /root/work/env.sh
M=qwen2.5-coder-0.5b-instruct; G=$W/models/q05.gguf; B=$R/benchmarks/banks/$M; O=$W/out/q05; cd $R
MA="gguf_file=$G,dtype=float32,bank=$B/lover_gsm8k-train.jsonl.gz,bank_only=True"
C="--task lover_gsm8k --apply_chat_template --banked_only --limit 200 --fit_config regime=authors"
T="python -m lover_lmeval.apps.cli train"
step trains
for L in 12 24; do
  OMP_NUM_THREADS=2 $T --model_args $MA,layer=$L $C --select dev:66 --out $O/ckpt/gsm8k-train200-authors-dev66-L$L.safetensors > $O/train_A_L$L.log 2>&1 &
  OMP_NUM_THREADS=2 $T --model_args $MA,layer=$L $C --out $O/ckpt/gsm8k-train200-authors-L$L.safetensors > $O/train_B_L$L.log 2>&1 &
  OMP_NUM_THREADS=2 $T --model_args $MA,layer=$L $C --supervised --select dev:66 --out $O/ckpt/gsm8k-supervised-dev66-L$L.safetensors > $O/train_E_L$L.log 2>&1 &
done
wait; step score
K=$O/ckpt; S=""
for f in $K/*.safetensors; do n=$(basename $f .safetensors); S="$S,$n=$f"; done
python benchmarks/regime_arms.py --model $M --gguf $G --dtype float32 --test-docs 0:400 --dev-docs 200:266 --layers 12,24 \
  --checkpoints "${S#,}" --checkpoints-only --out $O/arms_trainsplit.json > $O/arms_trainsplit.log 2>&1 || step SCORE FAILED
step done
