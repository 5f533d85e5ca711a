//! The copy engine's C ABI (`upcxx_extra_nvshmem_engine_*`): marshalling only; the engine is
//! [`crate::engine`].
