/* The convolution's packing as bitcode for the LLVM backend: conv.c with
 * APK_CONV_SPEC defines apk_spec_pack_col, _pack_col_t, _store_col, _im2col
 * and _col2im (the description as a parameter, everything they call inlined);
 * the library's other functions are static here and unused, so clang emits
 * none of them (codegen/CMakeLists.txt, print_llvm.c). Every module links
 * this bitcode, so it also defines apk_math.h's functions, which the
 * module's kernels call and its optimiser inlines into their loops. */
#define APK_STATIC 1
#define APK_CONV_SPEC 1
#include "conv.c"

#define APK_MATH_API
#include "apk_math.h"
