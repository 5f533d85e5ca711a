//! The part of NVSHMEM's `nvshmemi_device_host_state_t` (public header
//! `include/device_host/nvshmem_types.h`) that this library reads.
//!
//! The first 72 bytes are identical in every NVSHMEM 3.x release from 3.1.7 to 3.8.0; the
//! `layout_bindgen` test checks these offsets against each installed release's own header.

/// `int version`: `(1 << 16) + sizeof(nvshmemi_device_host_state_t)`.
pub const OFF_VERSION: usize = 0;
/// `int mype`.
pub const OFF_MYPE: usize = 4;
/// `int npes`.
pub const OFF_NPES: usize = 8;
/// `void *heap_base`.
pub const OFF_HEAP_BASE: usize = 40;
/// `size_t heap_size` (the reserved range).
pub const OFF_HEAP_SIZE: usize = 48;
/// `void **peer_heap_base_p2p` (device pointer to `npes` local mappings of the peers' heaps).
pub const OFF_PEER_HEAP_BASE_P2P: usize = 56;
/// `void **peer_heap_base_remote` (device pointer to `npes` heap bases, one per PE).
pub const OFF_PEER_HEAP_BASE_REMOTE: usize = 64;
/// Bytes read: the prefix that is stable across releases.
pub const PREFIX_LEN: usize = 72;
/// The major part of the version field (`1 << 16`).
pub const VERSION_MAJOR_TAG: u32 = 1 << 16;

/// The largest state the version field can describe: it holds the size in its low 16 bits.
pub const MAX_STATE_SIZE: u64 = 0xffff;
/// The state's alignment (it holds pointers); a symbol at another address is not the state.
pub const STATE_ALIGN: usize = 8;

/// Checks the symbol that is to hold the state before anything is read from it: its address is
/// aligned as the struct is, and its size (when known) covers the bytes read and is one the
/// version field can describe. Checked arithmetic only: the values come from a file.
pub fn check_state_symbol(addr: usize, size: Option<u64>) -> Result<(), String> {
    if addr % STATE_ALIGN != 0 {
        return Err(format!("is at 0x{addr:x}, not {STATE_ALIGN}-byte aligned as the state (which holds pointers) is"));
    }
    match size {
        Some(sz) if sz < PREFIX_LEN as u64 => Err(format!("is {sz} bytes, smaller than the {PREFIX_LEN} bytes read")),
        Some(sz) if sz > MAX_STATE_SIZE => {
            Err(format!("is {sz} bytes (st_size), more than the {MAX_STATE_SIZE} bytes the state's version field can describe"))
        }
        _ => Ok(()),
    }
}

/// The fields read from the state, decoded from its first [`PREFIX_LEN`] bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StateFields {
    pub version: u32,
    pub mype: i32,
    pub npes: i32,
    pub heap_base: usize,
    pub heap_size: usize,
    pub peer_heap_base_p2p: usize,
    pub peer_heap_base_remote: usize,
}

impl StateFields {
    /// Decodes the stable prefix (native endianness, as the process wrote it).
    pub fn decode(prefix: &[u8; PREFIX_LEN]) -> StateFields {
        let u32_at = |o: usize| u32::from_ne_bytes(prefix[o..o + 4].try_into().unwrap());
        let usize_at = |o: usize| usize::from_ne_bytes(prefix[o..o + 8].try_into().unwrap());
        StateFields {
            version: u32_at(OFF_VERSION),
            mype: u32_at(OFF_MYPE) as i32,
            npes: u32_at(OFF_NPES) as i32,
            heap_base: usize_at(OFF_HEAP_BASE),
            heap_size: usize_at(OFF_HEAP_SIZE),
            peer_heap_base_p2p: usize_at(OFF_PEER_HEAP_BASE_P2P),
            peer_heap_base_remote: usize_at(OFF_PEER_HEAP_BASE_REMOTE),
        }
    }

