//! The doctor's engine: what this library can do with a given NVSHMEM host library, as text and
//! JSON, with a verdict. Used by `upcxx-nvshmem-doctor` (a file, without initialising NVSHMEM)
//! and by `upcxx_extra_nvshmem_report` (the library loaded in this process, plus runtime facts).

use crate::cuda;
use crate::error::Status;
use crate::heap::Source;
use crate::nvshmem::discovery::{self, Step};
use crate::nvshmem::elf;
use crate::nvshmem::host_library::{self, LoadedLibrary};
use crate::nvshmem::state_layout;
use crate::table::{Heap, TABLE};
use serde_json::{Value, json};
use std::path::Path;

/// Supported / degraded / unsupported, with the exit status of the doctor.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
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

/// A report: JSON is the source of truth, the text is rendered from it.
#[derive(Clone, Debug)]
pub struct Report {
    pub json: Value,
    pub verdict: Verdict,
}

fn step_json(lib: &LoadedLibrary, step: Step) -> (Value, Status) {
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
        return (json!({"step": "cumodule", "available": available, "status": status.name(), "reason": reason}), status);
    }
    let o = discovery::try_step(lib, step);
    let status = if o.status == Status::Ok {
        (Status::Ok, o.detail.clone())
    } else {
        (discovery::failed_status(std::slice::from_ref(&o)), o.label())
    };
    (json!({"step": step.name(), "available": status.0 == Status::Ok, "status": status.0.name(), "reason": status.1}), status.0)
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
pub fn analyze(lib: &LoadedLibrary) -> (serde_json::Map<String, Value>, Verdict, String) {
    let mut m = serde_json::Map::new();
    let name = lib.name();
    m.insert(
        "nvshmem".into(),
        json!({
            "name": name,
            "version": lib.version().map(|(a, b, c)| format!("{a}.{b}.{c}")),
            "init_status": lib.init_status(),
        }),
    );
    let sym = elf::lookup(&lib.path, &["nvshmemi_device_state", "nvshmemi_state"]);
    // A symbol table that cannot be read is not a stripped file: symtab_present is null then,
    // and symtab_error says why.
    let (has_symtab, st) = match &sym {
        Ok(l) => (Some(l.has_symtab), l.symbols.clone()),
        Err(_) => (None, vec![None, None]),
    };
    let sym_json = |name: &str, s: Option<elf::FileSymbol>| match s {
        Some(s) => json!({"name": name, "st_value": s.value, "st_size": s.size, "binding": if s.local { "local" } else { "global" },
                          "address": format!("0x{:x}", lib.load_bias.wrapping_add(s.value as usize))}),
        None => json!({"name": name, "found": false}),
    };
    m.insert("symtab_present".into(), json!(has_symtab));
    if let Err(e) = &sym {
        m.insert("symtab_error".into(), json!(e));
    }
    m.insert("symbols".into(), json!([sym_json("nvshmemi_device_state", st[0]), sym_json("nvshmemi_state", st[1])]));

    let mut steps = Vec::new();
    let mut statuses = Vec::new();
    for step in Step::ALL {
        let (mut j, s) = step_json(lib, step);
        if step == Step::Dlsym {
            if let Some(r) = j["reason"].as_str().map(|r| dlsym_reason(r, &sym)) {
                j["reason"] = json!(r);
            }
        }
        steps.push(j);
        statuses.push(s);
    }
    m.insert("steps".into(), Value::Array(steps));

    // The layout check: the symbol's size covers what is read, and the version field is either
    // still 0 (before nvshmem_init) or 0x10000 + st_size.
    let layout_json = match st[0] {
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
            json!({"check": check, "detail": detail, "version_field": version, "expected_version": expected, "state_size": s.size,
                   "offsets": {"version": state_layout::OFF_VERSION, "mype": state_layout::OFF_MYPE, "npes": state_layout::OFF_NPES,
                               "heap_base": state_layout::OFF_HEAP_BASE, "heap_size": state_layout::OFF_HEAP_SIZE,
                               "peer_heap_base_p2p": state_layout::OFF_PEER_HEAP_BASE_P2P, "peer_heap_base_remote": state_layout::OFF_PEER_HEAP_BASE_REMOTE}})
        }
        None => {
            json!({"check": "not-run", "detail": "nvshmemi_device_state is not in the file's symbol tables; the public route reads the same layout at run time"})
        }
    };
    let layout_failed = layout_json["check"] == "fail";
    m.insert("layout".into(), layout_json);

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
    (m, verdict, reason)
}

fn finish(mut m: serde_json::Map<String, Value>, verdict: Verdict, reason: String) -> Report {
    m.insert("verdict".into(), json!(verdict.name()));
    m.insert("exit_code".into(), json!(verdict as i32));
    m.insert("reason".into(), json!(reason));
    Report { json: Value::Object(m), verdict }
}

