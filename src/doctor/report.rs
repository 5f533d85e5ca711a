//! The doctor's engine: what this library can do with a given NVSHMEM host library, as text and
//! JSON, with a verdict. Used by `upcxx-nvshmem-doctor` (a file, without initialising NVSHMEM)
//! and by `upcxx_extra_nvshmem_report` (the library loaded in this process, plus runtime facts).

use crate::cuda;
use crate::doctor::elf_check;
use crate::error::Status;
use crate::heap::Source;
use crate::nvshmem::discovery::{self, Step};
use crate::nvshmem::elf;
use crate::nvshmem::host_library::{self, LoadedLibrary};
use crate::nvshmem::state_layout;
use crate::table::{Heap, TABLE};
use serde::{Deserialize, Serialize};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// Supported / degraded / unsupported, with the exit status of the doctor.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Verdict {
    Supported = 0,
    Degraded = 1,
    Unsupported = 2,
}

impl Verdict {
    pub fn name(self) -> &'static str {
        match self {
            Verdict::Supported => "supported",
            Verdict::Degraded => "degraded",
            Verdict::Unsupported => "unsupported",
        }
    }
}

/// A report: the doctor's JSON is this struct serialised; the text is rendered from it, every
/// string that came from the system (paths, names, messages) escaped ([`escape`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Report {
    pub tool: String,
    pub tool_version: String,
    /// The library the report is about, and how it was chosen.
    pub library: Library,
    /// What the library says of itself (when it was loaded).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nvshmem: Option<NvshmemFacts>,
    /// Absent: not looked at; null: the symbol tables could not be read (`symtab_error`).
    #[serde(default, skip_serializing_if = "Option::is_none", with = "double_option")]
    pub symtab_present: Option<Option<bool>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symtab_error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub symbols: Option<Vec<SymbolFacts>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub steps: Option<Vec<StepFacts>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub layout: Option<Layout>,
    /// Inside a job: the heap translation uses.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resolution_trace: Option<Vec<TraceStep>>,
    /// Inside a job with a heap attached by hand: what the loaded library alone would be.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub library_verdict: Option<LibraryVerdict>,
    pub verdict: Verdict,
    /// The doctor's exit status (the verdict's number).
    pub exit_code: i32,
    pub reason: String,
}

/// `Option<Option<T>>` as "absent / null / value".
mod double_option {
    use serde::{Deserialize, Deserializer, Serialize, Serializer};
    pub fn serialize<S: Serializer>(v: &Option<Option<bool>>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(inner) => inner.serialize(s),
            None => s.serialize_none(),
        }
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Option<bool>>, D::Error> {
        Option::<bool>::deserialize(d).map(Some)
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Library {
    /// None when no library was found. The file's name when it is valid UTF-8; otherwise the
    /// name with U+FFFD for each byte that is not, and `path_bytes` holds the name.
    pub path: Option<String>,
    /// The file's name, byte for byte, when it is not valid UTF-8 (absent otherwise).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path_bytes: Option<Vec<u8>>,
    /// How it was found (`argument`, `NVSHMEM_HOME`, ...); None when none was.
    pub found_by: Option<String>,
    /// Why this one was chosen over the places searched after it (the search without PATH).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub why: Option<String>,
    /// What was searched, in order (the search without PATH).
    #[serde(default)]
    pub searched: Vec<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct NvshmemFacts {
    pub name: Option<String>,
    pub version: Option<String>,
    pub init_status: Option<i32>,
}

/// A state symbol as the file records it (`found: false` and nothing else when it does not).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SymbolFacts {
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub found: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub st_value: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub st_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub binding: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepFacts {
    pub step: String,
    pub available: bool,
    pub status: String,
    pub reason: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Layout {
    /// `pass`, `fail` or `not-run`.
    pub check: String,
    pub detail: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version_field: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_version: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub state_size: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offsets: Option<Offsets>,
}

/// The offsets of the fields this library reads in NVSHMEM's state.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Offsets {
    pub version: usize,
    pub mype: usize,
    pub npes: usize,
    pub heap_base: usize,
    pub heap_size: usize,
    pub peer_heap_base_p2p: usize,
    pub peer_heap_base_remote: usize,
}

/// The heap inside a job: `validation` is `pass` for a discovered one, `not-run` for one attached
/// by hand, a status name (with `error`) when discovery failed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Runtime {
    pub validation: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserved_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mapped_size: Option<usize>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub my_pe: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub n_pes: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device: Option<i32>,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct TraceStep {
    pub step: String,
    pub status: String,
    pub detail: String,
}

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LibraryVerdict {
    pub verdict: Verdict,
    pub reason: String,
}

/// What [`analyze`] finds in a loaded library.
#[derive(Clone, Debug, PartialEq)]
pub struct Analysis {
    pub nvshmem: NvshmemFacts,
    pub symtab_present: Option<bool>,
    pub symtab_error: Option<String>,
    pub symbols: Vec<SymbolFacts>,
    pub steps: Vec<StepFacts>,
    pub layout: Layout,
}

/// Bytes (a file's name) as one line of text: what is UTF-8 as [`escape`] writes it, each other
/// byte as `\xNN` (unambiguous: `escape` doubles every backslash).
pub fn escape_bytes(b: &[u8]) -> String {
    let mut out = String::new();
    for chunk in b.utf8_chunks() {
        out += &escape(chunk.valid());
        for x in chunk.invalid() {
            out += &format!("\\x{x:02x}");
        }
    }
    out
}

/// `s` as one line of text: control characters (a newline in a directory name included) and
/// backslashes escaped as Rust writes them (`\n`, `\u{1b}`, `\\`), so that nothing from the
/// system can start a line of the report or forge one.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            c if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}' | '\u{85}') => out.extend(c.escape_default()),
            c => out.push(c),
        }
    }
    out
}

