#!/usr/bin/env bash
# Builds xgrammar's C++ core (the grammar engine of constrained decoding;
# Apache-2.0) from its source distribution on PyPI, the only registry that
# carries it: a static library and its headers in .deps/xgrammar/, which
# CMakeLists.txt links. Not vendored: the sdist is fetched by pip, checked by
# sha256 and built here. Its own CMake would build the Python bindings
# (which need TVM-FFI): a config.cmake in the build directory turns them off.
# LTO is off so the archive holds ordinary objects any of our builds can link.
# Idempotent and quiet when the library is there.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
VERSION=0.2.8
SHA256=8305646fd2b319d6c3003f51a1665e54cbbe9cba1fb636bc41d0b46434ccbb80
deps="$root/.deps"
prefix="$deps/xgrammar"
[ -f "$prefix/.complete-$VERSION" ] && exit 0
echo "build_xgrammar: building xgrammar $VERSION's C++ core from its PyPI sdist" >&2
mkdir -p "$deps"
tarball="$deps/xgrammar-$VERSION.tar.gz"
if [ ! -f "$tarball" ] || ! echo "$SHA256  $tarball" | sha256sum -c --status; then
  tmp=$(mktemp -d)
  # --no-binary for xgrammar only: its build requirements come as wheels.
  python3 -m pip download --quiet --no-deps --no-binary xgrammar "xgrammar==$VERSION" -d "$tmp"
  mv "$tmp/xgrammar-$VERSION.tar.gz" "$tarball"
  rm -rf "$tmp"
fi
if ! echo "$SHA256  $tarball" | sha256sum -c --status; then
  echo "build_xgrammar: the downloaded sdist does not match its sha256" >&2
  exit 1
fi
src="$deps/xgrammar-$VERSION"
rm -rf "$src" "$prefix"
tar xzf "$tarball" -C "$deps"
mkdir -p "$src/build"
cat > "$src/build/config.cmake" <<'EOF'
set(XGRAMMAR_BUILD_PYTHON_BINDINGS OFF)
set(XGRAMMAR_BUILD_CXX_TESTS OFF)
set(XGRAMMAR_ENABLE_CPPTRACE OFF)
set(XGRAMMAR_ENABLE_INTERNAL_CHECK OFF)
EOF
cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_FLAGS="-fno-lto" \
  -DCMAKE_INSTALL_PREFIX="$prefix" >/dev/null
ninja -C "$src/build" --quiet
cmake --install "$src/build" >/dev/null
cp -r "$src/3rdparty/picojson/picojson.h" "$prefix/include/"
rm -rf "$src"
touch "$prefix/.complete-$VERSION"
