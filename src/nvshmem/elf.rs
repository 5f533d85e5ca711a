//! Reading symbols from the `.symtab` of a library file (the `object` crate over an mmap), and
//! opening a file only when it is a regular one. (Checking a file's ELF headers before it is
//! loaded is the doctor's: `doctor::elf_check`.)
//!
//! NVSHMEM's `nvshmemi_device_state` is a LOCAL symbol: `dlsym` cannot see it, but the file's
//! `.symtab` (present in every NVSHMEM 3.x pip release) records its value and size. Results are
//! cached per file identity (device, inode, size, mtime), so a repeated lookup costs a `stat`.

use object::{Object, ObjectSymbol};
use parking_lot::Mutex;
use std::collections::HashMap;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A symbol as recorded in the file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FileSymbol {
    /// `st_value`: add the load bias to get the address.
    pub value: u64,
    /// `st_size`.
    pub size: u64,
    /// STB_LOCAL?
    pub local: bool,
}

/// What the file's symbol tables say about the names asked for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SymtabLookup {
    /// False when the file has no `.symtab` section (stripped).
    pub has_symtab: bool,
    /// One entry per name asked for, from `.symtab` (then `.dynsym` for names not found there).
    pub symbols: Vec<Option<FileSymbol>>,
}

type Key = (PathBuf, u64, u64, u64, i64, Vec<String>);

static CACHE: Mutex<Option<HashMap<Key, SymtabLookup>>> = Mutex::new(None);

/// Looks `names` up in the file at `path` (cached).
pub fn lookup(path: &Path, names: &[&str]) -> Result<SymtabLookup, String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot stat {}: {e}", path.display()))?;
    let key: Key = (
        path.to_path_buf(),
        meta.dev(),
        meta.ino(),
        meta.size(),
        meta.mtime_nsec() + meta.mtime() * 1_000_000_000,
        names.iter().map(|s| s.to_string()).collect(),
    );
    if let Some(hit) = CACHE.lock().as_ref().and_then(|m| m.get(&key)) {
        return Ok(hit.clone());
    }
    let result = lookup_uncached(path, names)?;
    CACHE.lock().get_or_insert_with(HashMap::new).insert(key, result.clone());
    Ok(result)
}

/// Looks `names` up without the cache (mmap + parse).
#[allow(unsafe_code)]
pub fn lookup_uncached(path: &Path, names: &[&str]) -> Result<SymtabLookup, String> {
    // A regular file only (a FIFO put in its place is not waited on).
    let file = open_regular(path).map_err(|p| match p {
        OpenError::Io(e) => format!("cannot open {}: {e}", path.display()),
        OpenError::NotRegular(kind) => format!("{} is {kind}, not a regular file: give the library file itself", path.display()),
    })?;
    // SAFETY: the mapping is read-only and private; a library file being rewritten under a
    // running process is already undefined for the loader itself.
    let map = unsafe { memmap2::Mmap::map(&file) }.map_err(|e| format!("cannot mmap {}: {e}", path.display()))?;
    let obj = object::File::parse(&*map).map_err(|e| format!("{} is not a readable ELF file: {e}", path.display()))?;
    let has_symtab = obj.symbol_table().is_some() || obj.section_by_name(".symtab").is_some();
    let mut symbols = vec![None; names.len()];
    fill(&mut symbols, names, obj.symbols());
    if symbols.iter().any(Option::is_none) {
        fill(&mut symbols, names, obj.dynamic_symbols());
    }
    Ok(SymtabLookup { has_symtab, symbols })
}

fn fill<'d, S: ObjectSymbol<'d>>(out: &mut [Option<FileSymbol>], names: &[&str], iter: impl Iterator<Item = S>) {
    for sym in iter {
        let Ok(n) = sym.name() else { continue };
        if let Some(i) = names.iter().position(|w| *w == n) {
            if out[i].is_none() && sym.is_definition() {
                out[i] = Some(FileSymbol { value: sym.address(), size: sym.size(), local: sym.is_local() });
            }
        }
    }
}

/// Why [`open_regular`] refused a path.
#[derive(Debug)]
pub enum OpenError {
    /// Not a regular file (FIFO, socket, device, directory): nothing was read from it.
    NotRegular(&'static str),
    /// It could not be opened (or `stat`ed).
    Io(std::io::Error),
}

/// What the file type of an open file is, when it is not a regular file.
fn file_kind(mode: u32) -> Option<&'static str> {
    match mode & libc::S_IFMT {
        libc::S_IFREG => None,
        libc::S_IFIFO => Some("a FIFO (named pipe)"),
        libc::S_IFSOCK => Some("a socket"),
        libc::S_IFCHR => Some("a character device"),
        libc::S_IFBLK => Some("a block device"),
        libc::S_IFDIR => Some("a directory"),
        libc::S_IFLNK => Some("a symbolic link"),
        _ => Some("not a file of a known type"),
    }
}

/// Opens `path` for reading only if it is a regular file: `O_NONBLOCK` (opening a FIFO does not
/// wait for a writer), then `fstat` on what was opened; anything else is refused unread.
pub fn open_regular(path: &Path) -> Result<std::fs::File, OpenError> {
    use std::os::unix::fs::OpenOptionsExt;
    // `stat` first: opening a socket fails (ENXIO) and a device may do anything when opened.
    let meta = std::fs::metadata(path).map_err(OpenError::Io)?;
    if let Some(kind) = file_kind(meta.mode()) {
        return Err(OpenError::NotRegular(kind));
    }
    // Then what was opened: the path may have been replaced in between.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(OpenError::Io)?;
    let meta = file.metadata().map_err(OpenError::Io)?;
    if let Some(kind) = file_kind(meta.mode()) {
        return Err(OpenError::NotRegular(kind));
    }
    Ok(file)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_own_test_binary() {
        let exe = std::env::current_exe().unwrap();
        let r = lookup(&exe, &["main", "no_such_symbol_xyz"]).unwrap();
        assert!(r.symbols[0].is_some());
        assert!(r.symbols[1].is_none());
        // Second call is served from the cache and is identical.
        assert_eq!(lookup(&exe, &["main", "no_such_symbol_xyz"]).unwrap(), r);
    }

    #[test]
    fn open_regular_refuses_what_is_not_a_file() {
        assert!(matches!(open_regular(Path::new("/dev/null")), Err(OpenError::NotRegular("a character device"))));
        assert!(matches!(open_regular(Path::new("/")), Err(OpenError::NotRegular("a directory"))));
        assert!(matches!(open_regular(Path::new("/nonexistent/x")), Err(OpenError::Io(_))));
    }

    #[test]
    fn not_elf_is_an_error() {
        let p = std::env::temp_dir().join(format!("uxn-not-elf-{}", std::process::id()));
        std::fs::write(&p, b"hello").unwrap();
        assert!(lookup(&p, &["x"]).unwrap_err().contains("not a readable ELF"));
        std::fs::remove_file(&p).unwrap();
        assert!(lookup(Path::new("/nonexistent/uxn"), &["x"]).unwrap_err().contains("cannot stat"));
    }
}
