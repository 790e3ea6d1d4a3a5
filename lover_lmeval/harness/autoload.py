"""Register `lover_hf` and `lover_select` with lm-eval 0.4.x from the plain `lm_eval` CLI.

lm-eval 0.4.13 scans no entry points, so `lover_lmeval_autoload.pth` imports this module at start-up.
Importing lm-eval here would slow every Python start-up by seconds, so instead we install an import
hook that fires once `lm_eval.api.registry` has been executed, and register lazy "module:attr"
placeholders there: the plugin's own modules are imported only when lm-eval looks the names up.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys

REGISTRY_MODULE = "lm_eval.api.registry"
MODELS = {"lover_hf": "lover_lmeval.harness.model:LoverLM"}
FILTERS = {"lover_select": "lover_lmeval.harness.filter:LoverSelect"}


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


class _RegistryHook(importlib.abc.MetaPathFinder):
    """Wraps the loader of `lm_eval.api.registry` so that `register` runs right after it executes."""

    def find_spec(self, fullname, path, target=None):
        if fullname != REGISTRY_MODULE:
            return None
        sys.meta_path.remove(self)  # one shot; also keeps the lookup below from recursing here
        spec = importlib.util.find_spec(fullname)
        if spec is None or spec.loader is None:
            return spec
        exec_module = spec.loader.exec_module

        def exec_and_register(module):
            exec_module(module)
            register(module)

        spec.loader.exec_module = exec_and_register
        return spec


def install() -> None:
    if REGISTRY_MODULE in sys.modules:  # lm-eval already imported (e.g. autoload imported late)
        register(sys.modules[REGISTRY_MODULE])
    elif not any(isinstance(f, _RegistryHook) for f in sys.meta_path):
        sys.meta_path.insert(0, _RegistryHook())


install()