    /// The struct size the version field claims, when it has the expected major tag.
    pub fn claimed_size(&self) -> Option<usize> {
        (self.version & 0xffff_0000 == VERSION_MAJOR_TAG).then_some((self.version & 0xffff) as usize)
    }
}

/// Checks the version field against the size of the symbol that holds the state (step 1 and 2),
/// or, where the symbol size is not known (step 3), that the claimed size covers what is read.
pub fn check_version(version: u32, symbol_size: Option<usize>) -> Result<usize, String> {
    let claimed = (version & 0xffff_0000 == VERSION_MAJOR_TAG)
        .then_some((version & 0xffff) as usize)
        .ok_or_else(|| format!("version field 0x{version:x} does not have the major tag 0x10000"))?;
    if claimed < PREFIX_LEN {
        return Err(format!("version field 0x{version:x} claims a {claimed}-byte state, smaller than the {PREFIX_LEN} bytes read"));
    }
    match symbol_size {
        Some(size) if size != claimed => Err(format!(
            "version field 0x{version:x} claims a {claimed}-byte state but the symbol is {size} bytes \
             (expected version 0x{:x})",
            u128::from(VERSION_MAJOR_TAG) + size as u128
        )),
        _ => Ok(claimed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_must_match_symbol_size() {
        assert_eq!(check_version(0x10000 + 776, Some(776)), Ok(776));
        assert_eq!(check_version(0x10000 + 848, None), Ok(848));
        assert!(check_version(0x10000 + 776, Some(848)).unwrap_err().contains("848"));
        assert!(check_version(0x20000 + 776, Some(776)).is_err());
        assert!(check_version(0x10000 + 16, None).unwrap_err().contains("smaller"));
        assert!(check_version(0, None).is_err());
        // A symbol size from a hostile file: no overflow, a message.
        assert!(check_version(0x10000 + 776, Some(usize::MAX)).unwrap_err().contains(&format!("0x{:x}", 0x10000u128 + usize::MAX as u128)));
    }

    #[test]
    fn state_symbol_checks() {
        assert_eq!(check_state_symbol(0x1000, Some(848)), Ok(()));
        assert_eq!(check_state_symbol(0x1000, None), Ok(()));
        assert!(check_state_symbol(0x1001, Some(848)).unwrap_err().contains("not 8-byte aligned"));
        assert!(check_state_symbol(0x1004, None).unwrap_err().contains("not 8-byte aligned"));
        assert!(check_state_symbol(0x1000, Some(u64::MAX)).unwrap_err().contains("more than the 65535 bytes"));
        assert!(check_state_symbol(0x1000, Some(0x10000)).is_err());
        assert!(check_state_symbol(0x1000, Some(16)).unwrap_err().contains("smaller than the 72 bytes read"));
    }

    #[test]
    fn decode_reads_the_documented_offsets() {
        let mut b = [0u8; PREFIX_LEN];
        b[0..4].copy_from_slice(&(0x10308u32).to_ne_bytes());
        b[4..8].copy_from_slice(&3i32.to_ne_bytes());
        b[8..12].copy_from_slice(&8i32.to_ne_bytes());
        b[40..48].copy_from_slice(&0x4200_00000usize.to_ne_bytes());
        b[48..56].copy_from_slice(&(128usize << 30).to_ne_bytes());
        b[56..64].copy_from_slice(&0x1111usize.to_ne_bytes());
        b[64..72].copy_from_slice(&0x2222usize.to_ne_bytes());
        let f = StateFields::decode(&b);
        assert_eq!(
            f,
            StateFields {
                version: 0x10308,
                mype: 3,
                npes: 8,
                heap_base: 0x4200_00000,
                heap_size: 128 << 30,
                peer_heap_base_p2p: 0x1111,
                peer_heap_base_remote: 0x2222
            }
        );
        assert_eq!(f.claimed_size(), Some(0x308));
    }
}
