# Sourced by the bench scripts. `release_binary [FLAGS...]` builds the release binary with
# `cargo build --release FLAGS` (unless SKIP_BUILD=1) and sets $target_dir and $bin (its path).
release_binary() {
    [ -n "${SKIP_BUILD:-}" ] || cargo build --release --quiet "$@"
    target_dir=$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
    bin="$target_dir/release/ratescope"
}

# For the scripts that measure against the demo API alone: `start_demo_api BIN PORT`
# makes a scratch directory ($work, also the run's config directory; $out is OUT_DIR for files
# to keep, else $work), starts `BIN mock --port PORT` there and waits until its /open answers; on
# exit the demo API stops (with the caller's `$proxy`, when one is running) and $work is removed.
start_demo_api() {
    work=$(mktemp -d)
    out=${OUT_DIR:-$work}
    mkdir -p "$out"
    export RATESCOPE_CONFIG_DIR="$work"
    "$1" mock --port "$2" >"$work/mock.log" 2>&1 &
    mock=$!
    trap 'kill $mock ${proxy:-} 2>/dev/null; rm -rf "$work"' EXIT
    for _ in $(seq 50); do curl -sf "http://127.0.0.1:$2/open" >/dev/null 2>&1 && break; sleep 0.1; done
}
