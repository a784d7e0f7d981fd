#!/usr/bin/env bash
# Re-records the runner outputs under testdata/ from the small failing
# projects in testdata/projects (see README.md). Each project is copied to
# a fixed scratch directory first, so the paths in the outputs stay the
# same from one recording to the next and nothing is built inside the tree.
set -u
here=$(cd "$(dirname "$0")" && pwd)
scratch=${FEEDBACK_FIXTURE_DIR:-/tmp/supervisor-feedback-fixtures}
rm -rf "$scratch" && mkdir -p "$scratch"
cp -R "$here/projects/." "$scratch/"

# Each runner exits non-zero (the tests fail on purpose); only the output matters.
rec() { # rec OUTFILE DIR COMMAND...
	local out=$1 dir=$2; shift 2
	(cd "$scratch/$dir" && "$@") >"$here/$out" 2>&1
	echo "$out: exit $?"
}

export GOWORK=off GOTOOLCHAIN=local GOFLAGS= NO_COLOR=1
rec go-test.txt gotest go test ./...
rec go-test-v.txt gotest go test -v ./...

PYTEST=${PYTEST:-/usr/bin/python3 -m pytest}
rec pytest.txt pytest $PYTEST -p no:cacheprovider
rec pytest-q.txt pytest $PYTEST -p no:cacheprovider -q

# Node 20 reports in TAP when its output is not a terminal, as under a gate.
rec node-test.txt nodetest node --test
rec node-test-spec.txt nodetest node --test --test-reporter=spec

unset RUST_BACKTRACE
export CARGO_TARGET_DIR="$scratch/cargo-target" CARGO_TERM_COLOR=never
# Built first so that the compiler's progress lines stay out of the recordings.
(cd "$scratch/cargotest" && cargo test --offline --no-run -q) >/dev/null 2>&1
rec cargo-test.txt cargotest cargo test --offline --no-fail-fast
rec cargo-test-q.txt cargotest cargo test --offline --no-fail-fast -q
rec cargo-build.txt cargobroken cargo test --offline
