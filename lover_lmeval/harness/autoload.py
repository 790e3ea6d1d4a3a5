"""Register `lover_hf`, `lover_vllm`, `lover_select`, `lover_match` and the packaged task YAMLs with lm-eval 0.4.x
from the plain `lm_eval` CLI.

lm-eval 0.4.13 scans no entry points, so `lover_lmeval_autoload.pth` imports this module at start-up.
Importing lm-eval here would slow every Python start-up by seconds, so instead we install an import
hook that fires once `lm_eval.api.registry` (resp. `lm_eval.tasks.manager`) has been executed:
- the registries get lazy "module:attr" placeholders: the plugin's own modules are imported only when lm-eval
  looks the names up;
- every `TaskManager` also indexes the task folder shipped inside the package (`lover_lmeval/task_configs`), so
  `--tasks lover_gsm8k` resolves from an installed wheel with no `--include_path` and no clone. It goes before the
  user's own include paths, which therefore override a task of the same name;
- lm-eval's evaluator logger names the GGUF file where its chat-template hint would say `pretrained=None`.
"""

from __future__ import annotations

import functools
import importlib.abc
import importlib.util
import re
import sys
from pathlib import Path

MODELS = {"lover_hf": "lover_lmeval.harness.model:LoverLM", "lover_vllm": "lover_lmeval.harness.vllm.model:LoverVLLM"}
FILTERS = {"lover_select": "lover_lmeval.harness.filter:LoverSelect"}
METRICS = {"lover_match": "lover_lmeval.harness.metric:lover_match"}
TASK_FOLDER = Path(__file__).resolve().parents[1] / "task_configs"


def register(registry) -> None:
    """Add our lazy placeholders to lm-eval's registries (idempotent)."""
    # `get_model` imports lm_eval.models only when the model registry is *empty*; were ours the only
    # entry, `--model hf` would stop resolving. Importing it first fills in the built-in models.
    import lm_eval.models  # noqa: F401

    for name, target in MODELS.items():
        if name not in registry.model_registry:
            registry.model_registry.register(name, target=target)
    for name, target in FILTERS.items():
        if name not in registry.filter_registry:
            registry.filter_registry.register(name, target=target)
    for name, target in METRICS.items():
        if name not in registry.metric_registry:
            # Lazy: lm_eval.api.metrics may be the very module whose import is executing the registry right now.
            # Its built-in metrics still load: lm_eval.api.task imports that module before any task is built.
            registry.metric_registry.register(name, target=target)
            registry.higher_is_better_registry.register(name, target=True)
            registry.metric_agg_registry.register(name, target="lm_eval.api.metrics:mean")


def with_task_folder(include_path) -> list:
    """`include_path` as a list with our task folder first (once, also when the user names it themselves)."""
    paths = [] if include_path is None else list(include_path) if isinstance(include_path, (list, tuple)) \
        else [include_path]
    if not any(Path(p).resolve() == TASK_FOLDER for p in paths):
        paths.insert(0, str(TASK_FOLDER))
    return paths


def add_task_folder(manager_module) -> None:
    """Make every `TaskManager` index our task folder (idempotent)."""
    task_manager = manager_module.TaskManager
    if getattr(task_manager.__init__, "lover_tasks", False):
        return
    original = task_manager.__init__

    @functools.wraps(original)
    def __init__(self, verbosity=None, include_path=None, *args, **kwargs):
        original(self, verbosity, with_task_folder(include_path), *args, **kwargs)

    __init__.lover_tasks = True
    task_manager.__init__ = __init__


def _name_the_gguf(record) -> bool:
    """lm-eval's hint that a chat model runs without its chat template names the model by `pretrained`, which is
    None when lover_hf loads `gguf_file=`: name that file instead, read from this command line's model args (a
    Python caller's stay unnamed: they are not visible here). Never drops a record."""
    message = record.msg if isinstance(record.msg, str) else ""
    if message.startswith("pretrained=None appears to be an"):
        found = re.search(r"(?<![\w])gguf_file=([^,\s]+)", " ".join(sys.argv[1:]))
        if found:
            record.msg = f"gguf_file={found.group(1)}" + message.removeprefix("pretrained=None")
    return True


def name_the_gguf(evaluator) -> None:
    """Give lm-eval's evaluator logger the `_name_the_gguf` filter (idempotent)."""
    logger = getattr(evaluator, "eval_logger", None)
    if logger is not None and _name_the_gguf not in logger.filters:
        logger.addFilter(_name_the_gguf)


HOOKS = {"lm_eval.api.registry": register, "lm_eval.tasks.manager": add_task_folder,
         "lm_eval.evaluator": name_the_gguf}


class _ModuleHook(importlib.abc.MetaPathFinder):
    """Wraps the loader of each module in HOOKS so that its hook runs right after the module executes."""

    def __init__(self, pending: dict):
        self.pending = pending

    def find_spec(self, fullname, path, target=None):
        if fullname not in self.pending:
            return None
        hook = self.pending.pop(fullname)
        sys.meta_path.remove(self)  # the lookup below must not come back here
        try:
            spec = importlib.util.find_spec(fullname)
        finally:
            if self.pending:  # one shot per module
                sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_hook(module):
            exec_module(module)
            hook(module)

        spec.loader.exec_module = exec_and_hook
        return spec


def install() -> None:
    missing = {}
    for name, hook in HOOKS.items():
        if name in sys.modules:  # lm-eval already imported (e.g. autoload imported late)
            hook(sys.modules[name])
        else:
            missing[name] = hook
    if missing and not any(isinstance(f, _ModuleHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _ModuleHook(missing))


install()
