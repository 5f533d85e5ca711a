//! Reading symbols from the `.symtab` of a library file (the `object` crate over an mmap).
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
        FileProblem::Io(e) => format!("cannot open {}: {e}", path.display()),
        other => other.describe(path),
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

// ---------------------------------------------------------------------------------------------
// Checking a file before it is loaded (the doctor)
// ---------------------------------------------------------------------------------------------
//
// `dlopen` trusts the file: a program header that points past the end of a truncated copy makes
// the loader touch a page the file does not have (SIGBUS), a dynamic section outside every
// segment makes it read unmapped memory (SIGSEGV). `check_image` reads the headers the loader
// reads and checks them against the file, with checked arithmetic on every size and offset and
// every field read bytewise (no alignment is assumed), before the doctor lets `dlopen` see it.

/// What is wrong with a file the doctor was asked to load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FileProblem {
    /// Not a regular file (FIFO, socket, device, directory): nothing was read from it.
    NotRegular(&'static str),
    /// It could not be opened or read.
    Io(String),
    /// Zero bytes.
    Empty,
    /// It does not start with the ELF magic.
    NotElf,
    /// Shorter than its own headers say (a partial copy): what ends past the end of the file.
    Truncated { what: String, end: u64, size: u64 },
    /// Headers that contradict themselves or the ELF format.
    Corrupt(String),
    /// A well-formed ELF file this process cannot load (32-bit, big-endian, another machine,
    /// an executable or object file).
    Unsupported(String),
}

impl FileProblem {
    /// The sentence the doctor prints, about the file at `path`.
    pub fn describe(&self, path: &Path) -> String {
        let p = path.display();
        match self {
            FileProblem::NotRegular(kind) => format!("{p} is {kind}, not a regular file: give the library file itself"),
            FileProblem::Io(e) => format!("cannot read {p}: {e}"),
            FileProblem::Empty => format!("{p} is empty (0 bytes): not an ELF shared library"),
            FileProblem::NotElf => format!("{p} is not an ELF shared library"),
            FileProblem::Truncated { what, end, size } => format!(
                "{p} is truncated: it has {size} bytes, but its ELF headers describe at least {end} ({what} ends at byte {end}); \
                 a partial copy? It is not loaded"
            ),
            FileProblem::Corrupt(why) => format!("{p} is a corrupt ELF file ({why}); it is not loaded"),
            FileProblem::Unsupported(why) => format!("{p} cannot be loaded by this process: it is {why}"),
        }
    }
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
pub fn open_regular(path: &Path) -> Result<std::fs::File, FileProblem> {
    use std::os::unix::fs::OpenOptionsExt;
    // `stat` first: opening a socket fails (ENXIO) and a device may do anything when opened.
    let meta = std::fs::metadata(path).map_err(|e| FileProblem::Io(e.to_string()))?;
    if let Some(kind) = file_kind(meta.mode()) {
        return Err(FileProblem::NotRegular(kind));
    }
    // Then what was opened: the path may have been replaced in between.
    let file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | libc::O_CLOEXEC)
        .open(path)
        .map_err(|e| FileProblem::Io(e.to_string()))?;
    let meta = file.metadata().map_err(|e| FileProblem::Io(e.to_string()))?;
    if let Some(kind) = file_kind(meta.mode()) {
        return Err(FileProblem::NotRegular(kind));
    }
    Ok(file)
}

/// Bytes to check: a file (read with `pread`) or a buffer (the fuzz test's mutations).
pub trait Image {
    /// Its size in bytes.
    fn size(&self) -> u64;
    /// Fills `buf` from `offset`; an error when that is not all inside (the file shrank).
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()>;
}

impl Image for [u8] {
    fn size(&self) -> u64 {
        self.len() as u64
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        let start = usize::try_from(offset).ok().filter(|s| *s <= self.len());
        let src = start.and_then(|s| self.get(s..s.checked_add(buf.len())?));
        let src = src.ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        buf.copy_from_slice(src);
        Ok(())
    }
}

/// A file and the size `fstat` gave when the check began.
pub struct FileImage<'f> {
    pub file: &'f std::fs::File,
    pub size: u64,
}

impl Image for FileImage<'_> {
    fn size(&self) -> u64 {
        self.size
    }
    fn read_at(&self, offset: u64, buf: &mut [u8]) -> std::io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(self.file, buf, offset)
    }
}

/// One `PT_LOAD` program header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LoadSegment {
    pub offset: u64,
    pub vaddr: u64,
    pub filesz: u64,
    pub memsz: u64,
    pub flags: u32,
}

impl LoadSegment {
    /// `vaddr + memsz` (checked when the segment was read).
    pub fn end(&self) -> u64 {
        self.vaddr + self.memsz
    }
    pub fn writable(&self) -> bool {
        self.flags & PF_W != 0
    }
    pub fn executable(&self) -> bool {
        self.flags & PF_X != 0
    }
}

