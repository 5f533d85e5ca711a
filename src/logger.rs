//! Diagnostics through `log`, written to stderr when `UPCXX_EXTRA_NVSHMEM_LOG` is set
//! (`error`, `warn`, `info`, `debug` or `trace`). Silent otherwise.

use log::{LevelFilter, Log, Metadata, Record};
use std::sync::Once;

struct StderrLogger;

impl Log for StderrLogger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!("[upcxx-extra-nvshmem {} pid {}] {}", r.level(), std::process::id(), r.args());
        }
    }
    fn flush(&self) {}
}

/// Parses a level name.
pub fn parse_level(s: &str) -> Option<LevelFilter> {
    s.trim().parse().ok()
}

/// Installs the logger once, if the variable asks for it and no other logger is installed
/// (a Rust host program may have its own).
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        if let Some(level) = std::env::var("UPCXX_EXTRA_NVSHMEM_LOG").ok().and_then(|s| parse_level(&s)) {
            if log::set_logger(&StderrLogger).is_ok() {
                log::set_max_level(level);
            }
        }
    });
}
