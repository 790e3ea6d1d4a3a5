"""The README stays runnable and short: every ```bash block checked with the real parsers, every docs/ link resolved.

Running every block would take CI minutes (the main job alone decodes 12 questions), so each command is checked where
it would fail first, with the code that would reject it:
- `lm_eval ...` (also after `torchrun ... -m` / `accelerate launch -m`): lm-eval's own `run` argparser; every flag
  spelled exactly as it defines it (argparse would also accept a prefix); every `--model_args` key a lover_hf or HFLM
  argument, their values accepted by `LoverConfig` (what lover_hf parses first); `--gen_kwargs` honoured by
  `harness/generation.resolve_decoding` against those model_args; every `--tasks` name in lm-eval's TaskManager.
- `lover ...`: the subcommand's own parser; a block ending in `--help` is run for real (0.1-0.4 s).
- `python SCRIPT.py ...` (the eval-CI gate): the script's own `main` parses the block's arguments; its evaluation call
  is replaced by one that stops there, so the parsed floors can be checked against the task's rows.
- every path a block names inside the repository (or beside it in ../shared) exists.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import inspect
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

README = REPO / "README.md"
MAX_LINES = 160  # about 150 lines of prose, with room for the generated leaderboard table
DOC_PAGES = ("usage.md", "operations.md", "method.md", "findings.md", "architecture.md")
OUTPUT_FLAGS = {"--output_path", "-o", "--out"}  # their values are written, not read: they need not exist yet


def readme() -> str:
    return README.read_text()


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"```bash\n(.*?)```", text, re.S)


def commands(block: str) -> list[list[str]]:
    """The block's commands as shell words: continuation lines joined, comments dropped, `&&` / `;` / `|` split,
    leading VAR=value assignments dropped (a bare assignment is no command), each `$(...)` a command of its own and a
    placeholder word where it stood.

    Example: 'A=1 x --f $(y z) && w  # c' -> [['y', 'z'], ['x', '--f', 'SUBST'], ['w']]."""
    out: list[list[str]] = []
    for line in block.replace("\\\n", " ").splitlines():
        for inner in re.findall(r"\$\(([^()]*)\)", line):
            out += commands(inner)
        words = shlex.split(re.sub(r"\$\([^()]*\)", "SUBST", line), comments=True)
        command: list[str] = []
        for word in [*words, "&&"]:
            if word in ("&&", "||", ";", "|"):
                while command and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]):
                    command.pop(0)
                if command:
                    out.append(command)
                command = []
            else:
                command.append(word)
    return out


def test_commands_splits_as_a_shell_would():
    """The hand-worked example of `commands`, and a continued line."""
    assert commands("A=1 x --f $(y z) && w  # c\n") == [["y", "z"], ["x", "--f", "SUBST"], ["w"]]
    assert commands("GGUF=$(get-model m)\nlm_eval --a \\\n  b\n") == [["get-model", "m"], ["lm_eval", "--a", "b"]]


def every_command() -> list[list[str]]:
    return [command for block in bash_blocks(readme()) for command in commands(block)]


def lm_eval_args(command: list[str]) -> list[str] | None:
    """The arguments lm-eval's CLI receives from `command`, or None when it runs no lm_eval."""
    if Path(command[0]).name in ("lm_eval", "lm-eval"):
        return command[1:]
    for i in range(len(command) - 1):
        if command[i] == "-m" and command[i + 1] == "lm_eval":
            return command[i + 2:]
    return None


def lover_args(command: list[str]) -> list[str] | None:
    return command[1:] if Path(command[0]).name == "lover" else None


@pytest.fixture(scope="module")
def task_index():
    """lm-eval's index of the packaged lover_* tasks (the folder the start-up hook adds to every TaskManager)."""
    from lm_eval.tasks import TaskManager

    from lover_lmeval.harness.autoload import TASK_FOLDER

    return TaskManager(include_path=str(TASK_FOLDER), include_defaults=False).task_index


