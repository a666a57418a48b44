# Shared by the command-line tests (tests/cli/*.sh, sourced; not a test itself):
# a scratch directory removed on exit, and pass/fail counters with check().
# Usage: source "$(dirname "$0")/lib.bash" NAME   (NAME names the scratch directory)
set -u
TMP="$(mktemp -d "${TMPDIR:-/tmp}/tessera-$1.XXXXXX")"
trap 'rm -rf "$TMP"' EXIT
passed=0
failed=0

# free_port: a TCP port on 127.0.0.1 nobody listens on now (for a server under test).
free_port() {
  /usr/bin/python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

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


# For scripts that set BIN (the tool under test) and FLAGS (common arguments):
# run NP ARGS...: the tool under mpirun, stdout and stderr into $TMP/out and $TMP/err.
run() { timeout 120 mpirun --oversubscribe -np "$1" "$BIN" "${@:2}" >"$TMP/out" 2>"$TMP/err"; }

# expect_error NP PATTERN ARGS...: `run NP FLAGS ARGS` exits 2 with exactly one stderr line
# matching "^error: PATTERN" (every rank exits, one rank reports).
expect_error() {
  local np="$1" pattern="$2"
  shift 2
  run "$np" "${FLAGS[@]}" "$@"
  local code=$? lines
  lines=$(grep -c "^error: $pattern" "$TMP/err")
  [ $code -eq 2 ] && [ "$lines" -eq 1 ] || {
    echo "  exit $code, $lines matching lines; stderr:" >&2
    sed 's/^/    /' "$TMP/err" >&2
    return 1
  }
}
