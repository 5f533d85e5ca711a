//! Under `--cfg uxn_loom_bug`: a copy of src/table/translation.rs with the bug the table's model
//! must catch put in (a replaced snapshot freed at once, while a reader may still translate from
//! it), which src/lib.rs compiles instead of the library's file. The bug lives here, in the tests,
//! not in the library's source.

use std::{env, fs, path::Path};

/// The line the bug goes after: the new snapshot is published.
const ANCHOR: &str = "        self.span.0.store(unsafe { &raw mut (*new).snapshot.mapped }, Ordering::Release);\n";
/// Frees the snapshot just replaced, which a reader may still be translating from.
const BUG: &str = "        if let Some(i) = m.published.iter().position(|&p| p == old) {
            m.published.swap_remove(i);
            m.free(old);
        }
";

fn main() {
    let source = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../src/table/translation.rs");
    println!("cargo::rerun-if-changed={}", source.display());
    println!("cargo::rustc-check-cfg=cfg(uxn_loom_bug)");
    if env::var_os("CARGO_CFG_UXN_LOOM_BUG").is_none() {
        return;
    }
    let text = fs::read_to_string(&source).expect("src/table/translation.rs");
    assert_eq!(text.matches(ANCHOR).count(), 1, "the line the bug goes after is no longer in translation.rs once: update ANCHOR");
    // Inner doc comments cannot be include!d into a module: dropped.
    let text: String = text.lines().filter(|l| !l.starts_with("//!")).map(|l| format!("{l}\n")).collect();
    let bugged = text.replacen(ANCHOR, &format!("{ANCHOR}{BUG}"), 1);
    fs::write(Path::new(&env::var("OUT_DIR").expect("OUT_DIR")).join("translation_bug.rs"), bugged).expect("writing the copy");
}
