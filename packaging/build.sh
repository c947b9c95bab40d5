#!/usr/bin/env bash
# Builds Flotilla's binaries and its deb and rpm packages, and prints their
# sizes per architecture. `make packages` runs it; the packaging tests run
# it into a temporary directory.
#
#   packaging/build.sh [-o OUT] [-b BINDIR] [-n NAME] [-f FORMAT] [ARCH...]
#
#   ARCH     amd64, arm64 or arm7 (default: all three). amd64 and arm64 get
#            a .deb and an .rpm, arm7 a .deb (armhf).
#   -o OUT   where the packages go (default dist); binaries go to
#            OUT/bin/linux_ARCH.
#   -b DIR   package the binaries in DIR instead of building them (one
#            ARCH only).
#   -n NAME  only the package NAME (flotilla-agent or flotilla-hub).
#   -f FMT   only packages of format FMT (deb or rpm).
#
# Environment: GO (go), VERSION and COMMIT (as the Makefile sets them, for
# `version`), PKG_VERSION (the packages' version; default: VERSION without
# its "v" when it is a release tag, else 0.0.0~git<COMMIT>).
#
# Nothing is downloaded but Go modules: nfpm is built from the Go module
# proxy (or the module cache) into bin/tools.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD

GO=${GO:-go}
NFPM_VERSION=v2.45.2
# As the Makefile's TAGS (internal/buildtags).
TAGS=grpcnotrace
COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
VERSION=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo v0.0.0-dev)}
OUT=dist
BINDIR=
NAMES=(flotilla-agent flotilla-hub)
ONLY_FORMAT=
while getopts "o:b:n:f:" opt; do
  case $opt in
  o) OUT=$OPTARG ;;
  b) BINDIR=$OPTARG ;;
  n) NAMES=("$OPTARG") ;;
  f) ONLY_FORMAT=$OPTARG ;;
  *) exit 2 ;;
  esac
done
shift $((OPTIND - 1))
ARCHES=("$@")
[ ${#ARCHES[@]} -gt 0 ] || ARCHES=(amd64 arm64 arm7)
if [ -n "$BINDIR" ] && [ ${#ARCHES[@]} -ne 1 ]; then
  echo "build.sh: -b takes one ARCH" >&2
  exit 2
fi

if [ -z "${PKG_VERSION:-}" ]; then
  if [[ $VERSION =~ ^v?[0-9]+\.[0-9]+\.[0-9]+ ]]; then
    PKG_VERSION=${VERSION#v}
  else
    # Not a release: sorts before 0.0.1 and says which commit it is.
    PKG_VERSION=0.0.0~git$COMMIT
  fi
fi

NFPM=$ROOT/bin/tools/nfpm-$NFPM_VERSION/nfpm
if ! [ -x "$NFPM" ]; then
  GOBIN=$(dirname "$NFPM") "$GO" install "github.com/goreleaser/nfpm/v2/cmd/nfpm@$NFPM_VERSION"
fi

mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
LDFLAGS="-s -w -X flotilla.dev/flotilla/internal/version.Version=$VERSION -X flotilla.dev/flotilla/internal/version.Commit=$COMMIT"

# sizes[ARCH.ITEM] in MiB, printed as a table at the end.
declare -A sizes
mib() { awk -v b="$(stat -c %s "$1")" 'BEGIN { printf "%.1f", b / 1048576 }'; }

for arch in "${ARCHES[@]}"; do
  case $arch in
  amd64 | arm64) goarch=$arch goarm= formats=(deb rpm) ;;
  arm7) goarch=arm goarm=7 formats=(deb) ;;
  *)
    echo "build.sh: unknown ARCH $arch (amd64, arm64 or arm7)" >&2
    exit 2
    ;;
  esac
  bin=$BINDIR
  if [ -z "$bin" ]; then
    bin=$OUT/bin/linux_$arch
    mkdir -p "$bin"
    echo "build.sh: building the binaries for linux/$arch"
    CGO_ENABLED=0 GOOS=linux GOARCH=$goarch GOARM=$goarm \
      "$GO" build -trimpath -tags "$TAGS" -ldflags "$LDFLAGS" -o "$bin/" ./cmd/...
  fi
  bin=$(cd "$bin" && pwd)
  for b in flotilla-agent flotilla-logger flotilla-hub flotctl; do
    [ -f "$bin/$b" ] && sizes[$arch.$b]=$(mib "$bin/$b")
  done
  for pkg in "${NAMES[@]}"; do
    for format in "${formats[@]}"; do
      [ -z "$ONLY_FORMAT" ] || [ "$format" = "$ONLY_FORMAT" ] || continue
      before=$(ls "$OUT")
      ARCH=$arch VERSION=$PKG_VERSION BIN=$bin \
        "$NFPM" package --config "packaging/nfpm/$pkg.yaml" --packager "$format" --target "$OUT/" >/dev/null
      file=$(comm -13 <(echo "$before") <(ls "$OUT") | head -n 1)
      [ -n "$file" ] || file=$(ls -t "$OUT" | grep -E "^$pkg[-_].*\.$format$" | head -n 1)
      echo "build.sh: $OUT/$file"
      sizes[$arch.$pkg.$format]=$(mib "$OUT/$file")
    done
  done
done

columns=(flotilla-agent flotilla-logger flotilla-hub flotctl flotilla-agent.deb flotilla-hub.deb flotilla-agent.rpm flotilla-hub.rpm)
echo
echo "sizes in MiB (binaries stripped; .deb with xz, .rpm with zstd):"
printf '%-6s' arch
printf ' %18s' "${columns[@]}"
echo
for arch in "${ARCHES[@]}"; do
  printf '%-6s' "$arch"
  for c in "${columns[@]}"; do
    printf ' %18s' "${sizes[$arch.$c]:--}"
  done
  echo
done
