//! Fuzzes the C ABI of upcxx-extra-nvshmem the way a C caller uses it.
//!
//! Every input is decoded into a sequence of calls of the exported `upcxx_extra_nvshmem_*`
//! functions (attach, detach, set_peers, set_extent, to_global_ptr, from_global_ptr, offset,
//! to_offset, heap_query, table_bytes, select_source, locate, strerror, report, report_buffer,
//! last_error, version, set_peers_from_nvshmem) with random arguments: heap descriptions with NULL / huge / overflowing
//! bases and sizes, bad PE counts, peer tables with duplicate / negative / out-of-range ranks and
//! NULL / overflowing bases, addresses on and around every heap edge, NULL for each pointer.
//!
//! The functions are called through pointers whose return type is `int`, as C sees them, so a
//! status outside the enum is seen (and not undefined behaviour in the target). The oracle,
//! checked after every call:
//! * no crash, no panic (a panic aborts through libfuzzer-sys's hook even if the library's
//!   boundary would catch it; a PANIC status is a failure too);
//! * every status is one of the enum values;
//! * every status equals the one a shadow model (the heap and peer table last accepted, and the
//!   validation rules of `Heap::check` / `Peers::new`) predicts, and every OK answer equals
//!   the model's: raw = base[pe] + (sym - my_base), rank = rank_of_pe[pe]; back: pe =
//!   pe_of_rank[rank], sym = my_base + (raw - base[pe]); offsets, heap_query fields,
//!   table_bytes;
//! * out-parameters are untouched when a call fails;
//! * `last_error()` starts with the failing function's name after a failure and is unchanged
//!   after a success; `strerror` returns the documented descriptions; report_buffer's size,
//!   terminator and bounds.
//!
//! NVSHMEM is never loaded in this process: discovery answers NOT_LOADED, which the model knows.

#![no_main]

use arbitrary::{Arbitrary, Unstructured};
use libfuzzer_sys::fuzz_target;
use std::ffi::{CStr, c_char, c_int, c_void};
use std::mem::{offset_of, size_of, transmute};
use std::ptr::{null, null_mut};
use upcxx_extra_nvshmem::abi::{self, GlobalPtr as Gptr, Peer, Status};

// ---------------------------------------------------------------------------------------------
// The C view of the ABI: statuses and enum fields as plain ints.

const OK: c_int = 0;
const NULL_ARGUMENT: c_int = 1;
const NOT_LOADED: c_int = 2;
const OUT_OF_HEAP: c_int = 6;
const BAD_PE: c_int = 7;
const BAD_RANK: c_int = 8;
const TABLE_NOT_SET: c_int = 9;
const INVALID_ARGUMENT: c_int = 10;
const BUFFER_TOO_SMALL: c_int = 13;
const PANIC: c_int = 14;
const SOURCE_MANUAL: c_int = 4;

/// `upcxx_extra_nvshmem_heap_info_t` with the `source` enum as an int (a C caller may leave any
/// value there; attach must not read it).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CHeapInfo {
    base: *mut c_void,
    size: usize,
    mapped_size: usize,
    my_pe: c_int,
    n_pes: c_int,
    device: c_int,
    version_major: c_int,
    version_minor: c_int,
    version_patch: c_int,
    source: c_int,
}

/// `upcxx_extra_nvshmem_location_t` with the `source` enum as an int.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct CLocation {
    source: c_int,
    library: *const c_char,
    address: *mut c_void,
    symbol_size: usize,
    version_field: u32,
    is_device_address: bool,
}

const _: () = {
    use abi::{HeapInfo as H, Location as L};
    assert!(size_of::<CHeapInfo>() == size_of::<H>());
    assert!(offset_of!(CHeapInfo, size) == offset_of!(H, size));
    assert!(offset_of!(CHeapInfo, mapped_size) == offset_of!(H, mapped_size));
    assert!(offset_of!(CHeapInfo, my_pe) == offset_of!(H, my_pe));
    assert!(offset_of!(CHeapInfo, n_pes) == offset_of!(H, n_pes));
    assert!(offset_of!(CHeapInfo, device) == offset_of!(H, device));
    assert!(offset_of!(CHeapInfo, version_patch) == offset_of!(H, version_patch));
    assert!(offset_of!(CHeapInfo, source) == offset_of!(H, source));
    assert!(size_of::<CLocation>() == size_of::<L>());
    assert!(offset_of!(CLocation, library) == offset_of!(L, library));
    assert!(offset_of!(CLocation, symbol_size) == offset_of!(L, symbol_size));
    assert!(offset_of!(CLocation, is_device_address) == offset_of!(L, is_device_address));
    assert!(size_of::<Status>() == size_of::<c_int>());
};

/// The exported functions, typed as a C caller declares them (statuses as `int`).
mod c {
    use super::*;
    use abi::{HeapInfo as H, Location as L};
    type St = c_int;

    macro_rules! c_fn {
        ($name:ident, $f:path, ($($rust:ty),*) -> ($($c:ty),*)) => {
            #[inline(always)]
            pub fn $name() -> unsafe extern "C" fn($($c),*) -> St {
                let f: unsafe extern "C" fn($($rust),*) -> Status = $f;
                // SAFETY: same C ABI: a repr(C) enum is returned as an int, the pointer
                // arguments point to layout-identical structs (checked above).
                unsafe { transmute::<unsafe extern "C" fn($($rust),*) -> Status, unsafe extern "C" fn($($c),*) -> St>(f) }
            }
        };
    }
    c_fn!(attach, abi::upcxx_extra_nvshmem_attach, (*const H) -> (*const CHeapInfo));
    c_fn!(heap_query, abi::upcxx_extra_nvshmem_heap_query, (*mut H) -> (*mut CHeapInfo));
    c_fn!(detach, abi::upcxx_extra_nvshmem_detach, () -> ());
    c_fn!(offset, abi::upcxx_extra_nvshmem_offset, (*const c_void, *mut usize) -> (*const c_void, *mut usize));
    c_fn!(set_extent, abi::upcxx_extra_nvshmem_set_extent, (usize) -> (usize));
    c_fn!(to_offset, abi::upcxx_extra_nvshmem_to_offset,
          (*const c_void, usize, c_int, *mut c_int, *mut usize) -> (*const c_void, usize, c_int, *mut c_int, *mut usize));
    c_fn!(set_peers, abi::upcxx_extra_nvshmem_set_peers, (c_int, *const Peer) -> (c_int, *const Peer));
    c_fn!(set_peers_from_nvshmem, abi::upcxx_extra_nvshmem_set_peers_from_nvshmem, (*const c_int) -> (*const c_int));
    c_fn!(to_global_ptr, abi::upcxx_extra_nvshmem_to_global_ptr, (*const c_void, c_int, *mut Gptr) -> (*const c_void, c_int, *mut Gptr));
    c_fn!(from_global_ptr, abi::upcxx_extra_nvshmem_from_global_ptr,
          (c_int, *const c_void, *mut *mut c_void, *mut c_int) -> (c_int, *const c_void, *mut *mut c_void, *mut c_int));
    c_fn!(select_source, abi::upcxx_extra_nvshmem_select_source, (c_int) -> (c_int));
    c_fn!(locate, abi::upcxx_extra_nvshmem_locate, (c_int, *mut L) -> (c_int, *mut CLocation));
    c_fn!(table_bytes, abi::upcxx_extra_nvshmem_table_bytes, (*mut usize) -> (*mut usize));
    c_fn!(report, abi::upcxx_extra_nvshmem_report, (*mut libc::FILE) -> (*mut libc::FILE));
    c_fn!(report_buffer, abi::upcxx_extra_nvshmem_report_buffer, (*mut c_char, usize, *mut usize) -> (*mut c_char, usize, *mut usize));
    c_fn!(local_offset, abi::upcxx_extra_nvshmem_local_offset, (*const c_void, usize, *mut usize) -> (*const c_void, usize, *mut usize));
    c_fn!(from_offset, abi::upcxx_extra_nvshmem_from_offset,
          (c_int, usize, usize, *mut *mut c_void, *mut c_int) -> (c_int, usize, usize, *mut *mut c_void, *mut c_int));
    c_fn!(table_view, abi::upcxx_extra_nvshmem_table_view, (*mut abi::TableView) -> (*mut abi::TableView));
}