def task_rows(task_index, name: str) -> set[str]:
    """The metric rows (filter names) lm-eval prints for a task."""
    return {f["name"] for f in task_index[name].cfg.get("filter_list", [])}


def check_tasks(names, task_index) -> None:
    from lm_eval.tasks import TaskManager

    unknown = [n for n in names if n not in task_index]
    if unknown:  # not a packaged task: lm-eval's own index (seconds) must know it
        every = TaskManager().all_tasks
        assert not [n for n in unknown if n not in every], f"README --tasks {unknown}: no such task"


# lm-eval's VLLM arguments (and vLLM's engine arguments it passes on) that README commands use: neither is importable
# here (vLLM lives in .venv-vllm), so the ones shown are named; tests/test_vllm.py runs them.
VLLM_ARGS = {"dtype", "tensor_parallel_size", "data_parallel_size", "gpu_memory_utilization", "max_model_len"}


def check_model_args(model_args: dict, where: str, model: str = "lover_hf"):
    """Keys lover's model (and HFLM, or lm-eval's VLLM) take, values lover's configs accept; returns (config,
    explicit decoding args)."""
    from lover_lmeval.core.config import LoverConfig
    from lover_lmeval.harness.model_args import DECODING_ARGS, LOVER_ARGS, _hflm_args

    backend = _hflm_args() if model == "lover_hf" else VLLM_ARGS
    unknown = sorted(set(model_args) - set(LOVER_ARGS) - backend)
    assert not unknown, f"{where}: model_args {unknown} are neither {model}'s ({LOVER_ARGS}) nor its backend's"
    config, _ = LoverConfig.from_model_args(dict(model_args))
    return config, {arg for arg in DECODING_ARGS if arg in model_args}


def run_parser():
    from lm_eval._cli.harness import HarnessCLI

    return HarnessCLI()._subparsers.choices["run"]


def parse_or_fail(parser, args: list[str], where: str):
    try:
        return parser.parse_args(args)
    except SystemExit:
        pytest.fail(f"{where}: the parser refused {args} (its message is above)")


def test_readme_has_commands_for_lm_eval_and_lover():
    """The README's blocks do hold lm_eval commands (else the checks below would pass vacuously)."""
    found = [c for c in every_command() if lm_eval_args(c) is not None]
    assert len(found) >= 5 and any(lover_args(c) is not None for c in every_command())


def test_every_lm_eval_command_parses_with_lm_evals_own_cli(task_index):
    from lover_lmeval.harness.generation import resolve_decoding

    parser = run_parser()
    flags = {option for action in parser._actions for option in action.option_strings}
    for command in every_command():
        args = lm_eval_args(command)
        if args is None:
            continue
        where = " ".join(command)
        args = args[1:] if args and args[0] == "run" else args
        assert not [a for a in args if a.startswith("-") and a.split("=")[0] not in flags], where
        parsed = parse_or_fail(parser, args, where)
        assert parsed.model in ("lover_hf", "lover_vllm"), where
        config, explicit = check_model_args(parsed.model_args or {}, where, parsed.model)
        if getattr(parsed, "gen_kwargs", None):  # honoured, not refused, with these model_args
            resolve_decoding(config.decoding, explicit, parsed.gen_kwargs, 256)
        check_tasks(parsed.tasks, task_index)


def test_every_lover_command_parses_and_help_runs():
    from lover_lmeval.apps import cli

    ran = 0
    for command in every_command():
        args = lover_args(command)
        if args is None:
            continue
        if args and args[0] in cli.SUBCOMMANDS:
            sub = argparse.ArgumentParser(prog=f"lover {args[0]}")
            importlib.import_module(cli.SUBCOMMANDS[args[0]][0]).add_arguments(sub)
            if "--help" not in args:
                parse_or_fail(sub, args[1:], " ".join(command))
        if args and args[-1] == "--help":  # cheap: run it as written, with this interpreter's console script
            program = Path(sys.executable).parent / Path(command[0]).name
            done = subprocess.run([str(program), *args], cwd=REPO, capture_output=True, text=True, timeout=60)
            assert done.returncode == 0 and "usage: lover" in done.stdout, done.stderr[-2000:]
            assert all(name in done.stdout for name in cli.SUBCOMMANDS) or args[0] in cli.SUBCOMMANDS
            ran += 1
    assert ran >= 1, "the README shows no `lover ... --help` block to run"


