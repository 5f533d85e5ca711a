//! No import arrow in `src/` runs upward. Each top-level module of the crate has a layer; a
//! `crate::<module>` path (a `use`, or a path in code, `crate::fail!` included) written in one
//! module may only name a module of a lower layer (or itself). `src/lib.rs` is the root and may
//! name anything; the binaries (`src/bin/`) use the rlib, above all of it. A planted upward
//! import checks that the test can fail.

mod common;

use common::rust_files;
use std::path::Path;

/// The layers, bottom first. A module not listed here fails the test (give it a layer).
const LAYERS: &[&[&str]] = &[
    // Status codes, the error type, the thread's last error; the sync facade.
    &["error", "env", "sync"],
    // The panic boundary; logging; the heap record (what table/ and nvshmem/ share); the CUDA driver.
    &["panic", "logger", "heap", "cuda"],
    // NVSHMEM in this process: its host library, its state, discovery, initialisation.
    &["nvshmem"],
    // The translation table and what is published there.
    &["table"],
    // The copy engine (its protocol, and the CUDA driver as its GPU).
    &["engine"],
    // The doctor's engine.
    &["doctor"],
    // The C ABI: marshalling only.
    &["abi"],
];

/// Root items that are not modules, and the module that defines them (`#[macro_export]` macros
/// live at the crate root).
const ROOT_ITEMS: &[(&str, &str)] = &[("fail", "error")];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|l| l.contains(&module))
}

/// `text` with `//` comments removed and string literals emptied.
fn code_only(text: &str) -> String {
    let b: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == '/' && b.get(i + 1) == Some(&'/') {
            while i < b.len() && b[i] != '\n' {
                i += 1;
            }
            continue;
        }
        if b[i] == '"' {
            i += 1;
            while i < b.len() && b[i] != '"' {
                if b[i] == '\\' {
                    i += 1;
                }
                i += 1;
            }
            out.push_str("\"\"");
            i += 1;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    out
}

/// The modules named after `crate::` in `code`, with the line of each; `use crate::{a, b::c}`
/// names `a` and `b`.
fn crate_paths(code: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (n, line) in code.lines().enumerate() {
        let mut rest = line;
        while let Some(at) = rest.find("crate::") {
            // `$crate::` inside a macro is the crate root too; `upcxx_extra_nvshmem_crate::` is not.
            let before = rest[..at].chars().last();
            rest = &rest[at + "crate::".len()..];
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            if let Some(group) = rest.strip_prefix('{') {
                let end = group.find('}').unwrap_or(group.len());
                for part in group[..end].split(',') {
                    let name: String = part.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                    if !name.is_empty() {
                        out.push((n + 1, name));
                    }
                }
                continue;
            }
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            if !name.is_empty() {
                out.push((n + 1, name));
            }
        }
    }
    out
}

/// The top-level module a source file belongs to (None: the crate root or a binary).
fn module_of(path: &str) -> Option<String> {
    let rel = path.strip_prefix("src/")?;
    if rel == "lib.rs" || rel.starts_with("bin/") {
        return None;
    }
    let first = rel.split('/').next()?;
    Some(first.trim_end_matches(".rs").to_string())
}

/// Every upward (or unlayered) arrow in `files`.
fn violations(files: &[(String, String)]) -> Vec<String> {
    let mut bad = Vec::new();
    for (path, text) in files {
        let Some(from) = module_of(path) else { continue };
        let Some(from_layer) = layer_of(&from) else {
            bad.push(format!("{path}: module `{from}` has no layer in tests/build_layers.rs"));
            continue;
        };
        for (line, name) in crate_paths(&code_only(text)) {
            let to = ROOT_ITEMS.iter().find(|(item, _)| *item == name).map_or(name.as_str(), |(_, m)| m);
            if to == from {
                continue;
            }
            match layer_of(to) {
                Some(l) if l < from_layer => {}
                Some(l) => bad.push(format!(
                    "{path}:{line}: `{from}` (layer {from_layer}) imports `crate::{name}` (layer {l}): an arrow {}",
                    if l == from_layer { "within one layer" } else { "upward" }
                )),
                None => bad.push(format!("{path}:{line}: `crate::{name}` is not a layered module")),
            }
        }
    }
    bad
}

#[test]
fn no_import_runs_upward() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    files.sort();
    let files: Vec<(String, String)> = files
        .into_iter()
        .map(|p| (p.strip_prefix(root).unwrap().to_string_lossy().into_owned(), std::fs::read_to_string(&p).unwrap()))
        .collect();
    let arrows: usize = files.iter().filter(|(p, _)| module_of(p).is_some()).map(|(_, t)| crate_paths(&code_only(t)).len()).sum();
    assert!(arrows > 20, "the scan found only {arrows} crate:: paths: is it reading the sources?");
    let bad = violations(&files);
    assert!(bad.is_empty(), "import arrows against the layer order (tests/build_layers.rs):\n{}", bad.join("\n"));
}

#[test]
fn a_planted_upward_import_fails() {
    let planted = |path: &str, text: &str| violations(&[(path.to_string(), text.to_string())]);
    assert_eq!(planted("src/table/x.rs", "use crate::abi::Status;\n").len(), 1);
    assert_eq!(planted("src/nvshmem/x.rs", "use crate::{error::Result, table::TABLE};\n").len(), 1);
    assert_eq!(planted("src/error.rs", "fn f() { crate::panic::guarded(\"x\", || ()) }\n").len(), 1);
    assert_eq!(planted("src/heap.rs", "let x = crate::cuda::driver_available();\n").len(), 1, "within one layer");
    assert_eq!(planted("src/newmod.rs", "\n").len(), 1, "a module without a layer");
    // Downward arrows, comments, strings, the root and the binaries are fine.
    assert!(planted("src/abi/translation.rs", "use crate::table::TABLE;\ncrate::fail!(BadPe, \"x\");\n").is_empty());
    assert!(planted("src/table/x.rs", "// use crate::abi::Status;\nlet s = \"crate::doctor\";\n").is_empty());
    assert!(planted("src/lib.rs", "use crate::abi;\n").is_empty());
    assert!(planted("src/bin/d.rs", "use crate::abi;\n").is_empty());
}
