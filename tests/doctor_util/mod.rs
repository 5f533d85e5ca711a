//! What the doctor's hostile-input tests share: the doctor run as a subprocess with a time limit
//! (a hang is a failure, not a stuck test), tiny shared libraries built with `cc`, and the
//! crafted sources (data symbols named like the API, state symbols with absurd sizes or odd
//! addresses, a constructor that crashes).
#![allow(dead_code)]

use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// How one doctor run ended.
#[derive(Debug)]
pub struct Outcome {
    pub code: Option<i32>,
    pub signal: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    pub secs: f64,
    pub timed_out: bool,
}

impl Outcome {
    /// The message the doctor gave: the report (stdout) or the error (stderr).
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// Asserts the run ended by itself, within `limit_s`, with exit status `code` and no signal.
    pub fn expect(&self, code: i32, limit_s: f64, what: &str) {
        assert!(!self.timed_out, "{what}: the doctor hung (killed after {:.1} s)\n{}", self.secs, self.text());
        assert_eq!(self.signal, None, "{what}: the doctor died of signal {:?}\n{}", self.signal, self.text());
        assert_eq!(self.code, Some(code), "{what}: exit status\n{}", self.text());
        assert!(self.secs < limit_s, "{what}: the doctor took {:.2} s (limit {limit_s} s)", self.secs);
        assert!(!self.text().trim().is_empty(), "{what}: no message");
    }
}

/// Runs the doctor with `args`, killed after `kill_after` (then `timed_out`).
pub fn doctor(args: &[&str], env: &[(&str, &str)], kill_after: Duration) -> Outcome {
    let mut c = doctor_command();
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    run_doctor(c, kill_after)
}

/// The doctor's command (stdin null, stdout and stderr piped), to add arguments (any bytes),
/// a working directory and variables to, then [`run_doctor`].
pub fn doctor_command() -> Command {
    // UXN_TEST_DOCTOR_BIN runs the corpus against another build (an old one, to see it fail).
    let bin = std::env::var("UXN_TEST_DOCTOR_BIN").unwrap_or_else(|_| env!("CARGO_BIN_EXE_upcxx-nvshmem-doctor").to_string());
    let mut c = Command::new(bin);
    c.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::piped());
    c
}

/// Runs `c` (from [`doctor_command`]), killed after `kill_after` (then `timed_out`).
pub fn run_doctor(mut c: Command, kill_after: Duration) -> Outcome {
    let t = Instant::now();
    let mut child = c.spawn().expect("run the doctor");
    let (mut out, mut err) = (child.stdout.take().unwrap(), child.stderr.take().unwrap());
    let r_out = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out.read_to_end(&mut s);
        s
    });
    let r_err = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err.read_to_end(&mut s);
        s
    });
    let mut timed_out = false;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t.elapsed() > kill_after {
            timed_out = true;
            let _ = child.kill();
            break child.wait().unwrap();
        }
        std::thread::sleep(Duration::from_millis(2));
    };
    let secs = t.elapsed().as_secs_f64();
    let stdout = String::from_utf8_lossy(&r_out.join().unwrap()).into_owned();
    let stderr = String::from_utf8_lossy(&r_err.join().unwrap()).into_owned();
    Outcome { code: status.code(), signal: status.signal(), stdout, stderr, secs, timed_out }
}

/// A fresh, empty directory for one test.
pub fn scratch(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("uxn-doctor-{tag}-{}", std::process::id()));
    std::fs::remove_dir_all(&dir).ok();
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Builds `src` (C) into `dir/name` as a shared library with `cc`.
pub fn build_so(dir: &Path, name: &str, src: &str) -> PathBuf {
    let c = dir.join(format!("{name}.c"));
    let so = dir.join(name);
    std::fs::write(&c, src).unwrap();
    let out = Command::new("cc").args(["-shared", "-fPIC", "-O1", "-o"]).arg(&so).arg(&c).output().expect("cc is needed for this test");
    assert!(out.status.success(), "cc {name}: {}", String::from_utf8_lossy(&out.stderr));
    so
}

/// The public functions a fake NVSHMEM exports (callable before init, as the doctor calls them).
pub const FAKE_API: &str = r#"
#include <string.h>
int nvshmemx_init_status(void) { return 0; }
void nvshmem_info_get_name(char *n) { strcpy(n, "NVSHMEM v3.4.5"); }
int nvshmemx_cumodule_init(void *m) { (void)m; return 1; }
void *nvshmem_ptr(const void *p, int pe) { (void)p; (void)pe; return 0; }
"#;

/// A well-formed fake NVSHMEM: the API plus a LOCAL 848-byte `nvshmemi_device_state` in .bss,
/// 16-byte aligned (supported: the .symtab step finds it).
pub fn good_source() -> String {
    format!("{FAKE_API}\nstatic char nvshmemi_device_state[848] __attribute__((used, aligned(16)));\n")
}

/// The API plus a LOCAL `nvshmemi_device_state` of `size` (an assembler expression) at
/// `misalign` bytes past a 16-byte boundary.
pub fn state_source(size: &str, misalign: u32) -> String {
    format!(
        "{FAKE_API}\n__asm__(\".section .bss\\n.balign 16\\n.skip {misalign}\\n.type nvshmemi_device_state, @object\\n\
         nvshmemi_device_state:\\n.skip 848\\n.size nvshmemi_device_state, {size}\\n.previous\\n\");\n"
    )
}

/// `nvshmem_info_get_name` and `nvshmemx_init_status` as data, in a data segment.
pub const DATA_API: &str = r#"
char nvshmem_info_get_name[64] = "NVSHMEM v3.4.5";
int nvshmemx_init_status = 2;
void *nvshmem_ptr = 0;
"#;

/// The same names as data placed in .text (an executable segment): only the symbol's type says
/// it is not a function.
pub const DATA_IN_TEXT_API: &str = r#"
__attribute__((section(".text"))) const char nvshmem_info_get_name[64] = "NVSHMEM v3.4.5 \xff\xff\xff\xff";
__attribute__((section(".text"))) const int nvshmemx_init_status[4] = {-1, -1, -1, -1};
"#;

/// A library whose constructor crashes: it passes every header check; only loading it shows.
pub fn crashing_constructor_source() -> String {
    format!("{FAKE_API}\n__attribute__((constructor)) static void boom(void) {{ *(volatile int *)8 = 1; }}\n")
}

/// A library whose constructor sleeps for a minute: only the doctor's load timeout ends it.
pub fn stalling_constructor_source() -> String {
    format!("{FAKE_API}\n#include <unistd.h>\n__attribute__((constructor)) static void stall(void) {{ sleep(60); }}\n")
}

/// The smallest pip-installed release's `libnvshmem_host.so.3` (the real file the corpus and the
/// fuzz test cut and mutate), or None (skip) where none is installed.
pub fn real_library() -> Option<PathBuf> {
    crate::common::nvshmem_roots()
        .into_iter()
        .map(|r| r.join("lib/libnvshmem_host.so.3"))
        .min_by_key(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(u64::MAX))
}

/// A seeded xorshift64* generator: the same seed, the same files.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// In `[0, n)` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}
