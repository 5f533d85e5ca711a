//! upcxx-nvshmem-doctor: says, before a job runs, whether the NVSHMEM host library it will load
//! works with upcxx-extra-nvshmem. Needs no GPU and does not initialise NVSHMEM.
//!
//! The command line is `clap`'s ([`Cli`]; `--help` is the reference: the search order, the
//! exit statuses). A file is never given to `dlopen` before its ELF headers have been checked
//! against it (`doctor::elf_check`), and it is loaded in a child process (this program run again,
//! `std::process::Command` on `current_exe()`): the doctor itself never dies of a signal or hangs
//! on any file; the child is given the file as `--load-in-child -- FILE`, so no name is taken for
//! an option. A PATH that cannot be checked (66) has its message on stderr and no report; with 64,
//! or 66 for the only PATH, nothing is written to stdout (not even with `--json`). Every string
//! from the system in the text report and in the messages is escaped (`report::escape`): a path
//! holding a newline cannot forge a line. The environment is read through `env` (each variable
//! parsed strictly; a bad value exits 64 with one line naming it).

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::{CommandFactory, Parser};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use upcxx_extra_nvshmem::internals::elf_check::{self, Entry, FileProblem};
use upcxx_extra_nvshmem::internals::env::{self, LoaderDir};
use upcxx_extra_nvshmem::internals::report::{self, escape};

/// The NVSHMEM release `scripts/quickstart.sh` installs (`UXN_NVSHMEM_DEFAULT` of
/// `scripts/common.sh`; tests/int_doctor.rs checks that they agree).
const QUICKSTART_NVSHMEM: &str = "3.4.5";

const AFTER_HELP: &str = "PATH is an NVSHMEM host library file (libnvshmem_host.so.3), or an NVSHMEM root directory: then
the first of lib/libnvshmem_host.so.3, lib/libnvshmem_host.so, lib64/libnvshmem_host.so.3,
lib64/libnvshmem_host.so that exists under it is checked. Each PATH given is checked, one report
each, in order.

Without PATH the doctor checks the library a program would load: the first found of
  1. NVSHMEM_HOME: $NVSHMEM_HOME/lib, then lib64 (what a build against NVSHMEM_HOME uses, and
     what nvshmem_init loads when the dynamic loader finds none);
  2. the NVSHMEM 3.4.5 wheel in the install cache ($UXN_CACHE, else ~/.cache/upcxx-extra-nvshmem):
     nvshmem/3.4.5, or nvshmem-cu13/3.4.5 with UXN_NVSHMEM_CUDA=13;
  3. the dynamic loader's search path: each directory of $LD_LIBRARY_PATH (separated by : or ;,
     an empty one is the current directory), `ldconfig -p`, /usr/local/lib,
     /usr/lib/x86_64-linux-gnu, /usr/lib64, /usr/lib;
  4. the nvidia-nvshmem-cu12 / -cu13 wheels of the python3 on PATH;
  5. last, the other NVSHMEM releases in the install cache (newest first), which a program
     loads only through NVSHMEM_HOME or LD_LIBRARY_PATH.
The report says which it chose and why (`chosen:`; JSON library.found_by and library.why) and
lists what was searched; when none is found it says so (exit 2).

--json prints the report as one JSON object; for several PATHs, a JSON array of the reports.
library.path is the file's name when that is valid UTF-8; otherwise it shows the name with
U+FFFD for each byte that is not, and library.path_bytes holds the name byte for byte (an
array of numbers 0-255). In the text report such a byte is written \\xNN.

