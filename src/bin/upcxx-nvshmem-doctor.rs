//! upcxx-nvshmem-doctor: says, before a job runs, whether the NVSHMEM host library it will load
//! works with upcxx-extra-nvshmem. Needs no GPU and does not initialise NVSHMEM.
//!
//! Usage: upcxx-nvshmem-doctor [--json] [PATH]
//!
//! PATH is the host library file or an NVSHMEM root directory (its lib/ or lib64/ holds
//! libnvshmem_host.so.3 or libnvshmem_host.so). Without PATH the library is searched the way a
//! job finds it, then in the cache that `scripts/install-deps.sh` (the quickstart) fills.
//!
//! Exit status (sysexits for the errors):
//! - 0 supported;
//! - 1 degraded (public route only);
//! - 2 unsupported, also when no PATH is given and the search finds no library (the environment
//!   is the input then), and for a file that is empty, not ELF, truncated, corrupt, or whose
//!   loading crashes (a signal in the child process that loads it) or takes over 20 s
//!   (`UXN_DOCTOR_LOAD_TIMEOUT_S`);
//! - 64 (EX_USAGE) usage error: an unknown option, more than one PATH; the usage goes to stderr;
//! - 66 (EX_NOINPUT) PATH does not exist or cannot be read (a symlink loop), is not a regular
//!   file (a FIFO, socket or device: never opened for reading, never waited on), or is a
//!   directory without the library.
//!
//! A file is never given to `dlopen` before its ELF headers have been checked against it
//! (`elf::check_image`), and it is loaded in a forked child: the doctor itself never dies of a
//! signal or hangs on any file.
//!
//! With 64 and 66 nothing is written to stdout (not even with `--json`); the message is on stderr.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};
use upcxx_extra_nvshmem::internals::{elf, report};

const USAGE: &str = "usage: upcxx-nvshmem-doctor [--json] [PATH]

PATH is libnvshmem_host.so.3 (or any NVSHMEM host library file), or an NVSHMEM root directory:
then the first of lib/libnvshmem_host.so.3, lib/libnvshmem_host.so, lib64/libnvshmem_host.so.3,
lib64/libnvshmem_host.so under it is used.
Without PATH the library is searched the way a job finds it: $NVSHMEM_HOME/lib and lib64,
$LD_LIBRARY_PATH, the pip packages nvidia-nvshmem-cu12/-cu13 of the python3 on PATH, the system
linker paths; then in the install cache of upcxx-extra-nvshmem's scripts ($UXN_CACHE, else
~/.cache/upcxx-extra-nvshmem: the newest release there). When none is found the report lists
what was searched (exit 2).

  --json          print the report as JSON
  -h, --help      print this help
  -V, --version   print the version

Exit status:
  0   supported
  1   degraded (public route only)
  2   unsupported (also: no PATH and no NVSHMEM host library found; a file that is empty,
      not ELF, truncated or corrupt (never loaded), or whose loading crashes or stalls)
  64  usage error (unknown option, more than one PATH)
  66  PATH does not exist or cannot be read, is not a regular file (FIFO, socket, device),
      or is a directory without an NVSHMEM host library

A file is checked before it is loaded, then loaded in a child process, killed after 20 s
(UXN_DOCTOR_LOAD_TIMEOUT_S=<seconds>).";

/// sysexits.h EX_USAGE: the command was used incorrectly.
const EX_USAGE: i32 = 64;
/// sysexits.h EX_NOINPUT: an input file did not exist or was not readable.
const EX_NOINPUT: i32 = 66;

const NAMES: [&str; 2] = ["libnvshmem_host.so.3", "libnvshmem_host.so"];

fn in_dir(dir: &Path) -> Option<PathBuf> {
    NAMES.iter().map(|n| dir.join(n)).find(|p| p.is_file())
}