// ---------------------------------------------------------------------------------------------
// Input: a sequence of operations.

/// A pointer-sized value for a heap base.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum BaseSel {
    Null,
    /// Host memory owned by the fuzz target.
    Host(u16),
    One,
    Raw(usize),
    /// usize::MAX - k.
    NearMax(u16),
    Pow2(u8),
    Page(u32),
    /// A base that makes `base + size` land exactly on usize::MAX (fits) or one past (overflows).
    EndAtMax(bool),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum SizeSel {
    Zero,
    One,
    Small(u16),
    Host,
    Raw(usize),
    Pow2(u8),
    /// usize::MAX - base (fits exactly), or one more (overflows).
    ToMax(bool),
    Max,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum MappedSel {
    Zero,
    Size,
    SizeMinus1,
    SizePlus1,
    Half,
    Raw(usize),
    Max,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum CountSel {
    One,
    Small(u8),
    /// 1..=64.
    Mid(u8),
    /// 1..=4096 (large tables are as reachable, just not the common case: they are slow).
    Large(u16),
    Exactly4096,
    Zero,
    Minus1,
    Min,
    Max,
    Raw(i32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum IdxSel {
    /// x mod n (a valid index when n > 0).
    In(u32),
    Zero,
    Last,
    Minus1,
    N,
    NPlus1,
    Min,
    Max,
    Raw(i32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum IntSel {
    Small(i8),
    Raw(i32),
    Min,
    Max,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum SourceSel {
    Valid(u8),
    Raw(i32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
struct HeapDesc {
    base: BaseSel,
    size: SizeSel,
    mapped: MappedSel,
    n_pes: CountSel,
    my_pe: IdxSel,
    device: IntSel,
    version: (i32, i32, i32),
    source: SourceSel,
}

/// A point of a heap (mine, or a peer's).
#[derive(Arbitrary, Debug, Clone, Copy)]
enum Anchor {
    BaseMinus1,
    Base,
    LastByte,
    End,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum AddrSel {
    Null,
    Edge(Anchor),
    Near(Anchor, i8),
    /// base + x mod size.
    Inside(u64),
    Raw(usize),
    MaxMinus(u16),
}

/// The `n_pes` argument of set_peers.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum PeersCount {
    Heap,
    HeapPlus1,
    HeapMinus1,
    Other(CountSel),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum RankMode {
    Identity,
    Shuffled,
    Reversed,
    Rotated(u16),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum BasesMode {
    Uniform,
    Strided(u32),
    Random,
    /// All peers at the highest base that still fits the heap.
    AtMax,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum RankVal {
    DupOf(u16),
    SwapWith(u16),
    Minus1,
    N,
    Min,
    Max,
    Raw(i32),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum PeerBaseVal {
    Null,
    MyBase,
    MyBasePlus1,
    /// usize::MAX - size: the heap ends exactly at usize::MAX.
    MaxFit,
    /// usize::MAX - size + 1: overflows by one.
    Overflow1,
    UsizeMax,
    One,
    Raw(usize),
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum PeerMut {
    Rank(u16, RankVal),
    Base(u16, PeerBaseVal),
}

#[derive(Arbitrary, Debug, Clone)]
struct PeersDesc {
    count: PeersCount,
    seed: u64,
    ranks: RankMode,
    bases: BasesMode,
    muts: Vec<PeerMut>,
    nulls: u8,
}

#[derive(Arbitrary, Debug, Clone, Copy)]
enum LenSel {
    Zero,
    Small(u16),
    NeedMinus1,
    Need,
    NeedPlus1,
}

/// The argument of set_extent, relative to the model heap's size.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum ExtentSel {
    Zero,
    One,
    /// x mod size, + 1.
    Within(u64),
    SizeMinus1,
    Size,
    SizePlus1,
    Max,
    Raw(usize),
}

/// The `len` argument of to_offset, relative to the bound (extent or heap size) left after `sym`.
#[derive(Arbitrary, Debug, Clone, Copy)]
enum RangeLen {
    Zero,
    One,
    Small(u16),
    /// Exactly to the bound, one short, one past.
    ToBound,
    ToBoundMinus1,
    ToBoundPlus1,
    Max,
}

#[derive(Arbitrary, Debug, Clone)]
enum Op {
    Attach {
        desc: HeapDesc,
        nulls: u8,
    },
    /// attach the model's heap again (the table must be dropped).
    Reattach,
    Detach,
    SetPeers(PeersDesc),
    ToGlobal {
        sym: AddrSel,
        pe: IdxSel,
        nulls: u8,
    },
    FromGlobal {
        rank: IdxSel,
        of_pe: Option<IdxSel>,
        peer: IdxSel,
        raw: AddrSel,
        nulls: u8,
    },
    Offset {
        addr: AddrSel,
        nulls: u8,
    },
    SetExtent(ExtentSel),
    ToOffset {
        sym: AddrSel,
        len: RangeLen,
        pe: IdxSel,
        nulls: u8,
    },
    /// Every edge of the heap on PE `pe`, both directions, and the round trip.
    Sweep {
        pe: IdxSel,
    },
    HeapQuery {
        nulls: u8,
    },
    TableBytes {
        nulls: u8,
    },
    SelectSource(IntSel),
    Locate {
        source: IntSel,
        nulls: u8,
    },
    Strerror(IntSel),
    ReportBuffer {
        len: LenSel,
        nulls: u8,
    },
    Report {
        nulls: u8,
    },
    SetPeersFromNvshmem {
        nulls: u8,
    },
    LastError,
    Version,
    LocalOffset {
        sym: AddrSel,
        len: RangeLen,
        nulls: u8,
    },
    /// An offset picked around the edges of a heap (as an address in `[0, size)`), on a rank.
    FromOffset {
        rank: IdxSel,
        off: AddrSel,
        len: RangeLen,
        nulls: u8,
    },
    /// `check_host_ptr`, and the span published for inline checks, read as a caller reads it.
    CheckHostPtr {
        addr: AddrSel,
    },
    TableView {
        nulls: u8,
    },
}

/// Whether argument `i` is NULL: rarely (1 in 16 calls has any NULL), so that most calls go deep.
fn is_null(nulls: u8, i: u32) -> bool {
    nulls & 0xf0 == 0 && nulls & (1 << i) != 0
}

// ---------------------------------------------------------------------------------------------
// The shadow model.

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct MHeap {
    base: usize,
    size: usize,
    mapped: usize,
    my_pe: i32,
    n_pes: i32,
    device: i32,
    version: (i32, i32, i32),
}

impl MHeap {
    /// The C description of this heap, with `source` as given.
    fn info(&self, source: c_int) -> CHeapInfo {
        CHeapInfo {
            base: self.base as *mut c_void,
            size: self.size,
            mapped_size: self.mapped,
            my_pe: self.my_pe,
            n_pes: self.n_pes,
            device: self.device,
            version_major: self.version.0,
            version_minor: self.version.1,
            version_patch: self.version.2,
            source,
        }
    }
}

#[derive(Clone, Debug)]
struct MPeers {
    rank_of_pe: Vec<i32>,
    pe_of_rank: Vec<i32>,
    bases: Vec<usize>,
    uniform: bool,
    identity: bool,
}

struct Model {
    heap: Option<MHeap>,
    peers: Option<MPeers>,
    /// The extent set with set_extent (0: none), cleared by attach and detach.
    extent: usize,
    /// The last heap description tried (for addresses when no heap is attached).
    ref_heap: (usize, usize),
    /// This thread's last error text, as the library must show it.
    last_error: Vec<u8>,
}

/// The rules of `Heap::check`, in its order.
fn check_heap(h: &MHeap) -> Result<(), c_int> {
    if h.base == 0 || h.size == 0 || h.base.checked_add(h.size).is_none() || h.mapped > h.size || h.n_pes <= 0 {
        return Err(INVALID_ARGUMENT);
    }
    if h.my_pe < 0 || h.my_pe >= h.n_pes {
        return Err(BAD_PE);
    }
    Ok(())
}

/// The rules of `upcxx_extra_nvshmem_set_peers` + `Peers::new`, in their order.
fn check_peers(heap: Option<&MHeap>, n_arg: c_int, specs: &[Peer], null_peers: bool) -> Result<MPeers, c_int> {
    if null_peers {
        return Err(NULL_ARGUMENT);
    }
    if n_arg <= 0 {
        return Err(INVALID_ARGUMENT);
    }
    let Some(h) = heap else { return Err(NOT_LOADED) };
    if n_arg != h.n_pes {
        return Err(INVALID_ARGUMENT);
    }
    let n = n_arg as usize;
    assert_eq!(specs.len(), n);
    if specs[h.my_pe as usize].base as usize != h.base {
        return Err(INVALID_ARGUMENT);
    }
    let mut pe_of_rank = vec![-1i32; n];
    for (pe, s) in specs.iter().enumerate() {
        if s.rank < 0 || s.rank as usize >= n {
            return Err(BAD_RANK);
        }
        let b = s.base as usize;
        if b == 0 || b.checked_add(h.size).is_none() {
            return Err(INVALID_ARGUMENT);
        }
        if pe_of_rank[s.rank as usize] != -1 {
            return Err(BAD_RANK);
        }
        pe_of_rank[s.rank as usize] = pe as i32;
    }
    let bases: Vec<usize> = specs.iter().map(|s| s.base as usize).collect();
    Ok(MPeers {
        uniform: bases.iter().all(|b| *b == h.base),
        identity: specs.iter().enumerate().all(|(pe, s)| s.rank as usize == pe),
        rank_of_pe: specs.iter().map(|s| s.rank).collect(),
        pe_of_rank,
        bases,
    })
}

impl Model {
    /// The bytes of each heap translation accepts: the extent, or the heap's size.
    fn bound(&self, h: &MHeap) -> usize {
        if self.extent != 0 { self.extent } else { h.size }
    }

    fn to_global(&self, sym: usize, pe: c_int) -> Result<Gptr, c_int> {
        let (Some(h), Some(p)) = (&self.heap, &self.peers) else { return Err(TABLE_NOT_SET) };
        let off = sym.wrapping_sub(h.base);
        if off >= self.bound(h) {
            return Err(OUT_OF_HEAP);
        }
        if pe < 0 || pe >= h.n_pes {
            return Err(BAD_PE);
        }
        let i = pe as usize;
        Ok(Gptr { rank: p.rank_of_pe[i], device: if pe == h.my_pe { h.device } else { -1 }, raw: (p.bases[i] + off) as *mut c_void, pe })
    }

    fn from_global(&self, rank: c_int, raw: usize) -> Result<(usize, c_int), c_int> {
        let (Some(h), Some(p)) = (&self.heap, &self.peers) else { return Err(TABLE_NOT_SET) };
        if rank < 0 || rank >= h.n_pes {
            return Err(BAD_RANK);
        }
        let pe = p.pe_of_rank[rank as usize];
        let off = raw.wrapping_sub(p.bases[pe as usize]);
        if off >= self.bound(h) {
            return Err(OUT_OF_HEAP);
        }
        Ok((h.base + off, pe))
    }

    fn offset(&self, addr: usize) -> Result<usize, c_int> {
        let Some(h) = &self.heap else { return Err(TABLE_NOT_SET) };
        let off = addr.wrapping_sub(h.base);
        if off < self.bound(h) { Ok(off) } else { Err(OUT_OF_HEAP) }
    }

    fn to_offset(&self, sym: usize, len: usize, pe: c_int) -> Result<(c_int, usize), c_int> {
        let (Some(h), Some(p)) = (&self.heap, &self.peers) else { return Err(TABLE_NOT_SET) };
        let off = sym.wrapping_sub(h.base);
        let bound = self.bound(h);
        if off >= bound || len > bound - off {
            return Err(OUT_OF_HEAP);
        }
        if pe < 0 || pe >= h.n_pes {
            return Err(BAD_PE);
        }
        Ok((p.rank_of_pe[pe as usize], off))
    }

    /// `to_offset` toward my PE without a peer table.
    fn local_offset(&self, sym: usize, len: usize) -> Result<usize, c_int> {
        let Some(h) = &self.heap else { return Err(TABLE_NOT_SET) };
        let off = sym.wrapping_sub(h.base);
        let bound = self.bound(h);
        if off >= bound || len > bound - off { Err(OUT_OF_HEAP) } else { Ok(off) }
    }

    fn from_offset(&self, rank: c_int, off: usize, len: usize) -> Result<(usize, c_int), c_int> {
        let (Some(h), Some(p)) = (&self.heap, &self.peers) else { return Err(TABLE_NOT_SET) };
        if rank < 0 || rank >= h.n_pes {
            return Err(BAD_RANK);
        }
        let bound = self.bound(h);
        if off >= bound || len > bound - off {
            return Err(OUT_OF_HEAP);
        }
        Ok((h.base + off, p.pe_of_rank[rank as usize]))
    }

    /// No NVSHMEM here: the heap's own range is the only heap memory.
    fn check_host_ptr(&self, addr: usize) -> c_int {
        match &self.heap {
            Some(h) if addr.wrapping_sub(h.base) < h.size => INVALID_ARGUMENT,
            _ => OK,
        }
    }

    fn set_extent(&self, bytes: usize) -> Result<(), c_int> {
        let Some(h) = &self.heap else { return Err(TABLE_NOT_SET) };
        if bytes > h.size { Err(INVALID_ARGUMENT) } else { Ok(()) }
    }

    fn n(&self) -> i64 {
        self.heap.map_or(0, |h| h.n_pes as i64)
    }

    fn idx(&self, s: IdxSel) -> c_int {
        idx_in(s, self.n())
    }

    /// `(base, size)` of PE `pe`'s heap for picking addresses (falls back to my heap, then to the
    /// last description tried).
    fn heap_of(&self, pe: Option<c_int>) -> (usize, usize) {
        match (&self.heap, &self.peers, pe) {
            (Some(h), Some(p), Some(pe)) if pe >= 0 && (pe as usize) < p.bases.len() => (p.bases[pe as usize], h.size),
            (Some(h), _, _) => (h.base, h.size),
            _ => self.ref_heap,
        }
    }

    /// After a call: the status is an enum value (not PANIC), equals the model's, and last_error
    /// follows it.
    fn status(&mut self, name: &str, got: c_int, want: c_int) {
        assert!((0..=13).contains(&got) || got == PANIC, "{name}: status {got} is not a status");
        assert_ne!(got, PANIC, "{name}: PANIC status: {}", last_error_text());
        assert_eq!(got, want, "{name}: status {got} but the model says {want} (last error: {})", last_error_text());
        if got == OK {
            assert!(last_error_is(&self.last_error), "{name} succeeded but changed last_error to {:?}", last_error_text());
        } else {
            let now = last_error_bytes();
            assert!(
                now.starts_with(name.as_bytes()) && now[name.len()..].starts_with(b": "),
                "{name} failed with {got} but last_error is {:?}",
                String::from_utf8_lossy(&now)
            );
            self.last_error = now;
        }
    }
}

fn idx_in(s: IdxSel, n: i64) -> c_int {
    let v: i64 = match s {
        IdxSel::In(x) => {
            if n > 0 {
                x as i64 % n
            } else {
                x as i64
            }
        }
        IdxSel::Zero => 0,
        IdxSel::Last => n - 1,
        IdxSel::Minus1 => -1,
        IdxSel::N => n,
        IdxSel::NPlus1 => n + 1,
        IdxSel::Min => i32::MIN as i64,
        IdxSel::Max => i32::MAX as i64,
        IdxSel::Raw(r) => r as i64,
    };
    v.clamp(i32::MIN as i64, i32::MAX as i64) as c_int
}

fn int_of(s: IntSel) -> c_int {
    match s {
        IntSel::Small(x) => x as c_int,
        IntSel::Raw(x) => x,
        IntSel::Min => i32::MIN,
        IntSel::Max => i32::MAX,
    }
}

fn count_of(s: CountSel) -> c_int {
    match s {
        CountSel::One => 1,
        CountSel::Small(x) => 1 + (x % 8) as c_int,
        CountSel::Mid(x) => 1 + (x % 64) as c_int,
        CountSel::Large(x) => 1 + (x % 4096) as c_int,
        CountSel::Exactly4096 => 4096,
        CountSel::Zero => 0,
        CountSel::Minus1 => -1,
        CountSel::Min => i32::MIN,
        CountSel::Max => i32::MAX,
        CountSel::Raw(x) => x,
    }
}

fn addr_in((base, size): (usize, usize), s: AddrSel) -> usize {
    let at = |a: Anchor| match a {
        Anchor::BaseMinus1 => base.wrapping_sub(1),
        Anchor::Base => base,
        Anchor::LastByte => base.wrapping_add(size).wrapping_sub(1),
        Anchor::End => base.wrapping_add(size),
    };
    match s {
        AddrSel::Null => 0,
        AddrSel::Edge(a) => at(a),
        AddrSel::Near(a, d) => at(a).wrapping_add(d as isize as usize),
        AddrSel::Inside(x) => base.wrapping_add(if size == 0 { 0 } else { (x as usize) % size }),
        AddrSel::Raw(r) => r,
        AddrSel::MaxMinus(k) => usize::MAX - k as usize,
    }
}

/// Host memory the heaps may describe (translation never dereferences it).
fn host() -> &'static [u8] {
    static HOST: std::sync::OnceLock<Box<[u8]>> = std::sync::OnceLock::new();
    HOST.get_or_init(|| vec![0u8; 1 << 16].into_boxed_slice())
}

fn base_of(s: BaseSel, size_hint: usize) -> usize {
    match s {
        BaseSel::Null => 0,
        BaseSel::Host(x) => host().as_ptr() as usize + (x as usize % 4096),
        BaseSel::One => 1,
        BaseSel::Raw(r) => r,
        BaseSel::NearMax(k) => usize::MAX - k as usize,
        BaseSel::Pow2(k) => 1usize << (k % 64),
        BaseSel::Page(p) => (p as usize) << 12,
        BaseSel::EndAtMax(fits) => (usize::MAX - size_hint).wrapping_add(if fits { 0 } else { 1 }),
    }
}

fn size_of_sel(s: SizeSel, base: usize) -> usize {
    match s {
        SizeSel::Zero => 0,
        SizeSel::One => 1,
        SizeSel::Small(x) => x as usize,
        SizeSel::Host => {
            let h = host().as_ptr() as usize;
            (h + host().len()).saturating_sub(base).clamp(1, host().len())
        }
        SizeSel::Raw(r) => r,
        SizeSel::Pow2(k) => 1usize << (k % 64),
        SizeSel::ToMax(fits) => (usize::MAX - base).wrapping_add(if fits { 0 } else { 1 }),
        SizeSel::Max => usize::MAX,
    }
}

fn describe(d: &HeapDesc) -> CHeapInfo {
    // The size first when the base is chosen relative to it, else the base first.
    let (base, size) = match d.base {
        BaseSel::EndAtMax(_) => {
            let size = size_of_sel(d.size, 0);
            (base_of(d.base, size), size)
        }
        _ => {
            let base = base_of(d.base, 0);
            (base, size_of_sel(d.size, base))
        }
    };
    let mapped = match d.mapped {
        MappedSel::Zero => 0,
        MappedSel::Size => size,
        MappedSel::SizeMinus1 => size.wrapping_sub(1),
        MappedSel::SizePlus1 => size.wrapping_add(1),
        MappedSel::Half => size / 2,
        MappedSel::Raw(r) => r,
        MappedSel::Max => usize::MAX,
    };
    let n_pes = count_of(d.n_pes);
    CHeapInfo {
        base: base as *mut c_void,
        size,
        mapped_size: mapped,
        my_pe: idx_in(d.my_pe, n_pes as i64),
        n_pes,
        device: int_of(d.device),
        version_major: d.version.0,
        version_minor: d.version.1,
        version_patch: d.version.2,
        source: match d.source {
            SourceSel::Valid(x) => (x % 5) as c_int,
            SourceSel::Raw(r) => r,
        },
    }
}

fn last_error_bytes() -> Vec<u8> {
    let p = abi::upcxx_extra_nvshmem_last_error();
    assert!(!p.is_null(), "last_error returned NULL");
    // SAFETY: the library returns a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_bytes().to_vec()
}

/// Whether the last error reads `want` (no allocation: called after every call).
fn last_error_is(want: &[u8]) -> bool {
    let p = abi::upcxx_extra_nvshmem_last_error();
    assert!(!p.is_null(), "last_error returned NULL");
    // SAFETY: the library returns a NUL-terminated string.
    unsafe { CStr::from_ptr(p) }.to_bytes() == want
}

/// Whether the last error names `addr` as `0x<hex>` (no allocation).
fn last_error_names(addr: usize) -> bool {
    let mut hex = [0u8; 18];
    hex[0] = b'0';
    hex[1] = b'x';
    let digits = if addr == 0 { 1 } else { (usize::BITS - addr.leading_zeros()).div_ceil(4) as usize };
    for i in 0..digits {
        hex[2 + digits - 1 - i] = b"0123456789abcdef"[(addr >> (4 * i)) & 0xf];
    }
    let needle = &hex[..2 + digits];
    let p = abi::upcxx_extra_nvshmem_last_error();
    // SAFETY: the library returns a NUL-terminated string.
    let msg = unsafe { CStr::from_ptr(p) }.to_bytes();
    // The address must not run on into more hex digits.
    msg.windows(needle.len()).enumerate().any(|(i, w)| w == needle && !msg.get(i + needle.len()).is_some_and(|c| c.is_ascii_hexdigit()))
}

fn last_error_text() -> String {
    String::from_utf8_lossy(&last_error_bytes()).into_owned()
}

/// A tiny deterministic PRNG for bulk data (peer tables) from one seed.
struct SplitMix(u64);
impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
}

/// The peer array for set_peers: `len` entries built from the description and the model heap.
fn build_peers(d: &PeersDesc, len: usize, model: &Model) -> Vec<Peer> {
    let (my_base, size, my_pe) = match &model.heap {
        Some(h) => (h.base, h.size, h.my_pe as usize),
        None => (model.ref_heap.0, model.ref_heap.1, 0),
    };
    let mut rng = SplitMix(d.seed);
    let mut ranks: Vec<i32> = (0..len as i32).collect();
    match d.ranks {
        RankMode::Identity => {}
        RankMode::Shuffled => {
            for i in (1..len).rev() {
                let j = (rng.next() % (i as u64 + 1)) as usize;
                ranks.swap(i, j);
            }
        }
        RankMode::Reversed => ranks.reverse(),
        RankMode::Rotated(k) => {
            if len > 0 {
                ranks.rotate_left(k as usize % len)
            }
        }
    }
    // The highest base a `size`-byte heap fits at (0 when none does).
    let max_fit = usize::MAX.wrapping_sub(size);
    let mut bases: Vec<usize> = (0..len)
        .map(|pe| match d.bases {
            BasesMode::Uniform => my_base,
            BasesMode::Strided(stride) => my_base.wrapping_add((pe as usize).wrapping_mul(stride as usize)),
            BasesMode::Random => {
                if size == 0 || max_fit == 0 {
                    rng.next() as usize
                } else {
                    1 + (rng.next() as usize) % max_fit
                }
            }
            BasesMode::AtMax => max_fit,
        })
        .collect();
    if my_pe < len {
        bases[my_pe] = my_base;
    }
    for m in d.muts.iter().take(8) {
        if len == 0 {
            break;
        }
        match *m {
            PeerMut::Rank(pe, v) => {
                let pe = pe as usize % len;
                match v {
                    RankVal::DupOf(o) => ranks[pe] = ranks[o as usize % len],
                    RankVal::SwapWith(o) => ranks.swap(pe, o as usize % len),
                    RankVal::Minus1 => ranks[pe] = -1,
                    RankVal::N => ranks[pe] = len as i32,
                    RankVal::Min => ranks[pe] = i32::MIN,
                    RankVal::Max => ranks[pe] = i32::MAX,
                    RankVal::Raw(r) => ranks[pe] = r,
                }
            }
            PeerMut::Base(pe, v) => {
                let pe = pe as usize % len;
                bases[pe] = match v {
                    PeerBaseVal::Null => 0,
                    PeerBaseVal::MyBase => my_base,
                    PeerBaseVal::MyBasePlus1 => my_base.wrapping_add(1),
                    PeerBaseVal::MaxFit => max_fit,
                    PeerBaseVal::Overflow1 => max_fit.wrapping_add(1),
                    PeerBaseVal::UsizeMax => usize::MAX,
                    PeerBaseVal::One => 1,
                    PeerBaseVal::Raw(r) => r,
                };
            }
        }
    }
    ranks.iter().zip(&bases).map(|(r, b)| Peer { rank: *r, base: *b as *mut c_void }).collect()
}

// ---------------------------------------------------------------------------------------------
// The calls.

const GPTR_SENTINEL: Gptr = Gptr { rank: 0x5a5a_5a5a, device: 0x5a5a_5a5a, raw: 0x5a5a_5a5a as *mut c_void, pe: 0x5a5a_5a5a };

fn gptr_eq(a: &Gptr, b: &Gptr) -> bool {
    (a.rank, a.device, a.raw, a.pe) == (b.rank, b.device, b.raw, b.pe)
}

fn call_to_global(model: &mut Model, sym: usize, pe: c_int, null_out: bool) -> Option<Gptr> {
    let mut out = GPTR_SENTINEL;
    let outp = if null_out { null_mut() } else { &mut out as *mut Gptr };
    // SAFETY: outp is NULL or points to a Gptr.
    let st = unsafe { c::to_global_ptr()(sym as *const c_void, pe, outp) };
    let want = if sym == 0 || null_out { Err(NULL_ARGUMENT) } else { model.to_global(sym, pe) };
    model.status("upcxx_extra_nvshmem_to_global_ptr", st, want.as_ref().map_or_else(|e| *e, |_| OK));
    match want {
        Ok(g) => {
            assert!(gptr_eq(&out, &g), "to_global_ptr(0x{sym:x}, {pe}) = {out:?}, the model says {g:?}");
            Some(g)
        }
        Err(e) => {
            assert!(gptr_eq(&out, &GPTR_SENTINEL), "to_global_ptr failed but wrote its output");
            if e == OUT_OF_HEAP || e == BAD_PE {
                assert!(last_error_names(sym), "to_global_ptr error lacks the address 0x{sym:x}: {}", last_error_text());
            }
            None
        }
    }
}

fn call_from_global(model: &mut Model, rank: c_int, raw: usize, nulls: u8) -> Option<(usize, c_int)> {
    let (null_sym, null_pe) = (is_null(nulls, 1), is_null(nulls, 2));
    let mut sym: *mut c_void = 0x5a5a_5a5a as *mut c_void;
    let mut pe: c_int = 0x5a5a_5a5a;
    let symp = if null_sym { null_mut() } else { &mut sym as *mut *mut c_void };
    let pep = if null_pe { null_mut() } else { &mut pe as *mut c_int };
    // SAFETY: out-pointers are NULL or point to locals.
    let st = unsafe { c::from_global_ptr()(rank, raw as *const c_void, symp, pep) };
    let want = if raw == 0 || null_sym || null_pe { Err(NULL_ARGUMENT) } else { model.from_global(rank, raw) };
    model.status("upcxx_extra_nvshmem_from_global_ptr", st, want.as_ref().map_or_else(|e| *e, |_| OK));
    match want {
        Ok((s, p)) => {
            assert_eq!((sym as usize, pe), (s, p), "from_global_ptr({rank}, 0x{raw:x}): the model says (0x{s:x}, {p})");
            Some((s, p))
        }
        Err(e) => {
            assert_eq!((sym as usize, pe), (0x5a5a_5a5a, 0x5a5a_5a5a), "from_global_ptr failed but wrote its output");
            if e == OUT_OF_HEAP || e == BAD_RANK {
                assert!(last_error_names(raw), "from_global_ptr error lacks the address 0x{raw:x}: {}", last_error_text());
            }
            None
        }
    }
}

fn call_offset(model: &mut Model, addr: usize, null_out: bool) {
    let mut off: usize = 0x5a5a_5a5a;
    let outp = if null_out { null_mut() } else { &mut off as *mut usize };
    // SAFETY: outp is NULL or points to a local.
    let st = unsafe { c::offset()(addr as *const c_void, outp) };
    let want = if addr == 0 || null_out { Err(NULL_ARGUMENT) } else { model.offset(addr) };
    model.status("upcxx_extra_nvshmem_offset", st, want.map_or_else(|e| e, |_| OK));
    match want {
        Ok(o) => assert_eq!(off, o, "offset(0x{addr:x})"),
        Err(e) => {
            assert_eq!(off, 0x5a5a_5a5a, "offset failed but wrote its output");
            if e == OUT_OF_HEAP {
                assert!(last_error_names(addr), "offset error lacks the address 0x{addr:x}: {}", last_error_text());
            }
        }
    }
}

/// to_global then, when it works, from_global of the answer: must come back to (sym, pe).
fn round_trip(model: &mut Model, sym: usize, pe: c_int) {
    if let Some(g) = call_to_global(model, sym, pe, false) {
        let back = call_from_global(model, g.rank, g.raw as usize, 0xff);
        assert_eq!(back, Some((sym, pe)), "round trip of (0x{sym:x}, {pe}) through {g:?}");
    }
}

/// A range's length, relative to the `left` bytes up to the bound.
fn range_len(len: RangeLen, left: usize) -> usize {
    match len {
        RangeLen::Zero => 0,
        RangeLen::One => 1,
        RangeLen::Small(x) => x as usize,
        RangeLen::ToBound => left,
        RangeLen::ToBoundMinus1 => left.wrapping_sub(1),
        RangeLen::ToBoundPlus1 => left.wrapping_add(1),
        RangeLen::Max => usize::MAX,
    }
}

fn report_text_len() -> usize {
    let mut need = 0usize;
    // SAFETY: NULL buffer of length 0, `need` is a local.
    let st = unsafe { c::report_buffer()(null_mut(), 0, &mut need) };
    assert_eq!(st, BUFFER_TOO_SMALL);
    assert!(need >= 1);
    need
}

fn run(data: &[u8]) {
    let mut u = Unstructured::new(data);
    // Every input starts from a detached library, so inputs replay alone.
    // SAFETY: no arguments.
    assert_eq!(unsafe { c::detach()() }, OK);
    let mut model =
        Model { heap: None, peers: None, extent: 0, ref_heap: (host().as_ptr() as usize, 4096), last_error: last_error_bytes() };

    while !u.is_empty() {
        let Ok(op) = Op::arbitrary(&mut u) else { break };
        step(&mut model, op);
    }
    // SAFETY: no arguments.
    assert_eq!(unsafe { c::detach()() }, OK);
}

fn step(model: &mut Model, op: Op) {
    match op {
        Op::Attach { desc, nulls } => {
            let info = describe(&desc);
            attach(model, info, is_null(nulls, 0));
        }
        Op::Reattach => {
            if let Some(h) = model.heap {
                attach(model, h.info(0), false);
                assert!(model.peers.is_none());
            }
        }
        Op::Detach => {
            // SAFETY: no arguments.
            let st = unsafe { c::detach()() };
            model.status("upcxx_extra_nvshmem_detach", st, OK);
            model.heap = None;
            model.peers = None;
            model.extent = 0;
        }
        Op::SetPeers(d) => set_peers(model, &d),
        Op::ToGlobal { sym, pe, nulls } => {
            let pe = model.idx(pe);
            let sym = if is_null(nulls, 0) { 0 } else { addr_in(model.heap_of(None), sym) };
            call_to_global(model, sym, pe, is_null(nulls, 1));
        }
        Op::FromGlobal { rank, of_pe, peer, raw, nulls } => {
            // The address is picked around some PE's heap; the rank is that PE's (a consistent
            // pair) or any other.
            let peer = model.idx(peer);
            let rank = match (of_pe, &model.peers) {
                (None, Some(p)) if peer >= 0 && (peer as usize) < p.rank_of_pe.len() => p.rank_of_pe[peer as usize],
                (Some(r), _) => model.idx(r),
                _ => model.idx(rank),
            };
            let raw = if is_null(nulls, 0) { 0 } else { addr_in(model.heap_of(Some(peer)), raw) };
            call_from_global(model, rank, raw, nulls);
        }
        Op::Offset { addr, nulls } => {
            let addr = if is_null(nulls, 0) { 0 } else { addr_in(model.heap_of(None), addr) };
            call_offset(model, addr, is_null(nulls, 1));
        }
        Op::SetExtent(sel) => {
            let size = model.heap.map_or(model.ref_heap.1, |h| h.size);
            let bytes = match sel {
                ExtentSel::Zero => 0,
                ExtentSel::One => 1,
                ExtentSel::Within(x) => (x as usize % size.max(1)).wrapping_add(1),
                ExtentSel::SizeMinus1 => size.wrapping_sub(1),
                ExtentSel::Size => size,
                ExtentSel::SizePlus1 => size.wrapping_add(1),
                ExtentSel::Max => usize::MAX,
                ExtentSel::Raw(r) => r,
            };
            // SAFETY: plain integer argument.
            let st = unsafe { c::set_extent()(bytes) };
            let want = model.set_extent(bytes);
            model.status("upcxx_extra_nvshmem_set_extent", st, want.map_or_else(|e| e, |_| OK));
            if want.is_ok() {
                model.extent = bytes;
            }
        }
        Op::ToOffset { sym, len, pe, nulls } => {
            let pe = model.idx(pe);
            let sym = if is_null(nulls, 0) { 0 } else { addr_in(model.heap_of(None), sym) };
            let left = model.heap.map_or(0, |h| model.bound(&h).wrapping_sub(sym.wrapping_sub(h.base)));
            let len = range_len(len, left);
            let (null_rank, null_off) = (is_null(nulls, 1), is_null(nulls, 2));
            let (mut rank, mut off): (c_int, usize) = (0x5a5a_5a5a, 0x5a5a_5a5a);
            let rankp = if null_rank { null_mut() } else { &mut rank as *mut c_int };
            let offp = if null_off { null_mut() } else { &mut off as *mut usize };
            // SAFETY: the out-pointers are NULL or point to locals.
            let st = unsafe { c::to_offset()(sym as *const c_void, len, pe, rankp, offp) };
            let want = if sym == 0 || null_rank || null_off { Err(NULL_ARGUMENT) } else { model.to_offset(sym, len, pe) };
            model.status("upcxx_extra_nvshmem_to_offset", st, want.map_or_else(|e| e, |_| OK));
            match want {
                Ok(r) => assert_eq!((rank, off), r, "to_offset(0x{sym:x}, {len}, {pe})"),
                Err(e) => {
                    assert_eq!((rank, off), (0x5a5a_5a5a, 0x5a5a_5a5a), "to_offset failed but wrote its outputs");
                    if e == OUT_OF_HEAP || e == BAD_PE {
                        assert!(last_error_names(sym), "to_offset error lacks the address 0x{sym:x}: {}", last_error_text());
                    }
                }
            }
        }
        Op::Sweep { pe } => {
            let pe = model.idx(pe);
            let mine = model.heap_of(None);
            let theirs = model.heap_of(Some(pe));
            let rank = model.peers.as_ref().and_then(|p| p.rank_of_pe.get(pe as usize).copied()).unwrap_or(pe);
            for a in [Anchor::BaseMinus1, Anchor::Base, Anchor::LastByte, Anchor::End] {
                let sym = addr_in(mine, AddrSel::Edge(a));
                round_trip(model, sym, pe);
                call_offset(model, sym, false);
                call_from_global(model, rank, addr_in(theirs, AddrSel::Edge(a)), 0xff);
            }
        }
        Op::HeapQuery { nulls } => {
            let sentinel = CHeapInfo {
                base: 0x5a5a as *mut c_void,
                size: 0x5a5a,
                mapped_size: 0x5a5a,
                my_pe: 0x5a5a,
                n_pes: 0x5a5a,
                device: 0x5a5a,
                version_major: 0x5a5a,
                version_minor: 0x5a5a,
                version_patch: 0x5a5a,
                source: 0x5a5a,
            };
            let mut out = sentinel;
            let null_out = is_null(nulls, 0);
            let outp = if null_out { null_mut() } else { &mut out as *mut CHeapInfo };
            // SAFETY: outp is NULL or points to a local.
            let st = unsafe { c::heap_query()(outp) };
            let want = if null_out { Err(NULL_ARGUMENT) } else { model.heap.ok_or(NOT_LOADED) };
            model.status("upcxx_extra_nvshmem_heap_query", st, want.map_or_else(|e| e, |_| OK));
            match want {
                Ok(h) => {
                    assert_eq!(out, h.info(SOURCE_MANUAL), "heap_query");
                }
                Err(_) => assert_eq!(out, sentinel, "heap_query failed but wrote its output"),
            }
        }
        Op::TableBytes { nulls } => {
            let mut out: usize = 0x5a5a_5a5a;
            let null_out = is_null(nulls, 0);
            let outp = if null_out { null_mut() } else { &mut out as *mut usize };
            // SAFETY: outp is NULL or points to a local.
            let st = unsafe { c::table_bytes()(outp) };
            let want = if null_out {
                Err(NULL_ARGUMENT)
            } else {
                match (&model.heap, &model.peers) {
                    (Some(h), Some(p)) => {
                        let n = h.n_pes as usize;
                        Ok(if p.uniform { 0 } else { n * 8 } + if p.identity { 0 } else { n * 8 })
                    }
                    _ => Err(TABLE_NOT_SET),
                }
            };
            model.status("upcxx_extra_nvshmem_table_bytes", st, want.map_or_else(|e| e, |_| OK));
            match want {
                Ok(b) => assert_eq!(out, b, "table_bytes"),
                Err(_) => assert_eq!(out, 0x5a5a_5a5a, "table_bytes failed but wrote its output"),
            }
        }
        Op::SelectSource(s) => {
            let s = int_of(s);
            // SAFETY: plain int argument.
            let st = unsafe { c::select_source()(s) };
            model.status("upcxx_extra_nvshmem_select_source", st, if (0..=3).contains(&s) { OK } else { INVALID_ARGUMENT });
        }
        Op::Locate { source, nulls } => {
            let s = int_of(source);
            let sentinel = CLocation {
                source: 0x5a5a,
                library: 0x5a5a as *const c_char,
                address: 0x5a5a as *mut c_void,
                symbol_size: 0x5a5a,
                version_field: 0x5a5a,
                is_device_address: true,
            };
            let mut out = sentinel;
            let null_out = is_null(nulls, 0);
            let outp = if null_out { null_mut() } else { &mut out as *mut CLocation };
            // SAFETY: outp is NULL or points to a local.
            let st = unsafe { c::locate()(s, outp) };
            let want = if null_out {
                NULL_ARGUMENT
            } else if (0..=3).contains(&s) {
                NOT_LOADED
            } else {
                INVALID_ARGUMENT
            };
            model.status("upcxx_extra_nvshmem_locate", st, want);
            assert_eq!(out, sentinel, "locate failed but wrote its output");
        }
        Op::Strerror(s) => {
            let s = int_of(s);
            let p = abi::upcxx_extra_nvshmem_strerror(s);
            assert!(!p.is_null(), "strerror({s}) returned NULL");
            // SAFETY: a static NUL-terminated string.
            let text = unsafe { CStr::from_ptr(p) };
            let want = usize::try_from(s).ok().and_then(|i| Status::ALL.get(i)).map_or(c"unknown status", |st| st.description());
            assert_eq!(text, want, "strerror({s})");
            assert!(last_error_is(&model.last_error), "strerror changed last_error");
        }
        Op::ReportBuffer { len, nulls } => {
            // The report's size depends on the state (a heap attached by hand is described in
            // it): ask for it now. The probe fails on purpose; last_error follows it.
            let need = report_text_len();
            model.last_error = last_error_bytes();
            let len = match len {
                LenSel::Zero => 0,
                LenSel::Small(x) => x as usize % (need + 32),
                LenSel::NeedMinus1 => need - 1,
                LenSel::Need => need,
                LenSel::NeedPlus1 => need + 1,
            };
            let (null_buf, null_needed) = (is_null(nulls, 0), is_null(nulls, 1));
            const GUARD: usize = 16;
            let mut buf = vec![0xa5u8; len + GUARD];
            let mut needed: usize = 0x5a5a_5a5a;
            let bufp = if null_buf { null_mut() } else { buf.as_mut_ptr() as *mut c_char };
            let neededp = if null_needed { null_mut() } else { &mut needed as *mut usize };
            // SAFETY: buf has len (+ guard) bytes or is NULL; neededp is NULL or a local.
            let st = unsafe { c::report_buffer()(bufp, len, neededp) };
            let want = if null_buf && len > 0 {
                NULL_ARGUMENT
            } else if len < need {
                BUFFER_TOO_SMALL
            } else {
                OK
            };
            model.status("upcxx_extra_nvshmem_report_buffer", st, want);
            assert_eq!(needed, if null_needed { 0x5a5a_5a5a } else { need }, "report_buffer: needed");
            if want == OK {
                assert!(!buf[..need - 1].contains(&0), "report_buffer: NUL inside the text");
                assert_eq!(buf[need - 1], 0, "report_buffer: no terminator");
                assert!(buf[need..].iter().all(|b| *b == 0xa5), "report_buffer wrote past the text");
            } else {
                assert!(buf.iter().all(|b| *b == 0xa5), "report_buffer failed but wrote the buffer");
            }
        }
        Op::Report { nulls } => {
            let null_file = is_null(nulls, 0);
            let file = if null_file { null_mut() } else { dev_null() };
            // SAFETY: NULL or an open FILE*.
            let st = unsafe { c::report()(file) };
            model.status("upcxx_extra_nvshmem_report", st, if null_file { NULL_ARGUMENT } else { OK });
        }
        Op::SetPeersFromNvshmem { nulls } => {
            let map: Vec<c_int> = (0..4).collect();
            let p = if is_null(nulls, 0) { null() } else { map.as_ptr() };
            // SAFETY: NULL or 4 entries (never read: NVSHMEM is not loaded).
            let st = unsafe { c::set_peers_from_nvshmem()(p) };
            model.status("upcxx_extra_nvshmem_set_peers_from_nvshmem", st, NOT_LOADED);
        }
        Op::LocalOffset { sym, len, nulls } => {
            let sym = if is_null(nulls, 0) { 0 } else { addr_in(model.heap_of(None), sym) };
            let left = model.heap.map_or(0, |h| model.bound(&h).wrapping_sub(sym.wrapping_sub(h.base)));
            let len = range_len(len, left);
            let mut off: usize = 0x5a5a_5a5a;
            let offp = if is_null(nulls, 1) { null_mut() } else { &mut off as *mut usize };
            // SAFETY: the out-pointer is NULL or points to a local.
            let st = unsafe { c::local_offset()(sym as *const c_void, len, offp) };
            let want = if sym == 0 || offp.is_null() { Err(NULL_ARGUMENT) } else { model.local_offset(sym, len) };
            model.status("upcxx_extra_nvshmem_local_offset", st, want.map_or_else(|e| e, |_| OK));
            match want {
                Ok(o) => assert_eq!(off, o, "local_offset(0x{sym:x}, {len})"),
                Err(e) => {
                    assert_eq!(off, 0x5a5a_5a5a, "local_offset failed but wrote its output");
                    if e == OUT_OF_HEAP {
                        assert!(last_error_names(sym), "local_offset error lacks the address 0x{sym:x}: {}", last_error_text());
                    }
                }
            }
        }
        Op::FromOffset { rank, off, len, nulls } => {
            let rank = model.idx(rank);
            let size = model.heap_of(None).1;
            let off = addr_in((0, size), off);
            let left = model.heap.map_or(0, |h| model.bound(&h).wrapping_sub(off));
            let len = range_len(len, left);
            let (mut sym, mut pe): (*mut c_void, c_int) = (0x5a5a_5a5a as *mut c_void, 0x5a5a_5a5a);
            let symp = if is_null(nulls, 0) { null_mut() } else { &mut sym as *mut *mut c_void };
            let pep = if is_null(nulls, 1) { null_mut() } else { &mut pe as *mut c_int };
            // SAFETY: the out-pointers are NULL or point to locals.
            let st = unsafe { c::from_offset()(rank, off, len, symp, pep) };
            let want = if symp.is_null() || pep.is_null() { Err(NULL_ARGUMENT) } else { model.from_offset(rank, off, len) };
            model.status("upcxx_extra_nvshmem_from_offset", st, want.map_or_else(|e| e, |_| OK));
            match want {
                Ok(r) => {
                    assert_eq!((sym as usize, pe), r, "from_offset({rank}, {off}, {len})");
                    // The same bytes named by address on that rank translate the same way.
                    let raw = model.heap_of(Some(r.1)).0.wrapping_add(off);
                    assert_eq!(call_from_global(model, rank, raw, 0xff), Some(r), "from_offset and from_global_ptr differ");
                }
                Err(e) => {
                    assert_eq!((sym as usize, pe), (0x5a5a_5a5a, 0x5a5a_5a5a), "from_offset failed but wrote its outputs");
                    if e == OUT_OF_HEAP {
                        assert!(
                            last_error_text().contains(&format!("(heap offset {off})")),
                            "from_offset error lacks the offset {off}: {}",
                            last_error_text()
                        );
                    }
                }
            }
        }
        Op::CheckHostPtr { addr } => {
            let addr = addr_in(model.heap_of(None), addr);
            // SAFETY: the pointer is only compared, never read.
            let st = abi::upcxx_extra_nvshmem_check_host_ptr(addr as *const c_void) as c_int;
            let want = model.check_host_ptr(addr);
            model.status("upcxx_extra_nvshmem_check_host_ptr", st, want);
            if want != OK {
                assert!(last_error_names(addr), "check_host_ptr error lacks the address 0x{addr:x}: {}", last_error_text());
            }
            let mut slot: *const *const abi::Span = null_mut::<*const abi::Span>();
            // SAFETY: `slot` is a local.
            assert_eq!(unsafe { abi::upcxx_extra_nvshmem_heap_span(&mut slot) } as c_int, OK);
            // SAFETY: the library's slot, an atomic pointer to a span that lives as long as the process.
            let span = unsafe { *(*slot.cast::<std::sync::atomic::AtomicPtr<abi::Span>>()).load(std::sync::atomic::Ordering::Acquire) };
            assert_eq!((span.lo, span.size), model.heap.map_or((0, 0), |h| (h.base, h.size)), "heap_span");
            assert_eq!(addr.wrapping_sub(span.lo) < span.size, want != OK, "heap_span and check_host_ptr disagree on 0x{addr:x}");
        }
        Op::TableView { nulls } => {
            let sentinel = abi::TableView {
                base: 0x5a5a as *mut c_void,
                size: 0x5a5a,
                extent: 0x5a5a,
                my_pe: 0x5a5a,
                n_pes: 0x5a5a,
                device: 0x5a5a,
                peers_set: true,
            };
            let mut out = sentinel;
            let outp = if is_null(nulls, 0) { null_mut() } else { &mut out as *mut abi::TableView };
            // SAFETY: outp is NULL or points to a local.
            let st = unsafe { c::table_view()(outp) };
            let want = if outp.is_null() { Err(NULL_ARGUMENT) } else { model.heap.ok_or(TABLE_NOT_SET) };
            model.status("upcxx_extra_nvshmem_table_view", st, want.map_or_else(|e| e, |_| OK));
            let fields = |v: &abi::TableView| (v.base as usize, v.size, v.extent, v.my_pe, v.n_pes, v.device, v.peers_set);
            match want {
                Ok(h) => assert_eq!(
                    fields(&out),
                    (h.base, h.size, model.bound(&h), h.my_pe, h.n_pes, h.device, model.peers.is_some()),
                    "table_view"
                ),
                Err(_) => assert_eq!(fields(&out), fields(&sentinel), "table_view failed but wrote its output"),
            }
        }
        Op::LastError => {
            assert!(last_error_is(&model.last_error), "last_error: {:?}", last_error_text());
        }
        Op::Version => {
            let p = abi::upcxx_extra_nvshmem_version();
            assert!(!p.is_null());
            // SAFETY: a static NUL-terminated string.
            let v = unsafe { CStr::from_ptr(p) };
            assert_eq!(v.to_bytes(), env_version().as_bytes(), "version");
        }
    }
}

fn env_version() -> &'static str {
    // The library's version is the one its Cargo.toml says; the fuzz crate's path dependency.
    static V: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    V.get_or_init(|| {
        let p = abi::upcxx_extra_nvshmem_version();
        // SAFETY: a static NUL-terminated string.
        let s = unsafe { CStr::from_ptr(p) }.to_str().expect("version is UTF-8").to_string();
        assert!(!s.is_empty() && s.split('.').count() == 3 && s.split('.').all(|x| x.parse::<u32>().is_ok()), "version {s:?}");
        s
    })
}

fn dev_null() -> *mut libc::FILE {
    static F: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *F.get_or_init(|| {
        // SAFETY: NUL-terminated path and mode.
        let f = unsafe { libc::fopen(c"/dev/null".as_ptr(), c"w".as_ptr()) };
        assert!(!f.is_null());
        f as usize
    }) as *mut libc::FILE
}

fn attach(model: &mut Model, info: CHeapInfo, null_info: bool) {
    let h = MHeap {
        base: info.base as usize,
        size: info.size,
        mapped: info.mapped_size,
        my_pe: info.my_pe,
        n_pes: info.n_pes,
        device: info.device,
        version: (info.version_major, info.version_minor, info.version_patch),
    };
    model.ref_heap = (h.base, h.size);
    let p = if null_info { null() } else { &info as *const CHeapInfo };
    // SAFETY: NULL or a local struct.
    let st = unsafe { c::attach()(p) };
    let want = if null_info { Err(NULL_ARGUMENT) } else { check_heap(&h) };
    model.status("upcxx_extra_nvshmem_attach", st, want.map_or_else(|e| e, |_| OK));
    if want.is_ok() {
        model.heap = Some(h);
        model.peers = None;
        model.extent = 0;
    }
}

fn set_peers(model: &mut Model, d: &PeersDesc) {
    let heap_n = model.heap.map(|h| h.n_pes);
    let n_arg: c_int = match d.count {
        PeersCount::Heap => heap_n.unwrap_or(1),
        PeersCount::HeapPlus1 => heap_n.unwrap_or(1).saturating_add(1),
        PeersCount::HeapMinus1 => heap_n.unwrap_or(1).saturating_sub(1),
        PeersCount::Other(c) => count_of(c),
    };
    let null_peers = is_null(d.nulls, 0);
    // The array holds n_arg entries when the library may read them (n_arg entries, a C caller's
    // contract); a call that must be refused before reading gets a short array (or none).
    let will_read = !null_peers && n_arg > 0 && heap_n == Some(n_arg);
    if will_read && n_arg > 4096 {
        return; // keeps memory bounded: a valid call would need n_arg entries
    }
    let len = if n_arg > 0 { (n_arg as usize).min(4096) } else { 0 };
    let len = if will_read { len } else { len.min(8) };
    let specs = build_peers(d, len, model);
    let ptr = if null_peers {
        null()
    } else if specs.is_empty() {
        // A non-NULL pointer with no entries behind it (never read: n_arg <= 0 or no heap).
        std::ptr::NonNull::<Peer>::dangling().as_ptr() as *const Peer
    } else {
        specs.as_ptr()
    };
    // SAFETY: ptr is NULL, or has n_arg entries whenever the library reads them.
    let st = unsafe { c::set_peers()(n_arg, ptr) };
    let want = check_peers(model.heap.as_ref(), n_arg, &specs, null_peers);
    model.status("upcxx_extra_nvshmem_set_peers", st, want.as_ref().map_or_else(|e| *e, |_| OK));
    if let Ok(p) = want {
        model.peers = Some(p);
    }
}

fuzz_target!(|data: &[u8]| run(data));
