// Header hygiene: the C++ layer's header compiles alone, twice, as C++17 with -Wall -Wextra
// -Werror (built only when UPC++ is found).
#include <upcxx_extra/nvshmem.hpp>
#include <upcxx_extra/nvshmem.hpp>

int uxn_hygiene_hpp();
int uxn_hygiene_hpp() { return 0; }
