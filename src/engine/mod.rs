//! The copy engine: copies between addresses this process reaches (NVSHMEM's peer mapping, its
//! own device memory) on a private stream of one device, small ones batched into one kernel
//! launch, each with a ticket whose outcome a caller polls. [`core`] is the protocol, generic over
//! the GPU ([`core::Gpu`]); [`driver`] runs it over the CUDA driver ([`crate::cuda`]); [`watcher`]
//! is the host thread that watches the tickets a caller parks instead of polling them. The C ABI
//! (`upcxx_extra_nvshmem_engine_*`) is `crate::abi`'s; the C++ layer's `nvshmem_heap::copy` routes
//! its fast copies here and delivers their UPC++ completions.

pub mod core;
pub mod driver;
pub mod watcher;

pub use self::core::{Engine, Settled};
pub use driver::Driver;
use std::sync::Arc;
pub use watcher::{Wake, Watcher};

/// The engine over the CUDA driver, with its watcher. Derefs to the engine.
pub struct CudaEngine {
    engine: Arc<Engine<Driver>>,
    watcher: Watcher<Driver>,
}

impl CudaEngine {
    /// [`Engine::new`] over the CUDA driver; the watcher's thread starts at the first park.
    pub fn new(device: i32, batch_bytes: usize) -> Self {
        let engine = Arc::new(Engine::new(Driver, device, batch_bytes));
        CudaEngine { watcher: Watcher::new(Arc::clone(&engine)), engine }
    }

    /// [`Watcher::park`].
    pub fn park(&self, t: u64, wake: Wake) -> crate::error::Result<()> {
        self.watcher.park(t, wake)
    }

    /// [`Watcher::parked`].
    pub fn parked(&self) -> usize {
        self.watcher.parked()
    }
}

impl std::ops::Deref for CudaEngine {
    type Target = Engine<Driver>;
    fn deref(&self) -> &Engine<Driver> {
        &self.engine
    }
}

impl Drop for CudaEngine {
    /// The watcher stops first (every ticket still parked is woken), then the engine, freed with
    /// the last reference (the watcher's thread held the other), drains.
    fn drop(&mut self) {
        if !self.engine.forked() {
            self.watcher.stop();
        }
    }
}
