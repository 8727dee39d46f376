/* gemm.c and conv.c as one unit: what the LLVM backend compiles to bitcode
 * (codegen/CMakeLists.txt) and links into every module. */
#include "gemm.c"
#include "conv.c"
