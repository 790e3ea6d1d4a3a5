#!/usr/bin/env bash
# The wheel as a user gets it: build it from this checkout, install it with the pinned CPU torch into a fresh venv
# outside the checkout, and from an empty folder run `lm_eval --model lover_hf --tasks lover_gsm8k --limit 2` and a
# `simple_evaluate` call (embedded model, LOVER_DATA_DIR data), asserting the lover metric rows.
#
#   bash scripts/check_wheel.sh              build and install into a temporary folder, check, remove it
#   bash scripts/check_wheel.sh install DIR  only build the wheel and its venv in DIR (.ci/run: while the suite runs)
#   bash scripts/check_wheel.sh test DIR     only run the checks with the venv DIR holds
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
source "$repo/scripts/phases.sh"
source "$repo/scripts/pip.sh"

install() {
  "$repo/.venv/bin/python" -m pip wheel -q --no-deps -w "$work/dist" "$repo"  # setup.sh made .venv
  wheel="$(ls "$work"/dist/lover_lmeval-*.whl)"
  "$repo/.venv/bin/python" -m zipfile -l "$wheel" > "$work/contents.txt"
  grep -q "lover_lmeval/task_configs/lover_gsm8k.yaml" "$work/contents.txt" \
    || { echo "check_wheel: the wheel carries no task YAMLs" >&2; exit 1; }
  python3 -m venv "$work/venv"
  pip_install "$work/venv/bin/python" torch==2.13.0
  pip_install "$work/venv/bin/python" "$wheel"
  "$work/venv/bin/pip" check
}

run_tests() {
  wheel="$(ls "$work"/dist/lover_lmeval-*.whl)"
  rm -rf "$work/empty" && mkdir "$work/empty" && cd "$work/empty"
  export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1
  : "${LOVER_DATA_DIR:?set LOVER_DATA_DIR to the offline data (e.g. ../shared/data)}"
  # The command and the call run at once: each is one process that mostly imports and indexes on one core.
  "$work/venv/bin/lm_eval" --model lover_hf --model_args n_branches=2 --gen_kwargs max_gen_toks=16 \
    --tasks lover_gsm8k --limit 2 --output_path out > "$work/cli.log" 2>&1 &
  cli=$!
  call=0
  "$work/venv/bin/python" - <<'PY' || call=$?
from lm_eval import simple_evaluate

results = simple_evaluate(model="lover_hf", model_args="n_branches=2", tasks=["lover_gsm8k"], limit=2,
                          gen_kwargs="max_gen_toks=16")["results"]["lover_gsm8k"]
rows = {key.split(",")[1] for key in results if key.startswith("exact_match,")}
assert {"greedy", "majority", "cot_sum", "lover_max", "lover_sum"} <= rows, rows
print("check_wheel: simple_evaluate rows", sorted(rows))
PY
  status=0
  wait "$cli" || status=$?
  tail -n 15 "$work/cli.log"
  ((call == 0)) || { echo "check_wheel: simple_evaluate failed (exit $call)" >&2; exit 1; }
  ((status == 0)) || { echo "check_wheel: lm_eval failed (exit $status)" >&2; exit 1; }
  grep -q "lover_sum" "$work/cli.log" || { echo "check_wheel: lm_eval printed no lover_sum row" >&2; exit 1; }
  echo "check_wheel: ok ($(basename "$wheel"))"
}

phases check_wheel "$@"
