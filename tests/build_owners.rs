//! One owner per external system: no NVSHMEM symbol is resolved (`dlopen`, `dlsym`, `dladdr`,
//! `dl_iterate_phdr`, a function pointer made from an address) outside `src/nvshmem/host_library.rs`,
//! and no CUDA call (`cudarc`, `sys::cu*`) is made outside `src/cuda.rs`; nothing forks (a
//! child process is `std::process::Command`). The scan reads every
//! Rust source under `src/` with comments and string literals removed; a planted violation
//! checks that the scan can fail.

mod common;

use common::rust_files;
use std::path::Path;

/// (owner file, what only it may write). Matched against code with comments and the contents of
/// string literals removed (`"C"` of `extern "C"` is kept).
const OWNERS: &[(&str, &[&str])] = &[
    (
        "src/nvshmem/host_library.rs",
        &[
            "libc::dlopen",
            "libc::dlsym",
            "libc::dlclose",
            "libc::dladdr",
            "libc::dl_iterate_phdr",
            "libc::dlerror",
            "libc::RTLD_",
            ".dlsym(",
            "transmute::<*mut c_void",
            "transmute::<*const c_void",
            "transmute::<usize",
            "unsafe extern \"C\" fn(",
        ],
    ),
    ("src/cuda.rs", &["cudarc", "sys::cu", "CUresult", "CUdeviceptr", "CUmodule", "CUcontext"]),
];

/// What no file writes: (pattern, why).
const NOWHERE: &[(&str, &str)] = &[
    ("libc::fork", "a child process is `std::process::Command` (the doctor runs current_exe() again)"),
    ("libc::vfork", "a child process is `std::process::Command`"),
];

/// `text` with `//` comments removed and every string or char literal emptied (except `"C"`).
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        let c = b[i];
        if c == '/' && b.get(i + 1) == Some(&'/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if c == 'r' && b.get(i + 1) == Some(&'#') && b.get(i + 2) == Some(&'"') {
            // r#"..."#
            i += 3;
            while i + 1 < b.len() && !(b[i] == '"' && b[i + 1] == '#') {
                i += 1;
            }
            out.push_str("r#\"\"#");
            i += 2;
            continue;
        }
        if c == '"' {
            let start = i;
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            let lit: String = b[start..(i + 1).min(b.len())].iter().collect();
            out.push_str(if lit == "\"C\"" { "\"C\"" } else { "\"\"" });
            i += 1;
            continue;
        }
        if c == '\'' && b.get(i + 2) == Some(&'\'') {
            out.push_str("' '");
            i += 3;
            continue;
        }
        if c == '\'' && b.get(i + 1) == Some(&'\\') {
            // '\n', '\0', '\'', '\u{..}'
            let mut j = i + 2;
            while j < b.len() && b[j] != '\'' {
                j += 1;
            }
            out.push_str("' '");
            i = j + 1;
            continue;
        }
        out.push(c);
        i += 1;
    }
    out
}

/// Every `(file, line, pattern)` where a file other than its owner writes an owner's pattern.
fn violations(files: &[(String, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (path, text) in files {
        let code = code_only(text);
        for (n, line) in code.lines().enumerate() {
            for (p, why) in NOWHERE {
                if line.contains(p) {
                    bad.push(format!("{path}:{}: `{p}`: {why}: {}", n + 1, line.trim()));
                }
            }
        }
        for (owner, patterns) in OWNERS {
            if path == owner {
                continue;
            }
            for (n, line) in code.lines().enumerate() {
                for p in *patterns {
                    if line.contains(p) {
                        bad.push(format!("{path}:{}: `{p}` belongs in {owner} only: {}", n + 1, line.trim()));
                    }
                }
            }
        }
    }
    bad
}

fn sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    files
        .into_iter()
        .map(|p| (p.strip_prefix(root).unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect()
}

#[test]
fn each_external_system_has_one_owner() {
    let files = sources();
    assert!(files.iter().any(|(p, _)| p == "src/nvshmem/host_library.rs"), "the NVSHMEM owner moved: update OWNERS");
    assert!(files.iter().any(|(p, _)| p == "src/cuda.rs"), "the CUDA owner moved: update OWNERS");
    let bad = violations(&files);
    assert!(bad.is_empty(), "external systems reached outside their one module:\n{}", bad.join("\n"));
}

#[test]
fn the_scan_catches_a_planted_violation() {
    let planted = [
        ("src/table/x.rs".to_string(), "let f = unsafe { libc::dlsym(h, c\"nvshmem_ptr\".as_ptr()) };\n".to_string()),
        ("src/nvshmem/y.rs".to_string(), "let p: unsafe extern \"C\" fn() -> c_int = todo!();\n".to_string()),
        ("src/doctor/z.rs".to_string(), "use cudarc::driver::sys;\n".to_string()),
        ("src/abi/w.rs".to_string(), "let x = lib.dlsym(name);\n".to_string()),
        ("src/bin/d.rs".to_string(), "let pid = unsafe { libc::fork() };\n".to_string()),
    ];
    let bad = violations(&planted);
    assert_eq!(bad.len(), 5, "{bad:#?}");
    // Comments and messages may name what they like.
    let fine = [(
        "src/table/x.rs".to_string(),
        "// dlsym of libc::dlsym\nlet m = \"dlsym(nvshmemi_device_state) via libc::dlopen and cudarc\";\n".to_string(),
    )];
    assert_eq!(violations(&fine), Vec::<String>::new());
}

/// The CUDA calls of `text` (C++): `cudaXxx(` and `cuXxx(` outside comments and strings.
fn cuda_calls(text: &str) -> Vec<String> {
    let code = code_only(text);
    let mut calls = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let b = line.as_bytes();
        for i in 0..b.len() {
            let starts = (i == 0 || !(b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_')) && line[i..].starts_with("cu");
            if !starts {
                continue;
            }
            let rest = line[i + 2..].strip_prefix("da").unwrap_or(&line[i + 2..]);
            let name_len = rest.bytes().take_while(|c| c.is_ascii_alphanumeric() || *c == b'_').count();
            if rest.as_bytes().first().is_some_and(|c| c.is_ascii_uppercase()) && rest[name_len..].trim_start().starts_with('(') {
                calls.push(format!("{}: {}", n + 1, line.trim()));
            }
        }
    }
    calls
}

/// The C++ layer routes copies and delivers UPC++ completions: it calls no CUDA runtime or driver
/// function (CUDA types in signatures are fine); the library's C functions make those calls.
#[test]
fn the_cxx_layer_makes_no_cuda_call() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("include/upcxx_extra");
    let mut bad = Vec::new();
    let mut seen = 0;
    let mut dirs = vec![root];
    while let Some(d) = dirs.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                dirs.push(p);
            } else if p.extension().is_some_and(|x| x == "hpp") {
                seen += 1;
                for c in cuda_calls(&std::fs::read_to_string(&p).unwrap()) {
                    bad.push(format!("{}:{c}", p.display()));
                }
            }
        }
    }
    assert!(seen >= 10, "the C++ layer's headers moved: {seen} found");
    assert!(bad.is_empty(), "CUDA calls in the C++ layer:\n{}", bad.join("\n"));
    // The scan sees calls, and only calls.
    let planted = "cudaError_t e = cudaStreamQuery(s);\n  x = cuCtxGetCurrent (&c);\n// cudaFree(0)\ncudaStream_t s;\n";
    assert_eq!(cuda_calls(planted).len(), 2, "{:?}", cuda_calls(planted));
}