/// What a file that passed [`check_image`] looks like.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CheckedElf {
    pub size: u64,
    pub loads: Vec<LoadSegment>,
    /// Section headers (0 for a file without a section table).
    pub sections: u64,
    /// An `SHT_SYMTAB` section is present.
    pub has_symtab: bool,
}

impl CheckedElf {
    /// Is `[vaddr, vaddr + len)` inside one writable `PT_LOAD` (its memory image)?
    pub fn in_writable_load(&self, vaddr: u64, len: u64) -> bool {
        let Some(end) = vaddr.checked_add(len) else { return false };
        self.loads.iter().any(|l| l.writable() && vaddr >= l.vaddr && end <= l.end())
    }
}

const PT_LOAD: u32 = 1;
const PT_DYNAMIC: u32 = 2;
const PT_INTERP: u32 = 3;
const PT_NOTE: u32 = 4;
const PT_PHDR: u32 = 6;
const PT_TLS: u32 = 7;
const PT_GNU_EH_FRAME: u32 = 0x6474_e550;
const PT_GNU_PROPERTY: u32 = 0x6474_e553;
const PF_X: u32 = 1;
const PF_W: u32 = 2;
const SHT_NULL: u32 = 0;
const SHT_SYMTAB: u32 = 2;
const SHT_STRTAB: u32 = 3;
const SHT_NOBITS: u32 = 8;
const SHT_DYNSYM: u32 = 11;
const EHDR_LEN: u64 = 64;
const PHDR_LEN: u64 = 56;
const SHDR_LEN: u64 = 64;
const SYM_LEN: u64 = 24;
/// More than any real file needs; refused as corrupt so that no count read from a file decides
/// how much is allocated or how long the check runs.
const MAX_SECTIONS: u64 = 1 << 20;
/// An end past this (256 TiB) is no truncated copy of a real file: corrupt.
const ABSURD_END: u64 = 1 << 48;
const MAX_DYN_ENTRIES: u64 = 1 << 16;
const MAX_STRSZ: u64 = 16 << 20;
const MAX_RELOCS: u64 = 1 << 22;

#[cfg(target_arch = "x86_64")]
const R_IRELATIVE: Option<u64> = Some(37);
#[cfg(target_arch = "aarch64")]
const R_IRELATIVE: Option<u64> = Some(1032);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const R_IRELATIVE: Option<u64> = None;

#[cfg(target_arch = "x86_64")]
const NATIVE_MACHINE: Option<(u16, &str)> = Some((62, "x86-64"));
#[cfg(target_arch = "aarch64")]
const NATIVE_MACHINE: Option<(u16, &str)> = Some((183, "AArch64"));
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const NATIVE_MACHINE: Option<(u16, &str)> = None;

fn pt_name(typ: u32) -> String {
    match typ {
        PT_LOAD => "PT_LOAD".into(),
        PT_DYNAMIC => "PT_DYNAMIC".into(),
        PT_INTERP => "PT_INTERP".into(),
        PT_NOTE => "PT_NOTE".into(),
        PT_PHDR => "PT_PHDR".into(),
        PT_TLS => "PT_TLS".into(),
        PT_GNU_EH_FRAME => "PT_GNU_EH_FRAME".into(),
        PT_GNU_PROPERTY => "PT_GNU_PROPERTY".into(),
        t => format!("type 0x{t:x}"),
    }
}

/// A little-endian field of `n` bytes (1..=8) at `at` in `b`, read bytewise.
fn le(b: &[u8], at: usize, n: usize) -> u64 {
    b[at..at + n].iter().rev().fold(0u64, |v, x| (v << 8) | u64::from(*x))
}

fn corrupt<T>(why: String) -> Result<T, FileProblem> {
    Err(FileProblem::Corrupt(why))
}

struct Checker<'i, I: Image + ?Sized> {
    img: &'i I,
    size: u64,
    loads: Vec<LoadSegment>,
}

