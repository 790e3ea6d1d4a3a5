#!/bin/bash
# The device side of a GPU run (the device tool lends a machine that reaches no registry and syncs the repository
# afresh on each call, so everything lives under $W): one verb a tool call. setup (wheels, data, banks, a check that
# the stack imports and sees the GPU), piece NAME (a file .gpu/NAME: a GGUF piece `MODEL.pNN`; a folder: more banks,
# merged into $W/banks), launch SECONDS (assemble and verify each GGUF, start the run's job detached, then wait), wait
# SECONDS; `wheel NAME [SECONDS]` joins a wheel carried in pieces, installs it and runs the run's $SMOKE command (at
# most SECONDS); `convert` starts the GGUFs' conversion detached, so that it overlaps later transfers. launch and wait
# copy the banks named, the logs and checkpoints into $OUT when the job ends (or fails) or SECONDS pass. A run's own device.sh sets JOB (its job script, from the repository root), GGUFS ("MODEL:SHA256 ...",
# get-model names; the first is also G), DEFAULT_STEPS (the job's steps when STEPS is unset) and BANKS_BACK (bank files
# to copy back, relative to $W/banks), then runs this. On the device `../shared/bin/get-model MODEL` prints the
# assembled GGUF, so scripts that fetch by name run unchanged. First used by run 18 A
# (benchmarks/gpu_stage.sh makes the wheels, data, banks and pieces here, and slims the tree a call carries).
: "${JOB:?set by the run's device.sh}" "${GGUFS:?set by the run's device.sh}"
W=/root/w
export PATH=$W/site/bin:$PATH PYTHONPATH=$W/site:$W/repo LOVER_DATA_DIR=$W/data LOVER_CACHE_DIR=$W/cache HF_HUB_OFFLINE=1 \
  HF_DATASETS_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
