# Shared by the command-line tests (tests/cli/*.sh, sourced; not a test itself):
# a scratch directory removed on exit, and pass/fail counters with check().
# Usage: source "$(dirname "$0")/lib.bash" NAME   (NAME names the scratch directory)
set -u
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tessera-$1.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

check() {  # check DESCRIPTION COMMAND...: runs COMMAND, counts and reports the result
  local what="$1"
  shift
  if "$@"; then
    passed=$((passed + 1))
  else
    failed=$((failed + 1))
    echo "FAIL: $what" >&2
  fi
}

