#!/usr/bin/env bash
# `make soak`: the soak group of the e2e tests (tests/e2e/soak/) alone, long, on the e2e cluster
# (hack/e2e.sh starts and stops it), every fault kind at least 5 times. DURATION (e.g. 30m, 1h),
# TARGETS and SEED come from make; the history and a JSON report go to target/e2e/soak/.
. "$(dirname "$0")/lib.sh"
cd "$root"
duration=${DURATION:-30m}
case $duration in
  *h) seconds=$((${duration%h} * 3600)) ;;
  *m) seconds=$((${duration%m} * 60)) ;;
  *s) seconds=${duration%s} ;;
  *) die "DURATION=$duration: a number of seconds, minutes or hours (e.g. 30m)" ;;
esac
mkdir -p target/e2e/soak
export KUBESTEER_E2E_GROUPS=soak::run::
export KUBESTEER_SOAK_DURATION=${seconds}s
export KUBESTEER_SOAK_TARGETS=${TARGETS:-200}
MIN_FAULTS=5
export KUBESTEER_SOAK_MIN_FAULTS=$MIN_FAULTS
export KUBESTEER_SOAK_SEED=${SEED:-}
export KUBESTEER_SOAK_REPORT=$root/target/e2e/soak/report.json
# The faults go on until every kind has had 5 turns, then the end waits for every target.
export KUBESTEER_E2E_GROUP_TIMEOUT=$((seconds + 2400))
hack/e2e.sh
log "soak report: target/e2e/soak/report.json"