/// Candidate (path, how found) in the order a job would find it, plus what was searched.
fn search() -> (Option<(PathBuf, String)>, Vec<String>) {
    let mut searched = Vec::new();
    if let Some(home) = std::env::var_os("NVSHMEM_HOME").filter(|h| !h.is_empty()) {
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
    // Python's indentation is its syntax: each line is written out whole (a `\` continuation
    // in a Rust string would eat the leading spaces).
    let script = concat!(
        "import importlib.metadata as m\n",
        "for d in ('nvidia-nvshmem-cu12', 'nvidia-nvshmem-cu13'):\n",
        "    try:\n",
        "        for f in m.files(d) or []:\n",
        "            if f.name.startswith('libnvshmem_host.so'):\n",
        "                print(d, f.locate()); break\n",
        "    except Exception:\n",
        "        pass\n",
    );
    searched.push("pip: nvidia-nvshmem-cu12, nvidia-nvshmem-cu13 (python3 on PATH)".into());
    if let Some(out) = output_within(Command::new("python3").arg("-c").arg(script), TOOL_TIMEOUT) {
        for line in String::from_utf8_lossy(&out).lines() {
            if let Some((pkg, path)) = line.split_once(' ') {
                let p = PathBuf::from(path);
                if p.is_file() {
                    return (Some((p, format!("pip package {pkg}"))), searched);
                }
            }
        }
    }
    searched.push("ldconfig -p".into());
    if let Some(out) = output_within(Command::new("ldconfig").arg("-p"), TOOL_TIMEOUT) {
        for line in String::from_utf8_lossy(&out).lines() {
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
    // Last, where the quickstart put NVSHMEM: a job never looks there by itself, so this comes
    // after everything a job would load.
    if let Some(cache) = install_cache() {
        searched.push(format!("{} (install cache: nvshmem/<release>, nvshmem-cu13/<release>)", cache.display()));
        if let Some(p) = cached_releases(&cache).into_iter().find_map(|lib| in_dir(&lib)) {
            let how = "install cache of scripts/install-deps.sh; a job loads it only through NVSHMEM_HOME or LD_LIBRARY_PATH";
            return (Some((p, how.into())), searched);
        }
    }
    (None, searched)
}

/// How long the search waits for `python3` and `ldconfig`.
const TOOL_TIMEOUT: Duration = Duration::from_secs(10);

/// A tool's stdout, or None when it cannot be run or has not finished within `limit` (then it is
/// killed): a stuck `python3` on PATH does not hang the doctor.
fn output_within(cmd: &mut Command, limit: Duration) -> Option<Vec<u8>> {
    use std::io::Read;
    use std::os::fd::AsRawFd;
    let mut child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().ok()?;
    let mut stdout = child.stdout.take()?;
    // SAFETY: the pipe's own descriptor: non-blocking reads, so that this thread can watch the
    // clock (no helper thread: the doctor forks later).
    #[allow(unsafe_code)]
    unsafe {
        libc::fcntl(stdout.as_raw_fd(), libc::F_SETFL, libc::O_NONBLOCK)
    };
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let mut exited = false;
    loop {
        match stdout.read(&mut buf) {
            Ok(0) => break, // EOF
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::Interrupted => {
                if exited {
                    break; // exited, and a process it started still holds the pipe: not waited for
                }
            }
            Err(_) => break,
        }
        if !exited && matches!(child.try_wait(), Ok(Some(_))) {
            exited = true;
            continue; // drain what it wrote
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return None;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let _ = child.wait();
    Some(out)
}

/// The cache `scripts/install-deps.sh` fills: `$UXN_CACHE`, else `~/.cache/upcxx-extra-nvshmem`.
fn install_cache() -> Option<PathBuf> {
    let nonempty = |k| std::env::var_os(k).filter(|v| !v.is_empty());
    nonempty("UXN_CACHE").map(PathBuf::from).or_else(|| nonempty("HOME").map(|h| Path::new(&h).join(".cache/upcxx-extra-nvshmem")))
}

/// The `lib` directories of the NVSHMEM wheels in the install cache (`nvshmem/<release>` holds the
/// cu12 wheels, `nvshmem-cu13/<release>` the cu13 ones), the newest release first; for the same
/// release, the CUDA major version of `UXN_NVSHMEM_CUDA` (default 12) first. Directories whose
/// name is not a release number (an install in progress, `3.4.5.partial`) are skipped.
fn cached_releases(cache: &Path) -> Vec<PathBuf> {
    let preferred = std::env::var("UXN_NVSHMEM_CUDA").unwrap_or_else(|_| "12".into());
    let mut found: Vec<(Vec<u64>, bool, PathBuf)> = Vec::new();
    for (sub, cuda) in [("nvshmem", "12"), ("nvshmem-cu13", "13")] {
        let Ok(entries) = std::fs::read_dir(cache.join(sub)) else { continue };
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let Ok(release) = name.split('.').map(str::parse::<u64>).collect::<Result<Vec<u64>, _>>() else { continue };
            found.push((release, cuda == preferred, e.path().join("nvidia/nvshmem/lib")));
        }
    }
    found.sort_by(|a, b| (&b.0, b.1).cmp(&(&a.0, a.1)));
    found.into_iter().map(|(_, _, lib)| lib).collect()
}

/// The library file under an NVSHMEM root directory, in the order tried.
const IN_ROOT: [&str; 4] = ["lib/libnvshmem_host.so.3", "lib/libnvshmem_host.so", "lib64/libnvshmem_host.so.3", "lib64/libnvshmem_host.so"];

fn usage_error(msg: &str) -> ! {
    eprintln!("upcxx-nvshmem-doctor: {msg}\n\n{USAGE}");
    std::process::exit(EX_USAGE);
}

fn no_input(msg: &str) -> ! {
    eprintln!("upcxx-nvshmem-doctor: {msg}");
    std::process::exit(EX_NOINPUT);
}

/// The library file PATH names (a file, or the library under a root directory) and how it was
/// found; exits 66 when there is none or it cannot be read.
fn from_argument(arg: &Path) -> (PathBuf, String) {
    let meta = std::fs::metadata(arg).unwrap_or_else(|e| no_input(&format!("cannot read {}: {e}", arg.display())));
    let (file, how) = if meta.is_dir() {
        match IN_ROOT.iter().map(|n| arg.join(n)).find(|p| p.is_file()) {
            Some(p) => (p, format!("argument (NVSHMEM root {})", arg.display())),
            None => no_input(&format!(
                "{} is a directory without an NVSHMEM host library; looked for {} under it",
                arg.display(),
                IN_ROOT.join(", ")
            )),
        }
    } else {
        (arg.to_path_buf(), "argument".to_string())
    };
    // A regular file only: a FIFO, socket or device is refused unread (opened O_NONBLOCK, then
    // fstat), never waited on.
    match elf::open_regular(&file) {
        Ok(_) => {}
        Err(p @ elf::FileProblem::NotRegular(_)) => no_input(&p.describe(&file)),
        Err(e) => no_input(&e.describe(&file)),
    }
    (file, how)
}

/// How long loading and analysing a library may take in the child process.
/// `UXN_DOCTOR_LOAD_TIMEOUT_S` (1 to 3600 seconds) overrides it.
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);

fn load_timeout() -> Duration {
    let from_env = std::env::var("UXN_DOCTOR_LOAD_TIMEOUT_S").ok().and_then(|v| v.trim().parse::<u64>().ok());
    from_env.map_or(LOAD_TIMEOUT, |s| Duration::from_secs(s.clamp(1, 3600)))
}

/// The report on a file: checked here (never loaded when the check fails), then loaded and
/// analysed in a child process, so that whatever the checks cannot see (the library's own
/// constructors, relocations into its own code) can kill or stall only that child; its death or
/// a child still loading after [`LOAD_TIMEOUT`] is reported as unsupported.
fn inspect(file: &Path, how: &str, searched: &[String]) -> report::Report {
    if let Err(r) = report::check_file(file, how, searched) {
        return r;
    }
    match in_child(|| report::load_and_analyze(file, how, searched).to_json()) {
        Ok(json) => report::from_json(&json)
            .unwrap_or_else(|| report::load_failed(file, how, searched, "the process that loaded it wrote no report")),
        Err(why) => report::load_failed(file, how, searched, &why),
    }
}

/// Runs `work` in a forked child and returns what it wrote, or why it did not finish.
#[allow(unsafe_code)]
fn in_child(work: impl FnOnce() -> String) -> Result<String, String> {
    use std::io::{Read, Write};
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: a two-int array for pipe2.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Ok(work()); // no pipe: in this process, as before
    }
    // SAFETY: the doctor has one thread here (the search's helpers have ended), so the child
    // may allocate and dlopen.
    let pid = unsafe { libc::fork() };
    if pid < 0 {
        // SAFETY: our own descriptors.
        unsafe {
            libc::close(fds[0]);
            libc::close(fds[1])
        };
        return Ok(work());
    }
    if pid == 0 {
        // SAFETY: the write end, owned by this child from now on.
        let mut w = unsafe { std::fs::File::from_raw_fd(fds[1]) };
        // A panic must not unwind into the parent's code (a second doctor).
        let text = std::panic::catch_unwind(std::panic::AssertUnwindSafe(work));
        let ok = text.is_ok_and(|t| w.write_all(t.as_bytes()).is_ok());
        // No exit handlers or destructors of the loaded library: _exit.
        // SAFETY: ends this child.
        unsafe { libc::_exit(if ok { 0 } else { 1 }) };
    }
    // SAFETY: the parent's descriptors: close the write end, own the read end.
    unsafe { libc::close(fds[1]) };
    let mut r = unsafe { std::fs::File::from_raw_fd(fds[0]) };
    // SAFETY: our own descriptor.
    unsafe { libc::fcntl(fds[0], libc::F_SETFL, libc::O_NONBLOCK) };
    let limit = load_timeout();
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    let mut status = 0;
    let mut exited = false;
    loop {
        let mut buf = [0u8; 65536];
        match r.read(&mut buf) {
            Ok(0) => {}
            Ok(n) => {
                out.extend_from_slice(&buf[..n]);
                continue;
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock || e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => {}
        }
        if exited {
            break; // drained after the child ended (a process it started may hold the pipe)
        }
        // SAFETY: our own child.
        let w = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if w == pid {
            exited = true;
            continue;
        }
        if Instant::now() >= deadline {
            // SAFETY: our own child, still running.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            return Err(format!("loading it had not finished after {} s (the process that loaded it was killed)", limit.as_secs()));
        }
        let mut p = libc::pollfd { fd: fds[0], events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd.
        unsafe { libc::poll(&mut p, 1, 10) };
    }
    if libc::WIFSIGNALED(status) {
        let sig = libc::WTERMSIG(status);
        // SAFETY: strsignal returns a static or thread-local string.
        let name = unsafe { std::ffi::CStr::from_ptr(libc::strsignal(sig)) }.to_string_lossy().into_owned();
        return Err(format!(
            "loading it killed the process that loaded it with signal {sig} ({name}): the library passed the ELF checks, but its loading (relocations, constructors) crashes"
        ));
    }
    if !libc::WIFEXITED(status) || libc::WEXITSTATUS(status) != 0 {
        let code = libc::WEXITSTATUS(status);
        // 127: the loader's own exit when a symbol cannot be resolved (lazy binding at a call).
        let note = if code == 127 { " (the dynamic loader's exit for a symbol it cannot resolve; its message is on stderr)" } else { "" };
        return Err(format!("the process that loaded it exited with status {code}{note}"));
    }
    String::from_utf8(out).map_err(|_| "the process that loaded it wrote no report".to_string())
}

fn main() {
    let mut json = false;
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut options_done = false;
    for a in std::env::args_os().skip(1) {
        let Some(s) = a.to_str().filter(|s| !options_done && s.starts_with('-') && *s != "-") else {
            paths.push(PathBuf::from(a));
            continue;
        };
        match s {
            "--" => options_done = true,
            "--json" => json = true,
            "-h" | "--help" => {
                println!("{USAGE}");
                return;
            }
            "-V" | "--version" => {
                println!("upcxx-nvshmem-doctor {}", env!("CARGO_PKG_VERSION"));
                return;
            }
            s => usage_error(&format!("unknown option {s}")),
        }
    }
    if paths.len() > 1 {
        let named: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        usage_error(&format!("more than one PATH given ({}); give one", named.join(" and ")));
    }
    let r = match paths.pop() {
        Some(arg) => {
            let (file, how) = from_argument(&arg);
            inspect(&file, &how, &[])
        }
        None => match search() {
            (Some((p, how)), searched) => inspect(&p, &how, &searched),
            (None, searched) => report::not_found(&searched),
        },
    };
    // A closed pipe (`| head`, `| grep -q`) is not an error of the doctor: ignore write failures.
    let text = if json { r.to_json() + "\n" } else { r.to_text() };
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    std::process::exit(r.verdict as i32);
}
