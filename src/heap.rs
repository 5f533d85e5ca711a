//! The heap record: where a heap came from ([`Source`], the C ABI's
//! `upcxx_extra_nvshmem_source_t`) and what it is ([`Heap`]: base, sizes, PE, device). Discovery
//! produces it, `attach` takes it from a caller, the table publishes it. Needs only the
//! statuses, so the loom model compiles it as it is.

use crate::error::Result;

/// Where a heap came from: the resolution step that found it, or MANUAL (provenance; the C
/// ABI's `upcxx_extra_nvshmem_source_t`, also how C callers name a step to select).
//
// Rust names here; cbindgen writes the C ones (`UPCXX_EXTRA_NVSHMEM_SOURCE_DLSYM`).
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    /// Nothing found yet; as a selection: try every step in order (the default).
    None = 0,
    /// Step 1: `dlsym` of `nvshmemi_device_state` in a build that exports it.
    Dlsym = 1,
    /// Step 2: the `.symtab` of the loaded library file.
    Symtab = 2,
    /// Step 3: the public `nvshmemx_cumodule_init` route.
    Cumodule = 3,
    /// Described by hand with `upcxx_extra_nvshmem_attach`.
    Manual = 4,
}

impl Source {
    /// Every source, in numeric order (`ALL[s as usize] == s`).
    pub const ALL: [Source; 5] = [Source::None, Source::Dlsym, Source::Symtab, Source::Cumodule, Source::Manual];

    /// The header's name without its prefix, in lower case, as the doctor prints it ("dlsym").
    pub fn name(self) -> &'static str {
        match self {
            Source::None => "none",
            Source::Dlsym => "dlsym",
            Source::Symtab => "symtab",
            Source::Cumodule => "cumodule",
            Source::Manual => "manual",
        }
    }

    /// The source with this number, if any.
    pub fn from_u32(v: u32) -> Option<Source> {
        Source::ALL.get(v as usize).copied()
    }
}

/// The local heap, as attached by hand or discovered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heap {
    pub base: usize,
    pub size: usize,
    pub mapped_size: usize,
    pub my_pe: i32,
    pub n_pes: i32,
    pub device: i32,
    pub version: (i32, i32, i32),
    pub source: Source,
}

impl Heap {
    /// Checks a description given by a caller.
    pub fn check(&self) -> Result<()> {
        if self.base == 0 {
            crate::fail!(InvalidArgument, "heap base is NULL");
        }
        if self.size == 0 {
            crate::fail!(InvalidArgument, "heap size is 0");
        }
        if self.base.checked_add(self.size).is_none() {
            crate::fail!(InvalidArgument, "heap [0x{:x}, +0x{:x}) overflows the address space", self.base, self.size);
        }
        if self.mapped_size > self.size {
            crate::fail!(InvalidArgument, "mapped_size 0x{:x} exceeds the heap size 0x{:x}", self.mapped_size, self.size);
        }
        if self.n_pes <= 0 {
            crate::fail!(InvalidArgument, "n_pes is {}", self.n_pes);
        }
        if self.my_pe < 0 || self.my_pe >= self.n_pes {
            crate::fail!(BadPe, "my_pe {} is not in [0, {})", self.my_pe, self.n_pes);
        }
        Ok(())
    }

    /// Same heap (base, size, PE, PE count), whatever its mapped extent.
    pub fn same_heap(&self, other: &Heap) -> bool {
        (self.base, self.size, self.my_pe, self.n_pes) == (other.base, other.size, other.my_pe, other.n_pes)
    }
}

#[cfg(all(test, not(loom)))]
mod tests {
    use super::Source;

    #[test]
    fn sources_are_the_headers_in_numeric_order() {
        let header = include_str!("../include/upcxx_extra_nvshmem.h");
        for (i, s) in Source::ALL.iter().enumerate() {
            assert_eq!((*s as usize, Source::from_u32(i as u32)), (i, Some(*s)));
            let line = format!("UPCXX_EXTRA_NVSHMEM_SOURCE_{} = {i},", s.name().to_uppercase());
            assert!(header.contains(&line), "the header lacks {line}");
        }
        assert_eq!(Source::from_u32(5), None);
    }
}