Exit status (for several PATHs, the highest of theirs):
  0   supported
  1   degraded (public route only)
  2   unsupported (also: no PATH and no NVSHMEM host library found; a file that is empty,
      not ELF, truncated or corrupt (never loaded), or whose loading crashes or stalls)
  64  usage error (an unknown option), or a bad value of UXN_NVSHMEM_CUDA (12 or 13) or
      UXN_DOCTOR_LOAD_TIMEOUT_S (1 to 3600): one line naming the variable and its value
  66  PATH does not exist or cannot be read (the reason is named: permission denied (EACCES),
      a symlink loop (ELOOP), ...), is not a regular file (FIFO, socket, device, dangling
      symbolic link: named, never opened), or is a directory without an NVSHMEM host library
      (or whose library's place holds something that is not a file, named)

A file is checked before it is loaded, then loaded in a child process, killed after 20 s
(UXN_DOCTOR_LOAD_TIMEOUT_S=<seconds>, digits only, 1 to 3600).";

/// Whether the NVSHMEM host library a job will load works with upcxx-extra-nvshmem (no GPU
/// needed; NVSHMEM is not initialised).
#[derive(Parser, Debug)]
#[command(name = "upcxx-nvshmem-doctor", version, override_usage = "upcxx-nvshmem-doctor [--json] [PATH]...", after_help = AFTER_HELP)]
struct Cli {
    /// Print the report as JSON
    #[arg(long)]
    json: bool,
    /// An NVSHMEM host library file, or an NVSHMEM root directory
    #[arg(value_name = "PATH")]
    paths: Vec<PathBuf>,
    /// The child process: load the one PATH, analyse it, print the report as JSON. The parent
    /// runs it as `--load-in-child -- PATH`: no name can be taken for an option.
    #[arg(long = "load-in-child", hide = true)]
    load_in_child: bool,
}

/// What the environment sets for the doctor, each value checked ([`env`]'s rules).
struct Config {
    /// UXN_NVSHMEM_CUDA: 12 (default) or 13.
    cuda: u32,
    /// UXN_DOCTOR_LOAD_TIMEOUT_S, else [`LOAD_TIMEOUT`].
    load_timeout: Duration,
}

impl Config {
    /// The doctor's variables, read once; a bad value exits 64 with one line naming it.
    fn from_env() -> Config {
        let or_exit = |bad: env::BadValue| -> ! {
            // One line: the value is quoted with its control characters and other bytes escaped.
            eprintln!("upcxx-nvshmem-doctor: {bad}");
            std::process::exit(EX_USAGE)
        };
        let cuda = env::nvshmem_cuda().unwrap_or_else(|b| or_exit(b)).unwrap_or(12);
        let load_timeout = env::doctor_load_timeout().unwrap_or_else(|b| or_exit(b)).unwrap_or(LOAD_TIMEOUT);
        Config { cuda, load_timeout }
    }
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

/// The message of a PATH that cannot be checked (exit 66), on one line of stderr.
fn no_input(msg: &str) {
    eprintln!("upcxx-nvshmem-doctor: {}", escape(msg));
}

/// Where the search looks, in order, and what each place is to a program.
struct Search<'c> {
    config: &'c Config,
    searched: Vec<String>,
    /// What NVSHMEM_HOME is, for the reasons of the places after it: "NVSHMEM_HOME is not set",
    /// or where it points and that it holds no library.
    home: String,
}

/// A library found by the search: the file, how, and why that is the one a program would load.
struct Found {
    file: PathBuf,
    found_by: String,
    why: String,
}

impl Search<'_> {
    /// The first of `NAMES` that exists in `dir`; what was seen goes into `searched` (`label`
    /// names the place). A name there that is not a file (a FIFO, a dangling symbolic link) is
    /// named, and ends the look at that directory, as it ends the loader's.
    fn in_dir(&mut self, dir: &Path, label: &str) -> Option<PathBuf> {
        let entry = |s: &str| if label.is_empty() { s.to_string() } else { format!("{s} ({label})") };
        for n in NAMES {
            let p = dir.join(n);
            match elf_check::probe(&p) {
                Entry::File => {
                    self.searched.push(entry(&dir.display().to_string()));
                    return Some(p);
                }
                Entry::Missing(_) => {}
                Entry::NotAFile(kind) => {
                    self.searched.push(entry(&format!("{}: {n} is {kind}, not a shared library", dir.display())));
                    return None;
                }
                Entry::Unreadable(e) => {
                    self.searched.push(entry(&format!("{}: cannot read {n}: {e}", dir.display())));
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
        match env::nvshmem_home() {
            Some(home) => {
                for sub in ["lib", "lib64"] {
                    if let Some(p) = self.in_dir(&home.join(sub), "NVSHMEM_HOME") {
                        return found(
                            p,
                            "NVSHMEM_HOME",
                            format!(
                                "NVSHMEM_HOME is set to {}: a build against NVSHMEM_HOME uses it, and nvshmem_init loads it when the \
                                 loader finds none",
                                home.display()
                            ),
                        );
                    }
                }
                self.home = format!("NVSHMEM_HOME is set to {}, which has no NVSHMEM host library in lib or lib64", home.display());
            }
            None => self.searched.push("NVSHMEM_HOME: not set".into()),
        }
        let home = self.home.clone();
        // 2. The quickstart's NVSHMEM.
        let cache = install_cache();
        let cuda = self.config.cuda;
        if cache.is_none() {
            self.searched.push("the quickstart's NVSHMEM: neither UXN_CACHE nor HOME is set".into());
        }
        if let Some(cache) = &cache {
            let root = quickstart_root(cache, cuda);
            let label = format!("the quickstart's NVSHMEM {QUICKSTART_NVSHMEM}, nvidia-nvshmem-cu{cuda}");
            if let Some(p) = self.in_dir(&root.join("lib"), &label) {
                let why = format!(
                    "the NVSHMEM {QUICKSTART_NVSHMEM} (nvidia-nvshmem-cu{cuda}) that scripts/quickstart.sh installed, which the README \
                     builds the first program against (NVSHMEM_HOME={}); {home}",
                    root.display()
                );
                return found(p, "quickstart", why);
            }
        }
        // 3. The dynamic loader's search path, LD_LIBRARY_PATH read as the loader reads it.
        let loader_why = |how: &str| format!("{home}: the dynamic loader finds it on its search path ({how})");
        for d in env::ld_library_path().map(|v| env::loader_path(&v)).unwrap_or_default() {
            let hit = match d {
                LoaderDir::Dir(dir) => self.in_dir(&dir, "LD_LIBRARY_PATH"),
                LoaderDir::CurrentDir => {
                    let cwd = std::env::current_dir().unwrap_or_else(|_| PathBuf::from("."));
                    self.in_dir(&cwd, "LD_LIBRARY_PATH: an empty element, the current directory")
                }
                LoaderDir::Token(dir) => {
                    self.searched.push(format!(
                        "{} (LD_LIBRARY_PATH: the loader expands its $ORIGIN, $LIB or $PLATFORM for each program: not searched)",
                        dir.display()
                    ));
                    None
                }
            };
            if let Some(p) = hit {
                return found(p, "LD_LIBRARY_PATH", loader_why("LD_LIBRARY_PATH, searched first"));
            }
        }
        self.searched.push("ldconfig -p".into());
        if let Some(out) = output_within(Command::new("ldconfig").arg("-p"), TOOL_TIMEOUT) {
            for line in String::from_utf8_lossy(&out).lines() {
                if line.trim_start().starts_with("libnvshmem_host.so") {
                    if let Some(p) = line.split("=>").nth(1).map(|s| PathBuf::from(s.trim())) {
                        if p.is_file() {
                            return found(p, "system linker cache", loader_why("its cache, ldconfig"));
                        }
                    }
                }
            }
        }
        for d in ["/usr/local/lib", "/usr/lib/x86_64-linux-gnu", "/usr/lib64", "/usr/lib"] {
            if let Some(p) = self.in_dir(Path::new(d), "") {
                return found(p, "system library directory", loader_why("a default directory"));
            }
        }
        // 4. pip.
        self.searched.push("pip: nvidia-nvshmem-cu12, nvidia-nvshmem-cu13 (python3 on PATH)".into());
        if let Some((p, pkg)) = pip_wheel() {
            let why = format!("{home}; without NVSHMEM_HOME, CMake's fallback is the NVSHMEM wheel of the python3 on PATH");
            return found(p, &format!("pip package {pkg}"), why);
        }
        // 5. The tests' cache.
        if let Some(cache) = &cache {
            self.searched.push(format!("{} (install cache: nvshmem/<release>, nvshmem-cu13/<release>)", cache.display()));
            let releases = cached_releases(cache, cuda);
            if let Some(p) = releases.into_iter().find_map(|lib| NAMES.iter().map(|n| lib.join(n)).find(|p| p.is_file())) {
                let how = "install cache of scripts/install-deps.sh; a job loads it only through NVSHMEM_HOME or LD_LIBRARY_PATH";
                let why = format!(
                    "nothing a program would load was found ({home}; not the quickstart's NVSHMEM {QUICKSTART_NVSHMEM} either): the \
                     newest release the tests installed"
                );
                return found(p, how, why);
            }
        }
        None
    }
}

/// `<cache>/nvshmem/<release>/nvidia/nvshmem` (cu12) or `<cache>/nvshmem-cu13/...`, as
/// `uxn_nvshmem_root` of `scripts/common.sh` writes it.
fn quickstart_root(cache: &Path, cuda: u32) -> PathBuf {
    let sub = if cuda == 13 { "nvshmem-cu13" } else { "nvshmem" };
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
    env::cache().or_else(|| env::home().map(|h| h.join(".cache/upcxx-extra-nvshmem")))
}

/// The `lib` directories of the NVSHMEM wheels in the install cache (`nvshmem/<release>` holds the
/// cu12 wheels, `nvshmem-cu13/<release>` the cu13 ones), the newest release first; for the same
/// release, the CUDA major version of `UXN_NVSHMEM_CUDA` (default 12) first. Directories whose
/// name is not a release number (an install in progress, `3.4.5.partial`) are skipped.
fn cached_releases(cache: &Path, preferred: u32) -> Vec<PathBuf> {
    let mut found: Vec<(Vec<u64>, bool, PathBuf)> = Vec::new();
    for (sub, cuda) in [("nvshmem", 12), ("nvshmem-cu13", 13)] {
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
/// found; Err (exit 66) when there is none or it cannot be read, naming the I/O error or what is
/// there instead of a file. Nothing but a regular file is ever opened.
fn from_argument(arg: &Path) -> Result<(PathBuf, String), String> {
    let (file, how) = match elf_check::probe(arg) {
        Entry::Missing(e) | Entry::Unreadable(e) => return Err(format!("cannot read {}: {e}", arg.display())),
        Entry::NotAFile(kind) if kind != "a directory" => {
            return Err(format!("{} is {kind}, not a regular file: give the library file itself", arg.display()));
        }
        Entry::NotAFile(_) => {
            let mut hit = None;
            for n in IN_ROOT {
                let p = arg.join(n);
                match elf_check::probe(&p) {
                    Entry::File => {
                        hit = Some(p);
                        break;
                    }
                    Entry::Missing(_) => {}
                    Entry::NotAFile(kind) => {
                        return Err(format!(
                            "{} is {kind}, not a shared library (under an NVSHMEM root the first of {} that exists is checked)",
                            p.display(),
                            IN_ROOT.join(", ")
                        ));
                    }
                    Entry::Unreadable(e) => return Err(format!("cannot read {}: {e}", p.display())),
                }
            }
            match hit {
                Some(p) => (p, format!("argument (NVSHMEM root {})", arg.display())),
                None => {
                    return Err(format!(
                        "{} is a directory without an NVSHMEM host library; looked for {} under it",
                        arg.display(),
                        IN_ROOT.join(", ")
                    ));
                }
            }
        }
        Entry::File => (arg.to_path_buf(), "argument".to_string()),
    };
    // A regular file only: a FIFO, socket or device is refused unread (opened O_NONBLOCK, then
    // fstat), never waited on; a file that cannot be opened (EACCES) is named as such.
    if let Err(p @ (FileProblem::NotRegular(_) | FileProblem::Io(_))) = elf_check::open_regular(&file) {
        return Err(p.describe(&file));
    }
    Ok((file, how))
}

/// How long loading and analysing a library may take in the child process.
/// `UXN_DOCTOR_LOAD_TIMEOUT_S` (1 to 3600 seconds) overrides it ([`Config`]).
const LOAD_TIMEOUT: Duration = Duration::from_secs(20);

/// The report on a file: checked here (never loaded when the check fails), then loaded and
/// analysed in a child process, so that whatever the checks cannot see (the library's own
/// constructors, relocations into its own code) can kill or stall only that child; its death or
/// a child still loading after [`LOAD_TIMEOUT`] is reported as unsupported.
fn inspect(config: &Config, file: &Path, how: &str, why: Option<String>, searched: &[String]) -> report::Report {
    if let Err(mut r) = report::check_file(file, how, searched) {
        r.library.why = why;
        return *r;
    }
    let mut r = match in_child(file, config.load_timeout) {
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
fn in_child(file: &Path, limit: Duration) -> Result<String, String> {
    let exe = std::env::current_exe().map_err(|e| format!("the doctor cannot run itself to load it: {e}"))?;
    let child = Command::new(exe)
        .args(["--load-in-child", "--"])
        .arg(file)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| format!("the doctor cannot run itself to load it: {e}"))?;
    let (status, out) = run_within(child, limit)
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

/// The report on one PATH, or the message of a PATH that cannot be checked (exit 66).
fn for_path(config: &Config, arg: &Path) -> Result<report::Report, String> {
    let (file, how) = from_argument(arg)?;
    Ok(inspect(config, &file, &how, None, &[]))
}

fn main() {
    let cli = parse();
    if cli.load_in_child {
        match cli.paths.as_slice() {
            [file] => child_main(file),
            _ => usage_error("--load-in-child takes one PATH"),
        }
    }
    let config = Config::from_env();
    let mut reports = Vec::new();
    let mut status = 0;
    if cli.paths.is_empty() {
        let mut search = Search { config: &config, searched: Vec::new(), home: "NVSHMEM_HOME is not set".into() };
        let r = match search.run() {
            Some(f) => inspect(&config, &f.file, &f.found_by, Some(f.why), &search.searched),
            None => report::not_found(&search.searched, &search.home),
        };
        reports.push(r);
    }
    for arg in &cli.paths {
        match for_path(&config, arg) {
            Ok(r) => reports.push(r),
            Err(msg) => {
                no_input(&msg);
                status = EX_NOINPUT;
            }
        }
    }
    status = reports.iter().map(|r| r.verdict as i32).fold(status, i32::max);
    // With 66 for the only PATH nothing is written to stdout.
    let text = match (cli.json, reports.as_slice()) {
        (_, []) => String::new(),
        (true, [one]) if cli.paths.len() <= 1 => one.to_json() + "\n",
        (true, many) => serde_json::to_string_pretty(many).unwrap_or_default() + "\n",
        (false, many) => many.iter().map(report::Report::to_text).collect::<Vec<_>>().join("\n"),
    };
    // A closed pipe (`| head`, `| grep -q`) is not an error of the doctor: ignore write failures.
    let _ = std::io::Write::write_all(&mut std::io::stdout(), text.as_bytes());
    std::process::exit(status);
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
