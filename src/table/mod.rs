//! The translation table of the heap (the record is [`crate::heap`]): a peer table checked against
//! it ([`peers`]), the lock-free table translations read ([`translation`]), what is published
//! there and when ([`process_heap`]: discovery's heap, a heap attached by hand, peer tables), and
//! where a global address is mapped in this process ([`local_mapping`]).
//!
//! `peers` and `translation` need nothing outside this directory but `crate::error` and
//! `crate::heap`, so the loom model (`tests/loom/`) compiles them as they are.

pub mod local_mapping;
pub mod peers;
pub(crate) mod process_heap;
pub mod translation;

pub(crate) use crate::heap::Heap;
pub(crate) use translation::TABLE;
