"""Time ``fit`` on a Qwen2.5-0.5B-sized problem (CPU), alone or against an older commit's fit in one run.

1000 questions x 10 branches, D=896, features with LLM-like norms (~50 offset per set), answers spread over up to 5
groups; the default VerifierConfig (target <= 30 s), or ``--fit_config regime=authors`` (issue GPU decode item 6:
400 questions <= 60 s).

    .venv/bin/python -m benchmarks.performance.bench_fit [--questions 1000] [--branches 10] [--dim 896]
        [--fit_config "regime=authors;epochs=500"] [--threads 1]
    # A/B in one run: the fit of commit REV (its lover_lmeval, from `git archive`) and this tree's, alternated
    .venv/bin/python -m benchmarks.performance.bench_fit --ab REV --repeats 2 --out benchmarks/results/x.json ...

Each arm runs in its own process (same inputs, same seed); the A/B output holds each arm's seconds, the ratio of the
medians, and the largest difference between the two arms' final losses and probe scores (the same fit up to float
rounding, or not).
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parents[2]


def problem(questions: int, branches: int, dim: int):
    """Synthetic real-shaped inputs: features (Q, N, 2, D), mask (Q, N), groups (Q, N); seed 0."""
    g = torch.Generator().manual_seed(0)
    offsets = 50 * torch.nn.functional.normalize(torch.randn(2, dim, generator=g), dim=1)  # (2, D)
    features = torch.randn(questions, branches, 2, dim, generator=g) + offsets  # (Q, N, 2, D)
    mask = torch.ones(questions, branches, dtype=torch.bool)
    groups = torch.randint(0, 5, (questions, branches), generator=g)
    return features, mask, groups


def one_fit(args) -> dict:
    """Time one fit in this process (whichever lover_lmeval is first on sys.path)."""
    import lover_lmeval
    from lover_lmeval.core.verify.verifier import fit
    from lover_lmeval.core.verify.verifier_config import config_from_string

    torch.set_num_threads(args.threads or torch.get_num_threads())
    features, mask, groups = problem(args.questions, args.branches, args.dim)
    config = config_from_string(args.fit_config)
    torch.optim.AdamW([torch.zeros(1, requires_grad=True)])  # its first use imports torch._dynamo (s): not the fit's
    start = time.perf_counter()
    result = fit(features, mask, groups, config)
    seconds = time.perf_counter() - start
    with torch.no_grad():
        scores = result.verifier.scores(features[:50])  # (50, N)
    return {"module": lover_lmeval.__file__, "seconds": seconds, "final_losses": result.final_losses,
            "restart_losses": result.restart_losses,
            "scores": scores.flatten().tolist(), "threads": torch.get_num_threads(), "config": repr(config)}


def ab(args) -> dict:
    """Arms 'old' (commit args.ab) and 'new' (this tree), alternated args.repeats times, each in a subprocess."""
    old_root = Path(tempfile.mkdtemp(prefix="bench_fit_old_"))
    archive = subprocess.run(["git", "-C", str(REPO), "archive", args.ab, "lover_lmeval"], check=True,
                             capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(old_root)], input=archive, check=True)
    base = [sys.executable, __file__, "--questions", str(args.questions), "--branches", str(args.branches),
            "--dim", str(args.dim), "--fit_config", args.fit_config, "--threads", str(args.threads), "--json"]
    runs = {"old": [], "new": []}
    for _ in range(args.repeats):
        for arm, root in (("old", old_root), ("new", REPO)):
            done = subprocess.run(base, capture_output=True, text=True, check=True,
                                  env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin", "HOME": str(Path.home()),
                                       "OMP_NUM_THREADS": str(args.threads or "")})
            runs[arm].append(json.loads(done.stdout.strip().splitlines()[-1]))
            print(arm, f"{runs[arm][-1]['seconds']:.1f} s", runs[arm][-1]["module"], file=sys.stderr)
    old, new = runs["old"][0], runs["new"][0]
    loss_diff = max(abs(old["final_losses"][k] - new["final_losses"][k]) for k in old["final_losses"])
    score_diff = max(abs(a - b) for a, b in zip(old["scores"], new["scores"]))
    median = {arm: statistics.median(r["seconds"] for r in rows) for arm, rows in runs.items()}
    return {"rev_old": args.ab, "questions": args.questions, "branches": args.branches, "dim": args.dim,
            "fit_config": args.fit_config, "threads": args.threads, "repeats": args.repeats,
            "seconds": {arm: [round(r["seconds"], 2) for r in rows] for arm, rows in runs.items()},
            "median_seconds": median, "speedup_old_over_new": median["old"] / median["new"],
            "max_final_loss_diff": loss_diff, "max_score_diff_50_questions": score_diff,
            "final_losses": {"old": old["final_losses"], "new": new["final_losses"]},
            "restart_losses": {"old": old["restart_losses"], "new": new["restart_losses"]}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--branches", type=int, default=10)
    parser.add_argument("--dim", type=int, default=896)
    parser.add_argument("--fit_config", default="", help="VerifierConfig fields, e.g. 'regime=authors;epochs=500'")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    parser.add_argument("--json", action="store_true", help="print one JSON line (what --ab reads)")
    parser.add_argument("--ab", default="", help="commit whose fit runs as arm 'old', alternated with this tree's")
    parser.add_argument("--repeats", type=int, default=1, help="A/B rounds")
    parser.add_argument("--out", default="", help="A/B: also write the JSON here")
    args = parser.parse_args()
    if args.ab:
        report = ab(args)
        text = json.dumps(report, indent=2)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n")
        return
    report = one_fit(args)
    if args.json:
        print(json.dumps(report))
        return
    print(f"fit: {args.questions} questions x {args.branches} branches, D={args.dim}, threads={report['threads']}, "
          f"{report['config']}")
    print(f"final losses: { {k: round(v, 4) for k, v in report['final_losses'].items()} }")
    print(f"seconds: {report['seconds']:.1f}")


if __name__ == "__main__":
    main()
