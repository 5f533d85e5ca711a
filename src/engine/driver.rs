//! The engine's GPU: the CUDA driver, through [`crate::cuda`] (the one module that calls it).

use super::core::{Code, Desc, Gpu, Handle, Signal};
use crate::cuda;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU32, Ordering};

/// How many fork() children deep this process is, counted by a `pthread_atfork` handler
/// registered on first use.
fn fork_generation() -> u32 {
    static GENERATION: AtomicU32 = AtomicU32::new(0);
    static REGISTERED: OnceLock<()> = OnceLock::new();
    extern "C" fn in_child() {
        GENERATION.fetch_add(1, Ordering::Relaxed);
    }
    REGISTERED.get_or_init(|| {
        #[allow(unsafe_code)]
        // SAFETY: registers a handler that only increments an atomic (async-signal-safe).
        unsafe {
            libc::pthread_atfork(None, None, Some(in_child));
        }
    });
    GENERATION.load(Ordering::Relaxed)
}

/// The CUDA driver as the engine's [`Gpu`].
#[derive(Clone, Copy, Debug, Default)]
pub struct Driver;

impl Driver {
    /// Readies `device` for the engine before any copy: the batch kernel loaded into its primary
    /// context (a module load may wait for the device's queued work, which a copy issued in a
    /// stream's order must never do). Without a usable driver it does nothing: the engine's
    /// calls report that themselves.
    pub fn prepare(device: i32) {
        if let Err(why) = cuda::load_batch_kernel(device) {
            log::debug!("the batch kernel was not loaded ahead on device {device}: {why}");
        }
    }
}

impl Gpu for Driver {
    const BATCH_MAX: usize = cuda::BATCH_MAX;
    fn fork_generation(&self) -> u32 {
        fork_generation()
    }
    fn stream_create(&self, device: i32) -> Result<Handle, Code> {
        cuda::stream_create(device)
    }
    fn stream_destroy(&self, device: i32, s: Handle) {
        cuda::stream_destroy(device, s)
    }
    fn event_create(&self, ctx: Option<i32>) -> Result<Handle, Code> {
        cuda::event_create(ctx)
    }
    fn event_destroy(&self, e: Handle) {
        cuda::event_destroy(e)
    }
    fn event_record(&self, e: Handle, s: Handle, ctx: Option<i32>) -> Result<(), Code> {
        cuda::event_record(e, s, ctx)
    }
    fn event_query(&self, e: Handle) -> Result<(), Code> {
        cuda::event_query(e)
    }
    fn event_synchronize(&self, e: Handle) -> Result<(), Code> {
        cuda::event_synchronize(e)
    }
    fn stream_synchronize(&self, s: Handle, ctx: Option<i32>) -> Result<(), Code> {
        cuda::stream_synchronize(s, ctx)
    }
    fn stream_wait_event(&self, s: Handle, e: Handle, ctx: Option<i32>) -> Result<(), Code> {
        cuda::stream_wait_event(s, e, ctx)
    }
    fn memcpy_async(&self, dst: usize, src: usize, bytes: usize, s: Handle, ctx: Option<i32>) -> Result<(), Code> {
        cuda::memcpy_async(dst, src, bytes, s, ctx)
    }
    fn launch_batch(&self, device: i32, s: Handle, batch: &[Desc], signal: Option<Signal>) -> Result<(), String> {
        let copies = batch.iter().map(|d| cuda::BatchCopy { src: d.src, dst: d.dst, bytes: d.bytes });
        let signal = signal.map(|g| cuda::Signal { counter: g.counter, word: g.word, value: g.value });
        cuda::copy_batch(device, s, copies, signal)
    }
    fn stream_device(&self, s: Handle) -> i32 {
        cuda::stream_device(s)
    }
    fn stream_capturing(&self, s: Handle) -> Result<Option<bool>, Code> {
        cuda::stream_capturing(s)
    }
    fn device_count(&self) -> i32 {
        cuda::device_count().unwrap_or(0)
    }
    fn mapped_word(&self, device: i32) -> Result<(usize, usize), Code> {
        cuda::mapped_host_word(device)
    }
    fn mapped_words(&self, device: i32, words: usize) -> Result<(usize, usize), Code> {
        cuda::mapped_host_block(device, 4 * words)
    }
    fn device_words(&self, device: i32, words: usize) -> Result<usize, Code> {
        cuda::device_zeroed(device, 4 * words)
    }
    fn stream_write_value32(&self, s: Handle, addr: usize, value: u32, ctx: Option<i32>) -> Result<(), Code> {
        cuda::stream_write_value32(s, addr, value, ctx)
    }
    fn stream_query(&self, s: Handle, ctx: Option<i32>) -> Result<(), Code> {
        cuda::stream_query(s, ctx)
    }
    fn stream_wait_value32(&self, device: i32, s: Handle, addr: usize, value: u32) -> Result<(), String> {
        cuda::stream_wait_value32(device, s, addr, value)
    }
    fn result_name(&self, c: Code) -> String {
        cuda::result_name(c)
    }
}
