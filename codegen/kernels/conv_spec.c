/* The convolution's packing as bitcode for the LLVM backend: conv.c with
 * APK_CONV_SPEC defines apk_spec_pack_col, _pack_col_t, _store_col, _im2col
 * and _col2im (the description as a parameter, everything they call inlined);
 * the library's other functions are static here and unused, so clang emits
 * none of them (codegen/CMakeLists.txt, print_llvm.c). */
#define APK_STATIC 1
#define APK_CONV_SPEC 1
#include "conv.c"
