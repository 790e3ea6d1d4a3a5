"""The core pipeline runs on a transformers model with lm-eval unimportable, and gives what lover_hf gives."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
from lm_eval.api.instance import Instance

from lover_lmeval.harness.model import LoverLM

CONTEXTS = ["Question: 2 + 2?\nAnswer:", "Question: 3 + 4?\nAnswer:", "Question: name a colour.\nAnswer:"]
GEN_KWARGS = {"until": ["\n\n"], "max_gen_toks": 6}
MODEL_ARGS = dict(n_branches=3, batch_size=2, fit_config="epochs=3;restarts=1")

# Run in a fresh interpreter where `import lm_eval` fails, as in an environment without lm-eval.
CORE_ONLY = """
import json, sys
sys.modules["lm_eval"] = None  # any import of lm_eval now raises ImportError
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer
from lover_lmeval.core.config import LoverConfig
from lover_lmeval.core.decoding import DecodingConfig
from lover_lmeval.core.pipeline import Pipeline
from lover_lmeval.core.verifier import VerifierConfig

folder, prompts, until, budget = json.loads(sys.argv[1])
model = AutoModelForCausalLM.from_pretrained(folder).eval()
tokenizer = AutoTokenizer.from_pretrained(folder)
config = LoverConfig(decoding=DecodingConfig(n_branches=3), fit=VerifierConfig(epochs=3, restarts=1))
pipe = Pipeline(model, tokenizer, config, model_name=folder)
results = pipe.run(prompts, until, budget, batch_size=2)
pipe.fit(results)
print(json.dumps({
    "token_ids": [[b.token_ids for b in r.branches] for r in results],
    "features": [r.features.tolist() for r in results],
    "scores": [r.scores("lover").tolist() for r in results],
    "picks": {s: pipe.select(results, s) for s in ("greedy", "majority", "cot_sum", "lover_max", "lover_sum")},
    "lm_eval_imported": any(m.split(".")[0] == "lm_eval" for m in sys.modules if sys.modules[m] is not None),
}))
"""


def test_core_pipeline_without_lm_eval_matches_lover_hf(tiny_model_dir):
    lm = LoverLM(pretrained=str(tiny_model_dir), **MODEL_ARGS)
    prompts, until, budget = lm.prompts(CONTEXTS, GEN_KWARGS)
    done = subprocess.run([sys.executable, "-c", CORE_ONLY, json.dumps([str(tiny_model_dir), prompts, until, budget])],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    core = json.loads(done.stdout.strip().splitlines()[-1])
    assert core["lm_eval_imported"] is False
    requests = [Instance("generate_until", {}, (c, GEN_KWARGS), i) for i, c in enumerate(CONTEXTS)]
    for request in requests:
        request.task_name = "task_a"
    results = lm.generate_until(requests, disable_tqdm=True)
    assert core["token_ids"] == [[b.token_ids for b in r.branches] for r in results]
    for got, want in zip(core["features"], results):
        np.testing.assert_allclose(np.array(got), want.features, atol=1e-5)
    for got, want in zip(core["scores"], results):
        np.testing.assert_allclose(np.array(got), want.scores("lover"), atol=1e-5)
    assert all(len(picks) == len(CONTEXTS) and all(isinstance(p, str) for p in picks)
               for picks in core["picks"].values())
    assert core["picks"]["lover_sum"] == lm.pipeline.select(results, "lover_sum")
