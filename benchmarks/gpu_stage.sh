#!/bin/bash
# Here, before and after a GPU run's device calls (benchmarks/gpu_device.sh is the device side). From the repo root:
#   gpu_stage.sh stage MODEL...   wheels (gpu_wheels.sh) into .whl/; into .gpu/: data/ (GSM8K, HotpotQA, MMLU-Pro,
#                                 BBH from $LOVER_DATA_DIR), each MODEL's GGUF in 60 MiB pieces MODEL.pNN, and
#                                 banks/ and banks05/ from the committed banks named in BANKS and BANKS2 (MODEL/FILE)
#   gpu_stage.sh slim             takes the heavy tracked folders out of git's index and excludes them, so that a
#                                 device call carries the 2.5 MB the jobs need (the tracked tree is over the 64 MiB a
#                                 call carries); they stay on disk. Commit nothing while slim, and warn other
#                                 agents of this checkout: git status hides new files under those folders meanwhile.
#   gpu_stage.sh unslim           puts them back (their index entries reset to HEAD; the exclude lines removed)
# Calls, in order: `device.sh setup` carrying .whl .gpu/data .gpu/banks; `device.sh piece banks05` carrying
# .gpu/banks05; `device.sh piece MODEL.pNN` carrying that piece, one a call; `device.sh launch SECONDS`.
set -euo pipefail
HEAVY="benchmarks/banks benchmarks/results/paper_qwen2.5-coder-0.5b-instruct benchmarks/results/paper_smollm2-135m-instruct
  benchmarks/results/paper_qwen2.5-coder-1.5b-instruct benchmarks/results/selectors benchmarks/results/gpu_run15
  verifier_ckpts tests docs"
EXCLUDE=.git/info/exclude
case ${1:-} in
  stage)
    shift
    grep -qx '/.whl/' $EXCLUDE 2>/dev/null || printf '/.whl/\n/.gpu/\n' >> $EXCLUDE
    [ -d .whl ] || bash benchmarks/gpu_wheels.sh
    rm -rf .gpu/banks .gpu/banks05 && mkdir -p .gpu/data .gpu/banks .gpu/banks05  # no stale banks in a call
    cp -r "${LOVER_DATA_DIR:?set LOVER_DATA_DIR}"/{README.md,gsm8k,hotpotqa,mmlu_pro,bbh} .gpu/data/
    for b in ${BANKS:-}; do mkdir -p ".gpu/banks/$(dirname "$b")" && cp "benchmarks/banks/$b" ".gpu/banks/$b"; done
    for b in ${BANKS2:-}; do mkdir -p ".gpu/banks05/$(dirname "$b")" && cp "benchmarks/banks/$b" ".gpu/banks05/$b"; done
    for m in "$@"; do
      gguf=$(../shared/bin/get-model "$m" | tail -1)
      split -b 60M -d -a 2 "$gguf" ".gpu/$m.p" && echo "$m: $(ls .gpu/$m.p* | wc -l) pieces, sha256 $(sha256sum "$gguf" | cut -c1-64)"
    done
    du -sh .whl .gpu/data .gpu/banks .gpu/banks05 ;;
  slim)
    git rm -r -q --cached $HEAVY
    for d in $HEAVY; do echo "/$d/" >> $EXCLUDE; done
    echo "travels: $(git ls-files -z | xargs -0 du -cb | tail -1 | cut -f1) bytes tracked" ;;
  unslim)
    git reset -q -- $HEAVY
    for d in $HEAVY; do grep -vxF "/$d/" $EXCLUDE > $EXCLUDE.tmp || true; mv $EXCLUDE.tmp $EXCLUDE; done
    git status --short | head ;;
  *) echo "usage: $0 stage MODEL... | slim | unslim" >&2; exit 2 ;;
esac
