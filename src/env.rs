//! Every environment variable this package reads (the library and the doctor): its name, what
//! it does, and its one strict parser. No other module calls `std::env::var`.
//!
//! The rules, for every variable:
//! - unset, or set to the empty string: the default (`VAR= program` is the same as no `VAR`);
//! - a number is decimal digits only: no sign (`+`, `-`), no space before or after, no unit
//!   (the unit is in the variable's name: `_S` seconds, `<bytes>`);
//! - a name is one of the spellings listed for the variable, ASCII case-insensitive, with no
//!   space before or after;
//! - a path is taken byte for byte, as the kernel and the dynamic loader take it (non-UTF-8
//!   bytes included).
//!
//! Two exceptions, kept from the C++ layer that read them first: [`COPY`]'s names are lower case
//! only, and [`COPY_BATCH_BYTES`] set to the empty string is a bad value, not the default.
//!
//! A value that breaks its rule is a [`BadValue`], naming the variable, the value as it is set
//! (quoted, escapes shown) and what is accepted; it is never ignored or read as something else.
//! What happens then is the reader's, and is written on each variable below: a call of the C
//! ABI that reads it fails with `INVALID_ARGUMENT` and the message as its last error; the
//! doctor exits 64 with the message on one line; the logger, which cannot fail, writes the
//! message to stderr once and stays off.
//!
//! This module imports nothing of the crate, so that every layer may read it.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;
use std::time::Duration;

/// One variable: its name, who reads it, and what it does (the values it accepts, its default,
/// what a bad value does).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Var {
    pub name: &'static str,
    pub read_by: &'static str,
    pub doc: &'static str,
}

/// Diagnostics to stderr.
pub const LOG: Var = Var {
    name: "UPCXX_EXTRA_NVSHMEM_LOG",
    read_by: "the library, once, when it is loaded",
    doc: "diagnostics through `log` to stderr at this level and above: error, warn, info, debug, trace, or off (the \
          default). A bad value is written to stderr once, and logging stays off.",
};

/// The resolution step(s) discovery uses.
pub const SOURCE: Var = Var {
    name: "UPCXX_EXTRA_NVSHMEM_SOURCE",
    read_by: "the library, at the first heap query (heap_query, set_peers_from_nvshmem, report) until a value is taken",
    doc: "the resolution step(s) of discovery: auto (every step in order, the default; also none or 0), dlsym (1), \
          symtab (2) or cumodule (3). upcxx_extra_nvshmem_select_source overrides it. A bad value fails each heap \
          query with INVALID_ARGUMENT until it is fixed or select_source is called.",
};

/// Test knob: shifts the heap base read.
pub const DEBUG_HEAP_BASE_SKEW: Var = Var {
    name: "UPCXX_EXTRA_NVSHMEM_DEBUG_HEAP_BASE_SKEW",
    read_by: "the library, at each heap query",
    doc: "test knob: <bytes> (digits) added to the heap base read from NVSHMEM's state, to show validation refusing \
          a wrong layout. Never set it in a job. A bad value fails each heap query with INVALID_ARGUMENT.",
};

/// How the C++ layer's heap.copy moves bytes.
pub const COPY: Var = Var {
    name: "UPCXX_EXTRA_NVSHMEM_COPY",
    read_by: "the library, at each upcxx_extra_nvshmem_copy_policy (the C++ layer: once per nvshmem_heap, when it is built)",
    doc: "how heap.copy moves bytes: fast (the default: the copy engine, small copies with heap memory at both ends \
          batched), unbatched (the engine, one copy each, none batched) or upcxx (every copy with a heap end is \
          upcxx::copy); these spellings exactly, lower case (empty: the default). A bad value fails copy_policy with \
          INVALID_ARGUMENT, and so the heap's construction on every rank (errc bad_environment).",
};

