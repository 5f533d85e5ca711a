//! The translation table's protocol under loom: every interleaving (up to the preemption bound)
//! of a reader translating while a writer publishes, replaces (arrays growing from uniform, and
//! shrinking back, buffers reused from the pool) or detaches. A reader's answer must be the
//! answer of one table that was published while it read, or the status of "no table": never a
//! mix of two tables, never a read of a freed buffer. Two reads wrapped in `Table::consistent`
//! (as `local_ptr` makes them) come from one table, which two bare reads do not.
//!
//!   RUSTFLAGS="--cfg loom" cargo test --release --manifest-path loom/Cargo.toml
//!
//! With `--cfg uxn_loom_bug` src/table.rs retires the published arrays to the pool before taking
//! the new ones (the bug a stress test once found by luck): `replace_reusing_the_pool` must then
//! fail, and does.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use upcxx_extra_nvshmem_loom::heap::Source;
use upcxx_extra_nvshmem_loom::status::Status;
use upcxx_extra_nvshmem_loom::table::{Global, Heap, PeerSpec, Table};

const BASE: usize = 0x10_0000;
const SIZE: usize = 0x1000;

fn heap(n: i32) -> Heap {
    Heap { base: BASE, size: SIZE, mapped_size: SIZE, my_pe: 0, n_pes: n, device: 0, version: (3, 4, 5), source: Source::Manual }
}

/// PE `pe` -> (rank, base) for a table "t": per-PE bases and a rotated rank map, distinct per t.
fn specs(n: i32, t: usize) -> Vec<PeerSpec> {
    (0..n)
        .map(|pe| PeerSpec {
            rank: (pe + t as i32) % n,
            base: if pe == 0 { BASE } else { BASE + (t + 1) * 0x10_0000 + pe as usize * 0x1_0000 },
        })
        .collect()
}

fn uniform(n: i32) -> Vec<PeerSpec> {
    (0..n).map(|pe| PeerSpec { rank: pe, base: BASE }).collect()
}

/// What table `specs` answers for (sym, pe) and (rank, raw).
fn expect_to(specs: &[PeerSpec], sym: usize, pe: i32) -> Global {
    let s = specs[pe as usize];
    Global { rank: s.rank, pe, device: if pe == 0 { 0 } else { -1 }, raw: s.base + (sym - BASE) }
}

/// One reader's translations, both the hot path (try_*) and the full one, checked against the
/// tables it may have seen.
fn read_and_check(t: &Table, tables: &[Option<Vec<PeerSpec>>]) {
    let sym = BASE + 0x40;
    let pe = 1;
    let ok_to = |g: &Global| tables.iter().flatten().any(|s| *g == expect_to(s, sym, pe));
    match t.to_global(sym, pe) {
        Ok(g) => assert!(ok_to(&g), "to_global answered {g:?}, from no published table"),
        Err(e) => assert!(
            tables.iter().any(|t| t.is_none()) && e.status == Status::TableNotSet,
            "to_global failed with {:?} ({}) though every table it could see has PE {pe}",
            e.status,
            e.message
        ),
    }
    if let Some(g) = t.try_to_global(sym, pe) {
        assert!(ok_to(&g), "try_to_global answered {g:?}, from no published table");
    }
    // from_global on the rank that PE 1 has in the first table, at its address there.
    let first = tables.iter().flatten().next().unwrap();
    let (rank, raw) = (first[1].rank, first[1].base + 0x40);
    let ok_from = |(s, p): (usize, i32)| {
        tables.iter().flatten().any(|sp| {
            let pe = sp.iter().position(|x| x.rank == rank).unwrap();
            let off = raw.wrapping_sub(sp[pe].base);
            off < SIZE && (s, p) == (BASE + off, pe as i32)
        })
    };
    if let Ok(a) = t.from_global(rank, raw) {
        assert!(ok_from(a), "from_global answered {a:?}, from no published table");
    }
    if let Some(a) = t.try_from_global(rank, raw) {
        assert!(ok_from(a), "try_from_global answered {a:?}, from no published table");
    }
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(f);
}

/// One model: `setup` builds the table before the reader starts; the reader translates while
/// `write` changes the table; every answer must come from one of `seen` (None: no table).
fn race(setup: fn(&Table), seen: fn() -> Vec<Option<Vec<PeerSpec>>>, write: fn(&Table)) {
    model(move || {
        let t = Arc::new(Table::new());
        setup(&t);
        let r = {
            let t = t.clone();
            thread::spawn(move || read_and_check(&t, &seen()))
        };
        write(&t);
        r.join().unwrap();
    });
}

