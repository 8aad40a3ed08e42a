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
# Phases that need different things of the machine can run side by side, in
# lanes: a lane is a function whose phases run one after another, in the
# background, beside the caller and the other lanes (on 2 cores, a suite
# that mostly waits on its servers leaves room for one that computes):
#
#   rust_lane() { phase "Rust tests" cargo test ...; phase "..." ...; }
#   lane "Rust" rust_lane
#   lane "single box" single_box_lane
#   lanes_wait       # returns when every lane has ended
#
# A phase is one command (a function works too). Its output goes to a log
# of its own under $PHASES_LOG_DIR (a temporary directory unless set) and to
# the terminal: as it comes for a phase of the caller's, whole when it ends
# for a phase in a lane (under a lock file, util-linux's flock, so lanes'
# outputs never interleave). The summary takes the failing tests' lines
# from the logs, in the forms the runners print them:
#   pytest  "FAILED tests/python/test_x.py::test_y - AssertionError: ..."
#           and "ERROR ..." (its short summary, `-rfE`, pytest's default)
#   cargo   "test module::name ... FAILED", and "error: ..." lines (a build
#           error, or `--no-fail-fast`'s list of the test binaries that failed)
#   node    "not ok N - name" (TAP, the reporter `node --test` writes to a
#           file when it is given `--test-reporter=tap`), at any depth, so a
#           failing subtest is named with the test around it

PHASES_LOG_DIR=${PHASES_LOG_DIR:-$(mktemp -d /tmp/shellgate-test-phases.XXXXXX)}
mkdir -p "$PHASES_LOG_DIR"
# One line per phase that ended, whichever lane ran it (appended whole, so
# lanes' lines never mix): when it started, its wall and CPU seconds, its
# result, its name and its log, separated by tabs.
PHASES_RESULTS="$PHASES_LOG_DIR/results.tsv"
: >"$PHASES_RESULTS"
# The lane this shell is (empty: the caller's; as in file names, and as
# given), its phases so far, and the lanes it started.
PHASES_LANE=
PHASES_LANE_NAME=
PHASES_COUNT=0
PHASES_LANE_PIDS=()
PHASES_LANE_NAMES=()

# phase NAME COMMAND [ARGS...]: runs COMMAND, never stopping the caller.
phase() {
  local name=$1
  shift
  local log="$PHASES_LOG_DIR/${PHASES_LANE:+$PHASES_LANE-}$(printf '%02d' "$PHASES_COUNT")-${name//[^A-Za-z0-9]/-}.log"
  PHASES_COUNT=$((PHASES_COUNT + 1))
  local started=$SECONDS status cpu_before cpu_after seconds cpu
  local where="${PHASES_LANE:+lane $PHASES_LANE_NAME, }${started}s into the run"
  local cpu_file="$PHASES_LOG_DIR/.cpu${PHASES_LANE:+-$PHASES_LANE}"
  children_cpu_seconds >"$cpu_file"
  cpu_before=$(<"$cpu_file")
  # In a subshell with errexit on, so the first failing command inside a
  # function phase ends that phase (as a failure), not the caller's run;
  # the caller's errexit is off meanwhile, and the status is the command's
  # (PIPESTATUS), not tee's.
  set +e
  if [ -z "$PHASES_LANE" ]; then
    printf '\n== %s (%s)\n' "$name" "$where" >&2
    ( set -e; "$@" ) 2>&1 | tee "$log"
    status=${PIPESTATUS[0]}
  else
    {
      flock 9
      printf '\n== %s starts (%s)\n' "$name" "$where" >&2
    } 9>>"$PHASES_LOG_DIR/.say.lock"
    ( set -e; "$@" ) >"$log" 2>&1 </dev/null
    status=$?
  fi
  set -e
  # Its CPU time beside its wall time: what a quiet machine would take.
  children_cpu_seconds >"$cpu_file"
  cpu_after=$(<"$cpu_file")
  seconds=$((SECONDS - started))
  cpu=$(awk -v a="$cpu_before" -v b="$cpu_after" 'BEGIN { printf "%.0f", b - a }')
  local ended
  ended=$(printf '== %s: %ds, %ss of CPU (user and system)' "$name" "$seconds" "$cpu")
  if [ -z "$PHASES_LANE" ]; then
    printf '%s\n' "$ended" >&2
  else
    {
      flock 9
      printf '\n== %s (%s)\n' "$name" "$where" >&2
      cat "$log"
      printf '%s\n' "$ended" >&2
    } 9>>"$PHASES_LOG_DIR/.say.lock"
  fi
  local result=ok
  [ "$status" -eq 0 ] || result="FAILED (exit $status)"
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$started" "$seconds" "$cpu" "$result" "$name" "$log" >>"$PHASES_RESULTS"
  return 0
}

