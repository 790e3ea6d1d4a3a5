#!/usr/bin/env bash
# The paper's comparisons (issue 5) for one model, step by step, on whatever device torch finds (a GPU makes the
# whole list take minutes; on the 2-core CPU use grow_gsm8k_banks.sh and small limits). Every step decodes into a
# resumable branch bank under $BANKS (banked questions are never decoded again), trains its label-free verifiers
# with `lover train`, and writes a `lover compare` leaderboard under $RESULTS.
#
#   GGUF=$(../shared/bin/get-model qwen2.5-coder-0.5b-instruct | tail -1) bash benchmarks/paper/paper_runs.sh
#   STEPS="gsm8k_train gsm8k_test" GSM8K_TEST=1319 bash benchmarks/paper/paper_runs.sh
#   TRAIN=0 STEPS=igsm IGSM_OPS="2 4 8" TEST=20 BATCH=8 bash benchmarks/paper/paper_runs.sh  # CPU: committed ckpts
#   TRAIN=0 FIT_CONFIG="orient=confidence" RESULTS=benchmarks/results/paper_NAME/orient_confidence bash ...  # variant fit
#
# Steps (in the order given by $STEPS):
#   gsm8k_train  verifiers trained label-free on the first $TRAIN GSM8K training questions: the paper's losses
#                (gsm8k-train) and the authors'-code variant (gsm8k-train-authors: inter_raw + curriculum)
#   gsm8k_test   the first $GSM8K_TEST GSM8K test questions: test-time fit, both trained verifiers, layer sweep
#   bbh_ood      the six BBH tasks scored by the GSM8K-trained verifiers (out of distribution, paper Table 7)
#   hotpotqa     verifier trained on $TRAIN unlabeled yes/no-like questions; the 458 yes/no dev questions
#   mmlu_pro     verifier trained on $TRAIN questions of the ten other categories; the test categories
#                $MMLU_PRO_CATEGORIES (default: the four of the paper's split)
#   igsm         verifier trained on $TRAIN iGSM max_op 8 training problems; test max_op 2/4/8/16
#   decoding     the first $DECODING_TEST GSM8K test questions with $DECODING_MODES branches (cot is gsm8k_test)
set -euo pipefail
cd "$(dirname "$0")/../.."
GGUF=${GGUF:?set GGUF to the model file, e.g. GGUF=\$(../shared/bin/get-model qwen2.5-coder-0.5b-instruct | tail -1)}
NAME=${NAME:-$(basename "$GGUF" .gguf)}
BATCH=${BATCH:-32}
TRAIN=${TRAIN:-200}  # 0: train nothing, score the checkpoints already under $CKPTS (CPU runs)
GSM8K_TEST=${GSM8K_TEST:-400}
TEST=${TEST:-}  # limit for the other test sets (empty: the whole split)
DECODING_TEST=${DECODING_TEST:-100}
DECODING_MODES=${DECODING_MODES:-"sample beam"}  # decoding modes of the decoding step
LAYERS=${LAYERS:-3,6,9,12,15,18,21}
IGSM_OPS=${IGSM_OPS:-"2 4 8 16"}  # iGSM max_op test sets of the igsm step
BBH_TASKS=${BBH_TASKS:-"boolean_expressions causal_judgement multistep_arithmetic_two navigate object_counting web_of_lies"}
MMLU_PRO_CATEGORIES=${MMLU_PRO_CATEGORIES:-"biology computer_science history physics"}  # test categories of mmlu_pro
STEPS=${STEPS:-"gsm8k_train gsm8k_test bbh_ood hotpotqa mmlu_pro igsm decoding"}
BANKS=${BANKS:-benchmarks/banks/$NAME}
RESULTS=${RESULTS:-benchmarks/results/paper_$NAME}
CKPTS=${CKPTS:-verifier_ckpts/$NAME}
LOVER=${LOVER:-lover}
FIT_CONFIG=${FIT_CONFIG:-}  # the test-time fit's VerifierConfig (lover_hf fit_config=, ';'-separated); empty: defaults
export LOVER_DATA_DIR=${LOVER_DATA_DIR:-$(cd .. && pwd)/shared/data} HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
ARGS="gguf_file=$GGUF,batch_size=$BATCH,dtype=float32${FIT_CONFIG:+,fit_config=$FIT_CONFIG}"
mkdir -p "$BANKS" "$RESULTS" "$CKPTS"
limit=()
[ -n "$TEST" ] && limit=(--limit "$TEST")

