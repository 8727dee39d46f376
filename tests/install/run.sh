#!/bin/sh
# Installs the build into a fresh prefix and uses it as a new user would:
# the example client (samples/client) built through pkg-config (shared and
# static) and through find_package(accpar), its report checked against
# `accparc plan --format json`; the installed accparc compiling and running a
# program with the runtime it finds beside itself, from a copy of the prefix
# moved elsewhere; a generated program built with CMake against
# accpar::runtime; libaccpar.so exporting the public API only.
# Usage: run.sh BUILD_DIR SOURCE_DIR VERSION
set -eu
build=$1 source=$2 version=$3
work="$build/install-test"
prefix="$work/prefix"
rm -rf "$work"
mkdir -p "$work"
fail() { echo "install test: $*" >&2; exit 1; }
# Whether two tensor files hold the same shape and values (to 1e-4).
same_tensor() {
  /usr/bin/python3 - "$1" "$2" <<'PY'
import sys
import numpy as np
import onnx
from onnx import numpy_helper
a, b = (numpy_helper.to_array(onnx.load_tensor(p)) for p in sys.argv[1:3])
sys.exit(0 if a.shape == b.shape and np.allclose(a, b, rtol=1e-4, atol=1e-5) else 1)
PY
}

cmake --install "$build" --prefix "$prefix" >"$work/install.log" ||
  { cat "$work/install.log"; fail "cmake --install failed"; }

libdir=$(cd "$prefix" && ls -d lib*/pkgconfig | head -1 | xargs dirname)
[ -n "$libdir" ] || fail "no pkgconfig folder under $prefix"
case $version in
  0.*) soversion=$(echo "$version" | cut -d. -f1-2) ;;
  *) soversion=$(echo "$version" | cut -d. -f1) ;;
esac
for f in bin/accparc bin/accpar-zoo include/accpar/accpar.h include/accpar/plan.h \
         include/accpar/runtime/accpar_rt.h share/accpar/kernels/kernels.h \
         share/accpar/kernels/gemm.c share/accpar/kernels/conv.c \
         "$libdir/libaccpar.so.$version" "$libdir/libaccpar.so.$soversion" "$libdir/libaccpar.so" \
         "$libdir/libaccpar.a" "$libdir/libaccpar_kernels.a" "$libdir/libaccpar_rt.a" \
         "$libdir/pkgconfig/accpar.pc" "$libdir/pkgconfig/accpar-runtime.pc" \
         "$libdir/cmake/accpar/accparConfig.cmake" "$libdir/cmake/accpar/accparConfigVersion.cmake"; do
  [ -e "$prefix/$f" ] || fail "$f was not installed"
done
soname=$(readelf -d "$prefix/$libdir/libaccpar.so" | sed -n 's/.*Library soname: \[\(.*\)\]/\1/p')
[ "$soname" = "libaccpar.so.$soversion" ] || fail "SONAME is '$soname', expected libaccpar.so.$soversion"

# Only the public API leaves the shared library: no protobuf-c bindings, no kernels.
others=$(nm -D --defined-only "$prefix/$libdir/libaccpar.so" | awk '{print $3}' | grep -v '^ap_' || true)
[ -z "$others" ] || fail "libaccpar.so exports more than ap_*: $(echo "$others" | head -5 | tr '\n' ' ')"
nm -D --defined-only "$prefix/$libdir/libaccpar.so" | awk '{print $3}' | sort >"$work/exported"
grep -ho 'AP_API [^(]*(' "$prefix/include/accpar/"*.h | grep -o 'ap_[a-z0-9_]*(' | tr -d '(' |
  sort >"$work/declared"
diff -u "$work/declared" "$work/exported" >&2 || fail "the exported symbols are not the declared API"

got=$("$prefix/bin/accparc" --version)
[ "$got" = "accparc $version" ] || fail "accparc --version printed '$got'"

# A model, from the installed zoo generator.
"$prefix/bin/accpar-zoo" -o "$work/models" lenet5 resnet_small >/dev/null
array=tpuv3:1,tpuv2:2
"$prefix/bin/accparc" plan "$work/models/lenet5.onnx" --devices "$array" --format json \
  >"$work/lenet5.plan.json"
"$prefix/bin/accparc" plan "$work/models/resnet_small.onnx" --devices cpu:4 --format json \
  >"$work/resnet_small.plan.json"

export PKG_CONFIG_PATH="$prefix/$libdir/pkgconfig"
cc=${CC:-cc}
# shellcheck disable=SC2046 # pkg-config's flags are split on purpose
$cc -std=c11 -Wall -Wextra -Werror "$source/samples/client/client.c" \
  $(pkg-config --cflags --libs accpar) -Wl,-rpath,"$prefix/$libdir" -o "$work/client-pc"
readelf -d "$work/client-pc" | grep -q "NEEDED.*libaccpar.so.$soversion" ||
  fail "the pkg-config client does not link libaccpar.so.$soversion"
# shellcheck disable=SC2046
$cc -std=c11 -Wall -Wextra -Werror "$source/samples/client/client.c" $(pkg-config --cflags accpar) \
  "$prefix/$libdir/libaccpar.a" $(pkg-config --static --libs accpar | sed 's/-laccpar / /') \
  -o "$work/client-static"
! readelf -d "$work/client-static" | grep -q "libaccpar" || fail "the static client needs libaccpar.so"

cmake -S "$source/samples/client" -B "$work/client-cmake" -DCMAKE_PREFIX_PATH="$prefix" \
  -DCMAKE_BUILD_TYPE=Release >"$work/client-cmake.log" 2>&1 ||
  { cat "$work/client-cmake.log"; fail "configuring the client with find_package(accpar) failed"; }