/// The largest copy the copy engine batches.
pub const COPY_BATCH_BYTES: Var = Var {
    name: "UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES",
    read_by: "the library, at each upcxx_extra_nvshmem_copy_policy (the C++ layer: once per nvshmem_heap, when it is built)",
    doc: "<bytes> (digits; default 262144, 0: none) the largest copy with heap memory at both ends that heap.copy \
          batches; with UPCXX_EXTRA_NVSHMEM_COPY=unbatched none is, whatever it says (it is still checked). Set to \
          the empty string it is a bad value. A bad value fails copy_policy with INVALID_ARGUMENT, and so the heap's \
          construction on every rank (errc bad_environment).",
};

/// [`COPY_BATCH_BYTES`]'s default: above it a copy engine beats a kernel on one lone copy
/// (BENCHMARKS.md).
pub const DEFAULT_COPY_BATCH_BYTES: usize = 262144;

/// NVSHMEM's install directory.
pub const NVSHMEM_HOME: Var = Var {
    name: "NVSHMEM_HOME",
    read_by: "the library (upcxx_extra_nvshmem_nvshmem_load, when the loader finds no libnvshmem_host.so.3) and the doctor",
    doc: "NVSHMEM's root directory: the library loads $NVSHMEM_HOME/lib/libnvshmem_host.so.3 when the dynamic \
          loader finds none; the doctor without PATH searches it first. A path, taken byte for byte.",
};

/// The CUDA major version of the NVSHMEM wheel.
pub const NVSHMEM_CUDA: Var = Var {
    name: "UXN_NVSHMEM_CUDA",
    read_by: "the doctor (and the installer scripts)",
    doc: "the CUDA major version of the NVSHMEM wheel: 12 (nvidia-nvshmem-cu12, the default) or 13 \
          (nvidia-nvshmem-cu13). A bad value: the doctor exits 64.",
};

/// How long the doctor lets a library load.
pub const DOCTOR_LOAD_TIMEOUT_S: Var = Var {
    name: "UXN_DOCTOR_LOAD_TIMEOUT_S",
    read_by: "the doctor",
    doc: "seconds (digits, 1 to 3600; default 20) the doctor's child process may take to load and analyse a library \
          before it is killed. A bad value: the doctor exits 64.",
};

/// Where the NVSHMEM wheels are installed.
pub const CACHE: Var = Var {
    name: "UXN_CACHE",
    read_by: "the doctor (and the installer scripts)",
    doc: "the install cache of NVSHMEM wheels (default ~/.cache/upcxx-extra-nvshmem). A path, taken byte for byte.",
};

/// Every variable of this package, in the order documented.
pub const ALL: [Var; 9] =
    [LOG, SOURCE, DEBUG_HEAP_BASE_SKEW, COPY, COPY_BATCH_BYTES, NVSHMEM_HOME, NVSHMEM_CUDA, DOCTOR_LOAD_TIMEOUT_S, CACHE];

/// A value that does not parse: the variable, its value as set, and what it accepts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadValue {
    pub var: &'static str,
    pub value: OsString,
    pub expected: &'static str,
}

impl std::fmt::Display for BadValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // `{:?}` of an OsStr: quoted, with spaces visible and control characters and bytes that
        // are not UTF-8 escaped.
        write!(f, "{} is set to {:?}, which is not {}: unset it or set one of those", self.var, self.value, self.expected)
    }
}

impl std::error::Error for BadValue {}

/// The variable's value, None when it is unset or empty.
pub fn raw(var: Var) -> Option<OsString> {
    std::env::var_os(var.name).filter(|v| !v.is_empty())
}

fn bad(var: Var, value: &OsStr, expected: &'static str) -> BadValue {
    BadValue { var: var.name, value: value.to_os_string(), expected }
}

/// `value` as one of `names` (ASCII case-insensitive, nothing around it): its index.
fn one_of(value: &OsStr, names: &[&str]) -> Option<usize> {
    let s = value.to_str()?;
    names.iter().position(|n| n.eq_ignore_ascii_case(s))
}

