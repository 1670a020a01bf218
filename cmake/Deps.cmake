# Third-party libraries. Each failure names the Debian package that provides it;
# scripts/install-deps.sh installs all of them.
find_package(PkgConfig)
if(NOT PKG_CONFIG_FOUND)
    message(FATAL_ERROR "pkg-config not found: apt-get install pkg-config")
endif()

function(dedupd_require_pkg var module debpkg)
    pkg_check_modules(${var} IMPORTED_TARGET ${module})
    if(NOT ${var}_FOUND)
        message(FATAL_ERROR "${module} not found: apt-get install ${debpkg}")
    endif()
endfunction()

# A library without a .pc file: header + library by hand.
function(dedupd_require_lib target header lib debpkg)
    find_path(${target}_INCLUDE ${header})
    find_library(${target}_LIBRARY ${lib})
    if(NOT ${target}_INCLUDE OR NOT ${target}_LIBRARY)
        message(FATAL_ERROR "${header} / lib${lib} not found: apt-get install ${debpkg}")
    endif()
    add_library(${target} INTERFACE IMPORTED GLOBAL)
    target_include_directories(${target} INTERFACE ${${target}_INCLUDE})
    target_link_libraries(${target} INTERFACE ${${target}_LIBRARY})
endfunction()

dedupd_require_pkg(LIBUV libuv libuv1-dev)
dedupd_require_pkg(LIBCRYPTO libcrypto libssl-dev)
dedupd_require_pkg(LIBSSL libssl libssl-dev)
dedupd_require_pkg(PROTOBUFC libprotobuf-c libprotobuf-c-dev)
dedupd_require_pkg(INIH inih libinih-dev)
dedupd_require_pkg(XXHASH libxxhash libxxhash-dev)
dedupd_require_pkg(ZSTD libzstd libzstd-dev)
dedupd_require_lib(dd_rocksdb rocksdb/c.h rocksdb librocksdb-dev)
if(DEDUPD_TESTS)
    dedupd_require_pkg(CRITERION criterion libcriterion-dev)
endif()

find_program(PROTOC_C NAMES protoc-c protoc-gen-c)
if(NOT PROTOC_C)
    message(FATAL_ERROR "protoc-c not found: apt-get install protobuf-c-compiler")
endif()

find_package(Threads REQUIRED)
