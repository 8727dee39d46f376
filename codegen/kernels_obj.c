/* The kernel library (codegen/kernels/gemm.c and conv.c) as an object file,
 * compiled by clang at build time (codegen/CMakeLists.txt) and assembled
 * into accparc as it is: the LLVM backend writes it beside every model.o
 * and links it, and adds it to the JIT (print_llvm.c). Beside it, the
 * convolution's packing as bitcode (kernels/conv_spec.c), which every
 * module links. Hidden: the shared libaccpar exports ap_* alone. */
#ifndef ACCPAR_KERNELS_OBJ
#error "ACCPAR_KERNELS_OBJ names the object file"
#endif
#ifndef ACCPAR_CONV_SPEC_BC
#error "ACCPAR_CONV_SPEC_BC names the bitcode file"
#endif

__asm__(".section .rodata\n"
        ".balign 16\n"
        ".globl cg_kernels_obj\n"
        ".hidden cg_kernels_obj\n"
        ".type cg_kernels_obj, @object\n"
        "cg_kernels_obj:\n"
        ".incbin \"" ACCPAR_KERNELS_OBJ "\"\n"
        "cg_kernels_obj_end:\n"
        ".balign 8\n"
        ".globl cg_kernels_obj_size\n"
        ".hidden cg_kernels_obj_size\n"
        ".type cg_kernels_obj_size, @object\n"
        "cg_kernels_obj_size:\n"
        ".quad cg_kernels_obj_end - cg_kernels_obj\n"
        ".balign 16\n"
        ".globl cg_conv_spec_bc\n"
        ".hidden cg_conv_spec_bc\n"
        ".type cg_conv_spec_bc, @object\n"
        "cg_conv_spec_bc:\n"
        ".incbin \"" ACCPAR_CONV_SPEC_BC "\"\n"
        "cg_conv_spec_bc_end:\n"
        ".balign 8\n"
        ".globl cg_conv_spec_bc_size\n"
        ".hidden cg_conv_spec_bc_size\n"
        ".type cg_conv_spec_bc_size, @object\n"
        "cg_conv_spec_bc_size:\n"
        ".quad cg_conv_spec_bc_end - cg_conv_spec_bc\n"
        ".previous\n");

extern const unsigned char cg_kernels_obj[];
extern const unsigned long cg_kernels_obj_size;
extern const unsigned char cg_conv_spec_bc[];
extern const unsigned long cg_conv_spec_bc_size;
