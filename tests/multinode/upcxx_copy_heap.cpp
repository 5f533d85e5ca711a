// upcxx_copy_heap: UPC++ 2023.9.0's test/copy.cpp, unmodified, with its device buffers on NVSHMEM's
// symmetric heap and every upcxx::copy through nvshmem_heap::copy (upcxx_tests_heap.hpp):
//   device_allocator<Device>   -> heap_segment<Device>: nvshmem_malloc (collective, as the test's
//                                 allocators are made on every rank in the same order), allocate()
//                                 = heap.to_global_ptr, local() = heap.from_global_ptr
//   upcxx::copy(src, dst, n)   -> heap.copy(src, dst, n), its path checked against the ends: fast
//                                 exactly when both ends are memory of this rank's node (the
//                                 stand-in's and UPC++'s nodes are the same here), else a fallback
// Run with 2 ranks as 2 nodes (GASNET_SUPERNODE_MAXSIZE=1 UXN_STANDIN_NODE_SIZE=1).
#include "upcxx_tests_heap.hpp"

namespace uxn_wrap {

template <class Device>
class heap_segment {
public:
    heap_segment(Device &, std::size_t bytes) : base_(static_cast<char *>(nvshmem_malloc(bytes))), size_(bytes) {}
    ~heap_segment() { nvshmem_free(base_); }  // collective: the test deletes its allocators on every rank
    template <class T>
    upcxx::global_ptr<T, Device::kind> allocate(std::size_t n) {
        const std::size_t bytes = (n * sizeof(T) + 511) / 512 * 512;
        if (!base_ || used_ + bytes > size_) return nullptr;
        T *p = reinterpret_cast<T *>(base_ + used_);
        used_ += bytes;
        return heap()->to_global_ptr(p);
    }
    template <class T>
    T *local(upcxx::global_ptr<T, Device::kind> gp) const {
        return heap()->from_global_ptr(gp).first;
    }
    template <class T>
    void deallocate(upcxx::global_ptr<T, Device::kind>) {}  // freed with the block

private:
    char *base_;
    std::size_t size_, used_ = 0;
};

// Memory of this rank's node (a device end is heap memory: every device buffer of the test is).
template <class T>
bool on_my_node(const upcxx::global_ptr<T, upcxx::memory_kind::any> &p) {
    return upcxx::local_team_contains(p.where());
}

}  // namespace uxn_wrap

namespace upcxx {
template <class T>
future<> uxn_heap_copy(global_ptr<T, memory_kind::any> src, global_ptr<T, memory_kind::any> dst, std::size_t n) {
    using namespace uxn_wrap;
    const bool device = src.dynamic_kind() != memory_kind::host || dst.dynamic_kind() != memory_kind::host;
    const bool fast = device && on_my_node(src) && on_my_node(dst);
    const auto c0 = heap()->copies();
    future<> f = heap()->copy(src, dst, n);
    const auto c1 = heap()->copies();
    if (device) {
        (fast ? fast_expected() : fallback_expected())++;
        if ((c1.fast - c0.fast) != (fast ? 1u : 0u) || (c1.fallback - c0.fallback) != (fast ? 0u : 1u)) wrong_paths()++;
    }
    return f;
}
}  // namespace upcxx

#define device_allocator uxn_wrap::heap_segment
#define copy(...) uxn_heap_copy(__VA_ARGS__)
#define main uxn_upcxx_copy_main
#include "copy.cpp"
#undef main
#undef copy
#undef device_allocator

int main() {
    uxn_wrap::start("upcxx_copy_heap");
    const int test_rc = uxn_upcxx_copy_main();  // prints "Test result: SUCCESS" on rank 0
    copy_test::check("copy.cpp", test_rc == 0, "UPC++'s copy.cpp returned %d", test_rc);
    const int rc = uxn_wrap::stop();
    upcxx::finalize();
    return rc;
}
