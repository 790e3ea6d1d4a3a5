#!/bin/bash
# 0.5B on the GPU: features + the authors' layout, speed rows, parallelize, the authors' code, our train-split arms, n=400.
. /root/work/env.sh
M=qwen2.5-coder-0.5b-instruct; G=$W/models/q05.gguf; B=$R/benchmarks/banks/$M; O=$W/out/q05; mkdir -p $O/ckpt; cd $R
step export; python benchmarks/export_authors_layout.py --model $M --gguf $G --dtype float32 --train-docs 0:266 \
  --test-docs 0:400 --layers 12,24 --match-partition 200 --out $W/authors-in > $O/export.log 2>&1 || step EXPORT FAILED
step bench; python benchmarks/bench_decode.py --gguf $G --device cuda --dtype bfloat16 --n-questions 10 --batch-size 5 \
  --output $O/bench_q05_bf16_b5.json > $O/bench_b5.log 2>&1 || step BENCH FAILED
step parallelize; lm_eval --model lover_hf --model_args gguf_file=$G,parallelize=True,dtype=bfloat16 --tasks lover_gsm8k \
  --limit 2 --apply_chat_template --output_path $O/parallelize > $O/parallelize.log 2>&1 || step PARALLELIZE FAILED
step fits
for L in 0 1; do d=$W/authors-run$L; mkdir -p $d; cp $W/authors/*.py $d/
  (cd $d && python main.py --model_name $M --dataset_name gsm8k --encode_format qa --nepochs 5000 --lr 1e-5 --layer $L \
    --train_num_examples 200 --test_num_examples 400 --ntries 3 --exp_description layer$L \
    --hs_train_file_path $W/authors-in/hs_train.npy --model_answer_train_file_path $W/authors-in/answers_model_train.json \
    --gt_answer_train_file_path $W/authors-in/answers_gt_train.json --hs_test_file_path $W/authors-in/hs_test.npy \
    --gt_answer_test_file_path $W/authors-in/answers_gt_test.json \
    --model_answer_test_file_path $W/authors-in/answers_model_test.json > $O/authors_layer$L.out 2>&1; step authors $L done) &
done
MA="gguf_file=$G,dtype=float32,bank=$B/lover_gsm8k-train.jsonl.gz,bank_only=True"
C="--task lover_gsm8k --apply_chat_template --banked_only --limit 200 --fit_config regime=authors"
for L in 12 24; do
  OMP_NUM_THREADS=2 lover train --model_args $MA,layer=$L $C --select dev:66 --out $O/ckpt/gsm8k-train200-authors-dev66-L$L.safetensors > $O/train_A_L$L.log 2>&1 &
  OMP_NUM_THREADS=2 lover train --model_args $MA,layer=$L $C --out $O/ckpt/gsm8k-train200-authors-L$L.safetensors > $O/train_B_L$L.log 2>&1 &
  OMP_NUM_THREADS=2 lover train --model_args $MA,layer=$L $C --supervised --select dev:66 --out $O/ckpt/gsm8k-supervised-dev66-L$L.safetensors > $O/train_E_L$L.log 2>&1 &
done
OMP_NUM_THREADS=4 python benchmarks/regime_arms.py --model $M --gguf $G --dtype float32 --test-docs 0:400 --dev-docs 200:266 \
  --layers 12,24 --out $O/arms_test400.json > $O/arms_test400.log 2>&1 &
wait; step score
K=$O/ckpt; python benchmarks/regime_arms.py --model $M --gguf $G --dtype float32 --test-docs 0:400 --dev-docs 200:266 --layers 12,24 \
  --checkpoints "A'12=$K/gsm8k-train200-authors-dev66-L12.safetensors,B12=$K/gsm8k-train200-authors-L12.safetensors,E12=$K/gsm8k-supervised-dev66-L12.safetensors,A'24=$K/gsm8k-train200-authors-dev66-L24.safetensors,B24=$K/gsm8k-train200-authors-L24.safetensors,E24=$K/gsm8k-supervised-dev66-L24.safetensors" \
  --checkpoints-only --out $O/arms_trainsplit.json > $O/arms_trainsplit.log 2>&1 || step SCORE FAILED
cp -r $W/authors-run0/log $O/authors_log0; cp -r $W/authors-run1/log $O/authors_log1; cp $W/authors-in/order_train.json $O/
cp -r $W/authors-run*/result $O/ 2>/dev/null; touch $W/out/q05.done; step done