fn step_facts(lib: &LoadedLibrary, step: Step) -> (StepFacts, Status) {
    if step == Step::Cumodule {
        // Not run here: it needs an initialised NVSHMEM. Say whether it can run at all.
        let exported = lib.api.cumodule_init.is_some();
        let driver = cuda::driver_available();
        let (available, reason) = match (exported, driver) {
            (false, _) => (false, "nvshmemx_cumodule_init is not exported".to_string()),
            (true, true) => (true, "nvshmemx_cumodule_init is exported and the CUDA driver is loadable; runs after nvshmem_init".into()),
            (true, false) => {
                (true, "nvshmemx_cumodule_init is exported; needs a GPU (no libcuda here) and an initialised NVSHMEM at run time".into())
            }
        };
        let status = if available { Status::Ok } else { Status::StepUnavailable };
        return (StepFacts { step: "cumodule".into(), available, status: status.name().into(), reason }, status);
    }
    let o = discovery::try_step(lib, step);
    let (status, reason) = if o.status == Status::Ok {
        (Status::Ok, o.detail.clone())
    } else {
        (discovery::failed_status(std::slice::from_ref(&o)), o.label())
    };
    (StepFacts { step: step.name().into(), available: status == Status::Ok, status: status.name().into(), reason }, status)
}

/// The dlsym step's reason, told from what the file's symbol tables say. Discovery only knows
/// dlsym cannot see the symbol ([`discovery::NOT_EXPORTED`]); the doctor reads the file: LOCAL in
/// its .symtab, or a stripped file with no symbol table at all.
fn dlsym_reason(reason: &str, sym: &Result<elf::SymtabLookup, String>) -> String {
    const LOCAL: &str = crate::nvshmem::discovery::NOT_EXPORTED;
    if !reason.contains(LOCAL) {
        return reason.to_string();
    }
    let why = match sym {
        Ok(l) if !l.has_symtab => ", and the file has no symbol table (stripped)".to_string(),
        Ok(l) => match l.symbols.first().copied().flatten() {
            Some(s) if s.local => " (a LOCAL symbol in its .symtab)".to_string(),
            Some(_) => " (in its .symtab, but not in its dynamic symbol table)".to_string(),
            None => ", and it is not in its .symtab either".to_string(),
        },
        Err(e) => format!(" (its symbol tables could not be read: {e})"),
    };
    reason.replacen(LOCAL, &why, 1)
}