/// A decimal number: digits only (`0`-`9`, at least one), no sign, no space, no unit. None when
/// the value is anything else or does not fit a u64.
pub fn digits(value: &OsStr) -> Option<u64> {
    let s = value.to_str()?;
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

/// The level of [`LOG`]; Ok(None) when unset.
pub fn log_level() -> Result<Option<log::LevelFilter>, BadValue> {
    raw(LOG).map(|v| parse_log(&v)).transpose()
}

pub fn parse_log(value: &OsStr) -> Result<log::LevelFilter, BadValue> {
    use log::LevelFilter as L;
    const LEVELS: [log::LevelFilter; 6] = [L::Error, L::Warn, L::Info, L::Debug, L::Trace, L::Off];
    one_of(value, &["error", "warn", "info", "debug", "trace", "off"])
        .map(|i| LEVELS[i])
        .ok_or_else(|| bad(LOG, value, "one of error, warn, info, debug, trace, off"))
}

/// What [`SOURCE`] selects (the C enum `upcxx_extra_nvshmem_source_t`'s numbers 0 to 3).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourceSetting {
    /// Every step, in order (NONE).
    Auto = 0,
    Dlsym = 1,
    Symtab = 2,
    Cumodule = 3,
}

/// [`SOURCE`]; Ok(None) when unset.
pub fn source() -> Result<Option<SourceSetting>, BadValue> {
    raw(SOURCE).map(|v| parse_source(&v)).transpose()
}

pub fn parse_source(value: &OsStr) -> Result<SourceSetting, BadValue> {
    use SourceSetting::*;
    const NAMES: [(&str, SourceSetting); 9] = [
        ("auto", Auto),
        ("none", Auto),
        ("0", Auto),
        ("dlsym", Dlsym),
        ("1", Dlsym),
        ("symtab", Symtab),
        ("2", Symtab),
        ("cumodule", Cumodule),
        ("3", Cumodule),
    ];
    let names: Vec<&str> = NAMES.iter().map(|(n, _)| *n).collect();
    one_of(value, &names)
        .map(|i| NAMES[i].1)
        .ok_or_else(|| bad(SOURCE, value, "one of auto, dlsym, symtab, cumodule (or none, 0, 1, 2, 3)"))
}

/// [`DEBUG_HEAP_BASE_SKEW`] in bytes; Ok(None) when unset.
pub fn debug_heap_base_skew() -> Result<Option<isize>, BadValue> {
    raw(DEBUG_HEAP_BASE_SKEW).map(|v| parse_skew(&v)).transpose()
}

pub fn parse_skew(value: &OsStr) -> Result<isize, BadValue> {
    digits(value)
        .and_then(|n| isize::try_from(n).ok())
        .ok_or_else(|| bad(DEBUG_HEAP_BASE_SKEW, value, "a number of bytes (digits only, at most 2^63-1)"))
}

/// What [`COPY`] and [`COPY_BATCH_BYTES`] ask of heap.copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CopySetting {
    /// Every copy with a heap end is upcxx::copy (`COPY=upcxx`).
    pub upcxx_only: bool,
    /// The largest copy batched (0: none).
    pub batch_bytes: usize,
}

impl Default for CopySetting {
    fn default() -> Self {
        CopySetting { upcxx_only: false, batch_bytes: DEFAULT_COPY_BATCH_BYTES }
    }
}

/// [`COPY`] and [`COPY_BATCH_BYTES`] as set now (each read at every call); the first bad value
/// of the two, [`COPY`] first.
pub fn copy_setting() -> Result<CopySetting, BadValue> {
    parse_copy(std::env::var_os(COPY.name).as_deref(), std::env::var_os(COPY_BATCH_BYTES.name).as_deref())
}

#[cfg(target_pointer_width = "64")]
const BATCH_BYTES_EXPECTED: &str =
    "a number of bytes in decimal digits only (no sign, space or unit; at most 18446744073709551615; 0: no batching)";
#[cfg(not(target_pointer_width = "64"))]
const BATCH_BYTES_EXPECTED: &str = "a number of bytes in decimal digits only (no sign, space or unit; at most 4294967295; 0: no batching)";

