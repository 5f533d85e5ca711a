//! Checking a file before the doctor loads it: its ELF headers, read through the `object`
//! crate's `elf` structures over a [`ReadRef`] (a byte slice, or a file through `ReadCache`).
//!
//! `dlopen` trusts the file: a program header that points past the end of a truncated copy makes
//! the loader touch a page the file does not have (SIGBUS), a dynamic section outside every
//! segment makes it read unmapped memory (SIGSEGV). [`check_image`] reads the headers the loader
//! reads and checks them against the file, with checked arithmetic on every size and offset
//! (`object`'s structures are byte arrays: no alignment is assumed), before the doctor lets
//! `dlopen` see it. Only the doctor needs this: nothing of the library's C ABI calls it.

use crate::nvshmem::elf::{OpenError, open_regular as open_regular_file};
use object::LittleEndian as LE;
use object::elf::{self, Dyn64, FileHeader64, GnuHashHeader, HashHeader, Ident, ProgramHeader64, SectionHeader64, Sym64};
use object::pod::Pod;
use object::read::{ReadCache, ReadRef};
use std::path::Path;

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

impl From<OpenError> for FileProblem {
    fn from(e: OpenError) -> FileProblem {
        match e {
            OpenError::NotRegular(kind) => FileProblem::NotRegular(kind),
            OpenError::Io(e) => FileProblem::Io(io_reason(&e)),
        }
    }
}

/// An I/O error as the doctor names it: the system's text with the errno's name, so that a
/// permission problem reads as such ("Permission denied (EACCES, os error 13)").
pub fn io_reason(e: &std::io::Error) -> String {
    let Some(code) = e.raw_os_error() else { return e.to_string() };
    let name = match code {
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::ENOENT => "ENOENT",
        libc::ENOTDIR => "ENOTDIR",
        libc::ELOOP => "ELOOP",
        libc::EIO => "EIO",
        libc::ENAMETOOLONG => "ENAMETOOLONG",
        libc::ENXIO => "ENXIO",
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::ENOMEM => "ENOMEM",
        libc::ESTALE => "ESTALE",
        _ => return e.to_string(),
    };
    let text = e.to_string();
    let text = text.strip_suffix(&format!(" (os error {code})")).unwrap_or(&text);
    format!("{text} ({name}, os error {code})")
}

/// What is at a path, told from `lstat` and `stat` alone: nothing is opened, so a FIFO is never
/// waited on and a device never touched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// Nothing there (ENOENT, or ENOTDIR: a path through a file): the reason.
    Missing(String),
    /// A regular file (through any symbolic links).
    File,
    /// Something that is not a regular file, named: "a FIFO (named pipe)", "a directory",
    /// "a dangling symbolic link (to /x)".
    NotAFile(String),
    /// `stat` failed otherwise (EACCES, ELOOP, ...): the reason.
    Unreadable(String),
}

/// What is at `path` ([`Entry`]).
pub fn probe(path: &Path) -> Entry {
    use std::io::ErrorKind::{NotADirectory, NotFound};
    use std::os::unix::fs::FileTypeExt;
    let link = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if matches!(e.kind(), NotFound | NotADirectory) => return Entry::Missing(io_reason(&e)),
        Err(e) => return Entry::Unreadable(io_reason(&e)),
    };
    let meta = match std::fs::metadata(path) {
        Ok(m) => m,
        Err(e) if link.file_type().is_symlink() && matches!(e.kind(), NotFound | NotADirectory) => {
            let to = std::fs::read_link(path).map_or_else(|_| "?".to_string(), |t| t.display().to_string());
            return Entry::NotAFile(format!("a dangling symbolic link (to {to})"));
        }
        Err(e) => return Entry::Unreadable(io_reason(&e)),
    };
    let t = meta.file_type();
    let kind = if t.is_file() {
        return Entry::File;
    } else if t.is_dir() {
        "a directory"
    } else if t.is_fifo() {
        "a FIFO (named pipe)"
    } else if t.is_socket() {
        "a socket"
    } else if t.is_char_device() {
        "a character device"
    } else if t.is_block_device() {
        "a block device"
    } else {
        "not a file of a known type"
    };
    Entry::NotAFile(kind.to_string())
}