impl<I: Image + ?Sized> Checker<'_, I> {
    /// `[offset, offset + len)` inside the file, or why not.
    fn span(&self, offset: u64, len: u64, what: &dyn Fn() -> String) -> Result<u64, FileProblem> {
        let Some(end) = offset.checked_add(len) else {
            return corrupt(format!("{}: offset 0x{offset:x} + size 0x{len:x} overflows", what()));
        };
        if end > self.size && end > ABSURD_END {
            return corrupt(format!("{} ends at byte {end}, absurdly far past the end of the file ({} bytes)", what(), self.size));
        }
        if end > self.size {
            return Err(FileProblem::Truncated { what: what(), end, size: self.size });
        }
        Ok(end)
    }

    /// Reads `len` bytes at `offset` (checked to be inside the file first).
    fn read(&self, offset: u64, len: u64, what: &dyn Fn() -> String) -> Result<Vec<u8>, FileProblem> {
        let end = self.span(offset, len, what)?;
        let mut buf = vec![0u8; len as usize];
        // The file may have shrunk since fstat: that is a truncation too.
        self.img.read_at(offset, &mut buf).map_err(|_| FileProblem::Truncated { what: what(), end, size: self.size })?;
        Ok(buf)
    }

    /// The `PT_LOAD` whose memory image holds `[vaddr, vaddr + len)`.
    fn load_of(&self, vaddr: u64, len: u64) -> Option<LoadSegment> {
        let end = vaddr.checked_add(len)?;
        self.loads.iter().copied().find(|l| vaddr >= l.vaddr && end <= l.end())
    }

    fn in_load(&self, vaddr: u64, len: u64, what: &dyn Fn() -> String) -> Result<LoadSegment, FileProblem> {
        self.load_of(vaddr, len)
            .ok_or_else(|| FileProblem::Corrupt(format!("{} at 0x{vaddr:x} (0x{len:x} bytes) is outside every PT_LOAD segment", what())))
    }

    /// The memory image the loader makes of `[vaddr, vaddr + len)` (inside one PT_LOAD): the
    /// file's bytes, then zeros past `p_filesz`.
    fn read_vaddr(&self, vaddr: u64, len: u64, what: &dyn Fn() -> String) -> Result<Vec<u8>, FileProblem> {
        let l = self.in_load(vaddr, len, what)?;
        let rel = vaddr - l.vaddr;
        let mut out = vec![0u8; len as usize];
        if rel < l.filesz {
            let n = (l.filesz - rel).min(len);
            let bytes = self.read(l.offset + rel, n, what)?;
            out[..n as usize].copy_from_slice(&bytes);
        }
        Ok(out)
    }
}

