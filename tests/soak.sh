#!/bin/sh
# The faults soak: `serve --fake` with injected errors, disconnects and
# stalls on loopback and `load` against it for SOAK_SECONDS (default 1800),
# the server killed at 40 % of the run and restarted 3 s later; checks that
# the generator keeps going, one record per call, injected faults = errors
# recorded by type, the outage recorded and resumed (tests/test_reliability.c
# --soak does the work; its NOTE line has the figures).
# Usage: tests/soak.sh [BUILD]   (default build/release; run from the
# repository root after make BUILD=... BUILD/tests/test_reliability)
set -u
build=${1:-build/release}
SOAK_SECONDS=${SOAK_SECONDS:-1800} AGENTREPLAY_BIN=${AGENTREPLAY_BIN:-$build/agentreplay} \
    exec "$build/tests/test_reliability" --soak