/// `path` and `found_by` are None when no library was found (JSON null).
fn header(path: Option<&str>, found_by: Option<&str>, searched: &[String]) -> serde_json::Map<String, Value> {
    let mut m = serde_json::Map::new();
    m.insert("tool".into(), json!("upcxx-nvshmem-doctor"));
    m.insert("tool_version".into(), json!(env!("CARGO_PKG_VERSION")));
    m.insert("library".into(), json!({"path": path, "found_by": found_by, "searched": searched}));
    m
}

/// The doctor when no PATH was given and the search found no NVSHMEM host library: unsupported
/// (the environment is the input), with what was searched.
pub fn not_found(searched: &[String]) -> Report {
    let m = header(None, None, searched);
    let reason = format!(
        "no NVSHMEM host library found; searched: {}; give PATH, or set NVSHMEM_HOME or LD_LIBRARY_PATH",
        if searched.is_empty() { "nothing".to_string() } else { searched.join(", ") }
    );
    finish(m, Verdict::Unsupported, reason)
}

/// What `host_library::open_file`'s error means. It returns a plain string for both a failed
/// `dlopen` (the `dlerror()` text) and a library that loaded but is not NVSHMEM: tell them apart
/// so that the doctor never says "dlopen failed" about a library that loaded.
fn open_error(path: &Path, e: &str) -> String {
    let p = path.display();
    if let Some(why) = e.strip_prefix(host_library::NOT_LOADED) {
        // Refused before dlopen (the file changed since `check_file`).
        why.to_string()
    } else if e.starts_with("not an NVSHMEM host library") {
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
/// with the file ([`elf::check_image`]). Err is the report for a file that must not be loaded:
/// unsupported, saying whether it is empty, not ELF, truncated, corrupt or not loadable here.
pub fn check_file(path: &Path, found_by: &str, searched: &[String]) -> Result<elf::CheckedElf, Report> {
    let checked = elf::open_regular(path).and_then(|f| elf::check_file(&f));
    checked.map_err(|p| {
        let m = header(Some(&path.display().to_string()), Some(found_by), searched);
        finish(m, Verdict::Unsupported, p.describe(path))
    })
}

/// The doctor on a file that passed [`check_file`]: loads it (NVSHMEM is not initialised) and
/// analyses it. The doctor runs this in a child process of its own ([`load_failed`] is the
/// report when that child dies).
pub fn load_and_analyze(path: &Path, found_by: &str, searched: &[String]) -> Report {
    let mut m = header(Some(&path.display().to_string()), Some(found_by), searched);
    let unsupported = |m, why: String| finish(m, Verdict::Unsupported, why);
    let lib = match host_library::open_file(path) {
        Ok(l) => l,
        Err(e) => return unsupported(m, open_error(path, &e)),
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
        return unsupported(m, why);
    }
    let (facts, verdict, reason) = analyze(&lib);
    m.extend(facts);
    finish(m, verdict, reason)
}

/// The doctor on a file, in this process: [`check_file`], then [`load_and_analyze`].
pub fn for_file(path: &Path, found_by: &str, searched: &[String]) -> Report {
    match check_file(path, found_by, searched) {
        Ok(_) => load_and_analyze(path, found_by, searched),
        Err(r) => r,
    }
}

/// The report when loading a file that passed [`check_file`] killed or stalled the process that
/// loaded it (`why`): unsupported.
pub fn load_failed(path: &Path, found_by: &str, searched: &[String], why: &str) -> Report {
    let m = header(Some(&path.display().to_string()), Some(found_by), searched);
    finish(m, Verdict::Unsupported, format!("{}: {why}", path.display()))
}

/// A report from its JSON (as [`Report::to_json`] wrote it, in the doctor's child process).
pub fn from_json(text: &str) -> Option<Report> {
    let json: Value = serde_json::from_str(text).ok()?;
    let verdict = match json["exit_code"].as_i64()? {
        0 => Verdict::Supported,
        1 => Verdict::Degraded,
        2 => Verdict::Unsupported,
        _ => return None,
    };
    Some(Report { json, verdict })
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
        let mut m = header(None, Some("loaded in this process"), &[]);
        let why = "no NVSHMEM host library is loaded in this process";
        if let Some(h) = manual {
            m.insert("runtime".into(), heap_json(&h, "not-run"));
            return finish(m, Verdict::Supported, manual_reason(&h, &format!("{why}, so discovery is not used")));
        }
        return finish(m, Verdict::Unsupported, why.into());
    };
    let mut m = header(Some(&lib.path.display().to_string()), Some("loaded in this process"), &[]);
    let (facts, verdict, reason) = analyze(lib);
    m.extend(facts);
    if let Some(h) = manual {
        m.insert("runtime".into(), heap_json(&h, "not-run"));
        m.insert("library_verdict".into(), json!({"verdict": verdict.name(), "reason": reason}));
        let why = format!("discovery is not used; the loaded library alone would be {}: {reason}", verdict.name());
        return finish(m, Verdict::Supported, manual_reason(&h, &why));
    }
    let runtime = match discovery::query_live() {
        Ok((h, _)) => heap_json(&h, "pass"),
        Err(e) => json!({"validation": e.status.name(), "error": e.message}),
    };
    m.insert("runtime".into(), runtime);
    m.insert(
        "resolution_trace".into(),
        Value::Array(
            discovery::last_steps().iter().map(|o| json!({"step": o.step.name(), "status": o.status.name(), "detail": o.detail})).collect(),
        ),
    );
    finish(m, verdict, reason)
}

/// The runtime facts of a heap: `validation` is "pass" for a discovered one, "not-run" for one
/// attached by hand (nothing validates it against NVSHMEM).
fn heap_json(h: &Heap, validation: &str) -> Value {
    json!({
        "validation": validation,
        // A manual heap is reported as the C enum spells it; discovered ones by their step.
        "source": if h.source == Source::Manual { "MANUAL" } else { h.source.name() },
        "base": format!("0x{:x}", h.base),
        "reserved_size": h.size,
        "mapped_size": h.mapped_size,
        "my_pe": h.my_pe,
        "n_pes": h.n_pes,
        "device": h.device,
    })
}

fn manual_reason(h: &Heap, why: &str) -> String {
    format!(
        "the heap was attached by hand (upcxx_extra_nvshmem_attach, source MANUAL): base 0x{:x}, size {}, PE {} of {}; translation uses it; {why}",
        h.base, h.size, h.my_pe, h.n_pes
    )
}

impl Report {
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(&self.json).unwrap_or_default()
    }

    /// The human-readable form.
    pub fn to_text(&self) -> String {
        let j = &self.json;
        let s = |v: &Value| match v {
            Value::String(s) => s.clone(),
            Value::Null => "-".into(),
            other => other.to_string(),
        };
        let mut out = String::new();
        out += &format!("upcxx-nvshmem-doctor {}\n", s(&j["tool_version"]));
        let lib = &j["library"];
        match (&lib["path"], &lib["found_by"]) {
            (Value::String(p), Value::String(by)) if !p.is_empty() => out += &format!("library:   {p} (found by {by})\n"),
            (_, Value::String(by)) => out += &format!("library:   none {by}\n"),
            _ => out += "library:   none found\n",
        }
        if let Some(n) = j.get("nvshmem") {
            out += &format!("nvshmem:   {} (release {})\n", s(&n["name"]), s(&n["version"]));
        }
        if let Some(b) = j.get("symtab_present") {
            let what = match b {
                Value::Bool(true) => "present".to_string(),
                Value::Bool(false) => "absent (stripped)".to_string(),
                _ => format!("unreadable ({})", s(&j["symtab_error"])),
            };
            out += &format!(".symtab:   {what}\n");
        }
        if let Some(Value::Array(syms)) = j.get("symbols") {
            for y in syms {
                if y.get("found") == Some(&Value::Bool(false)) {
                    out += &format!("symbol:    {}: not found\n", s(&y["name"]));
                } else {
                    out += &format!(
                        "symbol:    {}: st_value 0x{:x}, st_size {}, {} (address {})\n",
                        s(&y["name"]),
                        y["st_value"].as_u64().unwrap_or(0),
                        s(&y["st_size"]),
                        s(&y["binding"]),
                        s(&y["address"])
                    );
                }
            }
        }
        if let Some(Value::Array(steps)) = j.get("steps") {
            for st in steps {
                out += &format!(
                    "step {:9} {} ({})\n",
                    s(&st["step"]),
                    if st["available"] == true { "available  " } else { "unavailable" },
                    s(&st["reason"])
                );
            }
        }
        if let Some(l) = j.get("layout") {
            out += &format!("layout:    {}: {}\n", s(&l["check"]), s(&l["detail"]));
        }
        if let Some(r) = j.get("runtime") {
            if r["source"] == "MANUAL" {
                out += &format!(
                    "runtime:   base {} reserved {} mapped {} PE {}/{} device {} source MANUAL (attached by hand; not validated against NVSHMEM)\n",
                    s(&r["base"]),
                    s(&r["reserved_size"]),
                    s(&r["mapped_size"]),
                    s(&r["my_pe"]),
                    s(&r["n_pes"]),
                    s(&r["device"])
                );
            } else if r["validation"] == "pass" {
                out += &format!(
                    "runtime:   base {} reserved {} mapped {} PE {}/{} device {} via {}; validation pass\n",
                    s(&r["base"]),
                    s(&r["reserved_size"]),
                    s(&r["mapped_size"]),
                    s(&r["my_pe"]),
                    s(&r["n_pes"]),
                    s(&r["device"]),
                    s(&r["source"])
                );
            } else {
                out += &format!("runtime:   {}: {}\n", s(&r["validation"]), s(&r["error"]));
            }
        }
        out += &format!("verdict:   {}: {}\n", s(&j["verdict"]), s(&j["reason"]));
        out
    }
}