cmake --build "$work/client-cmake" >>"$work/client-cmake.log" 2>&1 ||
  { cat "$work/client-cmake.log"; fail "building the client with find_package(accpar) failed"; }

for c in client-pc client-static client-cmake/accpar-client; do
  "$work/$c" "$work/models/lenet5.onnx" "$array" >"$work/$(basename "$c").lenet5.out"
  /usr/bin/python3 "$source/tests/install/check_client.py" "$work/$(basename "$c").lenet5.out" \
    "$work/lenet5.plan.json" || fail "$c on lenet5 disagrees with accparc plan"
  "$work/$c" "$work/models/resnet_small.onnx" cpu:4 >"$work/$(basename "$c").resnet.out"
  /usr/bin/python3 "$source/tests/install/check_client.py" "$work/$(basename "$c").resnet.out" \
    "$work/resnet_small.plan.json" || fail "$c on resnet_small disagrees with accparc plan"
done
# An error is one line on stderr and exit status 1.
if "$work/client-pc" "$work/no-such.onnx" "$array" >"$work/err.out" 2>"$work/err.txt"; then
  fail "the client accepted a missing model"
fi
[ "$(wc -l <"$work/err.txt")" -eq 1 ] && grep -q "no-such.onnx" "$work/err.txt" ||
  fail "the client's error is not one line naming the file: $(cat "$work/err.txt")"

# The installed accparc finds its runtime beside itself, with no environment
# variable, from wherever the prefix is moved to.
cp -a "$prefix" "$work/moved"
(
  unset ACCPAR_RT_LIB ACCPAR_RT_INCLUDE ACCPAR_KERNELS_DIR
  "$work/moved/bin/accparc" compile "$work/models/lenet5.onnx" --devices cpu:2 -o "$work/prog" \
    >"$work/compile.log" 2>&1 || { cat "$work/compile.log"; fail "installed accparc compile failed"; }
)
grep -q "$work/moved/bin/../$libdir/libaccpar_rt" "$work/prog/build.sh" ||
  fail "the program was not linked against the moved prefix's runtime: $(cat "$work/prog/build.sh")"
"$prefix/bin/accpar-zoo" --inputs -o "$work/data" lenet5 >/dev/null
"$work/prog/model" --inputs "$work/data/lenet5_data" --outputs "$work/prog-out" >/dev/null
[ -s "$work/prog-out/output_0.pb" ] || fail "the compiled program wrote no output"

# The LLVM backend, when built, is a module the installed accparc loads from
# the moved prefix; accparc itself does not load libLLVM.
if [ -e "$prefix/$libdir/accpar/accpar-llvm.so" ]; then
  ! readelf -d "$prefix/bin/accparc" | grep -q "NEEDED.*libLLVM" ||
    fail "accparc loads libLLVM at start: $(readelf -d "$prefix/bin/accparc" | grep NEEDED | tr '\n' ' ')"
  (
    unset ACCPAR_RT_LIB ACCPAR_RT_INCLUDE ACCPAR_KERNELS_DIR ACCPAR_LLVM_MODULE
    # The build tree's module must not be the one found (glibc's loader
    # names every object it loads).
    LD_DEBUG=files LD_DEBUG_OUTPUT="$work/llvm-compile.ld" \
      "$work/moved/bin/accparc" compile "$work/models/lenet5.onnx" --devices cpu:2 --backend llvm \
      -o "$work/prog-llvm" >"$work/compile-llvm.log" 2>&1 ||
      { cat "$work/compile-llvm.log"; fail "installed accparc compile --backend llvm failed"; }
    grep -q "file=$work/moved/bin/\.\./$libdir/accpar/accpar-llvm.so " "$work/llvm-compile.ld".* ||
      fail "the installed accparc did not load the moved prefix's accpar-llvm.so"
  )
  "$work/prog-llvm/model" --inputs "$work/data/lenet5_data" --outputs "$work/prog-llvm-out" >/dev/null
  same_tensor "$work/prog-out/output_0.pb" "$work/prog-llvm-out/output_0.pb" ||
    fail "the installed LLVM backend's program disagrees with the C backend's"
fi

# A generated program built by CMake against accpar::runtime.
mkdir -p "$work/prog-cmake"
cat >"$work/prog-cmake/CMakeLists.txt" <<CMAKE
cmake_minimum_required(VERSION 3.20)
project(lenet5_program LANGUAGES C)
find_package(accpar CONFIG REQUIRED)
file(GLOB sources "$work/prog/*.c")
add_executable(model \${sources})
target_link_libraries(model PRIVATE accpar::runtime)
CMAKE
cmake -S "$work/prog-cmake" -B "$work/prog-cmake/build" -DCMAKE_PREFIX_PATH="$prefix" \
  >"$work/prog-cmake.log" 2>&1 && cmake --build "$work/prog-cmake/build" >>"$work/prog-cmake.log" 2>&1 ||
  { cat "$work/prog-cmake.log"; fail "building a generated program against accpar::runtime failed"; }
"$work/prog-cmake/build/model" --inputs "$work/data/lenet5_data" --outputs "$work/prog-cmake-out" >/dev/null
same_tensor "$work/prog-out/output_0.pb" "$work/prog-cmake-out/output_0.pb" ||
  fail "the program built by accparc and the one built against accpar::runtime disagree"
echo "install test: prefix, pkg-config (shared, static), find_package, installed accparc: ok"
