# pkg-config: the installed (moved) prefix's upcxx-extra-nvshmem.pc gives the flags a C program
# needs, and the program starts without LD_LIBRARY_PATH.
#   cmake -DPREFIX=<moved prefix> -DBIN=<dir> -DSRC=<pkgconfig_smoke.c> -P pkgconfig.cmake
cmake_minimum_required(VERSION 3.20)
file(MAKE_DIRECTORY "${BIN}")
set(ENV{PKG_CONFIG_PATH} "${PREFIX}/lib/pkgconfig")
execute_process(COMMAND pkg-config --cflags --libs upcxx-extra-nvshmem OUTPUT_VARIABLE flags
                OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND pkg-config --modversion upcxx-extra-nvshmem COMMAND_ERROR_IS_FATAL ANY)
message(STATUS "pkg-config --cflags --libs upcxx-extra-nvshmem: ${flags}")
separate_arguments(flags UNIX_COMMAND "${flags}")
execute_process(COMMAND cc -std=c11 -Wall -Wextra -Werror "${SRC}" -o "${BIN}/smoke" ${flags} COMMAND_ERROR_IS_FATAL ANY)
unset(ENV{LD_LIBRARY_PATH})
execute_process(COMMAND "${BIN}/smoke" COMMAND_ERROR_IS_FATAL ANY)