/// Static facts about a loaded NVSHMEM library: steps, symbol, layout, verdict.
#[allow(unsafe_code)]
pub fn analyze(lib: &LoadedLibrary) -> (Analysis, Verdict, String) {
    let nvshmem =
        NvshmemFacts { name: lib.name(), version: lib.version().map(|(a, b, c)| format!("{a}.{b}.{c}")), init_status: lib.init_status() };
    let sym = elf::lookup(&lib.path, &["nvshmemi_device_state", "nvshmemi_state"]);
    // A symbol table that cannot be read is not a stripped file: symtab_present is null then,
    // and symtab_error says why.
    let (has_symtab, st) = match &sym {
        Ok(l) => (Some(l.has_symtab), l.symbols.clone()),
        Err(_) => (None, vec![None, None]),
    };
    let symbol = |name: &str, s: Option<elf::FileSymbol>| match s {
        Some(s) => SymbolFacts {
            name: name.into(),
            found: None,
            st_value: Some(s.value),
            st_size: Some(s.size),
            binding: Some(if s.local { "local" } else { "global" }.into()),
            address: Some(format!("0x{:x}", lib.load_bias.wrapping_add(s.value as usize))),
        },
        None => SymbolFacts { name: name.into(), found: Some(false), st_value: None, st_size: None, binding: None, address: None },
    };
    let symbols = vec![symbol("nvshmemi_device_state", st[0]), symbol("nvshmemi_state", st[1])];

    let mut steps = Vec::new();
    let mut statuses = Vec::new();
    for step in Step::ALL {
        let (mut f, s) = step_facts(lib, step);
        if step == Step::Dlsym {
            f.reason = dlsym_reason(&f.reason, &sym);
        }
        steps.push(f);
        statuses.push(s);
    }

    // The layout check: the symbol's size covers what is read, and the version field is either
    // still 0 (before nvshmem_init) or 0x10000 + st_size.
    let layout = match st[0] {
        Some(s) => {
            let addr = lib.load_bias.wrapping_add(s.value as usize);
            // st_value and st_size come from the file: checked (alignment, size) before the
            // state is read, and read bytewise.
            let symbol = state_layout::check_state_symbol(addr, Some(s.size));
            let version = if symbol.is_ok() && lib.contains_writable(addr, state_layout::PREFIX_LEN) {
                let mut b = [0u8; 4];
                for (i, x) in b.iter_mut().enumerate() {
                    // SAFETY: inside the library's writable segment (checked just above).
                    *x = unsafe { std::ptr::read_volatile((addr + i) as *const u8) };
                }
                Some(u32::from_ne_bytes(b))
            } else {
                None
            };
            // None when st_size is absurd (2^64-1 would overflow).
            let expected = u64::from(state_layout::VERSION_MAJOR_TAG).checked_add(s.size);
            let (check, detail) = match version {
                _ if symbol.is_err() => ("fail", format!("nvshmemi_device_state {}", symbol.clone().unwrap_err())),
                None => ("fail", "the symbol is not inside a loaded writable segment".to_string()),
                Some(0) => (
                    "pass",
                    format!(
                        "st_size {} covers the {} bytes read; version field is 0 until nvshmem_init, then must be 0x{:x}",
                        s.size,
                        state_layout::PREFIX_LEN,
                        expected.unwrap_or(0)
                    ),
                ),
                Some(v) if Some(u64::from(v)) == expected => ("pass", format!("version field 0x{v:x} == 0x10000 + st_size")),
                Some(v) => ("fail", format!("version field 0x{v:x} != 0x10000 + st_size = 0x{:x}", expected.unwrap_or(0))),
            };
            Layout {
                check: check.into(),
                detail,
                version_field: version,
                expected_version: expected,
                state_size: Some(s.size),
                offsets: Some(Offsets {
                    version: state_layout::OFF_VERSION,
                    mype: state_layout::OFF_MYPE,
                    npes: state_layout::OFF_NPES,
                    heap_base: state_layout::OFF_HEAP_BASE,
                    heap_size: state_layout::OFF_HEAP_SIZE,
                    peer_heap_base_p2p: state_layout::OFF_PEER_HEAP_BASE_P2P,
                    peer_heap_base_remote: state_layout::OFF_PEER_HEAP_BASE_REMOTE,
                }),
            }
        }
        None => Layout {
            check: "not-run".into(),
            detail: "nvshmemi_device_state is not in the file's symbol tables; the public route reads the same layout at run time".into(),
            version_field: None,
            expected_version: None,
            state_size: None,
            offsets: None,
        },
    };
    let layout_failed = layout.check == "fail";

    let direct_ok = statuses[0] == Status::Ok || statuses[1] == Status::Ok;
    let public_ok = statuses[2] == Status::Ok;
    let any_layout_error = statuses.contains(&Status::UnsupportedLayout) || layout_failed;
    let (verdict, reason) = if any_layout_error {
        (Verdict::Unsupported, "the state's layout does not match what this library reads (see layout and steps)".to_string())
    } else if direct_ok {
        let via = if statuses[0] == Status::Ok { "dlsym" } else { ".symtab" };
        (
            Verdict::Supported,
            format!("the heap is found through {via}{}", if public_ok { ", with the public cumodule route as a fallback" } else { "" }),
        )
    } else if public_ok {
        let why = if has_symtab == Some(true) {
            "nvshmemi_device_state is neither exported nor in its .symtab"
        } else {
            "nvshmemi_device_state is not exported and the file has no symbol table (stripped)"
        };
        let why = match &sym {
            Err(e) => format!("nvshmemi_device_state is not exported and the file's symbol tables could not be read ({e})"),
            Ok(_) => why.to_string(),
        };
        (Verdict::Degraded, format!("supported through the public route only: {why}"))
    } else {
        (Verdict::Unsupported, "no resolution step can find the state: not exported, no .symtab, and no nvshmemx_cumodule_init".to_string())
    };
    let analysis = Analysis { nvshmem, symtab_present: has_symtab, symtab_error: sym.err(), symbols, steps, layout };
    (analysis, verdict, reason)
}