# lane NAME FUNCTION [ARGS...]: runs FUNCTION in the background, its phases
# one after another; lanes_wait waits for it.
lane() {
  local name=$1
  shift
  (
    PHASES_LANE=${name//[^A-Za-z0-9]/-}
    PHASES_LANE_NAME=$name
    PHASES_COUNT=0
    PHASES_LANE_PIDS=()
    "$@"
  ) </dev/null &
  PHASES_LANE_PIDS+=($!)
  PHASES_LANE_NAMES+=("$name")
}

# Waits for every lane started so far. A lane whose function itself failed
# between its phases (not one of its phases: those never stop it) is a
# failure of its own in the summary, since its later phases never ran.
lanes_wait() {
  local index status
  for index in "${!PHASES_LANE_PIDS[@]}"; do
    status=0
    wait "${PHASES_LANE_PIDS[$index]}" || status=$?
    if [ "$status" -ne 0 ]; then
      printf '%s\t0\t0\tFAILED (exit %s)\tlane %s ended early\t\n' "$SECONDS" "$status" \
        "${PHASES_LANE_NAMES[$index]}" >>"$PHASES_RESULTS"
    fi
  done
  PHASES_LANE_PIDS=()
  PHASES_LANE_NAMES=()
}

# Ends the lanes still running and everything they started (for the
# caller's EXIT trap: a run that stops early leaves no build or server
# behind).
lanes_stop() {
  local pid
  for pid in "${PHASES_LANE_PIDS[@]}"; do
    phases_kill_tree "$pid"
  done
}
phases_kill_tree() {
  local child
  for child in $(pgrep -P "$1" 2>/dev/null); do
    phases_kill_tree "$child"
  done
  kill "$1" 2>/dev/null || true
}

# The CPU seconds (user and system) of this shell's finished children so
# far (bash's `times`: its second line, as "1m2.500s 0m3.250s"); a lane's
# shell counts its own. Called with its output to a file, not a pipe: in a
# pipeline or a command substitution it would run in a subshell, which has
# no children yet.
children_cpu_seconds() {
  local times_file="$PHASES_LOG_DIR/.times${PHASES_LANE:+-$PHASES_LANE}"
  times >"$times_file"
  awk 'NR == 2 {
    total = 0
    for (i = 1; i <= 2; i++) { split($i, part, "m"); total += part[1] * 60 + part[2] }
    printf "%.1f", total
  }' "$times_file"
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

# Prints every phase's time and result, in the order they started, then
# every failure; returns 1 if any phase failed.
phases_summary() {
  local failed=0 started seconds cpu result name log
  printf '\n== summary (%ds in all)\n' "$SECONDS"
  while IFS=$'\t' read -r started seconds cpu result name log; do
    printf '%6ds  %-40s %s\n' "$seconds" "$name" "$result"
  done < <(sort -s -n -k1,1 "$PHASES_RESULTS")
  while IFS=$'\t' read -r started seconds cpu result name log; do
    [ "$result" = ok ] && continue
    failed=1
    if [ -z "$log" ]; then
      printf '\n-- %s\n' "$name"
      continue
    fi
    printf '\n-- %s failed (its log: %s):\n' "$name" "$log"
    local failures
    failures=$(phase_failures "$log")
    if [ -n "$failures" ]; then
      printf '%s\n' "$failures" | sed -e 's/^/   /'
    else
      # Nothing in a known form: the log's end says what went wrong.
      tail -n 15 "$log" | sed -e 's/^/   /'
    fi
  done < <(sort -s -n -k1,1 "$PHASES_RESULTS")
  if ((failed)); then
    printf '\nFAILED: see each failing phase above\n'
    return 1
  fi
  printf '\nevery phase passed\n'
}
