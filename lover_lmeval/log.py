"""The package's one logger, named for the lm-eval model that runs.

lm-eval's command line shows the records of the loggers under `lm_eval` (its `setup_logging` gives that tree a
handler and stops it propagating) and names each by what follows `lm_eval.`: every module logs through `log` here,
which writes to `lm_eval.<model>`, the model that runs (`lover_hf`, `lover_vllm`: each says so as it starts,
`running`), so a lover_vllm run's messages say `[lover_vllm:...]` wherever in the package they come from, and a
message that names the model takes `model_name()`. Outside lm-eval's command line (`lover train`, `lover compare`)
the records propagate to whatever the command configured.
"""

from __future__ import annotations

import logging

#: the lm-eval model whose run the messages belong to (`running` sets it); lover_hf until a model starts
_running = ["lover_hf"]


def running(model: str) -> None:
    """Say which lm-eval model runs: its messages are logged under `lm_eval.<model>` from now on."""
    _running[0] = model


def model_name() -> str:
    """The lm-eval model that runs (`lover_hf`, `lover_vllm`)."""
    return _running[0]


class _ModelLogger:
    """`logging.Logger`'s methods on `lm_eval.<model_name()>`, looked up at each call."""

    def __getattr__(self, name: str):
        return getattr(logging.getLogger(f"lm_eval.{_running[0]}"), name)


log = _ModelLogger()