impl Report {
    /// A report about `path` (None: no library found), found by `found_by`, after `searched`:
    /// nothing analysed yet, the verdict to be set by [`Report::finish`].
    pub fn new(path: Option<&Path>, found_by: Option<&str>, searched: &[String]) -> Report {
        Report {
            tool: "upcxx-nvshmem-doctor".into(),
            tool_version: env!("CARGO_PKG_VERSION").into(),
            library: Library {
                path: path.map(|p| p.display().to_string()),
                path_bytes: path.filter(|p| p.to_str().is_none()).map(|p| p.as_os_str().as_bytes().to_vec()),
                found_by: found_by.map(str::to_string),
                why: None,
                searched: searched.to_vec(),
            },
            nvshmem: None,
            symtab_present: None,
            symtab_error: None,
            symbols: None,
            steps: None,
            layout: None,
            runtime: None,
            resolution_trace: None,
            library_verdict: None,
            verdict: Verdict::Unsupported,
            exit_code: Verdict::Unsupported as i32,
            reason: String::new(),
        }
    }

    /// The verdict and why.
    pub fn finish(mut self, verdict: Verdict, reason: String) -> Report {
        self.verdict = verdict;
        self.exit_code = verdict as i32;
        self.reason = reason;
        self
    }

    fn with(mut self, a: Analysis) -> Report {
        self.nvshmem = Some(a.nvshmem);
        self.symtab_present = Some(a.symtab_present);
        self.symtab_error = a.symtab_error;
        self.symbols = Some(a.symbols);
        self.steps = Some(a.steps);
        self.layout = Some(a.layout);
        self
    }
}

/// The doctor when no PATH was given and the search found no NVSHMEM host library: unsupported
/// (the environment is the input), with what was searched and what NVSHMEM_HOME is (`home`:
/// "NVSHMEM_HOME is not set", or where it points and that it has no library).
pub fn not_found(searched: &[String], home: &str) -> Report {
    let reason = format!(
        "no NVSHMEM host library found ({home}); searched: {}; give PATH, or set NVSHMEM_HOME to an NVSHMEM root \
         directory (holding lib/libnvshmem_host.so.3), or name its lib directory in LD_LIBRARY_PATH",
        if searched.is_empty() { "nothing".to_string() } else { searched.join(", ") }
    );
    Report::new(None, None, searched).finish(Verdict::Unsupported, reason)
}

/// What `host_library::open_file`'s error means. It returns a plain string for both a failed
/// `dlopen` (the `dlerror()` text) and a library that loaded but is not NVSHMEM: tell them apart
/// so that the doctor never says "dlopen failed" about a library that loaded.
fn open_error(path: &Path, e: &str) -> String {
    let p = path.display();
    if e.starts_with("not an NVSHMEM host library") {
        // "not an NVSHMEM host library: it exports none of ..."
        format!("{p} loaded, but it is {e}")
    } else if let Some(rest) = e.strip_prefix("the library is loaded but ") {
        format!("{p} loaded, but {rest}")
    } else {
        format!("dlopen of {p} failed: {e}")
    }
}

