# The library built and installed as a user does (README: cmake, cmake --build, cmake --install),
# then the prefix copied to MOVED: later steps build against the moved copy, so the package must
# be relocatable.
#   cmake -DROOT=<repo> -DBIN=<dir> -DPREFIX=<dir> -DMOVED=<dir> -DCARGO_TARGET_DIR=<dir> [-DJOBS=N] -P install.cmake
cmake_minimum_required(VERSION 3.20)
if(NOT JOBS)
  set(JOBS 2)
endif()
file(REMOVE_RECURSE "${PREFIX}" "${MOVED}")
execute_process(COMMAND "${CMAKE_COMMAND}" -S "${ROOT}" -B "${BIN}" "-DCMAKE_INSTALL_PREFIX=${PREFIX}"
                        "-DUXN_CARGO_TARGET_DIR=${CARGO_TARGET_DIR}" COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND "${CMAKE_COMMAND}" --build "${BIN}" -j ${JOBS} COMMAND_ERROR_IS_FATAL ANY)
execute_process(COMMAND "${CMAKE_COMMAND}" --install "${BIN}" COMMAND_ERROR_IS_FATAL ANY)
# cp -a keeps the library's symbolic links as links.
execute_process(COMMAND cp -a "${PREFIX}" "${MOVED}" COMMAND_ERROR_IS_FATAL ANY)
message(STATUS "installed in ${PREFIX}, copied to ${MOVED}")
