//! upcxx-nvshmem-doctor: says, before a job runs, whether the NVSHMEM host library it will load
//! works with upcxx-extra-nvshmem. Needs no GPU and does not initialise NVSHMEM.
//!
//! Usage: upcxx-nvshmem-doctor [--json] [PATH]
//! Exit status: 0 supported, 1 degraded (public route only), 2 unsupported.

use std::path::{Path, PathBuf};
use std::process::Command;
use upcxx_extra_nvshmem::report;

const USAGE: &str = "usage: upcxx-nvshmem-doctor [--json] [PATH-TO-libnvshmem_host.so]

Without PATH the library is searched the way a job finds it: $NVSHMEM_HOME/lib, $LD_LIBRARY_PATH,
the pip packages nvidia-nvshmem-cu12/-cu13 of the python3 on PATH, then the system linker paths.
Exit status: 0 supported, 1 degraded (public route only), 2 unsupported.";

const NAMES: [&str; 2] = ["libnvshmem_host.so.3", "libnvshmem_host.so"];

fn in_dir(dir: &Path) -> Option<PathBuf> {
    NAMES.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// Candidate (path, how found) in the order a job would find it, plus what was searched.
fn search() -> (Option<(PathBuf, String)>, Vec<String>) {
    let mut searched = Vec::new();
    if let Ok(home) = std::env::var("NVSHMEM_HOME") {
        for sub in ["lib", "lib64"] {
            let d = Path::new(&home).join(sub);
            searched.push(d.display().to_string());
            if let Some(p) = in_dir(&d) {
                return (Some((p, "NVSHMEM_HOME".into())), searched);
            }
        }
    }
    if let Ok(ld) = std::env::var("LD_LIBRARY_PATH") {
        for d in ld.split(':').filter(|d| !d.is_empty()) {
            searched.push(d.to_string());
            if let Some(p) = in_dir(Path::new(d)) {
                return (Some((p, "LD_LIBRARY_PATH".into())), searched);
            }
        }
    }
    let script = "import importlib.metadata as m\n\
for d in ('nvidia-nvshmem-cu12', 'nvidia-nvshmem-cu13'):\n\
    try:\n\
        for f in m.files(d) or []:\n\
            if f.name.startswith('libnvshmem_host.so'):\n\
                print(d, f.locate()); break\n\
    except Exception:\n\
        pass\n";
    searched.push("pip: nvidia-nvshmem-cu12, nvidia-nvshmem-cu13 (python3 on PATH)".into());
    if let Ok(out) = Command::new("python3").arg("-c").arg(script).output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if let Some((pkg, path)) = line.split_once(' ') {
                let p = PathBuf::from(path);
                if p.is_file() {
                    return (Some((p, format!("pip package {pkg}"))), searched);
                }
            }
        }
    }
    searched.push("ldconfig -p".into());
    if let Ok(out) = Command::new("ldconfig").arg("-p").output() {
        for line in String::from_utf8_lossy(&out.stdout).lines() {
            if line.trim_start().starts_with("libnvshmem_host.so") {
                if let Some(p) = line.split("=>").nth(1).map(|s| PathBuf::from(s.trim())) {
                    if p.is_file() {
                        return (Some((p, "system linker cache".into())), searched);
                    }
                }
            }
        }
    }
    for d in ["/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"] {
        searched.push(d.into());
        if let Some(p) = in_dir(Path::new(d)) {
            return (Some((p, "system library directory".into())), searched);
        }
    }
    (None, searched)
}

fn main() {
    let mut json = false;
    let mut path = None;
    for a in std::env::args().skip(1) {
        match a.as_str() {
            "--json" => json = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            "-V" | "--version" => {
                println!("upcxx-nvshmem-doctor {}", env!("CARGO_PKG_VERSION"));
                return;
            }
            s if s.starts_with('-') => {
                eprintln!("unknown option {s}\n{USAGE}");
                std::process::exit(2);
            }
            s => path = Some(PathBuf::from(s)),
        }
    }
    let r = match path {
        Some(p) => report::for_file(&p, "argument", &[]),
        None => match search() {
            (Some((p, how)), searched) => report::for_file(&p, &how, &searched),
            (None, searched) => {
                let mut r = report::for_file(Path::new("/nonexistent/libnvshmem_host.so.3"), "not found", &searched);
                r.json["reason"] = serde_json::json!(format!("no NVSHMEM host library found; searched: {}", searched.join(", ")));
                r.json["library"]["path"] = serde_json::Value::Null;
                r
            }
        },
    };
    // A closed pipe (`| head`, `| grep -q`) is not an error of the doctor: ignore write failures.
    let text = if json { r.to_json() + "\n" } else { r.to_text() };
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    std::process::exit(r.verdict as i32);
}
