// A stand-in for UPC++, for copy_engine_model_test only: personas whose LPC inbox (lpc_ff from
// any thread) runs at their progress(), one per thread or made current by a persona_scope, and a
// world of one rank for check.hpp. foreign_posts() counts lpc_ff calls made by a thread that
// does not hold the persona (after upcxx::finalize() such a post is an error in real UPC++).
#ifndef UXN_MODEL_UPCXX_HPP
#define UXN_MODEL_UPCXX_HPP

#include <atomic>
#include <deque>
#include <functional>
#include <mutex>
#include <utility>

namespace upcxx {
struct persona;
inline persona &current_persona();
inline std::atomic<int> &foreign_posts() {
    static std::atomic<int> v{0};
    return v;
}
struct persona {
    template <class F>
    void lpc_ff(F &&f) {
        if (&current_persona() != this) foreign_posts()++;
        std::lock_guard<std::mutex> lock(mu);
        inbox.emplace_back(std::forward<F>(f));
    }
    int progress() {  // runs what was queued before the call; what those queue runs next time
        std::deque<std::function<void()>> now;
        {
            std::lock_guard<std::mutex> lock(mu);
            now.swap(inbox);
        }
        for (auto &f : now) f();
        return static_cast<int>(now.size());
    }
    std::mutex mu;
    std::deque<std::function<void()>> inbox;
};
inline persona *&current_persona_ptr() {  // the thread's own persona unless a scope says otherwise
    thread_local persona own;
    thread_local persona *current = &own;
    return current;
}
inline persona &current_persona() { return *current_persona_ptr(); }
struct persona_scope {
    explicit persona_scope(persona &p) : prev(current_persona_ptr()) { current_persona_ptr() = &p; }
    ~persona_scope() { current_persona_ptr() = prev; }
    persona_scope(const persona_scope &) = delete;
    persona_scope &operator=(const persona_scope &) = delete;
    persona *prev;
};

inline void progress() { current_persona().progress(); }
inline bool initialized() { return false; }
inline int rank_me() { return 0; }
inline int rank_n() { return 1; }
struct op_fast_add_t {};
constexpr op_fast_add_t op_fast_add{};
template <class T>
struct ready_future {
    T v;
    T wait() const { return v; }
};
template <class T>
ready_future<T> reduce_all(T v, op_fast_add_t) {
    return {v};
}
}  // namespace upcxx

#endif
