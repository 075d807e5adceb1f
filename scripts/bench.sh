#!/usr/bin/env bash
# One command, one report (#18): builds ckptd and the bench helpers, runs every comparison on a
# fresh temp dir (each against its baseline, in the same run), and writes bench/REPORT.md with
# its plots under bench/plots/ (results.json beside them).
#
#   ./scripts/bench.sh                 the full comparison (about 10 minutes on 2 cores)
#   ./scripts/bench.sh --runs 3        three runs in a row, every ratio reported per run
#   ./scripts/bench.sh --tiny --out D  every benchmark at a token size, report into D (the smoke test)
#   ./scripts/bench.sh --only roundtrip,scale
#   ./scripts/bench.sh --scale 1000    the scale section at 1000 workflows x 100 (default 10000: 1M)
#   ./scripts/bench.sh --ts-install    also install the TS bench's own dependencies (SqliteSaver,
#                                      better-sqlite3: compiled from source, minutes) if missing
#
# Needs: Go, python3 (with langgraph, langgraph-checkpoint-sqlite and aiosqlite for the LangGraph
# rows: the Python client's test dependencies), node (clients/ts built with npm ci). Nothing is
# downloaded while measuring.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=$root/bench
args=()
ts_install=0
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --ts-install) ts_install=1; args+=("$1"); shift ;;
    --tiny) args+=("$1"); shift ;;
    --runs|--only|--scale) args+=("$1" "$2"); shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "bench.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
work=$(mktemp -d "${TMPDIR:-/tmp}/ckptd-bench.XXXXXX")
trap 'rm -rf "$work"' EXIT
export GOFLAGS="${GOFLAGS:--buildvcs=false}"
echo "bench: building into $work"
CGO_ENABLED=0 go build -o "$work/ckptd" ./cmd/ckptd
go build -o "$work/fill" ./bench/fill
go build -o "$work/probe" ./bench/probe
go test -c -o "$work/sqlite.test" ./store/sqlite
if [ -f clients/ts/package.json ] && [ -d clients/ts/node_modules ]; then
  (cd clients/ts && npm run --silent build >/dev/null)
  if [ "$ts_install" = 1 ] && [ ! -d clients/ts/bench/node_modules/better-sqlite3 ]; then
    (cd clients/ts/bench && npm install --no-audit --no-fund --no-package-lock --legacy-peer-deps)
  fi
fi
export CKPTD_PATH="$work/ckptd"
python3 bench/run.py --bin "$work/ckptd" --fill "$work/fill" --probe "$work/probe" --sqlite-test "$work/sqlite.test" \
  --work "$work" --out "$out" ${args[@]+"${args[@]}"}
