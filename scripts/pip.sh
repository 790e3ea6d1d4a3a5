# Sourced by the scripts that make venvs: `pip_install PYTHON ARGS...` is `PYTHON -m pip install -q ARGS`, where pip
# byte-compiles what it installs only when Python will not cache bytecode itself. pip compiles every module of a venv
# (~16.5k here: a minute of one core); a process of the suite imports ~3.4k of them, and Python writes each one's
# .pyc on its first import unless PYTHONDONTWRITEBYTECODE is set (as on the developers' machines: there pip must
# compile, or every process compiles its imports again). .ci/run unsets it, so its four venvs compile a fifth of the
# work, lazily, instead of competing with the suite for the two cores.
pip_install() {
  local python=$1 compile=()
  shift
  [ -n "${PYTHONDONTWRITEBYTECODE:-}" ] || compile=(--no-compile)
  "$python" -m pip install -q "${compile[@]}" "$@"
}
