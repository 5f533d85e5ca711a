//! Fails if any exported `extern "C"` function of the library does not run its body inside the
//! panic boundary (`boundary(`, `boundary_value(` or `boundary_hot(` as the first expression of
//! the body), if a private `extern "C"` function (the translation calls' slow paths, which
//! `boundary_hot` tail-calls) is not a full `boundary(`, or if an exported function lives
//! outside src/ffi.rs (where this test looks).

use std::path::Path;

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// `(name, first statement of the body)` for every `pub extern "C" fn` in `src`.
fn exported_fns(src: &str) -> Vec<(String, String)> {
    extern_fns(src).into_iter().filter(|f| f.2).map(|(n, b, _)| (n, b)).collect()
}

/// `(name, first statement of the body, is pub)` for every `extern "C" fn` in `src`.
fn extern_fns(src: &str) -> Vec<(String, String, bool)> {
    let mut out = Vec::new();
    let mut rest = src;
    while let Some(i) = rest.find("extern \"C\" fn ") {
        let line_start = rest[..i].rfind('\n').map_or(0, |j| j + 1);
        let public = rest[line_start..i].trim_start().starts_with("pub ");
        let after = &rest[i + "extern \"C\" fn ".len()..];
        let name: String = after.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
        let body_at = after.find('{').expect("fn body");
        let body = after[body_at + 1..].trim_start();
        out.push((name, body.chars().take(40).collect(), public));
        rest = &after[body_at..];
    }
    out
}

#[test]
fn every_exported_function_has_the_panic_boundary() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let ffi = std::fs::read_to_string(root.join("src/ffi.rs")).unwrap();
    let fns = exported_fns(&ffi);
    assert!(fns.len() >= 15, "expected the whole C ABI in src/ffi.rs, found {fns:?}");
    for (name, first) in &fns {
        assert!(name.starts_with("upcxx_extra_nvshmem_"), "{name} is exported without the prefix");
        assert!(
            first.starts_with("boundary(") || first.starts_with("boundary_value(") || first.starts_with("boundary_hot("),
            "{name} does not start its body with the panic boundary: `{first}`"
        );
    }
    // The slow paths that boundary_hot hands failures to are full boundaries themselves.
    let private: Vec<_> = extern_fns(&ffi).into_iter().filter(|f| !f.2).collect();
    for (name, first, _) in &private {
        assert!(first.starts_with("boundary("), "private extern \"C\" fn {name} is not a full boundary: `{first}`");
    }
    let hot = fns.iter().filter(|f| f.1.starts_with("boundary_hot(")).count();
    assert!(private.len() >= hot, "each boundary_hot function needs its slow path ({hot} hot, {} slow)", private.len());
    // Every #[no_mangle] is in ffi.rs (so the check above sees every export)...
    let mut files = Vec::new();
    rust_files(&root.join("src"), &mut files);
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        if f.ends_with("src/ffi.rs") {
            assert_eq!(text.matches("#[unsafe(no_mangle)]").count(), fns.len(), "each no_mangle fn is an extern \"C\" fn");
        } else if !f.to_string_lossy().contains("/bin/") {
            assert!(!text.contains("no_mangle"), "{} exports a symbol outside src/ffi.rs", f.display());
        }
    }
    // ...and the header declares exactly these functions.
    let header = std::fs::read_to_string(root.join("include/upcxx_extra_nvshmem.h")).unwrap();
    for (name, _) in &fns {
        assert!(header.contains(&format!("{name}(")), "{name} missing from the header");
    }
}

#[test]
fn the_checker_catches_a_missing_boundary() {
    let src = "pub extern \"C\" fn upcxx_extra_nvshmem_bad(x: i32) -> i32 { x + 1 }\n\
               pub extern \"C\" fn upcxx_extra_nvshmem_good() -> Status { boundary(\"g\", || Ok(())) }";
    let fns = exported_fns(src);
    assert_eq!(fns.len(), 2);
    assert!(!fns[0].1.starts_with("boundary("));
    assert!(fns[1].1.starts_with("boundary("));
    let slow = "extern \"C\" fn slow() -> Status { Status::Ok }\npub extern \"C\" fn upcxx_extra_nvshmem_x() -> Status { boundary_hot(\"x\", || true, || slow()) }";
    let all = extern_fns(slow);
    assert_eq!(all.len(), 2);
    assert!(!all[0].2 && !all[0].1.starts_with("boundary("), "a private slow path without a boundary is seen");
    assert_eq!(exported_fns(slow).len(), 1);
}