/// The doctor's first look at a file, before anything loads it: a regular file only (opened
/// with `O_NONBLOCK`, a FIFO or device is never waited on or read), and ELF headers that agree
/// with the file ([`elf_check::check_image`]). Err is the report for a file that must not be
/// loaded: unsupported, saying whether it is empty, not ELF, truncated, corrupt or not loadable here.
pub fn check_file(path: &Path, found_by: &str, searched: &[String]) -> Result<elf_check::CheckedElf, Box<Report>> {
    let checked = elf_check::open_regular(path).and_then(|f| elf_check::check_file(&f));
    checked.map_err(|p| Box::new(Report::new(Some(path), Some(found_by), searched).finish(Verdict::Unsupported, p.describe(path))))
}

/// The doctor on a file that passed [`check_file`]: loads it (NVSHMEM is not initialised) and
/// analyses it. The doctor runs this in a child process of its own ([`load_failed`] is the
/// report when that child dies).
pub fn load_and_analyze(path: &Path, found_by: &str, searched: &[String]) -> Report {
    let r = Report::new(Some(path), Some(found_by), searched);
    // The file the loader will open, checked again here (it may have changed since
    // `check_file`): a file refused by the check is never given to `dlopen`.
    let canonical = match std::fs::canonicalize(path) {
        Ok(c) => c,
        Err(e) => return r.finish(Verdict::Unsupported, format!("{}: {e}", path.display())),
    };
    if let Err(p) = elf_check::open_regular(&canonical).and_then(|f| elf_check::check_file(&f)) {
        return r.finish(Verdict::Unsupported, p.describe(path));
    }
    let lib = match host_library::open_file(&canonical) {
        Ok(l) => l,
        Err(e) => return r.finish(Verdict::Unsupported, open_error(path, &e)),
    };
    if lib.api.init_status.is_none() && lib.api.info_get_name.is_none() {
        // Exported under those names but not functions (a data symbol): never called.
        let data = lib.api_names_exported_as_data();
        let p = path.display();
        let why = if data.is_empty() {
            format!("{p} loaded, but it is not an NVSHMEM host library: it exports neither nvshmemx_init_status nor nvshmem_info_get_name")
        } else {
            format!(
                "{p} loaded, but it is not an NVSHMEM host library: it exports neither nvshmemx_init_status nor nvshmem_info_get_name \
                 as a function ({} {} a data symbol there, never called)",
                data.join(" and "),
                if data.len() == 1 { "is" } else { "are each" }
            )
        };
        return r.finish(Verdict::Unsupported, why);
    }
    let (a, verdict, reason) = analyze(&lib);
    r.with(a).finish(verdict, reason)
}

/// The doctor on a file, in this process: [`check_file`], then [`load_and_analyze`].
pub fn for_file(path: &Path, found_by: &str, searched: &[String]) -> Report {
    match check_file(path, found_by, searched) {
        Ok(_) => load_and_analyze(path, found_by, searched),
        Err(r) => *r,
    }
}

/// The report when loading a file that passed [`check_file`] killed or stalled the process that
/// loaded it (`why`): unsupported.
pub fn load_failed(path: &Path, found_by: &str, searched: &[String], why: &str) -> Report {
    Report::new(Some(path), Some(found_by), searched).finish(Verdict::Unsupported, format!("{}: {why}", path.display()))
}

/// A report from its JSON (as [`Report::to_json`] wrote it, in the doctor's child process).
pub fn from_json(text: &str) -> Option<Report> {
    let r: Report = serde_json::from_str(text).ok()?;
    (r.exit_code == r.verdict as i32).then_some(r)
}

