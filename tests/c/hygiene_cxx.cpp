// Header hygiene: the public C header compiles alone, twice, as C++17 with -Wall -Wextra -Werror.
#include "upcxx_extra_nvshmem.h"
#include "upcxx_extra_nvshmem.h"

#include <type_traits>

static_assert(std::is_standard_layout<upcxx_extra_nvshmem_gptr_t>::value, "gptr is a C struct");

int uxn_hygiene_cxx();
int uxn_hygiene_cxx() {
    upcxx_extra_nvshmem_heap_info_t info{};
    upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_heap_query(&info);
    return static_cast<int>(s) + (s == UPCXX_EXTRA_NVSHMEM_STATUS_OK ? 1 : 0);
}