/// Checks an ELF shared library's headers against its bytes, the way the loader will use them:
/// the ELF header; every program header inside the file; every `PT_LOAD` inside the file, in
/// ascending order, `p_filesz <= p_memsz`, aligned as its `p_align` says; the dynamic section,
/// notes, TLS image and `PT_PHDR` inside a `PT_LOAD`; each address the dynamic section gives
/// (string and symbol tables, hash tables, relocations, init/fini arrays, version tables)
/// inside a `PT_LOAD`, with its size; each relocation's target inside a `PT_LOAD` and its symbol
/// inside the symbol table; the section header table and every section with contents inside the
/// file. Err says what is wrong; no size or offset from the file is used unchecked.
pub fn check_image<I: Image + ?Sized>(img: &I) -> Result<CheckedElf, FileProblem> {
    let size = img.size();
    if size == 0 {
        return Err(FileProblem::Empty);
    }
    let mut c = Checker { img, size, loads: Vec::new() };
    let mut magic = [0u8; 4];
    if size < 4 || img.read_at(0, &mut magic).is_err() || &magic != b"\x7fELF" {
        return Err(FileProblem::NotElf);
    }
    let ident = c.read(0, 16, &|| "the ELF identification".into())?;
    match ident[4] {
        2 => {}
        1 => return Err(FileProblem::Unsupported("a 32-bit ELF file (ELFCLASS32)".into())),
        v => return corrupt(format!("EI_CLASS is {v}")),
    }
    match ident[5] {
        1 => {}
        2 => return Err(FileProblem::Unsupported("a big-endian ELF file".into())),
        v => return corrupt(format!("EI_DATA is {v}")),
    }
    if ident[6] != 1 {
        return corrupt(format!("EI_VERSION is {}", ident[6]));
    }
    let eh = c.read(0, EHDR_LEN, &|| "the ELF header".into())?;
    match le(&eh, 16, 2) {
        3 => {}
        1 => return Err(FileProblem::Unsupported("an object file (ET_REL), not a shared library".into())),
        2 => return Err(FileProblem::Unsupported("an executable (ET_EXEC), not a shared library".into())),
        4 => return Err(FileProblem::Unsupported("a core dump (ET_CORE), not a shared library".into())),
        t => return corrupt(format!("e_type is {t}")),
    }
    let machine = le(&eh, 18, 2) as u16;
    if let Some((want, name)) = NATIVE_MACHINE {
        if machine != want {
            return Err(FileProblem::Unsupported(format!("built for machine {machine} (e_machine), not for {name}")));
        }
    }
    if le(&eh, 20, 4) != 1 {
        return corrupt(format!("e_version is {}", le(&eh, 20, 4)));
    }
    let (phoff, shoff) = (le(&eh, 32, 8), le(&eh, 40, 8));
    let (ehsize, phentsize, phnum) = (le(&eh, 52, 2), le(&eh, 54, 2), le(&eh, 56, 2));
    let (shentsize, shnum, shstrndx) = (le(&eh, 58, 2), le(&eh, 60, 2), le(&eh, 62, 2));
    if ehsize < EHDR_LEN {
        return corrupt(format!("e_ehsize is {ehsize}, less than {EHDR_LEN}"));
    }
    if phentsize != PHDR_LEN {
        return corrupt(format!("e_phentsize is {phentsize}, not {PHDR_LEN}"));
    }
    if phnum == 0 || phnum == 0xffff {
        return corrupt(format!("e_phnum is {phnum}"));
    }

    // Program headers.
    let ph = c.read(phoff, phnum * PHDR_LEN, &|| format!("the program header table ({phnum} entries at offset 0x{phoff:x})"))?;
    let mut others = Vec::new();
    let mut dynamic = None;
    for i in 0..phnum as usize {
        let h = &ph[i * PHDR_LEN as usize..(i + 1) * PHDR_LEN as usize];
        let (typ, flags) = (le(h, 0, 4) as u32, le(h, 4, 4) as u32);
        let (offset, vaddr, filesz, memsz, align) = (le(h, 8, 8), le(h, 16, 8), le(h, 32, 8), le(h, 40, 8), le(h, 48, 8));
        let what = || format!("program header {i} ({})", pt_name(typ));
        if typ == PT_LOAD && filesz > memsz {
            return corrupt(format!("{}: p_filesz 0x{filesz:x} > p_memsz 0x{memsz:x}", what()));
        }
        if typ == PT_LOAD || filesz > 0 {
            c.span(offset, filesz, &what)?;
        }
        if typ != PT_LOAD {
            if typ == PT_DYNAMIC {
                if dynamic.is_some() {
                    return corrupt("two PT_DYNAMIC program headers".into());
                }
                dynamic = Some((vaddr, memsz));
            }
            others.push((i, typ, vaddr, filesz, memsz));
            continue;
        }
        if vaddr.checked_add(memsz).is_none() {
            return corrupt(format!("{}: p_vaddr 0x{vaddr:x} + p_memsz 0x{memsz:x} overflows", what()));
        }
        if align > 1 && (!align.is_power_of_two() || vaddr % align != offset % align) {
            return corrupt(format!("{}: p_vaddr 0x{vaddr:x} and p_offset 0x{offset:x} disagree modulo p_align 0x{align:x}", what()));
        }
        if let Some(prev) = c.loads.last() {
            if vaddr < prev.end() {
                return corrupt(format!("{}: PT_LOAD at 0x{vaddr:x} overlaps or precedes the one ending at 0x{:x}", what(), prev.end()));
            }
        }
        c.loads.push(LoadSegment { offset, vaddr, filesz, memsz, flags });
    }
    if c.loads.is_empty() {
        return corrupt("no PT_LOAD program header".into());
    }
    for (i, typ, vaddr, filesz, memsz) in others {
        // What the loader reads in memory: the whole dynamic section, notes and PT_PHDR, the TLS
        // initialisation image.
        let len = match typ {
            PT_DYNAMIC | PT_INTERP | PT_NOTE | PT_PHDR | PT_GNU_EH_FRAME | PT_GNU_PROPERTY => memsz,
            PT_TLS => filesz,
            _ => continue,
        };
        if len > 0 {
            c.in_load(vaddr, len, &|| format!("program header {i} ({})", pt_name(typ)))?;
        }
    }

    // The dynamic section, as the loader sees it in memory.
    if let Some((vaddr, memsz)) = dynamic {
        check_dynamic(&c, vaddr, memsz)?;
    }

    // The section header table and every section with contents.
    let (sections, has_symtab) = check_sections(&c, shoff, shentsize, shnum, shstrndx)?;
    Ok(CheckedElf { size, loads: c.loads, sections, has_symtab })
}

