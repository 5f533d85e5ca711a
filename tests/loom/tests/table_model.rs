//! The translation table's protocol under loom: every interleaving (up to the preemption bound)
//! of a reader translating while a writer publishes, replaces (arrays growing from uniform, and
//! shrinking back; a table installed again, sharing its arrays), attaches another heap or
//! detaches. A reader's answer must be the answer of one table that was published while it
//! read, or the status of "no table": never a mix of two tables, never a read of a freed
//! snapshot (loom reports one as a causality violation). A reader racing `attach` sees the old
//! heap or the new one, never none (two publications, a detach and then the attach, are
//! caught). `local_ptr`'s one read (translation, range and PE together) comes from one table,
//! which two separate reads do not.
//!
//!   RUSTFLAGS="--cfg loom" cargo test --release --manifest-path tests/loom/Cargo.toml
//!
//! With `--cfg uxn_loom_bug` src/table/translation.rs frees each snapshot as soon as it is replaced, while a
//! reader may still be translating from it: `replace_reusing_the_pool` must then fail, and does.
#![cfg(loom)]

use loom::sync::Arc;
use loom::thread;
use upcxx_extra_nvshmem_loom::error::Status;
use upcxx_extra_nvshmem_loom::heap::{Heap, Source};
use upcxx_extra_nvshmem_loom::table::peers::{PeerSpec, Peers};
use upcxx_extra_nvshmem_loom::table::translation::{Global, Table};

const BASE: usize = 0x10_0000;
const SIZE: usize = 0x1000;

fn heap(n: i32) -> Heap {
    Heap { base: BASE, size: SIZE, mapped_size: SIZE, my_pe: 0, n_pes: n, device: 0, version: (3, 4, 5), source: Source::Manual }
}

/// Installs table `specs` for `h` (checked first, as `process_heap` does).
fn set(t: &Table, h: Heap, specs: &[PeerSpec]) {
    t.set_peers(&Peers::new(&h, specs).unwrap()).unwrap();
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
    t.attach(heap(2));
}

/// A reader while the first table is published (before: heap, no peers).
#[test]
fn reader_against_publish() {
    race(with_heap, || vec![None, Some(specs(2, 0))], |t| set(t, heap(2), &specs(2, 0)));
}

/// A reader while a table with per-PE arrays replaces a uniform one (arrays grow from none),
/// and while a uniform one replaces a table with arrays (they shrink to none).
#[test]
fn reader_against_replace_growing_and_shrinking() {
    race(
        |t| {
            with_heap(t);
            set(t, heap(2), &uniform(2));
        },
        || vec![Some(uniform(2)), Some(specs(2, 0))],
        |t| set(t, heap(2), &specs(2, 0)),
    );
    race(
        |t| {
            with_heap(t);
            set(t, heap(2), &specs(2, 0));
        },
        || vec![Some(specs(2, 0)), Some(uniform(2))],
        |t| set(t, heap(2), &uniform(2)),
    );
}

/// A replaced snapshot must outlive every reader that may hold it; with the bug it is freed (its
/// memory back in the allocator's pool, to be reused) while the reader translates from it. The
/// name is the one the test `model.loom_catches_bug` (tests/CMakeLists.txt) runs.
#[test]
#[cfg_attr(uxn_loom_bug, should_panic(expected = "Concurrent read and write accesses"))]
fn replace_reusing_the_pool() {
    race(
        |t| {
            with_heap(t);
            set(t, heap(2), &specs(2, 1));
        },
        || vec![Some(specs(2, 1)), Some(specs(2, 2))],
        |t| set(t, heap(2), &specs(2, 2)),
    );
}

/// A table installed again shares the arrays of its first installation, while the table it
/// replaces is read.
#[test]
fn reader_against_a_table_installed_again() {
    race(
        |t| {
            with_heap(t);
            set(t, heap(2), &specs(2, 0));
            set(t, heap(2), &specs(2, 1));
        },
        || vec![Some(specs(2, 1)), Some(specs(2, 0))],
        |t| set(t, heap(2), &specs(2, 0)),
    );
}

/// A reader while the heap and table are forgotten.
#[test]
fn reader_against_detach() {
    race(
        |t| {
            with_heap(t);
            set(t, heap(2), &specs(2, 0));
        },
        || vec![Some(specs(2, 0)), None],
        |t| t.detach(),
    );
}

