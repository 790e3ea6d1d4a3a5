"""lover_vllm with `data_parallel_size` > 1: replicas started once a run, each decoding whole questions.

lm-eval's VLLM starts its Ray replicas inside every `_model_generate` call and shuts Ray down after it: CoT-decoding's
two calls (the first tokens, then the continuations) would load every replica twice a chunk, and spread one question's
N continuations over replicas, so none shares its prompt's KV cache. Here each replica is a Ray actor holding one
engine (`LLM`, `tensor_parallel_size` devices), started on the first decode and kept until `shutdown` (the end of the
run, or phases' switch to the HF copy). A question goes to one replica with both its requests, and the replica runs
the same `VLLMEngine` on it as a single engine does, so the branches do not depend on the parallelism: `cot` is
greedy after the first token, `sample` is seeded per prompt (`question_seed`), never per replica or position.

Each chunk's questions are dealt out in turn (replica r takes questions r, r + R, ...: neighbours, often of similar
length, spread over all replicas) and handed over as each replica's share returns, so the pipeline banks as they come.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

from ...core.decode.engine import Decoded, RunSpec
from .engine import VLLMEngine

#: Environment a replica's engine must not inherit from the driver: it would make the single-engine replica compute a
#: data-parallel rank of its own (lm-eval's VLLM drops the same names).
DP_ENVIRONMENT = ("VLLM_DP_RANK", "VLLM_DP_RANK_LOCAL", "VLLM_DP_SIZE", "VLLM_DP_MASTER_IP", "VLLM_DP_MASTER_PORT")


class Replica:
    """One engine in a Ray actor (wrapped by `ray.remote` in `ReplicaEngine.start`); `decode` runs `VLLMEngine` on
    it."""

    def __init__(self, model_args: dict, lora_request=None):
        from vllm import LLM

        for name in DP_ENVIRONMENT:
            os.environ.pop(name, None)
        # an engine inside an actor must not use Ray itself (nested placement groups deadlock): vLLM picks its own
        self.llm = LLM(**{k: v for k, v in model_args.items() if k != "distributed_executor_backend"})
        self.lora_request = lora_request

    def pid(self) -> int:
        return os.getpid()

    def decode(self, engine: VLLMEngine, prompts: list[list[int]], spec: RunSpec) -> list[Decoded]:
        from vllm.inputs import TokensPrompt

        def generate(requests, params):
            return self.llm.generate([TokensPrompt(prompt_token_ids=r) for r in requests], sampling_params=params,
                                     use_tqdm=False, lora_request=self.lora_request)

        return list(engine.with_generate(generate).decode(prompts, spec))


class ReplicaEngine:
    """`size` replicas of the engine `model_args` describe, `gpus` devices each (0 on vLLM's CPU backend). Decodes as
    `VLLMEngine` does, `engine` (its tokenizer, end tokens, chunk) telling each replica how."""

    def __init__(self, engine: VLLMEngine, model_args: dict, size: int, gpus: int, lora_request=None):
        self.engine, self.model_args, self.size, self.gpus = engine, model_args, size, gpus
        self.lora_request = lora_request
        self.name = engine.name
        self.replicas: list = []

    def start(self) -> None:
        """The replicas, started once (Ray too, if this process has not started it)."""
        if self.replicas:
            return
        import ray

        if not ray.is_initialized():
            ray.init(ignore_reinit_error=True, log_to_driver=False)
        actor = ray.remote(num_gpus=self.gpus, num_cpus=0 if self.gpus else 1)(Replica)
        self.replicas = [actor.remote(self.model_args, self.lora_request) for _ in range(self.size)]

    def pids(self) -> list[int]:
        import ray

        self.start()
        return ray.get([replica.pid.remote() for replica in self.replicas])

    def decode(self, prompts: list[list[int]], spec: RunSpec) -> Iterator[Decoded]:
        import ray

        self.start()
        # a replica decodes its share of a chunk in one VLLMEngine call (its own chunk: the whole share)
        step = (self.engine.chunk_questions or max(len(prompts), 1)) * self.size
        inner = VLLMEngine(None, self.engine.tokenizer, self.engine.eos_ids)  # its generate: the replica's engine
        for start in range(0, len(prompts), step):
            shares = {}  # the replica's future -> the questions it decodes
            for r, replica in enumerate(self.replicas):
                questions = list(range(start + r, min(start + step, len(prompts)), self.size))
                if questions:
                    shares[replica.decode.remote(inner, [prompts[q] for q in questions], spec)] = questions
            while shares:
                (ready,), _ = ray.wait(list(shares), num_returns=1)
                questions = shares.pop(ready)
                for decoded in ray.get(ready):
                    yield decoded._replace(q=questions[decoded.q])

    def shutdown(self) -> None:
        """Every replica's engine stopped and its memory freed (its actor process ends)."""
        import ray

        for replica in self.replicas:
            ray.kill(replica)
        self.replicas = []