fn check_dynamic<I: Image + ?Sized>(c: &Checker<'_, I>, vaddr: u64, memsz: u64) -> Result<(), FileProblem> {
    let n = (memsz / 16).min(MAX_DYN_ENTRIES);
    let bytes = c.read_vaddr(vaddr, n * 16, &|| "the dynamic section".into())?;
    let mut tags: Vec<(u64, u64)> = Vec::new();
    for e in bytes.chunks_exact(16) {
        let (tag, val) = (le(e, 0, 8), le(e, 8, 8));
        if tag == 0 {
            break;
        }
        tags.push((tag, val));
    }
    let get = |t: u64| tags.iter().find(|(k, _)| *k == t).map(|(_, v)| *v);
    // (address tag, size tag or fixed size, name)
    const SIZED: [(u64, u64, &str); 6] = [
        (5, 10, "DT_STRTAB/DT_STRSZ"),
        (7, 8, "DT_RELA/DT_RELASZ"),
        (17, 18, "DT_REL/DT_RELSZ"),
        (23, 2, "DT_JMPREL/DT_PLTRELSZ"),
        (25, 27, "DT_INIT_ARRAY/DT_INIT_ARRAYSZ"),
        (26, 28, "DT_FINI_ARRAY/DT_FINI_ARRAYSZ"),
    ];
    for (at, sz, name) in SIZED.iter().copied().chain([(32, 33, "DT_PREINIT_ARRAY/DT_PREINIT_ARRAYSZ"), (36, 35, "DT_RELR/DT_RELRSZ")]) {
        if let Some(a) = get(at) {
            c.in_load(a, get(sz).unwrap_or(0), &|| name.to_string())?;
        }
    }
    const FIXED: [(u64, u64, &str); 8] = [
        (3, 8, "DT_PLTGOT"),
        (4, 8, "DT_HASH"),
        (6, SYM_LEN, "DT_SYMTAB"),
        (0x6fff_fef5, 16, "DT_GNU_HASH"),
        (0x6fff_fff0, 2, "DT_VERSYM"),
        (0x6fff_fffc, 20, "DT_VERDEF"),
        (0x6fff_fffe, 16, "DT_VERNEED"),
        (12, 1, "DT_INIT"),
    ];
    for (at, len, name) in FIXED.iter().copied().chain([(13, 1, "DT_FINI")]) {
        if let Some(a) = get(at) {
            let l = c.in_load(a, len, &|| name.to_string())?;
            if (at == 12 || at == 13) && !l.executable() {
                return corrupt(format!("{name} 0x{a:x} is not in an executable segment"));
            }
        }
    }
    for (tag, want, name) in [(11u64, SYM_LEN, "DT_SYMENT"), (9, 24, "DT_RELAENT"), (19, 16, "DT_RELENT")] {
        if let Some(v) = get(tag) {
            if v != want {
                return corrupt(format!("{name} is {v}, not {want}"));
            }
        }
    }
    // Strings named by offset: inside the string table, NUL-terminated there.
    let strsz = get(10).unwrap_or(0);
    if strsz > MAX_STRSZ {
        return corrupt(format!("DT_STRSZ is {strsz}"));
    }
    let strtab = match get(5) {
        Some(a) => c.read_vaddr(a, strsz, &|| "the dynamic string table".into())?,
        None if tags.iter().any(|(t, _)| matches!(t, 1 | 14 | 15 | 29)) => return corrupt("DT_NEEDED without DT_STRTAB".into()),
        None => Vec::new(),
    };
    let string_ok = |off: u64| usize::try_from(off).ok().and_then(|o| strtab.get(o..)).is_some_and(|s| s.contains(&0));
    for (tag, val) in &tags {
        if matches!(tag, 1 | 14 | 15 | 29) && !string_ok(*val) {
            return corrupt(format!("dynamic tag {tag}'s string at offset {val} is not inside DT_STRTAB ({strsz} bytes)"));
        }
    }
    // Relocations: each target inside a segment, each symbol inside the symbol table and named
    // inside the string table.
    let symtab = get(6);
    // DT_TEXTREL, or DF_TEXTREL in DT_FLAGS: the loader makes the text writable to relocate it.
    let textrel = get(22).is_some() || get(30).is_some_and(|f| f & 4 != 0);
    for (at, sz, ent) in [(7u64, 8u64, 24u64), (23, 2, if get(20) == Some(17) { 16 } else { 24 }), (17, 18, 16)] {
        let (Some(a), Some(total)) = (get(at), get(sz)) else { continue };
        if total / ent > MAX_RELOCS {
            return corrupt(format!("{total} bytes of relocations"));
        }
        // Only the part the file holds: past p_filesz the table reads as zeros (R_*_NONE).
        let len = total - total % ent;
        let l = c.in_load(a, len, &|| format!("the relocations at 0x{a:x}"))?;
        let rel = a - l.vaddr;
        let in_file = if rel < l.filesz { (l.filesz - rel).min(len) / ent * ent } else { 0 };
        let mut done = 0;
        while done < in_file {
            let n = (in_file - done).min(ent * 4096);
            let chunk = c.read(l.offset + rel + done, n, &|| format!("the relocations at 0x{a:x}"))?;
            done += n;
            check_relocs(c, &chunk, ent, symtab, textrel, &string_ok)?;
        }
    }
    check_symbol_lookup(c, &get, &string_ok)
}

/// One dynamic symbol: named inside the string table; a defined function inside an executable
/// segment, a defined object inside a segment (what a relocation or `dlsym` hands out is then
/// at least mapped, and a function is code).
fn check_dynsym<I: Image + ?Sized>(c: &Checker<'_, I>, s: &[u8], i: u64, string_ok: &dyn Fn(u64) -> bool) -> Result<(), FileProblem> {
    if !string_ok(le(s, 0, 4)) {
        return corrupt(format!("dynamic symbol {i}'s name is not inside DT_STRTAB"));
    }
    let (typ, shndx, value, size) = (s[4] & 0xf, le(s, 6, 2), le(s, 8, 8), le(s, 16, 8));
    // Defined in a section of this file (not undefined, not SHN_ABS/COMMON/reserved).
    if shndx == 0 || shndx >= 0xff00 {
        return Ok(());
    }
    match typ {
        2 | 10 if !c.load_of(value, 1).is_some_and(|l| l.executable()) => {
            corrupt(format!("dynamic symbol {i} is a function at 0x{value:x}, outside every executable segment"))
        }
        1 if size > 0 && c.load_of(value, size).is_none() => {
            corrupt(format!("dynamic symbol {i} is an object at 0x{value:x} ({size} bytes), outside every segment"))
        }
        _ => Ok(()),
    }
}