class _Parsed(Exception):
    """Raised in place of the evaluation a script would start: its arguments parsed, nothing evaluated."""


def test_the_eval_ci_gate_block_parses_with_the_gates_own_main(task_index, monkeypatch):
    """gate.py's main() parses the README's arguments (its --floor type included); the floors name rows the task
    prints and the model_args are lover_hf's."""
    from lm_eval._cli.utils import key_val_to_dict

    scripts = [c for c in every_command() if Path(c[0]).name.startswith("python") and c[1].endswith(".py")]
    assert scripts, "the README shows no eval-CI gate command"
    for command in scripts:
        path = REPO / command[1]
        assert path.is_file(), command[1]
        spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)

        def stop(**kwargs):
            raise _Parsed(kwargs)

        monkeypatch.setattr(module, "simple_evaluate", stop)
        with pytest.raises(_Parsed) as parsed:
            module.main(command[2:])
        kwargs = parsed.value.args[0]
        check_model_args(key_val_to_dict(kwargs["model_args"]), " ".join(command))
        check_tasks(kwargs["tasks"], task_index)
        floors = [module.parse_floor(command[i + 1]) for i, word in enumerate(command) if word == "--floor"]
        assert floors and all(row in task_rows(task_index, task) for task, row, _ in floors), floors


def repo_paths(command: list[str]) -> list[str]:
    """Words of `command` that name a path in the repository or beside it (../shared/...), output paths excepted.
    A word is split at `=` and `,` (VAR=PATH, key=PATH,key=...); placeholders (/models/..., org/name) are not
    checked, as nothing the repository holds starts that way."""
    found = []
    for before, word in zip(["", *command], command):
        if before in OUTPUT_FLAGS or "://" in word:
            continue
        for part in re.split(r"[=,]", word):
            first = part.split("/")[0]
            if "/" in part and first and (first in ("..", ".") or (REPO / first).exists()):
                found.append(part)
    return found


def test_every_path_a_block_names_exists():
    shared = REPO.parent / "shared"
    checked = []
    for block in bash_blocks(readme()):
        for command in commands(block):
            for part in repo_paths(command):
                if part.startswith("../shared/") and not shared.is_dir():
                    continue  # a checkout without the offline data beside it
                assert (REPO / part).exists(), f"README block names {part!r}, which does not exist: {command}"
                checked.append(part)
    assert "scripts/setup.sh" in checked and "examples/ci/gate.py" in checked


