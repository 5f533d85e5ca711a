/* Header hygiene: the public C header compiles alone, twice, as strict C11 with -Wall -Wextra
 * -Werror (built as an object library by tests/c/CMakeLists.txt). */
#include "upcxx_extra_nvshmem.h"
#include "upcxx_extra_nvshmem.h"

/* Something that uses the declarations, so they are not only parsed. */
int uxn_hygiene_c(void);
int uxn_hygiene_c(void) {
    upcxx_extra_nvshmem_heap_info_t info = {0};
    upcxx_extra_nvshmem_status_t s = upcxx_extra_nvshmem_heap_query(&info);
    return (int)s + (int)sizeof(upcxx_extra_nvshmem_gptr_t) + (int)sizeof(upcxx_extra_nvshmem_location_t);
}
