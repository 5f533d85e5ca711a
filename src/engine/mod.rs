//! The copy engine: copies between addresses this process reaches (NVSHMEM's peer mapping, its
//! own device memory) on a private stream of one device, small ones batched into one kernel
//! launch, each with a ticket whose outcome a caller polls. [`core`] is the protocol, generic over
//! the GPU ([`core::Gpu`]); [`driver`] runs it over the CUDA driver ([`crate::cuda`]). The C ABI
//! (`upcxx_extra_nvshmem_engine_*`) is `crate::abi`'s; the C++ layer's `nvshmem_heap::copy` routes
//! its fast copies here and delivers their UPC++ completions.

pub mod core;
pub mod driver;

pub use self::core::{Engine, Settled};
pub use driver::Driver;

/// The engine over the CUDA driver.
pub type CudaEngine = Engine<Driver>;