/// `copy` and `batch_bytes` as [`COPY`] and [`COPY_BATCH_BYTES`] take them (None: unset).
pub fn parse_copy(copy: Option<&OsStr>, batch_bytes: Option<&OsStr>) -> Result<CopySetting, BadValue> {
    let mut p = CopySetting::default();
    if let Some(v) = copy.filter(|v| !v.is_empty()) {
        match v.to_str() {
            Some("fast") => {}
            Some("unbatched") => p.batch_bytes = 0,
            Some("upcxx") => p.upcxx_only = true,
            _ => return Err(bad(COPY, v, "one of fast, unbatched, upcxx (lower case)")),
        }
    }
    // Not `raw`: set to the empty string is a bad value here.
    if let Some(v) = batch_bytes {
        let n = digits(v).and_then(|n| usize::try_from(n).ok()).ok_or_else(|| bad(COPY_BATCH_BYTES, v, BATCH_BYTES_EXPECTED))?;
        if p.batch_bytes != 0 {
            p.batch_bytes = n;
        }
    }
    Ok(p)
}

/// [`NVSHMEM_HOME`]; None when unset or empty.
pub fn nvshmem_home() -> Option<PathBuf> {
    raw(NVSHMEM_HOME).map(PathBuf::from)
}

/// [`NVSHMEM_CUDA`]: 12 or 13; Ok(None) when unset.
pub fn nvshmem_cuda() -> Result<Option<u32>, BadValue> {
    raw(NVSHMEM_CUDA).map(|v| parse_cuda(&v)).transpose()
}

pub fn parse_cuda(value: &OsStr) -> Result<u32, BadValue> {
    one_of(value, &["12", "13"]).map(|i| [12, 13][i]).ok_or_else(|| bad(NVSHMEM_CUDA, value, "12 or 13"))
}

/// [`DOCTOR_LOAD_TIMEOUT_S`]; Ok(None) when unset.
pub fn doctor_load_timeout() -> Result<Option<Duration>, BadValue> {
    raw(DOCTOR_LOAD_TIMEOUT_S).map(|v| parse_load_timeout(&v)).transpose()
}

pub fn parse_load_timeout(value: &OsStr) -> Result<Duration, BadValue> {
    digits(value)
        .filter(|s| (1..=3600).contains(s))
        .map(Duration::from_secs)
        .ok_or_else(|| bad(DOCTOR_LOAD_TIMEOUT_S, value, "a number of seconds from 1 to 3600 (digits only)"))
}

/// [`CACHE`]; None when unset or empty.
pub fn cache() -> Option<PathBuf> {
    raw(CACHE).map(PathBuf::from)
}

/// `$HOME`; None when unset or empty.
pub fn home() -> Option<PathBuf> {
    std::env::var_os("HOME").filter(|v| !v.is_empty()).map(PathBuf::from)
}

/// `$LD_LIBRARY_PATH` as it is set (None: unset); [`loader_path`] splits it.
pub fn ld_library_path() -> Option<OsString> {
    std::env::var_os("LD_LIBRARY_PATH")
}

/// One element of a loader path list (`LD_LIBRARY_PATH`), as the dynamic loader reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoaderDir {
    /// A directory, as written (relative ones are relative to the current directory).
    Dir(PathBuf),
    /// An empty element: the current directory.
    CurrentDir,
    /// An element with a dynamic string token (`$ORIGIN`, `$LIB`, `$PLATFORM`, or braced),
    /// which the loader expands for each program: what it names depends on the program.
    Token(PathBuf),
}

