# shellcheck shell=bash
# Shared by the examples' run.sh scripts (sourced, not run): finding the programs, starting the
# server and the sites as background processes, waiting for the run, and cleaning up.
#
# Every process started here is killed on exit, whatever the exit (trap).

# The build directory: $FL_BUILD_DIR, else ./build under the repository root (./scripts/build.sh).
fl_example_programs() {
  local build="${FL_BUILD_DIR:-$repo/build}"
  FL="$build/cli/fl"
  RUN_REPORT="$build/examples/run_report"
  MAKE_TRANSACTIONS="$build/examples/make_transactions"
  for p in "$FL" "$RUN_REPORT" "$MAKE_TRANSACTIONS"; do
    if [ ! -x "$p" ]; then
      echo "error: $p is missing: build first (./scripts/build.sh) or set FL_BUILD_DIR" >&2
      exit 1
    fi
  done
}

# fl_example_python MODULE...: sets PYTHON to the Python that runs the Python SDK's examples
# ($FL_PYTHON, else the install step's .venv, made absolute) with the build's package on
# PYTHONPATH ($FL_PYTHONPATH, else $FL_BUILD_DIR/python), and checks that it imports MODULE...
fl_example_python() {
  PYTHON="${FL_PYTHON:-$repo/.venv/bin/python}"
  case "$PYTHON" in */*) PYTHON="$(cd "$(dirname "$PYTHON")" && pwd)/$(basename "$PYTHON")" ;; esac
  export PYTHONPATH="${FL_PYTHONPATH:-${FL_BUILD_DIR:-$repo/build}/python}${PYTHONPATH:+:$PYTHONPATH}"
  local m
  for m in "$@"; do
    if ! "$PYTHON" -c "import $m" 2>/dev/null; then
      echo "error: $PYTHON cannot import $m: run scripts/install-deps.sh and scripts/build.sh" >&2
      exit 1
    fi
  done
}

fl_example_pids=()
fl_example_cleanup() {
  local pid
  for pid in "${fl_example_pids[@]}"; do
    kill "$pid" 2>/dev/null || true
  done
  for pid in "${fl_example_pids[@]}"; do
    wait "$pid" 2>/dev/null || true
  done
}
trap fl_example_cleanup EXIT
trap 'exit 130' INT TERM

# start_server LOG ARGS...: starts `fl server ARGS...` with its log in LOG, waits until it
# listens and sets SERVER_PID and SERVER_PORT (the server is asked for a free port: listen ...:0).
start_server() {
  local log="$1"
  shift
  SERVER_LOG="$log"
  "$FL" server "$@" >"$log" 2>&1 &
  SERVER_PID=$!
  fl_example_pids+=("$SERVER_PID")
  SERVER_PORT=""
  for _ in $(seq 1 100); do
    SERVER_PORT=$(sed -n 's/.* server_listening .* port=\([0-9]*\) .*/\1/p' "$log" | head -n 1)
    [ -n "$SERVER_PORT" ] && return 0
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      echo "error: the server did not start; its log ($log):" >&2
      cat "$log" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "error: the server did not report its port within 10 s; see $log" >&2
  exit 1
}

# start_site NAME LOG ARGS...: starts `fl client --once ARGS...` in the background: the site exits
# when the run ends (without --once it would wait for the next run).
declare -A fl_site_pid fl_site_log
start_site() {
  local name="$1" log="$2"
  shift 2
  "$FL" client --once "$@" >"$log" 2>&1 &
  fl_site_pid[$name]=$!
  fl_site_log[$name]="$log"
  fl_example_pids+=("$!")
}

# wait_for_run TIMEOUT_S: waits for the server and every site to exit. Fails (exit 1, with the
# log's tail) as soon as a site or the server exits non-zero, or when the time is up.
wait_for_run() {
  local deadline=$((SECONDS + $1)) name pid rc
  local -A finished=()
  while :; do
    for name in "${!fl_site_pid[@]}"; do
      [ -n "${finished[$name]:-}" ] && continue
      pid=${fl_site_pid[$name]}
      kill -0 "$pid" 2>/dev/null && continue
      rc=0
      wait "$pid" || rc=$?
      finished[$name]=1
      if [ "$rc" -ne 0 ]; then
        echo "error: site $name exited with status $rc; the end of its log:" >&2
        tail -n 5 "${fl_site_log[$name]}" >&2
        exit 1
      fi
    done
    if ! kill -0 "$SERVER_PID" 2>/dev/null; then
      rc=0
      wait "$SERVER_PID" || rc=$?
      if [ "$rc" -ne 0 ]; then
        echo "error: the server exited with status $rc; the end of its log:" >&2
        tail -n 5 "$SERVER_LOG" >&2
        exit 1
      fi
      [ "${#finished[@]}" -eq "${#fl_site_pid[@]}" ] && return 0
    fi
    if [ "$SECONDS" -ge "$deadline" ]; then
      echo "error: the run did not end within $1 s; logs in $PWD" >&2
      exit 1
    fi
    sleep 0.2
  done
}
