# Helpers of the tmux tests of `drift top` (sourced, not a test: ctest runs
# tests/integration/*.sh only). Before sourcing set T (the test's folder, its
# screen.txt and stderr live there) and SOCK (the tmux server's socket name);
# WAIT_TENTHS (default 900) bounds wait_for in tenths of a second.
tm() { tmux -L "$SOCK" -f /dev/null "$@"; }
fail() {
    echo "FAIL: $*" >&2
    echo "--- screen:" >&2
    tm capture-pane -p -t top >&2 2>/dev/null || true
    [ -s "$T/stderr" ] && { echo "--- drift stderr:" >&2; cat "$T/stderr" >&2; }
    exit 1
}
wait_for() { # wait_for DESC CMD...: polls CMD every 0.1 s until it succeeds
    local desc="$1"; shift
    for _ in $(seq "${WAIT_TENTHS:-900}"); do
        if "$@"; then return 0; fi
        sleep 0.1
    done
    fail "timed out waiting for: $desc"
}
cap() { tm capture-pane -p -t top >"$T/screen.txt" 2>/dev/null; }
screen_has() { cap && grep -qF -- "$1" "$T/screen.txt"; }
screen_re() { cap && grep -qE -- "$1" "$T/screen.txt"; }
