# Compiler flags shared by every target: warnings, sanitizers, fuzzing.
set(DEDUPD_C_WARNINGS
    -Wall -Wextra -Wshadow -Wvla -Wstrict-prototypes -Wmissing-prototypes
    -Wformat=2 -Wno-format-nonliteral)
if(DEDUPD_WERROR)
    list(APPEND DEDUPD_C_WARNINGS -Werror)
endif()
add_compile_options("$<$<COMPILE_LANGUAGE:C>:${DEDUPD_C_WARNINGS}>")
add_compile_definitions(_GNU_SOURCE)

if(DEDUPD_SANITIZE)
    string(REPLACE "," ";" _san_list "${DEDUPD_SANITIZE}")
    foreach(_san IN LISTS _san_list)
        if(NOT _san MATCHES "^(address|undefined|thread|leak)$")
            message(FATAL_ERROR "DEDUPD_SANITIZE: unknown sanitizer '${_san}'")
        endif()
    endforeach()
    add_compile_options(-fsanitize=${DEDUPD_SANITIZE} -fno-omit-frame-pointer
                        -fno-sanitize-recover=undefined)
    add_link_options(-fsanitize=${DEDUPD_SANITIZE})
endif()

if(DEDUPD_FUZZ)
    if(NOT CMAKE_C_COMPILER_ID MATCHES "Clang")
        message(FATAL_ERROR "DEDUPD_FUZZ needs clang: configure with -DCMAKE_C_COMPILER=clang")
    endif()
    add_compile_options(-fsanitize=fuzzer-no-link,address,undefined)
    add_link_options(-fsanitize=address,undefined)
endif()
