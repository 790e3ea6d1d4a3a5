"""`lover --help` and every `lover <subcommand> --help` answer without importing torch, lm-eval, transformers or
datasets (they take seconds to import; the time is in the report, not asserted: timed tests are flaky), and the
defaults the parsers repeat to stay light equal the core's."""

from __future__ import annotations

import dataclasses
import subprocess
import sys

import pytest

from lover_lmeval.apps.cli import SUBCOMMANDS

HEAVY = ("torch", "lm_eval", "transformers", "datasets")
# A `lover` process (the .pth start-up hook included) that prints help, then the heavy packages it imported
WRAPPER = f"""import sys
from lover_lmeval.apps.cli import main
try:
    main(sys.argv[1:])
except SystemExit as done:
    assert done.code in (0, None), done.code
print("HEAVY", sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})), file=sys.stderr)
"""


@pytest.mark.parametrize("command", [[], *([name] for name in SUBCOMMANDS)], ids=lambda c: " ".join(c) or "lover")
def test_help_imports_no_heavy_package(command):
    done = subprocess.run([sys.executable, "-c", WRAPPER, *command, "--help"], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.startswith(f"usage: lover {' '.join(command)}".rstrip()), done.stdout[:200]
    assert "HEAVY []" in done.stderr, done.stderr[-3000:]


def test_parser_defaults_repeated_for_speed_equal_the_cores():
    """apps/igsm.py, apps/train_cli.py and apps/settings.py repeat a few core defaults so that the parsers import no
    core module."""
    from lover_lmeval.apps import igsm, train_cli
    from lover_lmeval.apps.settings import TrainSettings
    from lover_lmeval.core.verify.loss_spec import allowed_terms
    from lover_lmeval.core.verify.verifier_config import VerifierConfig
    from lover_lmeval.data.igsm import IGSMConfig

    assert igsm.DEFAULTS == dataclasses.asdict(IGSMConfig())
    assert (train_cli.DEFAULT_LOSSES, TrainSettings.seed) == (VerifierConfig.losses, VerifierConfig.seed)
    assert set(train_cli.LOSS_TERMS) == set(allowed_terms()) - {"supervised"}
