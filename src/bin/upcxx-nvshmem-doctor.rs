//! upcxx-nvshmem-doctor: says, before a job runs, whether the NVSHMEM host library it will load
//! works with upcxx-extra-nvshmem. Needs no GPU and does not initialise NVSHMEM.
//!
//! The command line is `clap`'s ([`Cli`]; `--help` is the reference: the search order, the
//! exit statuses). A file is never given to `dlopen` before its ELF headers have been checked
//! against it (`doctor::elf_check`), and it is loaded in a child process (this program run again,
//! `std::process::Command` on `current_exe()`): the doctor itself never dies of a signal or hangs
//! on any file. With 64 and 66 nothing is written to stdout (not even with `--json`); the message
//! is on stderr. Every string from the system in the text report and in the messages is escaped
//! (`report::escape`): a path holding a newline cannot forge a line.

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, Parser};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use upcxx_extra_nvshmem::internals::elf_check::{self, FileProblem};
use upcxx_extra_nvshmem::internals::report::{self, escape};

/// The NVSHMEM release `scripts/quickstart.sh` installs (`UXN_NVSHMEM_DEFAULT` of
/// `scripts/common.sh`; tests/int_doctor.rs checks that they agree).
const QUICKSTART_NVSHMEM: &str = "3.4.5";

const AFTER_HELP: &str = "PATH is libnvshmem_host.so.3 (or any NVSHMEM host library file), or an NVSHMEM root directory:
then the first of lib/libnvshmem_host.so.3, lib/libnvshmem_host.so, lib64/libnvshmem_host.so.3,
lib64/libnvshmem_host.so under it is used.