/// Opens `path` for reading only if it is a regular file (`nvshmem::elf::open_regular`).
pub fn open_regular(path: &Path) -> Result<std::fs::File, FileProblem> {
    open_regular_file(path).map_err(FileProblem::from)
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
        self.flags & elf::PF_W.0 != 0
    }
    pub fn executable(&self) -> bool {
        self.flags & elf::PF_X.0 != 0
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

const fn size<T>() -> u64 {
    std::mem::size_of::<T>() as u64
}

const IDENT_LEN: u64 = size::<Ident>();
const EHDR_LEN: u64 = size::<FileHeader64<LE>>();
const PHDR_LEN: u64 = size::<ProgramHeader64<LE>>();
const SHDR_LEN: u64 = size::<SectionHeader64<LE>>();
const SYM_LEN: u64 = size::<Sym64<LE>>();
const DYN_LEN: u64 = size::<Dyn64<LE>>();
const RELA_LEN: u64 = size::<elf::Rela64<LE>>();
const REL_LEN: u64 = size::<elf::Rel64<LE>>();
/// More than any real file needs; refused as corrupt so that no count read from a file decides
/// how much is allocated or how long the check runs.
const MAX_SECTIONS: u64 = 1 << 20;
/// An end past this (256 TiB) is no truncated copy of a real file: corrupt.
const ABSURD_END: u64 = 1 << 48;
const MAX_DYN_ENTRIES: u64 = 1 << 16;
const MAX_STRSZ: u64 = 16 << 20;
const MAX_RELOCS: u64 = 1 << 22;

#[cfg(target_arch = "x86_64")]
const R_IRELATIVE: Option<elf::RelocationType> = Some(elf::R_X86_64_IRELATIVE);
#[cfg(target_arch = "aarch64")]
const R_IRELATIVE: Option<elf::RelocationType> = Some(elf::R_AARCH64_IRELATIVE);
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const R_IRELATIVE: Option<elf::RelocationType> = None;

#[cfg(target_arch = "x86_64")]
const NATIVE_MACHINE: Option<(elf::Machine, &str)> = Some((elf::EM_X86_64, "x86-64"));
#[cfg(target_arch = "aarch64")]
const NATIVE_MACHINE: Option<(elf::Machine, &str)> = Some((elf::EM_AARCH64, "AArch64"));
#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
const NATIVE_MACHINE: Option<(elf::Machine, &str)> = None;

fn pt_name(typ: elf::ProgramType) -> String {
    match typ {
        elf::PT_LOAD => "PT_LOAD".into(),
        elf::PT_DYNAMIC => "PT_DYNAMIC".into(),
        elf::PT_INTERP => "PT_INTERP".into(),
        elf::PT_NOTE => "PT_NOTE".into(),
        elf::PT_PHDR => "PT_PHDR".into(),
        elf::PT_TLS => "PT_TLS".into(),
        elf::PT_GNU_EH_FRAME => "PT_GNU_EH_FRAME".into(),
        elf::PT_GNU_PROPERTY => "PT_GNU_PROPERTY".into(),
        t => format!("type 0x{:x}", t.0),
    }
}

/// The `T`s that fill `bytes` (a whole number of them: the callers read multiples of the size).
fn pods<T: Pod>(bytes: &[u8]) -> &[T] {
    object::pod::slice_from_bytes(bytes, bytes.len() / std::mem::size_of::<T>()).map_or(&[], |(s, _)| s)
}

/// One `T` at the start of `bytes` (at least its size: the callers read exactly that).
fn pod<T: Pod>(bytes: &[u8]) -> Result<&T, FileProblem> {
    object::pod::from_bytes(bytes).map(|(t, _)| t).map_err(|()| FileProblem::Corrupt("a header shorter than its type".into()))
}

/// A version index without its hidden flag (`VERSYM_HIDDEN`).
fn version_index(v: elf::VersionIndex) -> u16 {
    elf::VersymIndex::from(v).index().0
}

fn corrupt<T>(why: String) -> Result<T, FileProblem> {
    Err(FileProblem::Corrupt(why))
}

struct Checker<'d, R: ReadRef<'d>> {
    data: R,
    size: u64,
    loads: Vec<LoadSegment>,
    _data: std::marker::PhantomData<&'d [u8]>,
}

impl<'d, R: ReadRef<'d>> Checker<'d, R> {
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

    /// The `len` bytes at `offset` (checked to be inside the file first).
    fn read(&self, offset: u64, len: u64, what: &dyn Fn() -> String) -> Result<&'d [u8], FileProblem> {
        let end = self.span(offset, len, what)?;
        // The file may have shrunk since its size was taken: that is a truncation too.
        self.data.read_bytes_at(offset, len).map_err(|()| FileProblem::Truncated { what: what(), end, size: self.size })
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
            out[..n as usize].copy_from_slice(bytes);
        }
        Ok(out)
    }

    /// A `T` of the memory image at `vaddr`.
    fn vaddr_pod<T: Pod + Copy>(&self, vaddr: u64, what: &dyn Fn() -> String) -> Result<T, FileProblem> {
        pod::<T>(&self.read_vaddr(vaddr, size::<T>(), what)?).copied()
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
pub fn check_image<'d, R: ReadRef<'d>>(data: R) -> Result<CheckedElf, FileProblem> {
    let file_size = data.len().map_err(|()| FileProblem::Io("its size cannot be read".into()))?;
    if file_size == 0 {
        return Err(FileProblem::Empty);
    }
    let mut c = Checker { data, size: file_size, loads: Vec::new(), _data: std::marker::PhantomData };
    if file_size < 4 || c.data.read_bytes_at(0, 4).map_or(true, |m| m != &elf::ELFMAG[..]) {
        return Err(FileProblem::NotElf);
    }
    // The identification first (a file too short for the rest of the header is still told by
    // its class and data encoding): its 16 bytes, as the start of an otherwise zero header.
    let mut start = [0u8; EHDR_LEN as usize];
    start[..IDENT_LEN as usize].copy_from_slice(c.read(0, IDENT_LEN, &|| "the ELF identification".into())?);
    let ident: &Ident = &pod::<FileHeader64<LE>>(&start)?.e_ident;
    match ident.class {
        elf::ELFCLASS64 => {}
        elf::ELFCLASS32 => return Err(FileProblem::Unsupported("a 32-bit ELF file (ELFCLASS32)".into())),
        v => return corrupt(format!("EI_CLASS is {}", v.0)),
    }
    match ident.data {
        elf::ELFDATA2LSB => {}
        elf::ELFDATA2MSB => return Err(FileProblem::Unsupported("a big-endian ELF file".into())),
        v => return corrupt(format!("EI_DATA is {}", v.0)),
    }
    if ident.version != elf::EV_CURRENT {
        return corrupt(format!("EI_VERSION is {}", ident.version.0));
    }
    let eh: &FileHeader64<LE> = pod(c.read(0, EHDR_LEN, &|| "the ELF header".into())?)?;
    match eh.e_type.get(LE) {
        elf::ET_DYN => {}
        elf::ET_REL => return Err(FileProblem::Unsupported("an object file (ET_REL), not a shared library".into())),
        elf::ET_EXEC => return Err(FileProblem::Unsupported("an executable (ET_EXEC), not a shared library".into())),
        elf::ET_CORE => return Err(FileProblem::Unsupported("a core dump (ET_CORE), not a shared library".into())),
        t => return corrupt(format!("e_type is {}", t.0)),
    }
    let machine = eh.e_machine.get(LE);
    if let Some((want, name)) = NATIVE_MACHINE {
        if machine != want {
            return Err(FileProblem::Unsupported(format!("built for machine {} (e_machine), not for {name}", machine.0)));
        }
    }
    if eh.e_version.get(LE) != u32::from(elf::EV_CURRENT.0) {
        return corrupt(format!("e_version is {}", eh.e_version.get(LE)));
    }
    let (phoff, shoff) = (eh.e_phoff.get(LE), eh.e_shoff.get(LE));
    let (ehsize, phentsize, phnum) = (u64::from(eh.e_ehsize.get(LE)), u64::from(eh.e_phentsize.get(LE)), u64::from(eh.e_phnum.get(LE)));
    let (shentsize, shnum, shstrndx) =
        (u64::from(eh.e_shentsize.get(LE)), u64::from(eh.e_shnum.get(LE)), u64::from(eh.e_shstrndx.get(LE).0));
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
    let table = c.read(phoff, phnum * PHDR_LEN, &|| format!("the program header table ({phnum} entries at offset 0x{phoff:x})"))?;
    let mut others = Vec::new();
    let mut dynamic = None;
    for (i, h) in pods::<ProgramHeader64<LE>>(table).iter().enumerate() {
        let (typ, flags) = (h.p_type.get(LE), h.p_flags.get(LE).0);
        let (offset, vaddr, filesz, memsz, align) =
            (h.p_offset.get(LE), h.p_vaddr.get(LE), h.p_filesz.get(LE), h.p_memsz.get(LE), h.p_align.get(LE));
        let what = || format!("program header {i} ({})", pt_name(typ));
        if typ == elf::PT_LOAD && filesz > memsz {
            return corrupt(format!("{}: p_filesz 0x{filesz:x} > p_memsz 0x{memsz:x}", what()));
        }
        if typ == elf::PT_LOAD || filesz > 0 {
            c.span(offset, filesz, &what)?;
        }
        if typ != elf::PT_LOAD {
            if typ == elf::PT_DYNAMIC {
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
            elf::PT_DYNAMIC | elf::PT_INTERP | elf::PT_NOTE | elf::PT_PHDR | elf::PT_GNU_EH_FRAME | elf::PT_GNU_PROPERTY => memsz,
            elf::PT_TLS => filesz,
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
    Ok(CheckedElf { size: file_size, loads: c.loads, sections, has_symtab })
}

fn check_dynamic<'d, R: ReadRef<'d>>(c: &Checker<'d, R>, vaddr: u64, memsz: u64) -> Result<(), FileProblem> {
    let n = (memsz / DYN_LEN).min(MAX_DYN_ENTRIES);
    let bytes = c.read_vaddr(vaddr, n * DYN_LEN, &|| "the dynamic section".into())?;
    let mut tags: Vec<(elf::DynamicTag, u64)> = Vec::new();
    for e in pods::<Dyn64<LE>>(&bytes) {
        let (tag, val) = (e.d_tag.get(LE), e.d_val.get(LE));
        if tag == elf::DT_NULL {
            break;
        }
        tags.push((tag, val));
    }
    let get = |t: elf::DynamicTag| tags.iter().find(|(k, _)| *k == t).map(|(_, v)| *v);
    // (address tag, size tag, name)
    let sized = [
        (elf::DT_STRTAB, elf::DT_STRSZ, "DT_STRTAB/DT_STRSZ"),
        (elf::DT_RELA, elf::DT_RELASZ, "DT_RELA/DT_RELASZ"),
        (elf::DT_REL, elf::DT_RELSZ, "DT_REL/DT_RELSZ"),
        (elf::DT_JMPREL, elf::DT_PLTRELSZ, "DT_JMPREL/DT_PLTRELSZ"),
        (elf::DT_INIT_ARRAY, elf::DT_INIT_ARRAYSZ, "DT_INIT_ARRAY/DT_INIT_ARRAYSZ"),
        (elf::DT_FINI_ARRAY, elf::DT_FINI_ARRAYSZ, "DT_FINI_ARRAY/DT_FINI_ARRAYSZ"),
        (elf::DT_PREINIT_ARRAY, elf::DT_PREINIT_ARRAYSZ, "DT_PREINIT_ARRAY/DT_PREINIT_ARRAYSZ"),
        (elf::DT_RELR, elf::DT_RELRSZ, "DT_RELR/DT_RELRSZ"),
    ];
    for (at, sz, name) in sized {
        if let Some(a) = get(at) {
            c.in_load(a, get(sz).unwrap_or(0), &|| name.to_string())?;
        }
    }
    // (address tag, fixed size, name)
    let fixed = [
        (elf::DT_PLTGOT, 8, "DT_PLTGOT"),
        (elf::DT_HASH, size::<HashHeader<LE>>(), "DT_HASH"),
        (elf::DT_SYMTAB, SYM_LEN, "DT_SYMTAB"),
        (elf::DT_GNU_HASH, size::<GnuHashHeader<LE>>(), "DT_GNU_HASH"),
        (elf::DT_VERSYM, 2, "DT_VERSYM"),
        (elf::DT_VERDEF, size::<elf::Verdef<LE>>(), "DT_VERDEF"),
        (elf::DT_VERNEED, size::<elf::Verneed<LE>>(), "DT_VERNEED"),
        (elf::DT_INIT, 1, "DT_INIT"),
        (elf::DT_FINI, 1, "DT_FINI"),
    ];
    for (at, len, name) in fixed {
        if let Some(a) = get(at) {
            let l = c.in_load(a, len, &|| name.to_string())?;
            if (at == elf::DT_INIT || at == elf::DT_FINI) && !l.executable() {
                return corrupt(format!("{name} 0x{a:x} is not in an executable segment"));
            }
        }
    }
    for (tag, want, name) in
        [(elf::DT_SYMENT, SYM_LEN, "DT_SYMENT"), (elf::DT_RELAENT, RELA_LEN, "DT_RELAENT"), (elf::DT_RELENT, REL_LEN, "DT_RELENT")]
    {
        if let Some(v) = get(tag) {
            if v != want {
                return corrupt(format!("{name} is {v}, not {want}"));
            }
        }
    }
    // Strings named by offset: inside the string table, NUL-terminated there.
    let named = |t: elf::DynamicTag| matches!(t, elf::DT_NEEDED | elf::DT_SONAME | elf::DT_RPATH | elf::DT_RUNPATH);
    let strsz = get(elf::DT_STRSZ).unwrap_or(0);
    if strsz > MAX_STRSZ {
        return corrupt(format!("DT_STRSZ is {strsz}"));
    }
    let strtab = match get(elf::DT_STRTAB) {
        Some(a) => c.read_vaddr(a, strsz, &|| "the dynamic string table".into())?,
        None if tags.iter().any(|(t, _)| named(*t)) => return corrupt("DT_NEEDED without DT_STRTAB".into()),
        None => Vec::new(),
    };
    let string_ok = |off: u64| usize::try_from(off).ok().and_then(|o| strtab.get(o..)).is_some_and(|s| s.contains(&0));
    for (tag, val) in &tags {
        if named(*tag) && !string_ok(*val) {
            return corrupt(format!("dynamic tag {}'s string at offset {val} is not inside DT_STRTAB ({strsz} bytes)", tag.0));
        }
    }
    // Relocations: each target inside a segment, each symbol inside the symbol table and named
    // inside the string table.
    let symtab = get(elf::DT_SYMTAB);
    // DT_TEXTREL, or DF_TEXTREL in DT_FLAGS: the loader makes the text writable to relocate it.
    let textrel = get(elf::DT_TEXTREL).is_some() || get(elf::DT_FLAGS).is_some_and(|f| f & elf::DF_TEXTREL.0 != 0);
    let plt_ent = if get(elf::DT_PLTREL) == Some(elf::DT_REL.0 as u64) { REL_LEN } else { RELA_LEN };
    for (at, sz, ent) in
        [(elf::DT_RELA, elf::DT_RELASZ, RELA_LEN), (elf::DT_JMPREL, elf::DT_PLTRELSZ, plt_ent), (elf::DT_REL, elf::DT_RELSZ, REL_LEN)]
    {
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
            check_relocs(c, chunk, ent, symtab, textrel, &string_ok)?;
        }
    }
    check_symbol_lookup(c, &get, &string_ok)
}

/// One dynamic symbol: named inside the string table; a defined function inside an executable
/// segment, a defined object inside a segment (what a relocation or `dlsym` hands out is then
/// at least mapped, and a function is code).
fn check_dynsym<'d, R: ReadRef<'d>>(c: &Checker<'d, R>, s: &Sym64<LE>, i: u64, string_ok: &dyn Fn(u64) -> bool) -> Result<(), FileProblem> {
    if !string_ok(u64::from(s.st_name.get(LE))) {
        return corrupt(format!("dynamic symbol {i}'s name is not inside DT_STRTAB"));
    }
    let (typ, shndx, value, size) = (s.st_info.st_type(), s.st_shndx.get(LE), s.st_value.get(LE), s.st_size.get(LE));
    // Defined in a section of this file (not undefined, not SHN_ABS/COMMON/reserved).
    if shndx == elf::SHN_UNDEF || shndx.0 >= elf::SHN_LORESERVE {
        return Ok(());
    }
    match typ {
        elf::STT_FUNC | elf::STT_GNU_IFUNC if !c.load_of(value, 1).is_some_and(|l| l.executable()) => {
            corrupt(format!("dynamic symbol {i} is a function at 0x{value:x}, outside every executable segment"))
        }
        elf::STT_OBJECT if size > 0 && c.load_of(value, size).is_none() => {
            corrupt(format!("dynamic symbol {i} is an object at 0x{value:x} ({size} bytes), outside every segment"))
        }
        _ => Ok(()),
    }
}

/// What `dlsym` and the loader's symbol lookup walk: the GNU and SysV hash tables (a bucket
/// count of 0 divides by zero; a chain without its end bit runs off the mapping), every dynamic
/// symbol they reach (named inside the string table), the version tables (their chains inside
/// a segment, each version index the symbols use defined).
fn check_symbol_lookup<'d, R: ReadRef<'d>>(
    c: &Checker<'d, R>,
    get: &dyn Fn(elf::DynamicTag) -> Option<u64>,
    string_ok: &dyn Fn(u64) -> bool,
) -> Result<(), FileProblem> {
    const MAX: u64 = 1 << 20;
    let add = |a: u64, b: u64, what: &str| a.checked_add(b).ok_or_else(|| FileProblem::Corrupt(format!("{what} overflows")));
    let u32_at = |at: u64, what: &dyn Fn() -> String| c.vaddr_pod::<object::U32<LE>>(at, what).map(|v| u64::from(v.get(LE)));
    let mut nsyms = 0u64;
    if let Some(h) = get(elf::DT_GNU_HASH) {
        let what = || "DT_GNU_HASH".to_string();
        let hdr: GnuHashHeader<LE> = c.vaddr_pod(h, &what)?;
        let (nbuckets, symoffset, bloom) =
            (u64::from(hdr.bucket_count.get(LE)), u64::from(hdr.symbol_base.get(LE)), u64::from(hdr.bloom_count.get(LE)));
        if nbuckets == 0 || nbuckets > MAX || bloom == 0 || !bloom.is_power_of_two() || bloom > MAX {
            return corrupt(format!("DT_GNU_HASH has {nbuckets} buckets and {bloom} bloom words"));
        }
        let buckets_at = add(h, size::<GnuHashHeader<LE>>() + bloom * 8, "DT_GNU_HASH")?;
        let buckets = c.read_vaddr(buckets_at, nbuckets * 4, &what)?;
        let chain_at = add(buckets_at, nbuckets * 4, "DT_GNU_HASH")?;
        let mut top = 0;
        for b in pods::<object::U32<LE>>(&buckets).iter().map(|b| u64::from(b.get(LE))) {
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
                let v = u32_at(at, &what)?;
                i += 1;
                if v & 1 == 1 {
                    break;
                }
            }
            nsyms = i;
        }
    }
    if let Some(h) = get(elf::DT_HASH) {
        let what = || "DT_HASH".to_string();
        let hdr: HashHeader<LE> = c.vaddr_pod(h, &what)?;
        let (nbucket, nchain) = (u64::from(hdr.bucket_count.get(LE)), u64::from(hdr.chain_count.get(LE)));
        if nbucket == 0 || nbucket > MAX || nchain > MAX {
            return corrupt(format!("DT_HASH has {nbucket} buckets and {nchain} chain entries"));
        }
        let t = c.read_vaddr(h + size::<HashHeader<LE>>(), (nbucket + nchain) * 4, &what)?;
        if let Some(v) = pods::<object::U32<LE>>(&t).iter().map(|b| u64::from(b.get(LE))).find(|v| *v >= nchain) {
            return corrupt(format!("DT_HASH names symbol {v}, past its {nchain} chain entries"));
        }
        nsyms = nsyms.max(nchain);
    }
    if nsyms > MAX {
        return corrupt(format!("{nsyms} dynamic symbols"));
    }
    if nsyms > 0 {
        let Some(symtab) = get(elf::DT_SYMTAB) else { return corrupt("hash tables without DT_SYMTAB".into()) };
        let syms = c.read_vaddr(symtab, nsyms * SYM_LEN, &|| format!("the dynamic symbol table ({nsyms} symbols)"))?;
        for (i, s) in pods::<Sym64<LE>>(&syms).iter().enumerate() {
            check_dynsym(c, s, i as u64, string_ok)?;
        }
    }
    // Version definitions and needs: chains the loader follows until a 0 link.
    let mut ndx_high = 1u64;
    if let Some(mut at) = get(elf::DT_VERDEF) {
        for n in 0.. {
            if n > 0xffff {
                return corrupt("the DT_VERDEF chain has no end".into());
            }
            let what = || "DT_VERDEF".to_string();
            let d: elf::Verdef<LE> = c.vaddr_pod(at, &what)?;
            if d.vd_version.get(LE) != 1 {
                return corrupt(format!("a version definition has vd_version {}", d.vd_version.get(LE)));
            }
            ndx_high = ndx_high.max(u64::from(version_index(d.vd_ndx.get(LE))));
            let aux: elf::Verdaux<LE> = c.vaddr_pod(add(at, u64::from(d.vd_aux.get(LE)), "DT_VERDEF")?, &what)?;
            if !string_ok(u64::from(aux.vda_name.get(LE))) {
                return corrupt("a version definition's name is not inside DT_STRTAB".into());
            }
            match d.vd_next.get(LE) {
                0 => break,
                next => at = add(at, u64::from(next), "DT_VERDEF")?,
            }
        }
    }
    if let Some(mut at) = get(elf::DT_VERNEED) {
        let mut steps = 0u64;
        loop {
            let what = || "DT_VERNEED".to_string();
            let e: elf::Verneed<LE> = c.vaddr_pod(at, &what)?;
            if e.vn_version.get(LE) != 1 || !string_ok(u64::from(e.vn_file.get(LE))) {
                return corrupt("a version need has a bad vn_version or file name".into());
            }
            let mut aux = add(at, u64::from(e.vn_aux.get(LE)), "DT_VERNEED")?;
            loop {
                steps += 1;
                if steps > 0xffff {
                    return corrupt("the DT_VERNEED chain has no end".into());
                }
                let a: elf::Vernaux<LE> = c.vaddr_pod(aux, &what)?;
                ndx_high = ndx_high.max(u64::from(version_index(a.vna_other.get(LE))));
                if !string_ok(u64::from(a.vna_name.get(LE))) {
                    return corrupt("a needed version's name is not inside DT_STRTAB".into());
                }
                match a.vna_next.get(LE) {
                    0 => break,
                    next => aux = add(aux, u64::from(next), "DT_VERNEED")?,
                }
            }
            match e.vn_next.get(LE) {
                0 => break,
                next => at = add(at, u64::from(next), "DT_VERNEED")?,
            }
        }
    }
    if let (Some(versym), true) = (get(elf::DT_VERSYM), nsyms > 0) {
        let v = c.read_vaddr(versym, nsyms * 2, &|| "DT_VERSYM".into())?;
        if let Some(x) = pods::<elf::Versym<LE>>(&v).iter().map(|b| u64::from(b.0.get(LE).index().0)).find(|x| *x > ndx_high) {
            return corrupt(format!("a symbol has version index {x}, but the highest defined or needed is {ndx_high}"));
        }
    }
    Ok(())
}

fn check_relocs<'d, R: ReadRef<'d>>(
    c: &Checker<'d, R>,
    table: &[u8],
    ent: u64,
    symtab: Option<u64>,
    textrel: bool,
    string_ok: &dyn Fn(u64) -> bool,
) -> Result<(), FileProblem> {
    for e in table.chunks_exact(ent as usize) {
        // r_offset and r_info are the first 16 bytes of a REL and a RELA entry alike.
        let r: &elf::Rel64<LE> = pod(e)?;
        let target = r.r_offset.get(LE);
        let addend = if ent == RELA_LEN { Some(pod::<elf::Rela64<LE>>(e)?.r_addend.get(LE) as u64) } else { None };
        let typ = r.r_type(LE);
        if typ.0 == 0 {
            continue; // R_*_NONE (also the zeros past p_filesz)
        }
        let l = c.in_load(target, 8, &|| "a relocation's target".into())?;
        if !l.writable() && !textrel {
            return corrupt(format!("a relocation writes to 0x{target:x}, in a read-only segment (and there is no DT_TEXTREL)"));
        }
        if let (true, Some(resolver)) = (Some(typ) == R_IRELATIVE, addend) {
            // The loader calls the addend as the resolver.
            if !c.load_of(resolver, 1).is_some_and(|l| l.executable()) {
                return corrupt(format!("an IRELATIVE relocation's resolver 0x{resolver:x} is not in an executable segment"));
            }
        }
        let sym = u64::from(r.r_sym(LE));
        if sym != 0 {
            let Some(base) = symtab else { return corrupt("a relocation names a symbol but there is no DT_SYMTAB".into()) };
            let at = sym.checked_mul(SYM_LEN).and_then(|o| o.checked_add(base));
            let Some(at) = at else { return corrupt(format!("relocation symbol {sym} overflows")) };
            let s: Sym64<LE> = c.vaddr_pod(at, &|| format!("dynamic symbol {sym}"))?;
            check_dynsym(c, &s, sym, string_ok)?;
        }
    }
    Ok(())
}

fn check_sections<'d, R: ReadRef<'d>>(
    c: &Checker<'d, R>,
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
    let first: &SectionHeader64<LE> = pod(c.read(shoff, SHDR_LEN, &|| format!("the section header table (at offset 0x{shoff:x})"))?)?;
    // Extended numbering: section 0 holds the count and the string table index.
    let count = if shnum == 0 { first.sh_size.get(LE) } else { shnum };
    let strndx = if shstrndx == u64::from(elf::SHN_XINDEX.0) { u64::from(first.sh_link.get(LE)) } else { shstrndx };
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
    let mut types: Vec<elf::SectionType> = Vec::with_capacity(count as usize);
    const CHUNK: u64 = 1024;
    let mut i = 0;
    while i < count {
        let n = (count - i).min(CHUNK);
        let t = c.read(shoff + i * SHDR_LEN, n * SHDR_LEN, &|| "the section header table".into())?;
        for (j, h) in pods::<SectionHeader64<LE>>(t).iter().enumerate() {
            let k = i + j as u64;
            let (typ, offset, size, link, entsize) =
                (h.sh_type.get(LE), h.sh_offset.get(LE), h.sh_size.get(LE), u64::from(h.sh_link.get(LE)), h.sh_entsize.get(LE));
            types.push(typ);
            if typ != elf::SHT_NULL && typ != elf::SHT_NOBITS {
                c.span(offset, size, &|| format!("section {k} (sh_type {}, at offset 0x{offset:x}, 0x{size:x} bytes)", typ.0))?;
            }
            if typ == elf::SHT_SYMTAB || typ == elf::SHT_DYNSYM {
                if entsize != SYM_LEN || size % SYM_LEN != 0 {
                    return corrupt(format!("symbol table section {k}: sh_entsize {entsize}, sh_size {size}"));
                }
                if link == 0 || link >= count {
                    return corrupt(format!("symbol table section {k}: its string table {link} is not a section"));
                }
                has_symtab |= typ == elf::SHT_SYMTAB;
                links.push((k, link));
            }
        }
        i += n;
    }
    if let Some((k, link)) = links.into_iter().find(|(_, l)| types[*l as usize] != elf::SHT_STRTAB) {
        return corrupt(format!("symbol table section {k}: its string table {link} is not a string table section"));
    }
    Ok((count, has_symtab))
}

/// [`check_image`] on an open file, read through `object`'s `ReadCache` (`pread`-like reads of
/// the ranges the check asks for, never a mapping: a file truncated meanwhile reads as
/// truncated, never as a SIGBUS).
pub fn check_file(file: &std::fs::File) -> Result<CheckedElf, FileProblem> {
    let cache = ReadCache::new(file);
    check_image(&cache)
}

#[cfg(test)]
mod tests {
    use super::*;

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
        // The same verdict through a file as through its bytes.
        let f = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
        assert_eq!(check_file(&f), Ok(full));
    }

    #[test]
    fn io_errors_are_named() {
        let e = std::io::Error::from_raw_os_error(libc::EACCES);
        assert_eq!(io_reason(&e), "Permission denied (EACCES, os error 13)");
        let e = std::io::Error::from_raw_os_error(libc::ELOOP);
        assert!(io_reason(&e).starts_with("Too many levels of symbolic links (ELOOP"), "{}", io_reason(&e));
    }

    #[test]
    fn probe_names_what_is_there_without_opening_it() {
        assert_eq!(probe(Path::new("/dev/null")), Entry::NotAFile("a character device".into()));
        assert_eq!(probe(Path::new("/")), Entry::NotAFile("a directory".into()));
        assert!(matches!(probe(Path::new("/nonexistent/x")), Entry::Missing(_)));
        assert!(matches!(probe(Path::new("/etc/passwd/x")), Entry::Missing(_)));
        let dir = std::env::temp_dir().join(format!("uxn-probe-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let (fifo, link, file) = (dir.join("fifo"), dir.join("dangling"), dir.join("file"));
        let c = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        #[allow(unsafe_code)]
        // SAFETY: a NUL-terminated path.
        let made = unsafe { libc::mkfifo(c.as_ptr(), 0o644) };
        assert_eq!(made, 0);
        std::os::unix::fs::symlink(dir.join("nothing"), &link).unwrap();
        std::fs::write(&file, b"x").unwrap();
        assert_eq!(probe(&fifo), Entry::NotAFile("a FIFO (named pipe)".into()));
        assert_eq!(probe(&link), Entry::NotAFile(format!("a dangling symbolic link (to {})", dir.join("nothing").display())));
        assert_eq!(probe(&file), Entry::File);
        std::fs::remove_dir_all(&dir).ok();
    }

    #[test]
    fn open_regular_refuses_what_is_not_a_file() {
        assert_eq!(open_regular(Path::new("/dev/null")).unwrap_err(), FileProblem::NotRegular("a character device"));
        assert_eq!(open_regular(Path::new("/")).unwrap_err(), FileProblem::NotRegular("a directory"));
        assert!(matches!(open_regular(Path::new("/nonexistent/x")), Err(FileProblem::Io(_))));
    }
}