/// A little-endian u32 from the memory image (inside one PT_LOAD).
fn u32_at<I: Image + ?Sized>(c: &Checker<'_, I>, vaddr: u64, what: &dyn Fn() -> String) -> Result<u64, FileProblem> {
    Ok(le(&c.read_vaddr(vaddr, 4, what)?, 0, 4))
}

/// What `dlsym` and the loader's symbol lookup walk: the GNU and SysV hash tables (a bucket
/// count of 0 divides by zero; a chain without its end bit runs off the mapping), every dynamic
/// symbol they reach (named inside the string table), the version tables (their chains inside
/// a segment, each version index the symbols use defined).
fn check_symbol_lookup<I: Image + ?Sized>(
    c: &Checker<'_, I>,
    get: &dyn Fn(u64) -> Option<u64>,
    string_ok: &dyn Fn(u64) -> bool,
) -> Result<(), FileProblem> {
    const MAX: u64 = 1 << 20;
    let add = |a: u64, b: u64, what: &str| a.checked_add(b).ok_or_else(|| FileProblem::Corrupt(format!("{what} overflows")));
    let mut nsyms = 0u64;
    if let Some(h) = get(0x6fff_fef5) {
        let what = || "DT_GNU_HASH".to_string();
        let hdr = c.read_vaddr(h, 16, &what)?;
        let (nbuckets, symoffset, bloom) = (le(&hdr, 0, 4), le(&hdr, 4, 4), le(&hdr, 8, 4));
        if nbuckets == 0 || nbuckets > MAX || bloom == 0 || !bloom.is_power_of_two() || bloom > MAX {
            return corrupt(format!("DT_GNU_HASH has {nbuckets} buckets and {bloom} bloom words"));
        }
        let buckets_at = add(h, 16 + bloom * 8, "DT_GNU_HASH")?;
        let buckets = c.read_vaddr(buckets_at, nbuckets * 4, &what)?;
        let chain_at = add(buckets_at, nbuckets * 4, "DT_GNU_HASH")?;
        let mut top = 0;
        for b in buckets.chunks_exact(4).map(|b| le(b, 0, 4)) {
            if b != 0 && b < symoffset {
                return corrupt(format!("DT_GNU_HASH bucket {b} is below its first hashed symbol {symoffset}"));
            }
            top = top.max(b);
        }
        nsyms = symoffset;
        if top != 0 {
            // Every chain ends at or before the end of the last one: walk that one.
            let mut i = top;
            loop {
                if i - symoffset > MAX {
                    return corrupt("a DT_GNU_HASH chain has no end".into());
                }
                let at = add(chain_at, (i - symoffset) * 4, "DT_GNU_HASH")?;
                let v = u32_at(c, at, &what)?;
                i += 1;
                if v & 1 == 1 {
                    break;
                }
            }
            nsyms = i;
        }
    }
    if let Some(h) = get(4) {
        let what = || "DT_HASH".to_string();
        let hdr = c.read_vaddr(h, 8, &what)?;
        let (nbucket, nchain) = (le(&hdr, 0, 4), le(&hdr, 4, 4));
        if nbucket == 0 || nbucket > MAX || nchain > MAX {
            return corrupt(format!("DT_HASH has {nbucket} buckets and {nchain} chain entries"));
        }
        let t = c.read_vaddr(h + 8, (nbucket + nchain) * 4, &what)?;
        if let Some(v) = t.chunks_exact(4).map(|b| le(b, 0, 4)).find(|v| *v >= nchain) {
            return corrupt(format!("DT_HASH names symbol {v}, past its {nchain} chain entries"));
        }
        nsyms = nsyms.max(nchain);
    }
    if nsyms > MAX {
        return corrupt(format!("{nsyms} dynamic symbols"));
    }
    if nsyms > 0 {
        let Some(symtab) = get(6) else { return corrupt("hash tables without DT_SYMTAB".into()) };
        let syms = c.read_vaddr(symtab, nsyms * SYM_LEN, &|| format!("the dynamic symbol table ({nsyms} symbols)"))?;
        for (i, s) in syms.chunks_exact(SYM_LEN as usize).enumerate() {
            check_dynsym(c, s, i as u64, string_ok)?;
        }
    }
    // Version definitions and needs: chains the loader follows until a 0 link.
    let mut ndx_high = 1u64;
    if let Some(mut at) = get(0x6fff_fffc) {
        for n in 0.. {
            if n > 0xffff {
                return corrupt("the DT_VERDEF chain has no end".into());
            }
            let what = || "DT_VERDEF".to_string();
            let d = c.read_vaddr(at, 20, &what)?;
            if le(&d, 0, 2) != 1 {
                return corrupt(format!("a version definition has vd_version {}", le(&d, 0, 2)));
            }
            ndx_high = ndx_high.max(le(&d, 4, 2) & 0x7fff);
            let aux = c.read_vaddr(add(at, le(&d, 12, 4), "DT_VERDEF")?, 8, &what)?;
            if !string_ok(le(&aux, 0, 4)) {
                return corrupt("a version definition's name is not inside DT_STRTAB".into());
            }
            match le(&d, 16, 4) {
                0 => break,
                next => at = add(at, next, "DT_VERDEF")?,
            }
        }
    }
    if let Some(mut at) = get(0x6fff_fffe) {
        let mut steps = 0u64;
        loop {
            let what = || "DT_VERNEED".to_string();
            let e = c.read_vaddr(at, 16, &what)?;
            if le(&e, 0, 2) != 1 || !string_ok(le(&e, 4, 4)) {
                return corrupt("a version need has a bad vn_version or file name".into());
            }
            let mut aux = add(at, le(&e, 8, 4), "DT_VERNEED")?;
            loop {
                steps += 1;
                if steps > 0xffff {
                    return corrupt("the DT_VERNEED chain has no end".into());
                }
                let a = c.read_vaddr(aux, 16, &what)?;
                ndx_high = ndx_high.max(le(&a, 6, 2) & 0x7fff);
                if !string_ok(le(&a, 8, 4)) {
                    return corrupt("a needed version's name is not inside DT_STRTAB".into());
                }
                match le(&a, 12, 4) {
                    0 => break,
                    next => aux = add(aux, next, "DT_VERNEED")?,
                }
            }
            match le(&e, 12, 4) {
                0 => break,
                next => at = add(at, next, "DT_VERNEED")?,
            }
        }
    }
    if let (Some(versym), true) = (get(0x6fff_fff0), nsyms > 0) {
        let v = c.read_vaddr(versym, nsyms * 2, &|| "DT_VERSYM".into())?;
        if let Some(x) = v.chunks_exact(2).map(|b| le(b, 0, 2) & 0x7fff).find(|x| *x > ndx_high) {
            return corrupt(format!("a symbol has version index {x}, but the highest defined or needed is {ndx_high}"));
        }
    }
    Ok(())
}

