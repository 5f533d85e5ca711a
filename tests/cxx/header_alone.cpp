// The C++ layer's header alone in a translation unit, included twice, C++17, -Wall -Wextra
// -Werror (tests/cxx/CMakeLists.txt: cxx_header_alone, against each UPC++ release).
#include <upcxx_extra/nvshmem.hpp>
#include <upcxx_extra/nvshmem.hpp>

int uxn_header_alone();
int uxn_header_alone() { return 0; }
