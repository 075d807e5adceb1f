#!/usr/bin/env bash
# Builds every release artifact from this checkout into dist/ (or -o DIR):
#   bin/<goos>-<goarch>/ckptd[.exe]           static (CGO_ENABLED=0), -trimpath, stripped, with the
#                                              version (VERSION) and commit stamped in
#   ckptd-<v>-<goos>-<goarch>.tar.gz|.zip      each binary with the README (zip for Windows)
#   python/ckptd-<v>-py3-none-<platform>.whl   a wheel per platform carrying its binary, and the sdist
#   npm/ckptd-<v>.tgz, npm/ckptd-<os>-<cpu>-<v>.tgz   the npm package and its per-platform packages
#   SHA256SUMS
# for linux amd64/arm64, darwin amd64/arm64 and windows amd64. Reproducible: SOURCE_DATE_EPOCH is
# the commit's time, archives have sorted entries with fixed modes and owners, so two runs from
# the same commit give the same SHA256SUMS. Needs Go, Python 3 with `build` and `hatchling`
# (pip install build hatchling), Node and npm.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
out=dist
while [ $# -gt 0 ]; do
  case "$1" in
    -o) out=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "dist.sh: unknown argument $1 (usage: scripts/dist.sh [-o DIR])" >&2; exit 2 ;;
  esac
done
case "$out" in /*) ;; *) out="$root/$out" ;; esac

missing=""
command -v go >/dev/null || missing="$missing go"
command -v node >/dev/null || missing="$missing node"
command -v npm >/dev/null || missing="$missing npm"
python3 -c 'import build, hatchling' 2>/dev/null || missing="$missing python3-modules(build,hatchling: pip install build hatchling)"
if [ -n "$missing" ]; then echo "dist.sh: missing:$missing" >&2; exit 1; fi

version=$(tr -d ' \n' < VERSION)
for f in clients/python/pyproject.toml clients/ts/package.json clients/python/src/ckptd/_common.py; do
  v=$(grep -m1 -E '^(version = |  "version": |__version__ = )' "$f" | sed -E 's/.*"([^"]+)".*/\1/')
  if [ "$v" != "$version" ]; then
    echo "dist.sh: $f says version $v, VERSION says $version: make them agree" >&2; exit 1
  fi
done
if git rev-parse --git-dir >/dev/null 2>&1; then
  commit=${COMMIT:-$(git rev-parse HEAD)}
  if [ -z "${COMMIT:-}" ] && [ -n "$(git status --porcelain --untracked-files=no)" ]; then commit="$commit-dirty"; fi
  export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}
else
  : "${COMMIT:?dist.sh: not a git checkout: set COMMIT and SOURCE_DATE_EPOCH}"
  : "${SOURCE_DATE_EPOCH:?dist.sh: not a git checkout: set COMMIT and SOURCE_DATE_EPOCH}"
  commit=$COMMIT
  export SOURCE_DATE_EPOCH
fi

if [ -e "$out" ] && [ -n "$(ls -A "$out")" ] && [ ! -f "$out/SHA256SUMS" ]; then
  echo "dist.sh: $out exists and is not a previous dist/ (no SHA256SUMS): not touching it" >&2; exit 1
fi
rm -rf "$out"
mkdir -p "$out/bin" "$out/python" "$out/npm"
stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT
echo "== ckptd $version, commit $commit, SOURCE_DATE_EPOCH=$SOURCE_DATE_EPOCH -> $out"

targets="linux-amd64 linux-arm64 darwin-amd64 darwin-arm64 windows-amd64"
ldflags="-s -w -X main.version=$version -X main.commit=$commit"
for t in $targets; do
  goos=${t%-*} goarch=${t#*-}
  exe=ckptd; [ "$goos" = windows ] && exe=ckptd.exe
  echo "== go build $goos/$goarch"
  mkdir -p "$out/bin/$t"
  CGO_ENABLED=0 GOOS=$goos GOARCH=$goarch go build -trimpath -buildvcs=false -ldflags "$ldflags" \
    -o "$out/bin/$t/$exe" ./cmd/ckptd
  name=ckptd-$version-$t
  if [ "$goos" = windows ]; then
    python3 scripts/dist_pack.py zip "$out/$name.zip" "$name" "$out/bin/$t/$exe:0755" README.md:0644
  else
    python3 scripts/dist_pack.py tar "$out/$name.tar.gz" "$name" "$out/bin/$t/$exe:0755" README.md:0644
  fi
done

echo "== python wheels and sdist"
for t in $targets; do
  exe=ckptd; [ "${t%-*}" = windows ] && exe=ckptd.exe
  CKPTD_BINARY="$out/bin/$t/$exe" CKPTD_TARGET=$t \
    python3 -m build --no-isolation --wheel --outdir "$out/python" clients/python >"$stage/build.log" 2>&1 \
    || { cat "$stage/build.log" >&2; exit 1; }
done
CKPTD_COMMIT=$commit python3 -m build --no-isolation --sdist --outdir "$out/python" clients/python >"$stage/build.log" 2>&1 \
  || { cat "$stage/build.log" >&2; exit 1; }

echo "== npm packages"
if [ ! -d clients/ts/node_modules/typescript ]; then (cd clients/ts && npm ci --no-audit --no-fund --ignore-scripts); fi
node clients/ts/scripts/build.mjs
node scripts/dist_npm.mjs "$stage/npm" "$out/bin"
chmod -R u=rwX,go=rX "$stage/npm"
chmod 0755 "$stage"/npm/*/bin/ckptd* "$stage/npm/ckptd/bin/ckptd.cjs"
for d in "$stage"/npm/*/; do
  npm pack --silent --pack-destination "$out/npm" "$d" >/dev/null
done

python3 scripts/dist_pack.py sums "$out"
echo "== wrote $out:"
(cd "$out" && find . -type f ! -path './bin/*' | sort | sed 's|^\./|   |')
