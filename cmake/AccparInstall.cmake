# Installing accpar: libaccpar (shared, with a SONAME from the project's
# VERSION, and static), the public headers, accparc and accpar-zoo, the
# runtime libraries with their header and the kernel sources compiled
# programs include, accpar.pc and accpar-runtime.pc for pkg-config, and a
# CMake package (find_package(accpar CONFIG): accpar::accpar,
# accpar::runtime, accpar::runtime_mpi when MPI was found).
#
# Layout under the prefix (GNUInstallDirs):
#   bin/accparc, bin/accpar-zoo
#   LIBDIR/libaccpar.so.X.Y -> .so, libaccpar.a (+ libaccpar_kernels.a, which
#     the static library needs), libaccpar_rt.a, libaccpar_rt_mpi.a
#   LIBDIR/pkgconfig/accpar.pc, accpar-runtime.pc; LIBDIR/cmake/accpar/
#   INCLUDEDIR/accpar/{accpar.h,plan.h}; INCLUDEDIR/accpar/runtime/accpar_rt.h
#   DATADIR/accpar/kernels/ (the GEMM and convolution sources)
#   LIBDIR/accpar/accpar-llvm.so (the LLVM backend, loaded on first use:
#     codegen/llvm_module.c), when LLVM was found
# An installed accparc finds the runtime from its own location through the
# relative paths below (tools/runtime_paths.c).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

# The headers' version macros and the project's VERSION are one number.
file(STRINGS "${CMAKE_SOURCE_DIR}/include/accpar/accpar.h" _ap_version_line
     REGEX "^#define ACCPAR_VERSION_STRING ")
if(NOT _ap_version_line MATCHES "\"${PROJECT_VERSION}\"")
  message(FATAL_ERROR "include/accpar/accpar.h says ${_ap_version_line}, "
                      "CMakeLists.txt says VERSION ${PROJECT_VERSION}: make them agree")
endif()

# Everything linked into libaccpar.so is compiled with hidden visibility:
# only the functions the public headers mark AP_API are exported.
set_target_properties(accpar accpar_onnxpb accpar_kernels PROPERTIES
  C_VISIBILITY_PRESET hidden POSITION_INDEPENDENT_CODE ON)

# Before 1.0 a minor release may break the ABI, so the SONAME carries
# MAJOR.MINOR (libaccpar.so.0.1); from 1.0 on, MAJOR alone.
if(PROJECT_VERSION_MAJOR EQUAL 0)
  set(ACCPAR_SOVERSION "${PROJECT_VERSION_MAJOR}.${PROJECT_VERSION_MINOR}")
else()
  set(ACCPAR_SOVERSION "${PROJECT_VERSION_MAJOR}")
endif()
# Its code is the whole static archive; a target needs one source of its own.
file(CONFIGURE OUTPUT "${CMAKE_BINARY_DIR}/generated/accpar_shared.c" CONTENT
     "/* libaccpar.so ${PROJECT_VERSION}: the objects of libaccpar.a, whole. */\ntypedef int ap_shared_unit;\n")
add_library(accpar_shared SHARED "${CMAKE_BINARY_DIR}/generated/accpar_shared.c")
target_link_libraries(accpar_shared PRIVATE "$<LINK_LIBRARY:WHOLE_ARCHIVE,accpar>")
target_include_directories(accpar_shared PUBLIC
  "$<BUILD_INTERFACE:${CMAKE_SOURCE_DIR}/include>"
  "$<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>")
set_target_properties(accpar_shared PROPERTIES
  OUTPUT_NAME accpar EXPORT_NAME accpar
  VERSION "${PROJECT_VERSION}" SOVERSION "${ACCPAR_SOVERSION}"
  C_VISIBILITY_PRESET hidden LINKER_LANGUAGE C)
target_link_options(accpar_shared PRIVATE "LINKER:--no-undefined"
                    "LINKER:--version-script=${CMAKE_SOURCE_DIR}/cmake/accpar.map")
set_property(TARGET accpar_shared APPEND PROPERTY LINK_DEPENDS "${CMAKE_SOURCE_DIR}/cmake/accpar.map")