fn check_relocs<I: Image + ?Sized>(
    c: &Checker<'_, I>,
    table: &[u8],
    ent: u64,
    symtab: Option<u64>,
    textrel: bool,
    string_ok: &dyn Fn(u64) -> bool,
) -> Result<(), FileProblem> {
    for r in table.chunks_exact(ent as usize) {
        let (target, info) = (le(r, 0, 8), le(r, 8, 8));
        let typ = info & 0xffff_ffff;
        if typ == 0 {
            continue; // R_*_NONE (also the zeros past p_filesz)
        }
        let l = c.in_load(target, 8, &|| "a relocation's target".into())?;
        if !l.writable() && !textrel {
            return corrupt(format!("a relocation writes to 0x{target:x}, in a read-only segment (and there is no DT_TEXTREL)"));
        }
        if Some(typ) == R_IRELATIVE && ent == 24 {
            // The loader calls the addend as the resolver.
            let resolver = le(r, 16, 8);
            if !c.load_of(resolver, 1).is_some_and(|l| l.executable()) {
                return corrupt(format!("an IRELATIVE relocation's resolver 0x{resolver:x} is not in an executable segment"));
            }
        }
        let sym = info >> 32;
        if sym != 0 {
            let Some(base) = symtab else { return corrupt("a relocation names a symbol but there is no DT_SYMTAB".into()) };
            let at = sym.checked_mul(SYM_LEN).and_then(|o| o.checked_add(base));
            let Some(at) = at else { return corrupt(format!("relocation symbol {sym} overflows")) };
            let s = c.read_vaddr(at, SYM_LEN, &|| format!("dynamic symbol {sym}"))?;
            check_dynsym(c, &s, sym, string_ok)?;
        }
    }
    Ok(())
}

