#!/bin/sh
# install_consumer.sh BUILD_DIR CONSUMER_C CC [CFLAGS] — installs into a
# temporary prefix, builds a consumer with pkg-config (shared and static) and
# with find_package(memdecay), and runs each.
set -eu
build=$1 src=$2 cc=${3:-cc} extra=${4:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
pc=$(find "$tmp/prefix" -name memdecay.pc | head -n1)
test -n "$pc"
export PKG_CONFIG_PATH=$(dirname "$pc")
test -f "$tmp/prefix/include/memdecay/memdecay_ring.h"
test -n "$(find "$tmp/prefix" -name memdecayConfig.cmake)"
"$cc" $extra -o "$tmp/consumer" "$src" $(pkg-config --cflags --libs memdecay) -Wl,-rpath,"$(pkg-config --variable=libdir memdecay)"
"$tmp/consumer"
"$cc" $extra -o "$tmp/consumer_static" "$src" $(pkg-config --cflags memdecay) \
	"$(pkg-config --variable=libdir memdecay)/libmemdecay.a" -lm
"$tmp/consumer_static"
mkdir "$tmp/pkg"
cp "$src" "$tmp/pkg/consumer.c"
cat > "$tmp/pkg/CMakeLists.txt" <<CM
cmake_minimum_required(VERSION 3.20)
project(consumer C)
find_package(memdecay 0.1 REQUIRED)
add_executable(consumer consumer.c)
target_link_libraries(consumer PRIVATE memdecay::memdecay_static m)
target_compile_options(consumer PRIVATE $extra)
target_link_options(consumer PRIVATE $extra)
CM
cmake -S "$tmp/pkg" -B "$tmp/pkg/build" -DCMAKE_PREFIX_PATH="$tmp/prefix" -DCMAKE_C_COMPILER="$cc" >/dev/null
cmake --build "$tmp/pkg/build" >/dev/null
"$tmp/pkg/build/consumer"
echo "install_consumer: ok"