# Installed, the runtime's users also get the kernels' folder: every
# generated program includes kernels.h, and kernels.c includes apk_math.h and
# gemm.c.
foreach(rt accpar_rt accpar_rt_mpi)
  if(TARGET ${rt})
    target_include_directories(${rt} INTERFACE
      "$<INSTALL_INTERFACE:${CMAKE_INSTALL_DATADIR}/accpar/kernels>")
  endif()
endforeach()
set_target_properties(accpar_rt PROPERTIES EXPORT_NAME runtime)
set(_ap_export_targets accpar_shared accpar_rt)
if(TARGET accpar_rt_mpi)
  set_target_properties(accpar_rt_mpi PROPERTIES EXPORT_NAME runtime_mpi)
  list(APPEND _ap_export_targets accpar_rt_mpi)
  set(ACCPAR_HAVE_RT_MPI 1)
else()
  set(ACCPAR_HAVE_RT_MPI 0)
endif()

install(TARGETS ${_ap_export_targets} EXPORT accparTargets
  LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}"
  RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
install(TARGETS accpar accpar_kernels ARCHIVE DESTINATION "${CMAKE_INSTALL_LIBDIR}")
install(TARGETS accparc accpar-zoo RUNTIME DESTINATION "${CMAKE_INSTALL_BINDIR}")
if(TARGET accpar_llvm)
  install(TARGETS accpar_llvm LIBRARY DESTINATION "${CMAKE_INSTALL_LIBDIR}/accpar")
endif()
install(FILES "${CMAKE_SOURCE_DIR}/include/accpar/accpar.h" "${CMAKE_SOURCE_DIR}/include/accpar/plan.h"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/accpar")
install(FILES "${CMAKE_SOURCE_DIR}/runtime/accpar_rt.h"
        DESTINATION "${CMAKE_INSTALL_INCLUDEDIR}/accpar/runtime")
set(_ap_kernels "${CMAKE_SOURCE_DIR}/codegen/kernels")
install(FILES "${_ap_kernels}/kernels.h" "${_ap_kernels}/apk_tile.h" "${_ap_kernels}/apk_math.h"
              "${_ap_kernels}/gemm.c"
              "${_ap_kernels}/conv.c" DESTINATION "${CMAKE_INSTALL_DATADIR}/accpar/kernels")

install(EXPORT accparTargets NAMESPACE accpar::
        DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/accpar")
configure_package_config_file("${CMAKE_SOURCE_DIR}/cmake/accparConfig.cmake.in"
  "${CMAKE_BINARY_DIR}/cmake/accparConfig.cmake"
  INSTALL_DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/accpar" PATH_VARS CMAKE_INSTALL_BINDIR)
write_basic_package_version_file("${CMAKE_BINARY_DIR}/cmake/accparConfigVersion.cmake"
  VERSION "${PROJECT_VERSION}" COMPATIBILITY SameMinorVersion)
install(FILES "${CMAKE_BINARY_DIR}/cmake/accparConfig.cmake"
              "${CMAKE_BINARY_DIR}/cmake/accparConfigVersion.cmake"
        DESTINATION "${CMAKE_INSTALL_LIBDIR}/cmake/accpar")

# pkg-config files find the prefix from their own place (${pcfiledir}), so
# `cmake --install --prefix P` works for any P chosen at install time.
file(RELATIVE_PATH ACCPAR_PC_TO_PREFIX "/p/${CMAKE_INSTALL_LIBDIR}/pkgconfig" "/p")
if(TARGET accpar_rt_mpi)
  string(JOIN " " _ap_mpi_libs ${MPI_C_LIBRARIES})
  set(ACCPAR_PC_RT_MPI_LIBS "${MPI_C_LINK_FLAGS} ${_ap_mpi_libs}")
endif()
foreach(pc accpar accpar-runtime)
  configure_file("${CMAKE_SOURCE_DIR}/cmake/${pc}.pc.in" "${CMAKE_BINARY_DIR}/pkgconfig/${pc}.pc" @ONLY)
  install(FILES "${CMAKE_BINARY_DIR}/pkgconfig/${pc}.pc"
          DESTINATION "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
endforeach()