fn check_sections<I: Image + ?Sized>(
    c: &Checker<'_, I>,
    shoff: u64,
    shentsize: u64,
    shnum: u64,
    shstrndx: u64,
) -> Result<(u64, bool), FileProblem> {
    if shoff == 0 {
        // No section table (`sstrip`): nothing to check, no .symtab.
        return Ok((0, false));
    }
    if shentsize != SHDR_LEN {
        return corrupt(format!("e_shentsize is {shentsize}, not {SHDR_LEN}"));
    }
    if shnum != 0 {
        c.span(shoff, shnum * SHDR_LEN, &|| format!("the section header table ({shnum} entries at offset 0x{shoff:x})"))?;
    }
    let first = c.read(shoff, SHDR_LEN, &|| format!("the section header table (at offset 0x{shoff:x})"))?;
    // Extended numbering: section 0 holds the count and the string table index.
    let count = if shnum == 0 { le(&first, 32, 8) } else { shnum };
    let strndx = if shstrndx == 0xffff { le(&first, 40, 4) } else { shstrndx };
    if count > MAX_SECTIONS {
        return corrupt(format!("{count} section headers"));
    }
    let table_len = count * SHDR_LEN;
    c.span(shoff, table_len, &|| format!("the section header table ({count} entries at offset 0x{shoff:x})"))?;
    if strndx >= count.max(1) {
        return corrupt(format!("e_shstrndx {strndx} is not a section (there are {count})"));
    }
    let mut has_symtab = false;
    // (symbol table section, its string table section), checked once all types are known.
    let mut links: Vec<(u64, u64)> = Vec::new();
    let mut types: Vec<u32> = Vec::with_capacity(count as usize);
    const CHUNK: u64 = 1024;
    let mut i = 0;
    while i < count {
        let n = (count - i).min(CHUNK);
        let t = c.read(shoff + i * SHDR_LEN, n * SHDR_LEN, &|| "the section header table".into())?;
        for (j, h) in t.chunks_exact(SHDR_LEN as usize).enumerate() {
            let k = i + j as u64;
            let (typ, offset, size, link, entsize) = (le(h, 4, 4) as u32, le(h, 24, 8), le(h, 32, 8), le(h, 40, 4), le(h, 56, 8));
            types.push(typ);
            if typ != SHT_NULL && typ != SHT_NOBITS {
                c.span(offset, size, &|| format!("section {k} (sh_type {typ}, at offset 0x{offset:x}, 0x{size:x} bytes)"))?;
            }
            if typ == SHT_SYMTAB || typ == SHT_DYNSYM {
                if entsize != SYM_LEN || size % SYM_LEN != 0 {
                    return corrupt(format!("symbol table section {k}: sh_entsize {entsize}, sh_size {size}"));
                }
                if link == 0 || link >= count {
                    return corrupt(format!("symbol table section {k}: its string table {link} is not a section"));
                }
                has_symtab |= typ == SHT_SYMTAB;
                links.push((k, link));
            }
        }
        i += n;
    }
    if let Some((k, link)) = links.into_iter().find(|(_, l)| types[*l as usize] != SHT_STRTAB) {
        return corrupt(format!("symbol table section {k}: its string table {link} is not a string table section"));
    }
    Ok((count, has_symtab))
}

/// [`check_image`] on an open file, at the size `fstat` gives now.
pub fn check_file(file: &std::fs::File) -> Result<CheckedElf, FileProblem> {
    let size = file.metadata().map_err(|e| FileProblem::Io(e.to_string()))?.size();
    check_image(&FileImage { file, size })
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
    fn check_image_on_this_test_binary_and_its_cuts() {
        let exe = std::fs::read(std::env::current_exe().unwrap()).unwrap();
        if exe.get(16) != Some(&3) {
            return; // not a PIE: an executable is refused as such
        }
        let full = check_image(&exe[..]).expect("the test binary's own headers are sound");
        assert!(full.has_symtab && full.sections > 0 && !full.loads.is_empty());
        assert_eq!(check_image(&exe[..0]), Err(FileProblem::Empty));
        assert_eq!(check_image(&exe[..3]), Err(FileProblem::NotElf));
        assert_eq!(check_image(&b"hello, world"[..]), Err(FileProblem::NotElf));
        for n in [16, 64, 700, exe.len() / 2, exe.len() - 1] {
            assert!(matches!(check_image(&exe[..n]), Err(FileProblem::Truncated { size, .. }) if size == n as u64), "cut at {n}");
        }
        // A field read from the file never overflows: e_phoff at 2^64-8.
        let mut bad = exe.clone();
        bad[32..40].copy_from_slice(&(u64::MAX - 7).to_le_bytes());
        assert!(matches!(check_image(&bad[..]), Err(FileProblem::Corrupt(m)) if m.contains("overflows")));
    }

    #[test]
    fn open_regular_refuses_what_is_not_a_file() {
        assert_eq!(open_regular(Path::new("/dev/null")).unwrap_err(), FileProblem::NotRegular("a character device"));
        assert_eq!(open_regular(Path::new("/")).unwrap_err(), FileProblem::NotRegular("a directory"));
        assert!(matches!(open_regular(Path::new("/nonexistent/x")), Err(FileProblem::Io(_))));
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