def slug(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, punctuation dropped, spaces to hyphens ("Branch banks: nothing
    lost" -> "branch-banks-nothing-lost", "`lover_hf` model args" -> "lover_hf-model-args")."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def check_link(source: Path, target: str) -> None:
    path, _, anchor = target.partition("#")
    resolved = (source.parent / path).resolve() if path else source
    assert resolved.is_file(), f"{source.name} links {target}: no such file"
    if anchor:
        prose = re.sub(r"^```.*?^```", "", resolved.read_text(), flags=re.S | re.M)  # a `# comment` is no heading
        headings = re.findall(r"^#{1,6} (.+)$", prose, re.M)
        assert anchor in {slug(h) for h in headings}, f"{source.name} links {target}: no such heading"


def markdown_links(text: str) -> list[str]:
    return [t for t in re.findall(r"\]\(([^)\s]+)\)", text) if "://" not in t]


def test_the_readme_is_short_and_links_every_doc_page():
    text = readme()
    assert len(text.splitlines()) <= MAX_LINES, f"README.md has {len(text.splitlines())} lines (at most {MAX_LINES})"
    targets = markdown_links(text)
    for page in DOC_PAGES:  # every moved section is one link away
        assert f"docs/{page}" in {t.partition("#")[0] for t in targets}, page
    for target in targets:
        if not target.endswith(".png"):
            check_link(README, target)


def test_the_doc_pages_say_who_they_are_for_and_their_links_resolve():
    for page in DOC_PAGES:
        path = REPO / "docs" / page
        lines = path.read_text().splitlines()
        assert lines[0].startswith("# ") and lines[2].startswith("For "), f"docs/{page}: line 3 says who it is for"
        for target in markdown_links(path.read_text()):
            check_link(path, target)


def test_the_readme_figure_is_committed():
    """The figure benchmarks/selectors/selectors_table.py draws from the committed results."""
    for target in markdown_links(readme()):
        if target.endswith(".png"):
            assert (REPO / target).is_file(), f"README shows {target}: run benchmarks/selectors/selectors_table.py"


def test_the_main_job_is_one_block_under_its_heading():
    """One place to swap the main job: the single bash block of the "## Main job" section."""
    text = readme()
    section = text[text.index("\n## Main job\n"):]
    section = section[:section.index("\n## ", 1)]
    assert len(bash_blocks(section)) == 1


def table_rows(text: str, heading: str) -> list[list[str]]:
    """The cells of the first markdown table after `heading`, its header and rule left out."""
    lines = text[text.index(heading):].splitlines()[1:]
    start = next(i for i, line in enumerate(lines) if line.startswith("|"))
    table = []
    for line in lines[start:]:
        if not line.startswith("|"):
            break
        table.append([cell.strip() for cell in line.strip("|").split("|")])
    return table[2:]


def test_the_rows_legend_names_every_row_a_lover_task_prints(task_index):
    """The Rows table names exactly the filters of the packaged tasks (each prints one metric row per filter)."""
    legend = {name for cells in table_rows(readme(), "\n## Rows\n") for name in re.findall(r"`([^`]+)`", cells[0])}
    for task in ("lover_gsm8k", "lover_bbh_navigate", "lover_mmlu_pro_biology", "lover_bbh_boolean_expressions"):
        assert task_rows(task_index, task) == legend, task


def test_the_model_args_table_shows_the_codes_defaults():
    """Each arg of the table is lover_hf's or HFLM's, and each literal default (in backticks) is the code's:
    the component dataclass's field for lover_hf's args, HFLM's signature for its own."""
    from lm_eval.models.huggingface import HFLM

    from lover_lmeval.core.config import MODEL_ARGS, LoverConfig
    from lover_lmeval.harness.model_args import LOVER_ARGS, _hflm_args

    hflm = inspect.signature(HFLM.__init__).parameters
    config = LoverConfig()
    components = {"decoding": config.decoding, "features": config.features, "selection": config.selection,
                  "bank": config.bank, "batching": config.batching}
    rows = table_rows(readme(), "### `lover_hf` model args")
    assert len(rows) >= 10
    for cells in rows:
        names, defaults = re.findall(r"`([^`]+)`", cells[0]), re.findall(r"`([^`]+)`", cells[1])
        assert all(n in LOVER_ARGS or n in _hflm_args() for n in names), names
        if len(defaults) != len(names):  # said in words ("the middle block", "none"): nothing literal to compare
            continue
        for name, shown in zip(names, defaults):
            if name in MODEL_ARGS:
                component, field, _ = MODEL_ARGS[name]
                actual = getattr(components[component], field)
            else:
                actual = hflm[name].default
            actual = str(actual).lower() if isinstance(actual, bool) else str(actual)
            assert shown == actual, f"README says {name} defaults to {shown}; the code says {actual}"