/// `LD_LIBRARY_PATH` split as glibc's dynamic loader splits it (ld.so(8)): elements separated
/// by `:` or `;`, no escaping; an empty element (a leading, trailing or doubled separator) is
/// the current directory; a value that is empty as a whole names nothing.
pub fn loader_path(value: &OsStr) -> Vec<LoaderDir> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = value.as_bytes();
    if bytes.is_empty() {
        return Vec::new();
    }
    bytes
        .split(|b| *b == b':' || *b == b';')
        .map(|e| {
            let p = PathBuf::from(OsStr::from_bytes(e));
            // `${NAME}`, or `$NAME` at the end or before a `/` (glibc's `is_dst`).
            let has = |t: &str| {
                let (plain, braced) = (format!("${t}"), format!("${{{t}}}"));
                let plain_at = |i: usize| e[i..].starts_with(plain.as_bytes()) && matches!(e.get(i + plain.len()), None | Some(b'/'));
                (0..e.len()).any(|i| plain_at(i) || e[i..].starts_with(braced.as_bytes()))
            };
            if e.is_empty() {
                LoaderDir::CurrentDir
            } else if ["ORIGIN", "LIB", "PLATFORM"].iter().any(|t| has(t)) {
                LoaderDir::Token(p)
            } else {
                LoaderDir::Dir(p)
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    fn os(s: &str) -> &OsStr {
        OsStr::new(s)
    }

    #[test]
    fn numbers_are_digits_only() {
        assert_eq!(digits(os("4096")), Some(4096));
        assert_eq!(digits(os("0")), Some(0));
        for v in ["", " 1", "1 ", "+1", "-1", "1s", "0x10", "1e3", "1_000", "１", "18446744073709551616"] {
            assert_eq!(digits(os(v)), None, "{v:?}");
        }
        assert_eq!(digits(OsStr::from_bytes(b"1\xff")), None);
    }

    #[test]
    fn each_knob_refuses_what_it_does_not_name() {
        assert_eq!(parse_log(os("debug")), Ok(log::LevelFilter::Debug));
        assert_eq!(parse_log(os("TRACE")), Ok(log::LevelFilter::Trace));
        assert_eq!(parse_log(os("off")), Ok(log::LevelFilter::Off));
        for v in [" debug", "debug\n", "verbose", "1", "deb"] {
            assert!(parse_log(os(v)).is_err(), "{v:?}");
        }
        assert_eq!(parse_source(os("SymTab")), Ok(SourceSetting::Symtab));
        assert_eq!(parse_source(os("3")), Ok(SourceSetting::Cumodule));
        assert_eq!(parse_source(os("none")), Ok(SourceSetting::Auto));
        for v in ["manual", "4", " dlsym", "dlsym ", "+1", "01"] {
            assert!(parse_source(os(v)).is_err(), "{v:?}");
        }
        assert_eq!(parse_skew(os("4096")), Ok(4096));
        for v in ["-4096", "+4096", " 4096", "4096 ", "4k", "9223372036854775808"] {
            assert!(parse_skew(os(v)).is_err(), "{v:?}");
        }
        assert_eq!(parse_cuda(os("13")), Ok(13));
        for v in ["14", "cu13", " 13", "13.0", "+12"] {
            assert!(parse_cuda(os(v)).is_err(), "{v:?}");
        }
        assert_eq!(parse_load_timeout(os("1")), Ok(Duration::from_secs(1)));
        assert_eq!(parse_load_timeout(os("3600")), Ok(Duration::from_secs(3600)));
        for v in ["0", "3601", "20s", " 20", "+20", "-1", "2.5"] {
            assert!(parse_load_timeout(os(v)).is_err(), "{v:?}");
        }
    }

    #[test]
    fn the_copy_knobs_take_what_the_cxx_layer_always_took() {
        let set = |c: Option<&str>, b: Option<&str>| parse_copy(c.map(os), b.map(os));
        let p = |upcxx_only, batch_bytes| Ok(CopySetting { upcxx_only, batch_bytes });
        assert_eq!(set(None, None), p(false, 262144));
        assert_eq!(set(Some(""), None), p(false, 262144));
        assert_eq!(set(Some("fast"), Some("4096")), p(false, 4096));
        assert_eq!(set(Some("unbatched"), Some("4096")), p(false, 0), "unbatched: none, whatever the limit");
        assert_eq!(set(Some("upcxx"), None), p(true, 262144));
        assert_eq!(set(None, Some("0")), p(false, 0));
        assert_eq!(set(None, Some("18446744073709551615")), p(false, usize::MAX));
        for v in ["bogus", " fast", "fast ", "FAST", "Upcxx", "1"] {
            let e = set(Some(v), Some("12")).unwrap_err();
            assert_eq!(e.var, "UPCXX_EXTRA_NVSHMEM_COPY", "{v:?}");
            assert!(e.to_string().contains("which is not one of fast, unbatched, upcxx"), "{e}");
        }
        for v in ["12x", " -1", "\t-5", "+7", " 12", "-1", "12 ", "", "18446744073709551616"] {
            let e = set(None, Some(v)).unwrap_err();
            assert_eq!(e.var, "UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES", "{v:?}");
            // Checked with unbatched too.
            assert_eq!(set(Some("unbatched"), Some(v)).unwrap_err(), e, "{v:?}");
        }
        // COPY first.
        assert_eq!(set(Some("bogus"), Some("12x")).unwrap_err().var, "UPCXX_EXTRA_NVSHMEM_COPY");
        assert_eq!(
            set(None, Some("12x")).unwrap_err().to_string(),
            "UPCXX_EXTRA_NVSHMEM_COPY_BATCH_BYTES is set to \"12x\", which is not a number of bytes in decimal digits only \
             (no sign, space or unit; at most 18446744073709551615; 0: no batching): unset it or set one of those"
        );
    }

    #[test]
    fn a_bad_value_names_the_variable_and_the_value() {
        let e = parse_load_timeout(os("20s")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "UXN_DOCTOR_LOAD_TIMEOUT_S is set to \"20s\", which is not a number of seconds from 1 to 3600 (digits only): \
             unset it or set one of those"
        );
        let e = parse_cuda(OsStr::from_bytes(b" 1\xff\n")).unwrap_err();
        assert!(e.to_string().starts_with("UXN_NVSHMEM_CUDA is set to \" 1\\xFF\\n\", which is not 12 or 13"), "{e}");
    }

    #[test]
    fn the_loader_path_is_split_as_ld_so_splits_it() {
        use LoaderDir::*;
        let d = |s: &str| Dir(PathBuf::from(s));
        assert_eq!(loader_path(os("")), vec![]);
        assert_eq!(loader_path(os(":")), vec![CurrentDir, CurrentDir]);
        assert_eq!(loader_path(os("/a::/b;c;")), vec![d("/a"), CurrentDir, d("/b"), d("c"), CurrentDir]);
        assert_eq!(
            loader_path(os("$ORIGIN/../lib:/x/${LIB}:/y/$LIBRARY")),
            vec![Token(PathBuf::from("$ORIGIN/../lib")), Token(PathBuf::from("/x/${LIB}")), d("/y/$LIBRARY"),]
        );
        assert_eq!(loader_path(OsStr::from_bytes(b"/a\xff")), vec![Dir(PathBuf::from(OsStr::from_bytes(b"/a\xff")))]);
    }

    #[test]
    fn no_other_module_reads_the_environment() {
        // Every `env::var` / `env::var_os` of the crate's sources is in this file.
        let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
        let mut stack = vec![src];
        let mut readers = Vec::new();
        while let Some(dir) = stack.pop() {
            for e in std::fs::read_dir(&dir).unwrap().flatten() {
                let p = e.path();
                if p.is_dir() {
                    stack.push(p);
                } else if p.extension().is_some_and(|x| x == "rs") && !p.ends_with("src/env.rs") {
                    let text = std::fs::read_to_string(&p).unwrap();
                    if text.contains("env::var(") || text.contains("env::var_os(") || text.contains("env::vars(") {
                        readers.push(p.display().to_string());
                    }
                }
            }
        }
        assert!(readers.is_empty(), "read the environment through src/env.rs: {readers:?}");
        assert_eq!(ALL.iter().map(|v| v.name).collect::<std::collections::HashSet<_>>().len(), ALL.len());
    }
}