say() { echo "[paper_runs] $(date -u +%H:%M:%S) $*"; }

train() {  # task split bank out [more lover-train args]
  local task=$1 split=$2 bank=$3 out=$4
  shift 4
  [ "$TRAIN" = 0 ] && { say "TRAIN=0: not training $out"; return 0; }
  say "train $task/$split -> $out"
  $LOVER train --model_args "$ARGS" --task "$task" --split "$split" --limit "$TRAIN" --apply_chat_template \
    --bank "$BANKS/$bank" --out "$CKPTS/$out" "$@"
}

verifiers() {  # name=checkpoint ... -> "--verifiers a=x,b=y" for the checkpoints that exist (none: nothing)
  local kept=()
  for pair in "$@"; do [ -f "${pair#*=}" ] && kept+=("$pair"); done
  [ ${#kept[@]} -gt 0 ] && printf -- '--verifiers\n%s\n' "$(IFS=,; echo "${kept[*]}")"
  return 0
}

task_names() {  # prefix item ... -> "prefixitem,prefixitem,..."
  printf "$1%s," "${@:2}" | sed 's/,$//'
}

compare() {  # tasks bank out [more lover-compare args]
  local tasks=$1 bank=$2 out=$3
  shift 3
  say "compare $tasks -> $out"
  $LOVER compare --model_args "$ARGS,bank=$BANKS/$bank" --tasks "$tasks" --apply_chat_template \
    --out "$RESULTS/$out" "$@"
}

for step in $STEPS; do
  case $step in
    gsm8k_train)
      train lover_gsm8k train lover_gsm8k-train.jsonl.gz gsm8k-train.safetensors
      train lover_gsm8k train lover_gsm8k-train.jsonl.gz gsm8k-train-authors.safetensors \
        --losses nega+intra+inter_raw --fit_config "curriculum=0.2" ;;
    gsm8k_test)
      compare lover_gsm8k lover_gsm8k-test.jsonl.gz "gsm8k_test$GSM8K_TEST" --limit "$GSM8K_TEST" --layers "$LAYERS" \
        $(verifiers trained=$CKPTS/gsm8k-train.safetensors trained_authors=$CKPTS/gsm8k-train-authors.safetensors) ;;
    bbh_ood)
      for task in $BBH_TASKS; do
        compare "lover_bbh_$task" "lover_bbh_$task.jsonl.gz" "bbh_ood/$task" "${limit[@]}" \
          $(verifiers gsm8k=$CKPTS/gsm8k-train.safetensors gsm8k_authors=$CKPTS/gsm8k-train-authors.safetensors)
      done ;;
    hotpotqa)
      train lover_hotpotqa_yesno train lover_hotpotqa_yesno-train.jsonl.gz hotpotqa-train.safetensors
      compare lover_hotpotqa_yesno lover_hotpotqa_yesno-test.jsonl.gz hotpotqa "${limit[@]}" --layers "$LAYERS" \
        $(verifiers trained=$CKPTS/hotpotqa-train.safetensors gsm8k=$CKPTS/gsm8k-train.safetensors) ;;
    mmlu_pro)
      train lover_mmlu_pro_biology train lover_mmlu_pro-train.jsonl.gz mmlu_pro-train.safetensors
      compare "$(task_names lover_mmlu_pro_ $MMLU_PRO_CATEGORIES)" \
        lover_mmlu_pro-test.jsonl.gz mmlu_pro "${limit[@]}" \
        $(verifiers trained=$CKPTS/mmlu_pro-train.safetensors gsm8k=$CKPTS/gsm8k-train.safetensors) ;;
    igsm)
      train lover_igsm_op8 train lover_igsm-train.jsonl.gz igsm-train.safetensors
      compare "$(task_names lover_igsm_op $IGSM_OPS)" lover_igsm-test.jsonl.gz igsm "${limit[@]}" \
        $(verifiers trained=$CKPTS/igsm-train.safetensors gsm8k=$CKPTS/gsm8k-train.safetensors) ;;
    decoding)
      for mode in $DECODING_MODES; do
        ARGS="$ARGS,decoding=$mode" compare lover_gsm8k "lover_gsm8k-test-$mode.jsonl.gz" "decoding_$mode" \
          --limit "$DECODING_TEST" $(verifiers trained=$CKPTS/gsm8k-train.safetensors)
      done ;;
    *) echo "unknown step '$step' (known: gsm8k_train gsm8k_test bbh_ood hotpotqa mmlu_pro igsm decoding)" >&2
       exit 2 ;;
  esac
done
say done
