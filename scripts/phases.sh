# Sourced by check_wheel.sh and check_min_versions.sh: `phases NAME "$@"` runs the caller's `install` and `run_tests`
# as its arguments ask: `install DIR` or `test DIR` alone (.ci/run installs while the suite runs, tests after), or
# both, by default, in a temporary folder removed at exit. `$work` is the folder both functions use.
phases() {
  local name=$1 phase=${2:-all}
  work="${3:-}"
  if [ -z "$work" ]; then
    work="$(mktemp -d "${TMPDIR:-/tmp}/lover-$name.XXXX")"
    trap 'rm -rf "$work"' EXIT
  fi
  case "$phase" in
    install) install ;;
    test) run_tests ;;
    all) install && run_tests ;;
    *) echo "$name: unknown phase '$phase' (install, test or all)" >&2; exit 2 ;;
  esac
}
