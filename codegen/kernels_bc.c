/* The kernel library (codegen/kernels/gemm.c and conv.c) as LLVM bitcode,
 * compiled by clang at build time (codegen/CMakeLists.txt) and assembled
 * into accparc as it is, for the LLVM backend to link into every module
 * (print_llvm.c). Hidden: the shared libaccpar exports ap_* alone. */
#ifndef ACCPAR_KERNELS_BC
#error "ACCPAR_KERNELS_BC names the bitcode file"
#endif

__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl cg_kernels_bc\n"
        ".hidden cg_kernels_bc\n"
        ".type cg_kernels_bc, @object\n"
        "cg_kernels_bc:\n"
        ".incbin \"" ACCPAR_KERNELS_BC "\"\n"
        "cg_kernels_bc_end:\n"
        ".balign 8\n"
        ".globl cg_kernels_bc_size\n"
        ".hidden cg_kernels_bc_size\n"
        ".type cg_kernels_bc_size, @object\n"
        "cg_kernels_bc_size:\n"
        ".quad cg_kernels_bc_end - cg_kernels_bc\n"
        ".previous\n");

extern const unsigned char cg_kernels_bc[];
extern const unsigned long cg_kernels_bc_size;
