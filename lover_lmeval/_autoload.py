"""Kept so that a site-packages `lover_lmeval_autoload.pth` written by an install before the package's layout
changed (it says `import lover_lmeval._autoload`) still registers lover_hf until the package is reinstalled."""

from .harness import autoload  # noqa: F401