/// The report inside a job: the NVSHMEM library loaded in this process and, when it is
/// initialised, the runtime facts (base, sizes, PE, device, the step that served, validation).
///
/// A heap attached by hand (`upcxx_extra_nvshmem_attach`, source MANUAL) is what translation
/// uses, whatever NVSHMEM is or is not loaded: the runtime facts are then the attached heap's,
/// and the verdict says so (the library's own verdict stays in `library_verdict`).
pub fn in_process() -> Report {
    let manual = TABLE.heap().filter(|h| h.source == Source::Manual);
    let Some(lib) = host_library::loaded() else {
        let mut r = Report::new(None, Some("loaded in this process"), &[]);
        let why = "no NVSHMEM host library is loaded in this process";
        if let Some(h) = manual {
            r.runtime = Some(heap_runtime(&h, "not-run"));
            return r.finish(Verdict::Supported, manual_reason(&h, &format!("{why}, so discovery is not used")));
        }
        return r.finish(Verdict::Unsupported, why.into());
    };
    let (a, verdict, reason) = analyze(lib);
    let mut r = Report::new(Some(&lib.path), Some("loaded in this process"), &[]).with(a);
    if let Some(h) = manual {
        r.runtime = Some(heap_runtime(&h, "not-run"));
        let why = format!("discovery is not used; the loaded library alone would be {}: {reason}", verdict.name());
        r.library_verdict = Some(LibraryVerdict { verdict, reason });
        return r.finish(Verdict::Supported, manual_reason(&h, &why));
    }
    r.runtime = Some(match discovery::query_live() {
        Ok((h, _)) => heap_runtime(&h, "pass"),
        Err(e) => Runtime {
            validation: e.status.name().into(),
            error: Some(e.message),
            source: None,
            base: None,
            reserved_size: None,
            mapped_size: None,
            my_pe: None,
            n_pes: None,
            device: None,
        },
    });
    r.resolution_trace = Some(
        discovery::last_steps()
            .iter()
            .map(|o| TraceStep { step: o.step.name().into(), status: o.status.name().into(), detail: o.detail.clone() })
            .collect(),
    );
    r.finish(verdict, reason)
}

/// The runtime facts of a heap: `validation` is "pass" for a discovered one, "not-run" for one
/// attached by hand (nothing validates it against NVSHMEM).
fn heap_runtime(h: &Heap, validation: &str) -> Runtime {
    Runtime {
        validation: validation.into(),
        error: None,
        // A manual heap is reported as the C enum spells it; discovered ones by their step.
        source: Some(if h.source == Source::Manual { "MANUAL" } else { h.source.name() }.into()),
        base: Some(format!("0x{:x}", h.base)),
        reserved_size: Some(h.size),
        mapped_size: Some(h.mapped_size),
        my_pe: Some(h.my_pe),
        n_pes: Some(h.n_pes),
        device: Some(h.device),
    }
}

