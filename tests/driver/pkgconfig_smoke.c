/* Built with nothing but `cc $(pkg-config --cflags --libs upcxx-extra-nvshmem)`; started without
 * LD_LIBRARY_PATH (the .pc file's rpath). */
#include <stdio.h>
#include <string.h>

#include "upcxx_extra_nvshmem.h"

int main(void) {
    const char *v = upcxx_extra_nvshmem_version();
    int bad = upcxx_extra_nvshmem_to_global_ptr(NULL, 0, NULL) != UPCXX_EXTRA_NVSHMEM_STATUS_NULL_ARGUMENT;
    printf("upcxx-extra-nvshmem %s via pkg-config: %s\n", v, bad ? "FAILED" : "ok");
    return bad || !v || !*v;
}
