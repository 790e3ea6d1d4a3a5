"""Time ``fit`` with the default VerifierConfig on a Qwen2.5-0.5B-sized problem (CPU).

1000 questions x 10 branches, D=896, features with LLM-like norms (~50 offset per set),
answers spread over up to 5 groups.  Target: <= 30 s.

    .venv/bin/python benchmarks/performance/bench_fit.py [--questions 1000] [--branches 10] [--dim 896]
"""

import argparse
import time

import torch

from lover_lmeval.core.verify.verifier import VerifierConfig, fit


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=int, default=1000)
    parser.add_argument("--branches", type=int, default=10)
    parser.add_argument("--dim", type=int, default=896)
    args = parser.parse_args()
    g = torch.Generator().manual_seed(0)
    q, n, d = args.questions, args.branches, args.dim
    offsets = 50 * torch.nn.functional.normalize(torch.randn(2, d, generator=g), dim=1)  # (2, D)
    features = torch.randn(q, n, 2, d, generator=g) + offsets  # (Q, N, 2, D)
    mask = torch.ones(q, n, dtype=torch.bool)
    groups = torch.randint(0, 5, (q, n), generator=g)
    config = VerifierConfig()
    start = time.perf_counter()
    result = fit(features, mask, groups, config)
    seconds = time.perf_counter() - start
    print(f"fit: {q} questions x {n} branches, D={d}, threads={torch.get_num_threads()}, {config}")
    print(f"final losses: { {k: round(v, 4) for k, v in result.final_losses.items()} }")
    print(f"seconds: {seconds:.1f}")


if __name__ == "__main__":
    main()
