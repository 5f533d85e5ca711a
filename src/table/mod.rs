//! The heap and its translation table: the heap record ([`heap`]), a peer table checked against
//! it ([`peers`]), the lock-free table translations read ([`translation`]), what is published
//! there and when ([`process_heap`]: discovery's heap, a heap attached by hand, peer tables), and
//! where a global address is mapped in this process ([`local_mapping`]).
//!
//! `heap`, `peers` and `translation` need nothing outside this directory but `abi::status`, so
//! the loom model (`loom/`) compiles them as they are.

pub mod heap;
pub mod local_mapping;
pub mod peers;
pub(crate) mod process_heap;
pub mod translation;

pub(crate) use heap::Heap;
pub(crate) use translation::TABLE;