/// A reader while the heap is replaced by one with more PEs and its table (arrays grow).
#[test]
fn reader_against_a_larger_heap() {
    race(
        |t| {
            with_heap(t);
            set(t, heap(2), &specs(2, 0));
        },
        || vec![Some(specs(2, 0)), None, Some(specs(3, 1))],
        |t| {
            t.attach(heap(3));
            set(t, heap(3), &specs(3, 1));
        },
    );
}

/// `local_ptr`'s question (the translation of a range and my PE) against a detach. `one_read`:
/// as `local_ptr` asks it, one read (`from_global_range`), so the answer is the table's with its
/// PE, or no table and no heap. Otherwise as two reads (the translation, then the heap's
/// extent), which can mix two tables.
fn translation_and_my_pe(one_read: bool) {
    model(move || {
        let t = Arc::new(Table::new());
        with_heap(&t);
        set(&t, heap(2), &specs(2, 0));
        let r = {
            let t = t.clone();
            thread::spawn(move || {
                let (rank, raw) = (specs(2, 0)[1].rank, specs(2, 0)[1].base + 0x40);
                let (ok, heap) = if one_read {
                    match t.from_global_range(rank, raw, 8) {
                        Ok((_, _, my_pe)) => (true, (BASE, SIZE, my_pe)),
                        Err(e) if e.status == Status::TableNotSet => (false, (0, 0, 0)),
                        Err(e) => panic!("{:?}: {}", e.status, e.message),
                    }
                } else {
                    (t.from_global(rank, raw).is_ok(), t.extent())
                };
                let with_table = (true, (BASE, SIZE, 0));
                let without = (false, (0, 0, 0));
                assert!((ok, heap) == with_table || (ok, heap) == without, "a mix of two tables: {ok} with heap {heap:?}");
            })
        };
        t.detach();
        r.join().unwrap();
    });
}

#[test]
fn one_read_comes_from_one_table() {
    translation_and_my_pe(true);
}

/// With two reads, the model finds the mix (so the test above is not vacuous).
#[test]
#[should_panic(expected = "a mix of two tables")]
fn two_reads_can_mix_tables() {
    translation_and_my_pe(false);
}

/// A second heap (another base, 3 PEs) for the attach race.
fn other_heap() -> Heap {
    Heap { base: BASE + 0x100_0000, n_pes: 3, my_pe: 2, ..heap(2) }
}

/// A reader racing a heap replaced by hand: `attach` (one publication), or `detach` then
/// `attach` (two). The reader asks what `heap_query`'s callers and the translation calls see:
/// the heap's extent must be the old heap's or the new one's, and an offset in the old heap must
/// be answered by the old heap or refused as outside the new one, never "no heap is known".
fn reader_against_attach(two_publications: bool) {
    model(move || {
        let t = Arc::new(Table::new());
        with_heap(&t);
        set(&t, heap(2), &specs(2, 0));
        t.set_extent(SIZE / 2).unwrap();
        let r = {
            let t = t.clone();
            thread::spawn(move || {
                let old = (BASE, SIZE / 2, 0);
                let new = (other_heap().base, SIZE, 2);
                let e = t.extent();
                assert!(e == old || e == new, "the heap seen while attach ran: {e:?}, neither the old nor the new one");
                match t.offset(BASE + 0x10) {
                    Ok(off) => assert_eq!(off, 0x10),
                    Err(e) => assert_eq!(
                        e.status,
                        Status::OutOfHeap,
                        "offset while attach ran: {:?} ({}), neither the old nor the new one",
                        e.status,
                        e.message
                    ),
                }
            })
        };
        if two_publications {
            t.detach();
        }
        t.attach(other_heap());
        r.join().unwrap();
    });
}

#[test]
fn a_reader_racing_attach_sees_the_old_or_the_new_heap() {
    reader_against_attach(false);
}

/// Publishing "no heap" and then the new one (an `attach` made of two publications) is caught.
#[test]
#[should_panic(expected = "neither the old nor the new one")]
fn detach_then_attach_shows_no_heap() {
    reader_against_attach(true);
}