Without PATH the doctor checks the library that a program built as the README says would load:
the first found of
  1. NVSHMEM_HOME: $NVSHMEM_HOME/lib, then lib64 (what CMake builds against, and what
     nvshmem_init loads when the loader finds none);
  2. the quickstart's NVSHMEM: the release scripts/quickstart.sh installs, in its cache
     ($UXN_CACHE, else ~/.cache/upcxx-extra-nvshmem: nvshmem/<release>, or nvshmem-cu13/<release>
     with UXN_NVSHMEM_CUDA=13);
  3. the dynamic loader's search path: $LD_LIBRARY_PATH, `ldconfig -p`, /usr/local/lib,
     /usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/lib;
  4. pip: the nvidia-nvshmem-cu12/-cu13 wheels of the python3 on PATH (CMake's fallback);
  5. last, the tests' cache: the other releases in that cache (newest first), which a program
     loads only through NVSHMEM_HOME or LD_LIBRARY_PATH.
The report says which it chose and why (`chosen:`; JSON library.found_by and library.why) and
lists what was searched; when none is found it says so (exit 2).

Exit status:
  0   supported
  1   degraded (public route only)
  2   unsupported (also: no PATH and no NVSHMEM host library found; a file that is empty,
      not ELF, truncated or corrupt (never loaded), or whose loading crashes or stalls)
  64  usage error (unknown option, more than one PATH)
  66  PATH does not exist or cannot be read (the reason is named: permission denied (EACCES),
      a symlink loop (ELOOP), ...), is not a regular file (FIFO, socket, device), or is a
      directory without an NVSHMEM host library

A file is checked before it is loaded, then loaded in a child process, killed after 20 s
(UXN_DOCTOR_LOAD_TIMEOUT_S=<seconds>).";

/// Whether the NVSHMEM host library a job will load works with upcxx-extra-nvshmem (no GPU
/// needed; NVSHMEM is not initialised).
#[derive(Parser, Debug)]
#[command(name = "upcxx-nvshmem-doctor", version, override_usage = "upcxx-nvshmem-doctor [--json] [PATH]", after_help = AFTER_HELP)]
struct Cli {
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
    /// The NVSHMEM host library file, or an NVSHMEM root directory
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// The child process: load FILE, analyse it, print the report as JSON
    #[arg(long = "load-in-child", value_name = "FILE", hide = true)]
    load_in_child: Option<PathBuf>,
}

/// sysexits.h EX_USAGE: the command was used incorrectly.
const EX_USAGE: i32 = 64;
/// sysexits.h EX_NOINPUT: an input file did not exist or was not readable.
const EX_NOINPUT: i32 = 66;

const NAMES: [&str; 2] = ["libnvshmem_host.so.3", "libnvshmem_host.so"];

/// The library file under an NVSHMEM root directory, in the order tried.
const IN_ROOT: [&str; 4] = ["lib/libnvshmem_host.so.3", "lib/libnvshmem_host.so", "lib64/libnvshmem_host.so.3", "lib64/libnvshmem_host.so"];

fn usage_error(msg: &str) -> ! {
    eprintln!("upcxx-nvshmem-doctor: {}\n\n{}", escape(msg), Cli::command().render_help());
    std::process::exit(EX_USAGE);
}

fn no_input(msg: &str) -> ! {
    eprintln!("upcxx-nvshmem-doctor: {}", escape(msg));
    std::process::exit(EX_NOINPUT);
}

/// Is `p` a file? Ok(false) when nothing is there (or it is not a file); Err names any other
/// I/O error (a directory that cannot be searched: permission denied (EACCES), ...).
fn is_file(p: &Path) -> Result<bool, String> {
    match std::fs::metadata(p) {
        Ok(m) => Ok(m.is_file()),
        Err(e) if matches!(e.kind(), std::io::ErrorKind::NotFound | std::io::ErrorKind::NotADirectory) => Ok(false),
        Err(e) => Err(format!("cannot read {}: {}", p.display(), elf_check::io_reason(&e))),
    }
}

/// Where the search looks, in order, and what each place is to a program built as the README says.
struct Search {
    searched: Vec<String>,
}

/// A library found by the search: the file, how, and why that is the one a program would load.
struct Found {
    file: PathBuf,
    found_by: String,
    why: String,
}

impl Search {
    /// The first of `NAMES` in `dir`; what was seen goes into `searched` (`label` names the place).
    fn in_dir(&mut self, dir: &Path, label: &str) -> Option<PathBuf> {
        let entry = |s: &str| if label.is_empty() { s.to_string() } else { format!("{s} ({label})") };
        for n in NAMES {
            match is_file(&dir.join(n)) {
                Ok(true) => {
                    self.searched.push(entry(&dir.display().to_string()));
                    return Some(dir.join(n));
                }
                Ok(false) => {}
                Err(e) => {
                    self.searched.push(entry(&format!("{}: {e}", dir.display())));
                    return None;
                }
            }
        }
        self.searched.push(entry(&dir.display().to_string()));
        None
    }

    fn run(&mut self) -> Option<Found> {
        let found = |file: PathBuf, found_by: &str, why: String| Some(Found { file, found_by: found_by.to_string(), why });
        // 1. NVSHMEM_HOME.
        match std::env::var_os("NVSHMEM_HOME").filter(|h| !h.is_empty()) {
            Some(home) => {
                for sub in ["lib", "lib64"] {
                    if let Some(p) = self.in_dir(&Path::new(&home).join(sub), "") {
                        return found(
                            p,
                            "NVSHMEM_HOME",
                            "NVSHMEM_HOME is set: CMake builds the program against it, and nvshmem_init loads it when the loader finds none"
                                .into(),
                        );
                    }
                }
            }
            None => self.searched.push("NVSHMEM_HOME: not set".into()),
        }
        // 2. The quickstart's NVSHMEM.
        let cache = install_cache();
        let cuda = std::env::var("UXN_NVSHMEM_CUDA").ok().filter(|c| c == "13").unwrap_or_else(|| "12".into());
        if cache.is_none() {
            self.searched.push("the quickstart's NVSHMEM: neither UXN_CACHE nor HOME is set".into());
        }
        if let Some(cache) = &cache {
            let root = quickstart_root(cache, &cuda);
            let label = format!("the quickstart's NVSHMEM {QUICKSTART_NVSHMEM}, nvidia-nvshmem-cu{cuda}");
            if let Some(p) = self.in_dir(&root.join("lib"), &label) {
                let why = format!(
                    "the NVSHMEM {QUICKSTART_NVSHMEM} (nvidia-nvshmem-cu{cuda}) that scripts/quickstart.sh installed, which the README \
                     builds the first program against (NVSHMEM_HOME={}); NVSHMEM_HOME is not set",
                    root.display()
                );
                return found(p, "quickstart", why);
            }
        }
        // 3. The dynamic loader's search path.
        let loader_why = "not set: the dynamic loader finds it on its search path";
        if let Ok(ld) = std::env::var("LD_LIBRARY_PATH") {
            for d in ld.split(':').filter(|d| !d.is_empty()) {
                if let Some(p) = self.in_dir(Path::new(d), "LD_LIBRARY_PATH") {
                    return found(p, "LD_LIBRARY_PATH", format!("NVSHMEM_HOME is {loader_why} (LD_LIBRARY_PATH, searched first)"));
                }
            }
        }
        self.searched.push("ldconfig -p".into());
        if let Some(out) = output_within(Command::new("ldconfig").arg("-p"), TOOL_TIMEOUT) {
            for line in String::from_utf8_lossy(&out).lines() {
                if line.trim_start().starts_with("libnvshmem_host.so") {
                    if let Some(p) = line.split("=>").nth(1).map(|s| PathBuf::from(s.trim())) {
                        if p.is_file() {
                            return found(p, "system linker cache", format!("NVSHMEM_HOME is {loader_why} (its cache, ldconfig)"));
                        }
                    }
                }
            }
        }
        for d in ["/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"] {
            if let Some(p) = self.in_dir(Path::new(d), "") {
                return found(p, "system library directory", format!("NVSHMEM_HOME is {loader_why} (a default directory)"));
            }
        }
        // 4. pip.
        self.searched.push("pip: nvidia-nvshmem-cu12, nvidia-nvshmem-cu13 (python3 on PATH)".into());
        if let Some((p, pkg)) = pip_wheel() {
            let why = "CMake's fallback when NVSHMEM_HOME is not set: the NVSHMEM wheel of the python3 on PATH".into();
            return found(p, &format!("pip package {pkg}"), why);
        }
        // 5. The tests' cache.
        if let Some(cache) = &cache {
            self.searched.push(format!("{} (install cache: nvshmem/<release>, nvshmem-cu13/<release>)", cache.display()));
            if let Some(p) = cached_releases(cache).into_iter().find_map(|lib| NAMES.iter().map(|n| lib.join(n)).find(|p| p.is_file())) {
                let how = "install cache of scripts/install-deps.sh; a job loads it only through NVSHMEM_HOME or LD_LIBRARY_PATH";
                let why = format!(
                    "nothing a program would load was found (not the quickstart's NVSHMEM {QUICKSTART_NVSHMEM} either): the newest \
                     release the tests installed"
                );
                return found(p, how, why);
            }
        }
        None
    }
}

/// `<cache>/nvshmem/<release>/nvidia/nvshmem` (cu12) or `<cache>/nvshmem-cu13/...`, as
/// `uxn_nvshmem_root` of `scripts/common.sh` writes it.
fn quickstart_root(cache: &Path, cuda: &str) -> PathBuf {
    let sub = if cuda == "13" { "nvshmem-cu13" } else { "nvshmem" };
    cache.join(sub).join(QUICKSTART_NVSHMEM).join("nvidia/nvshmem")
}

/// The NVSHMEM host library of a pip wheel of the python3 on PATH, and the wheel's name.
fn pip_wheel() -> Option<(PathBuf, String)> {
    // Python's indentation is its syntax: each line is written out whole.
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
    let out = output_within(Command::new("python3").arg("-c").arg(script), TOOL_TIMEOUT)?;
    String::from_utf8_lossy(&out).lines().find_map(|line| {
        let (pkg, path) = line.split_once(' ')?;
        let p = PathBuf::from(path);
        p.is_file().then(|| (p, pkg.to_string()))
    })
}

/// How long the search waits for `python3` and `ldconfig`.
const TOOL_TIMEOUT: Duration = Duration::from_secs(10);

/// What a child wrote on stdout, read on a thread of its own; `None` when it is still running
/// after `limit` (then it is killed), with its exit status otherwise. A process the child left
/// behind holding the pipe is not waited for.
fn run_within(mut child: std::process::Child, limit: Duration) -> Result<(std::process::ExitStatus, Vec<u8>), Duration> {
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    if let Some(mut stdout) = child.stdout.take() {
        std::thread::spawn(move || {
            let mut buf = [0u8; 65536];
            while let Ok(n) = stdout.read(&mut buf) {
                if n == 0 || tx.send(buf[..n].to_vec()).is_err() {
                    break;
                }
            }
        });
    }
    let deadline = Instant::now() + limit;
    let mut out = Vec::new();
    let status = loop {
        while let Ok(chunk) = rx.try_recv() {
            out.extend_from_slice(&chunk);
        }
        if let Ok(Some(status)) = child.try_wait() {
            break status;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Err(limit);
        }
        if let Ok(chunk) = rx.recv_timeout(Duration::from_millis(10)) {
            out.extend_from_slice(&chunk);
        }
    };
    // Drain what it wrote: until EOF, or a moment of silence (a grandchild holds the pipe).
    while let Ok(chunk) = rx.recv_timeout(Duration::from_millis(200)) {
        out.extend_from_slice(&chunk);
    }
    Ok((status, out))
}

/// A tool's stdout, or None when it cannot be run or has not finished within `limit`: a stuck
/// `python3` on PATH does not hang the doctor.
fn output_within(cmd: &mut Command, limit: Duration) -> Option<Vec<u8>> {
    let child = cmd.stdin(Stdio::null()).stdout(Stdio::piped()).stderr(Stdio::null()).spawn().ok()?;
    run_within(child, limit).ok().map(|(_, out)| out)
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

/// The library file PATH names (a file, or the library under a root directory) and how it was
/// found; exits 66 when there is none or it cannot be read, naming the I/O error.
fn from_argument(arg: &Path) -> (PathBuf, String) {
    let meta = std::fs::metadata(arg).unwrap_or_else(|e| no_input(&format!("cannot read {}: {}", arg.display(), elf_check::io_reason(&e))));
    let (file, how) = if meta.is_dir() {
        let mut hit = None;
        for n in IN_ROOT {
            match is_file(&arg.join(n)) {
                Ok(true) => {
                    hit = Some(arg.join(n));
                    break;
                }
                Ok(false) => {}
                Err(e) => no_input(&e),
            }
        }
        match hit {
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
    // fstat), never waited on; a file that cannot be opened (EACCES) is named as such.
    if let Err(p @ (FileProblem::NotRegular(_) | FileProblem::Io(_))) = elf_check::open_regular(&file) {
        no_input(&p.describe(&file));
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
fn inspect(file: &Path, how: &str, why: Option<String>, searched: &[String]) -> report::Report {
    if let Err(mut r) = report::check_file(file, how, searched) {
        r.library.why = why;
        return *r;
    }
    let mut r = match in_child(file) {
        Ok(json) => match report::from_json(&json) {
            Some(mut r) => {
                r.library.found_by = Some(how.to_string());
                r.library.searched = searched.to_vec();
                r
            }
            None => report::load_failed(file, how, searched, "the process that loaded it wrote no report"),
        },
        Err(reason) => report::load_failed(file, how, searched, &reason),
    };
    r.library.why = why;
    r
}

/// The name of a signal, for the report.
fn signal_name(sig: i32) -> &'static str {
    match sig {
        libc::SIGSEGV => "Segmentation fault",
        libc::SIGBUS => "Bus error",
        libc::SIGABRT => "Aborted",
        libc::SIGILL => "Illegal instruction",
        libc::SIGFPE => "Floating point exception",
        libc::SIGKILL => "Killed",
        libc::SIGTERM => "Terminated",
        libc::SIGSYS => "Bad system call",
        _ => "a signal",
    }
}

/// The lines around the child's report on its stdout: what the loaded library itself writes there
/// (its constructors) cannot be taken for the report, and is passed on to stderr.
const REPORT_BEGIN: &str = "\n=== upcxx-nvshmem-doctor report ===\n";
const REPORT_END: &str = "\n=== end of report ===\n";

/// The report between the markers of the child's output, and what else it wrote.
fn split_report(out: &str) -> (Option<&str>, String) {
    let Some(begin) = out.rfind(REPORT_BEGIN) else { return (None, out.to_string()) };
    let body = &out[begin + REPORT_BEGIN.len()..];
    match body.find(REPORT_END) {
        Some(end) => (Some(&body[..end]), format!("{}{}", &out[..begin], &body[end + REPORT_END.len()..])),
        None => (None, out.to_string()),
    }
}

/// Runs this program again (`current_exe()`) as the child that loads `file`, and returns the JSON
/// report it printed, or why it did not finish.
fn in_child(file: &Path) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| format!("the doctor cannot run itself to load it: {e}"))?;
    let child = Command::new(exe)
        .arg("--load-in-child")
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("the doctor cannot run itself to load it: {e}"))?;
    let (status, out) = run_within(child, load_timeout())
        .map_err(|limit| format!("loading it had not finished after {} s (the process that loaded it was killed)", limit.as_secs()))?;
    if let Some(sig) = status.signal() {
        return Err(format!(
            "loading it killed the process that loaded it with signal {sig} ({}): the library passed the ELF checks, but its loading (relocations, constructors) crashes",
            signal_name(sig)
        ));
    }
    let out = String::from_utf8_lossy(&out);
    let (report, other) = split_report(&out);
    if !other.trim().is_empty() {
        // The library's own output on stdout, as it wrote it.
        eprint!("{other}");
    }
    match status.code() {
        Some(0) => report.map(str::to_string).ok_or_else(|| "the process that loaded it wrote no report".to_string()),
        code => {
            let code = code.unwrap_or(-1);
            // 127: the loader's own exit when a symbol cannot be resolved (lazy binding at a call).
            let note =
                if code == 127 { " (the dynamic loader's exit for a symbol it cannot resolve; its message is on stderr)" } else { "" };
            Err(format!("the process that loaded it exited with status {code}{note}"))
        }
    }
}

/// The child: loads and analyses `file`, prints the report as JSON, and ends without running
/// the loaded library's exit handlers or destructors (`_exit`).
fn child_main(file: &Path) -> ! {
    let r = std::panic::catch_unwind(|| format!("{REPORT_BEGIN}{}{REPORT_END}", report::load_and_analyze(file, "argument", &[]).to_json()));
    let ok = r.is_ok_and(|json| {
        let mut out = std::io::stdout().lock();
        std::io::Write::write_all(&mut out, json.as_bytes()).and_then(|()| std::io::Write::flush(&mut out)).is_ok()
    });
    // SAFETY: ends this process at once: the loaded library's exit handlers never run.
    #[allow(unsafe_code)]
    unsafe {
        libc::_exit(if ok { 0 } else { 1 })
    }
}

/// Parses the command line: help and version exit 0, anything else wrong is a usage error (64).
fn parse() -> Cli {
    match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) => {
            let _ = e.print();
            std::process::exit(0);
        }
        Err(e) => {
            let msg = match (e.kind(), e.get(ContextKind::InvalidArg)) {
                (ErrorKind::UnknownArgument, Some(ContextValue::String(arg))) => format!("unknown option {arg}"),
                _ => e.to_string().lines().next().unwrap_or("usage error").trim_start_matches("error: ").to_string(),
            };
            usage_error(&msg)
        }
    }
}

