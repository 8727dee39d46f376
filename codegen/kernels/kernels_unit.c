/* gemm.c and conv.c as one unit: what clang compiles to the object the LLVM
 * backend's programs link (codegen/CMakeLists.txt, codegen/kernels_obj.c). */
#include "gemm.c"
#include "conv.c"
