//! The translation table of the heap (the record is [`crate::heap`]): a peer table checked against
//! it ([`peers`]), the lock-free table translations read ([`translation`]: its publication; the
//! translations of one snapshot, [`snapshot`]; why one refused, [`errors`]), what is published
//! there and when ([`process_heap`]: discovery's heap, a heap attached by hand, peer tables), and
//! where a global address is mapped in this process ([`local_mapping`]).
//!
//! `peers`, `snapshot`, `errors` and `translation` need nothing outside this directory but
//! `crate::error` and `crate::heap`, so the loom model (`tests/loom/`) compiles them as they are.

mod errors;
pub mod local_mapping;
pub mod peers;
pub(crate) mod process_heap;
mod snapshot;
pub mod translation;

pub(crate) use crate::heap::Heap;
pub(crate) use translation::TABLE;
