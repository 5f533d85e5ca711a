//! Diagnostics through `log`, written to stderr when `UPCXX_EXTRA_NVSHMEM_LOG` is set
//! (`error`, `warn`, `info`, `debug`, `trace`; [`crate::env::LOG`]). Silent otherwise.
//!
//! The logger cannot fail the program that loads the library: a value that is not a level is
//! written to stderr once, as a warning naming the variable and the value, and logging stays off.

use crate::env;
use log::{Level, LevelFilter, Log, Metadata, Record};
use std::sync::Once;

struct StderrLogger;

/// The prefix of every line the library writes to stderr.
fn line(level: Level, msg: &std::fmt::Arguments<'_>) -> String {
    format!("[upcxx-extra-nvshmem {level} pid {}] {msg}", std::process::id())
}

impl Log for StderrLogger {
    fn enabled(&self, m: &Metadata<'_>) -> bool {
        m.level() <= log::max_level()
    }
    fn log(&self, r: &Record<'_>) {
        if self.enabled(r.metadata()) {
            eprintln!("{}", line(r.level(), r.args()));
        }
    }
    fn flush(&self) {}
}

/// The level `UPCXX_EXTRA_NVSHMEM_LOG` asks for (None: logging off), and the warning to write
/// when its value is not a level.
pub fn level_from_env() -> (Option<LevelFilter>, Option<String>) {
    match env::log_level() {
        Ok(level) => (level, None),
        Err(bad) => (None, Some(line(Level::Warn, &format_args!("{bad}; logging stays off")))),
    }
}

/// Installs the logger once, if the variable asks for it and no other logger is installed
/// (a Rust host program may have its own).
pub fn init() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        let (level, warning) = level_from_env();
        if let Some(w) = warning {
            eprintln!("{w}");
        }
        if let Some(level) = level.filter(|l| *l != LevelFilter::Off) {
            if log::set_logger(&StderrLogger).is_ok() {
                log::set_max_level(level);
            }
        }
    });
}
