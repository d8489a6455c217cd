# Every dependency comes from a Debian package (scripts/setup.sh installs them).
find_package(Threads REQUIRED)
find_package(Protobuf REQUIRED)
find_package(Boost REQUIRED COMPONENTS program_options)
find_package(spdlog REQUIRED)
find_package(fmt REQUIRED)
find_package(nlohmann_json REQUIRED)
find_package(ZLIB REQUIRED)  # PNG plots (metrics/png.cpp), .jsonl.gz corpora (data/compressed_input.cpp)
# libzstd-dev: .jsonl.zst corpora (data/compressed_input.cpp), through its pkg-config file.
find_package(PkgConfig REQUIRED)
pkg_check_modules(ZSTD REQUIRED IMPORTED_TARGET libzstd)
find_package(ICU REQUIRED COMPONENTS uc)
# libcrypto: HMAC-SHA256 challenge-response between the supervisor and its workers;
# libssl: cluster mode's optional TLS (actors/cluster/tls_context.h).
find_package(OpenSSL REQUIRED COMPONENTS Crypto SSL)
find_path(DOCTEST_INCLUDE_DIR doctest/doctest.h REQUIRED)

# OpenBLAS: the pthread flavour Debian installs as libopenblas.
set(BLA_VENDOR OpenBLAS)
find_package(BLAS REQUIRED)
find_path(CBLAS_INCLUDE_DIR cblas.h PATHS /usr/include/x86_64-linux-gnu/openblas-pthread REQUIRED)
add_library(troupe_blas INTERFACE)
target_link_libraries(troupe_blas INTERFACE ${BLAS_LIBRARIES})
target_include_directories(troupe_blas INTERFACE ${CBLAS_INCLUDE_DIR})

# CAF 0.17 ships no CMake package and no pkg-config file: wrap the libraries.
find_path(CAF_INCLUDE_DIR caf/all.hpp REQUIRED)
find_library(CAF_CORE_LIBRARY NAMES caf_core REQUIRED)
find_library(CAF_IO_LIBRARY NAMES caf_io REQUIRED)
add_library(CAF::core SHARED IMPORTED)
set_target_properties(CAF::core PROPERTIES IMPORTED_LOCATION "${CAF_CORE_LIBRARY}"
  INTERFACE_INCLUDE_DIRECTORIES "${CAF_INCLUDE_DIR}" INTERFACE_LINK_LIBRARIES Threads::Threads)
add_library(CAF::io SHARED IMPORTED)
set_target_properties(CAF::io PROPERTIES IMPORTED_LOCATION "${CAF_IO_LIBRARY}"
  INTERFACE_LINK_LIBRARIES CAF::core)

# Gloo (libgloo-dev) installs a CMake package whose target is `gloo`.
find_package(Gloo CONFIG QUIET PATHS /usr/share/cmake/Gloo)
if(NOT TARGET gloo)
  find_library(GLOO_LIBRARY NAMES gloo REQUIRED)
  add_library(gloo SHARED IMPORTED)
  set_target_properties(gloo PROPERTIES IMPORTED_LOCATION "${GLOO_LIBRARY}")
endif()
