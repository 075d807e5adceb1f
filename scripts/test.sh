#!/usr/bin/env bash
# Runs every test of the project: Go (with the race detector), the Python client, the TypeScript
# client, then the release artifacts (scripts/dist.sh into ./dist, checked by tests/) and the
# READMEs' commands. Needs Go, Python 3.9+ with pytest, and Node 20+ with npm; the release tests
# also use build, hatchling, twine, check-wheel-contents, packaging, qemu-user-static and file
# (.ci/run installs them). Installs nothing system-wide (npm packages go to clients/ts/node_modules,
# the ckptd binary to ./bin, the artifacts to ./dist).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)

echo "== build"
mkdir -p bin
CGO_ENABLED=0 go build -o bin/ckptd ./cmd/ckptd
export CKPTD_PATH="$root/bin/ckptd"

echo "== go vet + gofmt"
go vet ./...
unformatted=$(gofmt -l $(find . -name '*.go' -not -path './clients/*' -not -path './.git/*'))
if [ -n "$unformatted" ]; then echo "gofmt needed:"; echo "$unformatted"; exit 1; fi

echo "== go test -race"
# The PostgreSQL tests start a throwaway cluster of their own (internal/pgtest); without the
# server binaries they skip with one line (under CI=true they fail).
go test -race -count=1 -timeout 40m $(go list ./... | grep -v '/store')
echo "== storage packages, and the conformance suite's count per backend (store/storetest)"
storelog=$(mktemp)
if ! go test -race -count=1 -timeout 40m -v ./store/... >"$storelog" 2>&1; then
  grep -E -A3 -e '^(--- FAIL|FAIL|panic)|Error Trace|Error:|Test:|skipped' "$storelog" | tail -200
  rm -f "$storelog"
  exit 1
fi
grep -E 'storetest: [0-9]+ cases|PostgreSQL tests skipped' "$storelog" | sort -u
grep -E '^ok|^---' "$storelog" | grep -v -- '--- PASS' || true
rm -f "$storelog"

# One throwaway PostgreSQL cluster for the client suites (the LangGraph conformance suites run
# on both backends): its URL is exported as CKPTD_TEST_PG_URL; the cluster stops when this
# script ends, however it ends (its stdin is a pipe from this shell).
echo "== throwaway PostgreSQL cluster for the client suites"
CGO_ENABLED=0 go build -o bin/pgcluster ./internal/pgtest/cmd/pgcluster
pgenv=$(mktemp)
rm -f "$pgenv"
exec 3> >(exec bin/pgcluster -env "$pgenv")
pgpid=$!
trap 'exec 3>&-; wait $pgpid 2>/dev/null || true; rm -f "$pgenv"' EXIT
for _ in $(seq 1 600); do
  [ -s "$pgenv" ] && break
  kill -0 "$pgpid" 2>/dev/null || break
  sleep 0.2
done
if [ -s "$pgenv" ]; then
  set -a; . "$pgenv"; set +a
  echo "CKPTD_TEST_PG_URL=$CKPTD_TEST_PG_URL"
elif [ "${CI:-}" = "true" ]; then
  echo "no PostgreSQL cluster under CI=true"; exit 1
fi

# Every fuzz target runs for a bounded number of inputs, sized to about 10 s each on 2 cores (the
# first run also builds the instrumented packages, a few minutes with SQLite); CKPTD_FUZZTIME (say
# 30s or 50000x) sets one budget for all of them. The budgets are counts, not durations: go1.26's
# fuzz coordinator can report a duration's own deadline as a failure ("context deadline exceeded"
# with no failing input, golang/go#75804, fixed in go1.27), and a count sets no deadline. A failure
# leaves the failing input in the package's testdata/fuzz/ for `go test -run` to replay.
# Minimisation is one attempt: with the default 60 s per new input, a target whose coverage varies
# a little from run to run (FuzzArchive) spends its whole budget minimising instead of fuzzing.
echo "== go fuzz (${CKPTD_FUZZTIME:-about 10 s} per target)"
for target in ./framing:FuzzReader:100000x ./rpc:FuzzCodec:8000x ./rpc:FuzzJSONValid:20000x \
  ./rpc:FuzzParams:7000x ./rpc:FuzzStrictKeys:20000x ./cmd/ckptd:FuzzArchive:10000x; do
  IFS=: read -r pkg name budget <<<"$target"
  go test -run '^$' -fuzz "^${name}\$" -fuzztime "${CKPTD_FUZZTIME:-$budget}" -fuzzminimizetime 1x "$pkg"
done

if [ -d clients/python/tests ]; then
  echo "== python client"
  # A hung test fails after 240 s instead of stalling the run (pytest-timeout, optional locally).
  extra=""
  python3 -c 'import pytest_timeout' 2>/dev/null && extra="$extra --timeout 240"
  (cd clients/python && python3 -m pytest -q tests $extra)
fi

if [ -f clients/ts/package.json ]; then
  echo "== typescript client"
  (cd clients/ts && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; } && npm test)
fi
if [ -d tests ]; then
  echo "== release artifacts (scripts/dist.sh, then tests/) and the READMEs' commands"
  ./scripts/dist.sh -o "$root/dist"
  extra=""
  python3 -c 'import pytest_timeout' 2>/dev/null && extra="--timeout 2400"
  CKPTD_DIST_DIR="$root/dist" python3 -m pytest -q -p no:cacheprovider tests $extra
fi
echo "== all tests passed"