fn main() {
    let cli = parse();
    if let Some(file) = &cli.load_in_child {
        child_main(file);
    }
    if cli.paths.len() > 1 {
        let named: Vec<String> = cli.paths.iter().map(|p| p.display().to_string()).collect();
        usage_error(&format!("more than one PATH given ({}); give one", named.join(" and ")));
    }
    let r = match cli.paths.first() {
        Some(arg) => {
            let (file, how) = from_argument(arg);
            inspect(&file, &how, None, &[])
        }
        None => {
            let mut search = Search { searched: Vec::new() };
            match search.run() {
                Some(f) => inspect(&f.file, &f.found_by, Some(f.why), &search.searched),
                None => report::not_found(&search.searched),
            }
        }
    };
    // A closed pipe (`| head`, `| grep -q`) is not an error of the doctor: ignore write failures.
    let text = if cli.json { r.to_json() + "\n" } else { r.to_text() };
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    std::process::exit(r.verdict as i32);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_report_is_told_from_the_librarys_output() {
        let out = format!("noise{REPORT_BEGIN}{{\"a\": 1}}{REPORT_END}more");
        assert_eq!(split_report(&out), (Some("{\"a\": 1}"), "noisemore".to_string()));
        assert_eq!(split_report("{\"a\": 1}"), (None, "{\"a\": 1}".to_string()));
        let forged = format!("{REPORT_BEGIN}{{}}");
        assert_eq!(split_report(&forged).0, None, "no end marker: no report");
    }
}