collect() {  # at most 8 files back: the banks named, one tarball of logs/JSONs, one of checkpoints
  for bank in ${BANKS_BACK:-}; do cp "$W/banks/$bank" "$OUT/"; done
  tar -czf "$OUT/logs.tar.gz" --exclude=out/ckpt -C $W out
  [ -d $W/out/ckpt ] && tar -czf "$OUT/ckpt.tar.gz" -C $W/out ckpt
  ls -la "$OUT"; tail -5 $W/out/job.log
}
wait_job() {  # until the job ends or $1 seconds pass, printing progress every minute
  local end=$(( $(date +%s) + $1 )) i=0
  while [ $(date +%s) -lt $end ] && ! grep -q "=== .* \(done\|FAILED\)$" $W/out/job.log 2>/dev/null \
      && pgrep -f "$JOB" > /dev/null; do
    sleep 5; i=$((i + 1))
    [ $((i % 12)) -eq 0 ] && { date -u +%T; tail -n1 $W/out/job.log; tail -qn1 $W/out/*.log 2>/dev/null | cut -c1-160; }
  done
  collect
}
join_ggufs() {  # each GGUF of $GGUFS from its pieces, verified (once: a joined, verified file is kept)
  for spec in $GGUFS; do
    m=${spec%%:*}; [ -f $W/m/$m.gguf.ok ] && continue
    cat $W/p/$m.p?? > $W/m/$m.gguf && echo "${spec#*:}  $W/m/$m.gguf" | sha256sum -c && touch $W/m/$m.gguf.ok || return 1
  done
}
repo_copy() {  # the synced tree is replaced on every call: the job runs from a copy outside it
  rm -rf $W/repo && mkdir -p $W/repo && cp -r lover_lmeval benchmarks pyproject.toml $W/repo/ \
    && ln -sfn lover_lmeval/task_configs $W/repo/task_configs
}
case $1 in
  setup)
    mkdir -p $W/p $W/site $W/out $W/m $W/shared/bin
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target $W/site .whl/*.whl || exit 1
    for d in .gpu/*/; do cp -r "$d" $W/; done  # the folders this call carries: data/, banks/, ...
    # lover_lmeval's start-up hook (its .pth in a pip install) registers the lover_* tasks; here the package is on
    # PYTHONPATH only, so a sitecustomize there imports the hook, after any sitecustomize the image already has
    printf '%s\n' 'import os, sys' 'for _p in sys.path:' \
      '    _f = os.path.join(_p, "sitecustomize.py")' \
      '    if os.path.abspath(_p) != os.path.dirname(os.path.abspath(__file__)) and os.path.isfile(_f):' \
      '        exec(compile(open(_f).read(), _f, "exec")); break' \
      'import lover_lmeval.harness.autoload' > $W/site/sitecustomize.py
    printf '%s\n' '#!/bin/bash' "f=$W/m/\$1.gguf; [ -f \"\$f\" ] && echo \"\$f\" || { echo \"no \$f\" >&2; exit 1; }" \
      > $W/shared/bin/get-model && chmod +x $W/shared/bin/get-model
    repo_copy
    nvidia-smi -L; nproc; free -g | head -2
    cd $W/repo && python3 -c "
import torch, transformers, lm_eval, gguf, datasets
print(torch.__version__, transformers.__version__, datasets.__version__, torch.cuda.get_device_name(0))
from lm_eval.tasks import TaskManager
from lover_lmeval.harness.model import LoverLM
import lover_lmeval.apps.cli
t = TaskManager().load(['lover_gsm8k'])['tasks']['lover_gsm8k']
print('test docs', len(list(t.test_docs())), 'train docs', len(list(t.training_docs())))" 2>&1 | grep -v Warning | tail -5 ;;
  piece)
    if [ -d ".gpu/$2" ]; then cp -r ".gpu/$2/." $W/banks/ && find $W/banks -type f | wc -l
    else cp ".gpu/$2" $W/p/ && ls $W/p | wc -l && du -cb $W/p | tail -1; fi ;;
  wheel)  # a wheel over 60 MiB travels as pieces .gpu/WHEEL.pNN (`piece` each): join, install, then $SMOKE if set
    cat $W/p/$2.p?? > $W/$2 && python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
      --target $W/site $W/$2 || exit 1
    repo_copy; for d in .gpu/*/; do cp -r "$d" $W/; done  # what the smoke test reads may ride with the last piece
    [ -z "${SMOKE:-}" ] || (cd $W/repo && timeout "${3:-120}" bash -c "$SMOKE" > $W/out/smoke.log 2>&1; \
      echo "smoke ended with $?" >> $W/out/smoke.log); tail -n 25 $W/out/smoke.log 2>/dev/null ;;
  convert)  # join and verify the GGUFs whose pieces are all here, and convert them detached (launch's job waits)
    join_ggufs || exit 1; for d in .gpu/*/; do cp -r "$d" $W/; done  # folders riding with this call
    rm -rf $W/repo_c && mkdir -p $W/repo_c && cp -r lover_lmeval $W/repo_c/  # its own copy: later calls replace repo
    for m in $W/m/*.gguf; do
      (cd $W/repo_c && PYTHONPATH=$W/site:$W/repo_c setsid nohup python3 -c "from pathlib import Path; from lover_lmeval.core.loading import \
convert_gguf; print(convert_gguf(Path('$m')))" > $W/out/convert_$(basename $m .gguf).log 2>&1 < /dev/null &)
    done; sleep 1; pgrep -fc convert_gguf ;;
  launch)
    repo_copy; join_ggufs || exit 1
    first=${GGUFS%% *}
    STEPS="${STEPS:-$DEFAULT_STEPS}" BATCH=128 PY=python3 R=$W/repo G=$W/m/${first%%:*}.gguf MD=$W/m B=$W/banks \
      O=$W/out setsid nohup bash "$W/repo/$JOB" > $W/out/job.log 2>&1 < /dev/null &
    sleep 2; wait_job $2 ;;
  wait) wait_job $2 ;;
esac
