#!/usr/bin/env bash
# Install retexo from BUILD_DIR into a temporary prefix, build the example against the
# installed package with find_package(retexo), and run it under mpirun -np 2.
# Usage: install_test.sh SOURCE_DIR BUILD_DIR MPIEXEC
set -euo pipefail
src=$1
build=$2
mpiexec=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pkg-config --exists --print-errors retexo 2>/dev/null || true
PKG_CONFIG_PATH=$tmp/prefix/lib/pkgconfig pkg-config --modversion retexo
cmake -S "$src/test/install" -B "$tmp/example" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/example" -j 2 >/dev/null
"$mpiexec" -n 2 "$tmp/example/retexo_example"
