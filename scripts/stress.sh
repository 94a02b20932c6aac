#!/usr/bin/env bash
# The fence's long attack and differential runs, under the race detector: every
# swap race of fusefence for TOH_STRESS (default 1m) at each GOMAXPROCS setting
# (the test runs each race at the default and at 1), and new differential seeds
# for as long. About 13 minutes at the default; TOH_STRESS=10m scripts/stress.sh
# for a longer soak. Needs root (or an unprivileged user with /dev/fuse access).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="/usr/local/go/bin:$PATH"
export TOH_STRESS="${TOH_STRESS:-1m}"
export TOH_TEST_REQUIRE="${TOH_TEST_REQUIRE:-fuse}"

printf '== fusefence stress: TOH_STRESS=%s per race and for the differential seeds\n' "$TOH_STRESS"
go test -race -count=1 -timeout 0 -v -run '^(TestSwapRaces|TestDifferential)$' ./fusefence/ 2>&1 |
	grep -E '^(=== RUN|\s*--- |ok|FAIL|PASS)|writer operations|denials by rule|seed [0-9]+:|replay|canary|exercised'
