#!/usr/bin/env bash
# Install retexo from BUILD_DIR into a temporary prefix, then build the example against the
# installed package twice and run each build under mpirun -np 2:
#  1. with CMake: find_package(retexo) from a project that enables only CXX
#     (test/install/CMakeLists.txt), so the package config must not need a C compiler;
#  2. with pkg-config: the compile and link flags of retexo.pc, used separately.
# The README's C++ quick start must be test/install/quickstart.cpp, line for line.
# Usage: install_test.sh SOURCE_DIR BUILD_DIR MPIEXEC
set -euo pipefail
src=$1
build=$2
mpiexec=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null

echo "== CMake package, C++-only consumer"
cmake -S "$src/test/install" -B "$tmp/example" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$tmp/example" -j 2 >/dev/null
"$mpiexec" -n 2 "$tmp/example/retexo_example"
echo "== the README's C++ quick start"
# The file built is the README's code block, as printed there.
if ! awk '/^```cpp$/{f=1;next} /^```$/{if(f){exit}} f' "$src/README.md" | diff - "$src/test/install/quickstart.cpp"; then
  echo "README.md's C++ quick start differs from test/install/quickstart.cpp (diff above)" >&2
  exit 1
fi
"$mpiexec" -n 2 "$tmp/example/quickstart"

echo "== pkg-config"
if ! command -v pkg-config >/dev/null; then
  echo "SKIPPED: no pkg-config"
  exit 0
fi
pc=$(find "$tmp/prefix" -name retexo.pc -path "*/pkgconfig/*")
# retexo.pc finds the prefix from its own place: the temporary prefix here.
export PKG_CONFIG_PATH=$(dirname "$pc")
pkg-config --exists --print-errors retexo
pkg-config --modversion retexo
cxx=${CXX:-c++}
"$cxx" -O1 -Wall -Wextra -Werror -c "$src/test/install/retexo_example.cpp" -o "$tmp/example_pc.o" $(pkg-config --cflags retexo) # C++20 from retexo.pc
"$cxx" "$tmp/example_pc.o" -o "$tmp/example_pc" $(pkg-config --libs retexo)
"$mpiexec" -n 2 "$tmp/example_pc"
