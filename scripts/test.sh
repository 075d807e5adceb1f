#!/usr/bin/env bash
# Runs every test of the project: Go (with the race detector), the Python client, the TypeScript
# client. Needs Go, Python 3.9+ with pytest, and Node 20+ with npm; installs nothing system-wide
# (npm packages go to clients/ts/node_modules, the ckptd binary to ./bin).
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
go test -race -count=1 $(go list ./... | grep -v '/store')
echo "== storage packages, and the conformance suite's count per backend (store/storetest)"
storelog=$(mktemp)
if ! go test -race -count=1 -v ./store/... >"$storelog" 2>&1; then
  grep -E -- '^(--- FAIL|FAIL|panic)|Error Trace|Error:|Test:|skipped' -A3 "$storelog" | tail -200
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

if [ -d clients/python/tests ]; then
  echo "== python client"
  # A hung test fails after 240 s instead of stalling the run (pytest-timeout, optional locally).
  extra=""
  python3 -c 'import pytest_timeout' 2>/dev/null && extra="$extra --timeout 240"
  (cd clients/python && python3 -m pytest -q tests $extra)
  echo "== python client installs (online and offline wheel)"
  bash clients/python/scripts/check_install.sh
fi

if [ -f clients/ts/package.json ]; then
  echo "== typescript client"
  (cd clients/ts && { [ node_modules/.package-lock.json -nt package-lock.json ] || npm ci --no-audit --no-fund; } && npm test)
fi
echo "== all tests passed"