fn manual_reason(h: &Heap, why: &str) -> String {
    format!(
        "the heap was attached by hand (upcxx_extra_nvshmem_attach, source MANUAL): base 0x{:x}, size {}, PE {} of {}; translation uses it; {why}",
        h.base, h.size, h.my_pe, h.n_pes
    )
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).unwrap_or_default()
    }

    /// The human-readable form: one line per fact, every string from the system escaped.
    pub fn to_text(&self) -> String {
        let e = |s: &str| escape(s);
        let opt = |s: &Option<String>| s.as_deref().map_or("-".to_string(), escape);
        let num = |n: Option<i64>| n.map_or("-".to_string(), |n| n.to_string());
        let mut out = String::new();
        out += &format!("upcxx-nvshmem-doctor {}\n", e(&self.tool_version));
        let lib = &self.library;
        let path = match (&lib.path_bytes, &lib.path) {
            (Some(b), _) => Some(escape_bytes(b)),
            (None, p) => p.as_deref().map(escape),
        };
        match (&path, &lib.found_by) {
            (Some(p), Some(by)) if !p.is_empty() => out += &format!("library:   {p} (found by {})\n", e(by)),
            (_, Some(by)) => out += &format!("library:   none {}\n", e(by)),
            _ => out += "library:   none found\n",
        }
        if let Some(why) = &lib.why {
            out += &format!("chosen:    {}\n", e(why));
        }
        if let Some(n) = &self.nvshmem {
            out += &format!("nvshmem:   {} (release {})\n", opt(&n.name), opt(&n.version));
        }
        if let Some(b) = self.symtab_present {
            let what = match b {
                Some(true) => "present".to_string(),
                Some(false) => "absent (stripped)".to_string(),
                None => format!("unreadable ({})", opt(&self.symtab_error)),
            };
            out += &format!(".symtab:   {what}\n");
        }
        for y in self.symbols.iter().flatten() {
            if y.found == Some(false) {
                out += &format!("symbol:    {}: not found\n", e(&y.name));
            } else {
                out += &format!(
                    "symbol:    {}: st_value 0x{:x}, st_size {}, {} (address {})\n",
                    e(&y.name),
                    y.st_value.unwrap_or(0),
                    num(y.st_size.map(|v| v as i64)),
                    opt(&y.binding),
                    opt(&y.address)
                );
            }
        }
        for st in self.steps.iter().flatten() {
            out += &format!("step {:9} {} ({})\n", e(&st.step), if st.available { "available  " } else { "unavailable" }, e(&st.reason));
        }
        if let Some(l) = &self.layout {
            out += &format!("layout:    {}: {}\n", e(&l.check), e(&l.detail));
        }
        if let Some(r) = &self.runtime {
            let facts = || {
                format!(
                    "base {} reserved {} mapped {} PE {}/{} device {}",
                    opt(&r.base),
                    num(r.reserved_size.map(|v| v as i64)),
                    num(r.mapped_size.map(|v| v as i64)),
                    num(r.my_pe.map(i64::from)),
                    num(r.n_pes.map(i64::from)),
                    num(r.device.map(i64::from))
                )
            };
            if r.source.as_deref() == Some("MANUAL") {
                out += &format!("runtime:   {} source MANUAL (attached by hand; not validated against NVSHMEM)\n", facts());
            } else if r.validation == "pass" {
                out += &format!("runtime:   {} via {}; validation pass\n", facts(), opt(&r.source));
            } else {
                out += &format!("runtime:   {}: {}\n", e(&r.validation), opt(&r.error));
            }
        }
        out += &format!("verdict:   {}: {}\n", self.verdict.name(), e(&self.reason));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escape_keeps_one_line() {
        assert_eq!(escape("/opt/nvshmem/lib"), "/opt/nvshmem/lib");
        assert_eq!(escape("a\nverdict:   supported: x"), "a\\nverdict:   supported: x");
        assert_eq!(escape("tab\there\r\u{1b}[31m\\"), "tab\\there\\r\\u{1b}[31m\\\\");
        assert!(!escape("x\u{2028}y\u{85}").contains(['\u{2028}', '\u{85}']));
    }

    #[test]
    fn a_name_that_is_not_utf8_is_kept_byte_for_byte() {
        use std::os::unix::ffi::OsStrExt;
        let name = std::ffi::OsStr::from_bytes(b"/tmp/a\xff\\x/lib\xc3/libnvshmem_host.so.3");
        let r = load_failed(Path::new(name), "argument", &[], "it crashed");
        assert_eq!(r.library.path_bytes.as_deref(), Some(name.as_bytes()));
        assert_eq!(from_json(&r.to_json()), Some(r.clone()));
        assert!(r.to_text().contains("library:   /tmp/a\\xff\\\\x/lib\\xc3/libnvshmem_host.so.3 (found by argument)\n"), "{}", r.to_text());
        // A valid name has no path_bytes.
        let ok = load_failed(Path::new("/tmp/é/x.so"), "argument", &[], "x");
        assert_eq!(ok.library.path_bytes, None);
        assert!(!ok.to_json().contains("path_bytes"));
    }

    #[test]
    fn json_round_trip_and_forged_path() {
        let evil = Path::new("/tmp/x\nverdict:   supported: forged/libnvshmem_host.so.3");
        let r = load_failed(evil, "argument", &["/a\nb".into()], "it crashed");
        assert_eq!(from_json(&r.to_json()), Some(r.clone()));
        let text = r.to_text();
        assert_eq!(text.lines().filter(|l| l.starts_with("verdict:")).count(), 1, "{text}");
        assert!(text.lines().last().unwrap().starts_with("verdict:   unsupported: "), "{text}");
        // The analysis fields: absent when not looked at, null for an unreadable symbol table.
        assert!(!r.to_json().contains("symtab_present"));
        let mut u = r.clone();
        u.symtab_present = Some(None);
        assert!(u.to_json().contains("\"symtab_present\": null"));
        assert_eq!(from_json(&u.to_json()), Some(u));
    }
}