fn with_heap(t: &Table) {
    t.set_heap(Some(heap(2)));
}

/// A reader while the first table is published (before: heap, no peers).
#[test]
fn reader_against_publish() {
    race(with_heap, || vec![None, Some(specs(2, 0))], |t| t.set_peers(&heap(2), &specs(2, 0)).unwrap());
}

/// A reader while a table with per-PE arrays replaces a uniform one (arrays grow from none),
/// and while a uniform one replaces a table with arrays (they shrink to none).
#[test]
fn reader_against_replace_growing_and_shrinking() {
    race(
        |t| {
            with_heap(t);
            t.set_peers(&heap(2), &uniform(2)).unwrap();
        },
        || vec![Some(uniform(2)), Some(specs(2, 0))],
        |t| t.set_peers(&heap(2), &specs(2, 0)).unwrap(),
    );
    race(
        |t| {
            with_heap(t);
            t.set_peers(&heap(2), &specs(2, 0)).unwrap();
        },
        || vec![Some(specs(2, 0)), Some(uniform(2))],
        |t| t.set_peers(&heap(2), &uniform(2)).unwrap(),
    );
}

/// The published table's arrays must not be reused while published: table 1 is published with
/// the pool empty, so the new table needs fresh arrays (or, with the bug, gets table 1's own).
#[test]
#[cfg_attr(uxn_loom_bug, should_panic(expected = "from no published table"))]
fn replace_reusing_the_pool() {
    race(
        |t| {
            with_heap(t);
            t.set_peers(&heap(2), &specs(2, 1)).unwrap();
        },
        || vec![Some(specs(2, 1)), Some(specs(2, 2))],
        |t| t.set_peers(&heap(2), &specs(2, 2)).unwrap(),
    );
}

/// Pooled buffers are reused for a third table while the second is published and read.
#[test]
fn reader_against_replace_from_the_pool() {
    race(
        |t| {
            with_heap(t);
            t.set_peers(&heap(2), &specs(2, 0)).unwrap();
            t.set_peers(&heap(2), &specs(2, 1)).unwrap(); // table 0's arrays go to the pool
        },
        || vec![Some(specs(2, 1)), Some(specs(2, 2))],
        |t| t.set_peers(&heap(2), &specs(2, 2)).unwrap(), // takes them back, rewrites them
    );
}

/// A reader while the heap and table are forgotten.
#[test]
fn reader_against_detach() {
    race(
        |t| {
            with_heap(t);
            t.set_peers(&heap(2), &specs(2, 0)).unwrap();
        },
        || vec![Some(specs(2, 0)), None],
        |t| t.set_heap(None),
    );
}

/// A reader while the heap is replaced by one with more PEs and its table (arrays grow).
#[test]
fn reader_against_a_larger_heap() {
    race(
        |t| {
            with_heap(t);
            t.set_peers(&heap(2), &specs(2, 0)).unwrap();
        },
        || vec![Some(specs(2, 0)), None, Some(specs(3, 1))],
        |t| {
            t.set_heap(Some(heap(3)));
            t.set_peers(&heap(3), &specs(3, 1)).unwrap();
        },
    );
}

/// Two reads (a translation and the heap's extent, as `local_ptr` makes them) against a detach:
/// `consistent` makes them one snapshot, so the answer is the table's with its extent, or no
/// table with no extent. `consistent` false: the two reads done bare.
fn translation_and_extent(consistent: bool) {
    model(move || {
        let t = Arc::new(Table::new());
        with_heap(&t);
        t.set_peers(&heap(2), &specs(2, 0)).unwrap();
        let r = {
            let t = t.clone();
            thread::spawn(move || {
                let (rank, raw) = (specs(2, 0)[1].rank, specs(2, 0)[1].base + 0x40);
                let both = || (t.from_global(rank, raw).is_ok(), t.extent());
                let (ok, extent) = if consistent { t.consistent(both) } else { both() };
                let with_table = (true, (BASE, SIZE, 0));
                let without = (false, (0, 0, 0));
                assert!((ok, extent) == with_table || (ok, extent) == without, "a mix of two tables: {ok} with extent {extent:?}");
            })
        };
        t.set_heap(None);
        r.join().unwrap();
    });
}

#[test]
fn consistent_reads_come_from_one_table() {
    translation_and_extent(true);
}

/// Without `consistent`, the model finds the mix (so the test above is not vacuous).
#[test]
#[should_panic(expected = "a mix of two tables")]
fn bare_reads_can_mix_tables() {
    translation_and_extent(false);
}
