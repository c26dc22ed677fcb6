# Helpers shared by every CMakeLists of the project.

# Warning set for our own targets (not for third-party code).
function(nms_target_warnings target)
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wpedantic -Wshadow -Wvla
                                           -Wnon-virtual-dtor -Wimplicit-fallthrough)
  if(NMS_WARNINGS_AS_ERRORS)
    target_compile_options(${target} PRIVATE -Werror)
  endif()
endfunction()

# nms_add_test(NAME <name> SOURCES <files...> [LIBS <libs...>])
# One GoogleTest executable; every TEST becomes a CTest test. Tests may include private headers
# (src/) and find checked-in data through NMS_TEST_DATA_DIR.
function(nms_add_test)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE nmsparse::nmsparse GTest::gtest GTest::gtest_main
                                            OpenMP::OpenMP_CXX ${ARG_LIBS})
  target_include_directories(${ARG_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/src ${PROJECT_SOURCE_DIR}/tests)
  target_compile_definitions(${ARG_NAME} PRIVATE
    NMS_TEST_DATA_DIR="${PROJECT_SOURCE_DIR}/tests/data"
    NMS_SOURCE_DIR="${PROJECT_SOURCE_DIR}")
  nms_target_warnings(${ARG_NAME})
  gtest_discover_tests(${ARG_NAME} DISCOVERY_TIMEOUT 60 PROPERTIES TIMEOUT 600)
endfunction()

# nms_add_benchmark(NAME <name> SOURCES <files...>)
function(nms_add_benchmark)
  cmake_parse_arguments(ARG "" "NAME" "SOURCES;LIBS" ${ARGN})
  add_executable(${ARG_NAME} ${ARG_SOURCES})
  target_link_libraries(${ARG_NAME} PRIVATE nmsparse::nmsparse benchmark::benchmark
                                            OpenMP::OpenMP_CXX ${ARG_LIBS})
  target_include_directories(${ARG_NAME} PRIVATE ${PROJECT_SOURCE_DIR}/src)
  nms_target_warnings(${ARG_NAME})
endfunction()

# nms_isa_sources(avx512|avx512bf16|avx2 <files...>): adds sources of the nmsparse library that
# are compiled with that instruction set (run only after the runtime check of nmsparse/core/isa.h;
# avx512bf16 also after its own check of the CPU's AVX512_BF16), on x86-64 only.
# -ffp-contract=off: only the explicit fused multiply-adds, so every level rounds like the scalar
# specification. BMI2 and POPCNT come with every AVX-512 CPU; the AVX-512 level checks them too.
# (-Wno-maybe-uninitialized, -Wno-uninitialized: GCC 12 false positives in
# avx512fintrin.h's unpack intrinsics, GCC bug 105593.)
function(nms_isa_sources isa)
  if(NOT CMAKE_SYSTEM_PROCESSOR MATCHES "x86_64|AMD64")
    return()
  endif()
  if(isa STREQUAL "avx512")
    set(flags -mavx512f -mavx512bw -mavx512dq -mavx512vl -mbmi2 -mpopcnt -ffp-contract=off
              -Wno-maybe-uninitialized -Wno-uninitialized)
  elseif(isa STREQUAL "avx512bf16")  # the avx512 level plus AVX512_BF16 (checked at run time)
    set(flags -mavx512f -mavx512bw -mavx512dq -mavx512vl -mavx512bf16 -mbmi2 -mpopcnt
              -ffp-contract=off -Wno-maybe-uninitialized -Wno-uninitialized)
  elseif(isa STREQUAL "avx2")
    set(flags -mavx2 -mfma -ffp-contract=off)
  else()
    message(FATAL_ERROR "nms_isa_sources: unknown ISA '${isa}'")
  endif()
  target_sources(nmsparse PRIVATE ${ARGN})
  set_source_files_properties(${ARGN} TARGET_DIRECTORY nmsparse PROPERTIES COMPILE_OPTIONS "${flags}")
endfunction()
