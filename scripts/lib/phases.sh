# The test run's phases: each phase runs whatever happens to the ones before
# it, so one failing test never hides the others; at the end, one summary
# says each phase's time and result and names every failing test, and the
# run fails if any phase did. Sourced by scripts/test:
#
#   source scripts/lib/phases.sh
#   phase "Rust tests" cargo test --workspace --no-fail-fast
#   phase "Python suites" .venv/bin/python -m pytest -q tests/python
#   phases_summary   # prints the summary; returns 1 if any phase failed
#
# A phase is one command (a function works too). Its output goes to the
# terminal and to a log of its own under $PHASES_LOG_DIR (a temporary
# directory unless set), from which the summary takes the failing tests'
# lines, in the forms the runners print them:
#   pytest  "FAILED tests/python/test_x.py::test_y - AssertionError: ..."
#           and "ERROR ..." (its short summary, `-rfE`, pytest's default)
#   cargo   "test module::name ... FAILED", and "error: ..." lines (a build
#           error, or `--no-fail-fast`'s list of the test binaries that failed)
#   node    "not ok N - name" (TAP, the reporter `node --test` writes to a
#           file when it is given `--test-reporter=tap`), at any depth, so a
#           failing subtest is named with the test around it

PHASES_LOG_DIR=${PHASES_LOG_DIR:-$(mktemp -d /tmp/shellgate-test-phases.XXXXXX)}
mkdir -p "$PHASES_LOG_DIR"
PHASE_NAMES=()
PHASE_SECONDS=()
PHASE_RESULTS=()
PHASE_LOGS=()

# phase NAME COMMAND [ARGS...]: runs COMMAND, never stopping the caller.
phase() {
  local name=$1
  shift
  local index=${#PHASE_NAMES[@]}
  local log
  log="$PHASES_LOG_DIR/$(printf '%02d' "$index")-${name//[^A-Za-z0-9]/-}.log"
  printf '\n== %s (%ds into the run)\n' "$name" "$SECONDS" >&2
  local started=$SECONDS status cpu_before cpu_after
  children_cpu_seconds >"$PHASES_LOG_DIR/.cpu"
  cpu_before=$(<"$PHASES_LOG_DIR/.cpu")
  # In a subshell with errexit on, so the first failing command inside a
  # function phase ends that phase (as a failure), not the caller's run;
  # the caller's errexit is off meanwhile, and the status is the command's
  # (PIPESTATUS), not tee's.
  set +e
  ( set -e; "$@" ) 2>&1 | tee "$log"
  status=${PIPESTATUS[0]}
  set -e
  # Its CPU time beside its wall time: what a quiet machine would take.
  children_cpu_seconds >"$PHASES_LOG_DIR/.cpu"
  cpu_after=$(<"$PHASES_LOG_DIR/.cpu")
  printf '== %s: %ds, %ss of CPU (user and system)\n' "$name" $((SECONDS - started)) \
    "$(awk -v a="$cpu_before" -v b="$cpu_after" 'BEGIN { printf "%.0f", b - a }')" >&2
  PHASE_NAMES+=("$name")
  PHASE_SECONDS+=($((SECONDS - started)))
  PHASE_LOGS+=("$log")
  if [ "$status" -eq 0 ]; then
    PHASE_RESULTS+=(ok)
  else
    PHASE_RESULTS+=("FAILED (exit $status)")
  fi
  return 0
}

# The CPU seconds (user and system) of this shell's finished children so
# far (bash's `times`: its second line, as "1m2.500s 0m3.250s").
# `times` writes to a file, not a pipe: in a pipeline or a command
# substitution it would run in a subshell, which has no children yet.
children_cpu_seconds() {
  times >"$PHASES_LOG_DIR/.times"
  awk 'NR == 2 {
    total = 0
    for (i = 1; i <= 2; i++) { split($i, part, "m"); total += part[1] * 60 + part[2] }
    printf "%.1f", total
  }' "$PHASES_LOG_DIR/.times"
}

# The failing tests a phase's log names, one line each.
phase_failures() {
  local log=$1
  # Colour codes out first: cargo and pytest colour their output on a terminal.
  sed -e 's/\x1b\[[0-9;]*m//g' "$log" | grep -E \
    -e '^(FAILED|ERROR) ' \
    -e '^test .* \.\.\. FAILED$' \
    -e '^error(\[E[0-9]+\])?: ' \
    -e '^ *not ok [0-9]+ - ' \
    -e '^ +`-p ' \
    | sed -e 's/^ *//' | cut -c1-300 || true
}

# Prints every phase's time and result, then every failure; returns 1 if
# any phase failed.
phases_summary() {
  local failed=0 index
  printf '\n== summary (%ds in all)\n' "$SECONDS"
  for index in "${!PHASE_NAMES[@]}"; do
    printf '%6ds  %-40s %s\n' "${PHASE_SECONDS[$index]}" "${PHASE_NAMES[$index]}" "${PHASE_RESULTS[$index]}"
  done
  for index in "${!PHASE_NAMES[@]}"; do
    [ "${PHASE_RESULTS[$index]}" = ok ] && continue
    failed=1
    printf '\n-- %s failed (its log: %s):\n' "${PHASE_NAMES[$index]}" "${PHASE_LOGS[$index]}"
    local failures
    failures=$(phase_failures "${PHASE_LOGS[$index]}")
    if [ -n "$failures" ]; then
      printf '%s\n' "$failures" | sed -e 's/^/   /'
    else
      # Nothing in a known form: the log's end says what went wrong.
      tail -n 15 "${PHASE_LOGS[$index]}" | sed -e 's/^/   /'
    fi
  done
  if ((failed)); then
    printf '\nFAILED: see each failing phase above\n'
    return 1
  fi
  printf '\nevery phase passed\n'
}
