//! The model GPU and the scenarios of the engine's model (engine_model.rs, engine_bugs.rs).

use loom::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use loom::sync::{Arc, Mutex};
use loom::thread;
use upcxx_extra_nvshmem_loom::engine_core::{
    AFTER_STREAM, CALLER_TICKET, Code, CopyReq, DEVICE_ENDS, Desc, Engine, Gpu, Handle, NOT_READY, ON_STREAM, ON_STREAM_KERNEL_MAX,
    SUCCESS, Settled, Signal, UNKNOWN,
};
use upcxx_extra_nvshmem_loom::error::Status;

/// One operation on a model stream.
enum Op {
    Copy(usize),
    Batch(Vec<usize>),
    /// Runs once stream `.0` has run `.1` operations.
    Wait(usize, usize),
    /// Runs once the mapped word (the engine's stream tickets done) is at least `.0`.
    WaitValue(u32),
    /// Stores `.1` into the mapped word at host address `.0` (a ticket's word of a caller's stream).
    WriteValue(usize, u32),
    /// A copy or a launch that fails ([`ModelGpu::fail_next`]): its copies do not run, and the
    /// context faults (every later query reports [`FAULT`]).
    Fail,
}

/// The fault a failed operation leaves in the model's context (`CUDA_ERROR_ILLEGAL_ADDRESS`).
pub const FAULT: Code = 700;
/// What the model's driver answers a copy it refuses (`CUDA_ERROR_INVALID_VALUE`).
pub const REFUSED: Code = 1;
/// What it answers work on a stream of another device than the context's
/// (`CUDA_ERROR_INVALID_HANDLE`).
pub const OTHER_CONTEXT: Code = 400;

/// Handles of callers' streams being captured into a CUDA graph (no work is ever queued on them):
/// one whose capture is active, one whose capture was invalidated, one the driver cannot say.
pub const CAPTURED: Handle = 1000;
pub const INVALIDATED: Handle = 1001;
pub const CAPTURE_UNKNOWN: Handle = 1002;

#[derive(Default)]
struct Stream {
    ops: Vec<Op>,
    done: usize,
    destroyed: bool,
}

#[derive(Default)]
struct Sim {
    streams: Vec<Stream>,
    /// Event `i + 1`: recorded at (stream, operations before it), or not recorded.
    events: Vec<Option<(usize, usize)>>,
    /// The copies run, in order (a copy is named by its source address).
    ran: Vec<usize>,
    /// The mapped word's value when each copy of `ran` ran.
    word_at_run: Vec<u32>,
    /// The host's phase ([`ModelGpu::set_phase`]) when each copy of `ran` ran.
    phase_at_run: Vec<u32>,
    phase: u32,
    /// Launches to refuse.
    refuse_launches: u32,
    /// Callers' streams of device 1 (the engine's is device 0): their handles.
    other_device: Vec<Handle>,
    /// Callers' streams of device 1 whose device the driver cannot tell (`stream_device`: -1).
    unknown_device: Vec<Handle>,
    /// The driver refuses ([`OTHER_CONTEXT`]) a stream write or an event record on a stream of
    /// device 1 in the calling thread's context (device 0's), as CUDA does.
    refuse_other_context: bool,
    /// Work enqueued on a stream in the context of another device than the stream's (CUDA
    /// refuses it; the model counts it, checked by the scenarios).
    wrong_context: usize,
    /// A copy the driver refuses (`cuMemcpyAsync` returns [`REFUSED`]): its id.
    refuse_copy: Option<usize>,
    /// The driver refuses stream writes (`cuStreamWriteValue32`): callers' tickets are events.
    refuse_stream_writes: bool,
    /// Events destroyed (by index), and destroys of an event never made or destroyed already.
    freed: Vec<bool>,
    bad_destroys: usize,
    /// Copies and launches to fail when they run.
    fail_next: u32,
    /// Launches of the batch kernel enqueued (failing ones included).
    launches: usize,
    /// Stream writes enqueued.
    writes: usize,
    /// The blocks of device words handed out (first address, words), and launches whose
    /// completion word's counter lies outside them (checked by the scenarios).
    device_blocks: Vec<(usize, usize)>,
    bad_counters: usize,
    /// Calls that reached the GPU.
    calls: usize,
    /// Streams destroyed with work queued on them.
    busy_destroys: usize,
}

/// The model GPU (shared by the engine and the GPU thread).
#[derive(Clone)]
pub struct ModelGpu {
    sim: Arc<Mutex<Sim>>,
    /// No GPU thread: the GPU runs one operation at each query and what a synchronize needs
    /// (the scenarios of several host threads, whose interleavings are what they check).
    inline: bool,
    /// The GPU runs the newest stream's ready work first (stream 0, the caller's, last): a
    /// scenario's order across streams then rests on the engine's waits alone.
    newest_first: bool,
    generation: Arc<AtomicU32>,
    stop: Arc<AtomicBool>,
    /// The word of "mapped host memory" the engine writes its tickets done into (the host
    /// writes it with a plain std atomic, as the library does).
    word: &'static std::sync::atomic::AtomicU32,
    /// A failed operation ran: the context's sticky fault.
    fault: &'static std::sync::atomic::AtomicBool,
    /// The streams of device 1 (a copy of `other_device` and `unknown_device` that
    /// `stream_query` reads without the model's lock), and stream queries in the context of
    /// another device than the stream's (checked by run()).
    device1: &'static std::sync::Mutex<Vec<Handle>>,
    wrong_queries: &'static std::sync::atomic::AtomicUsize,
}

impl ModelGpu {
    fn new(refuse_launches: u32) -> Self {
        // Stream 0: the caller's (the legacy default stream).
        let sim = Sim { streams: vec![Stream::default()], refuse_launches, ..Default::default() };
        ModelGpu {
            sim: Arc::new(Mutex::new(sim)),
            inline: false,
            newest_first: false,
            generation: Arc::new(AtomicU32::new(0)),
            stop: Arc::new(AtomicBool::new(false)),
            word: Box::leak(Box::new(std::sync::atomic::AtomicU32::new(0))),
            fault: Box::leak(Box::new(std::sync::atomic::AtomicBool::new(false))),
            device1: Box::leak(Box::new(std::sync::Mutex::new(Vec::new()))),
            wrong_queries: Box::leak(Box::new(std::sync::atomic::AtomicUsize::new(0))),
        }
    }

    /// The device of stream `st` (whether or not the driver can tell it).
    fn device_of(s: &Sim, st: Handle) -> i32 {
        i32::from(s.other_device.contains(&st) || s.unknown_device.contains(&st))
    }

    /// Counts work enqueued on stream `st` in device `ctx`'s context when `st` is another's.
    fn in_context(s: &mut Sim, st: Handle, ctx: Option<i32>) {
        let dev = Self::device_of(s, st);
        if ctx.is_some_and(|d| d != dev) {
            s.wrong_context += 1;
        }
    }

    /// A stream write or an event record on stream `st` in context `ctx` (`None`: the calling
    /// thread's, device 0's). In another device's context than the stream's it is refused
    /// ([`OTHER_CONTEXT`]), as CUDA does, where the engine cannot know better: in the calling
    /// thread's context with [`ModelGpu::refuse_other_context`], or on a stream whose device the
    /// driver cannot tell (the engine tries each device's context). A context the engine named
    /// for a stream whose device it was told is counted when wrong ([`Self::in_context`]).
    fn admit(s: &mut Sim, st: Handle, ctx: Option<i32>) -> Result<(), Code> {
        let dev = Self::device_of(s, st);
        if ctx.unwrap_or(0) != dev && (s.unknown_device.contains(&st) || (ctx.is_none() && s.refuse_other_context)) {
            return Err(OTHER_CONTEXT);
        }
        Self::in_context(s, st, ctx);
        Ok(())
    }

    fn with<T>(&self, f: impl FnOnce(&mut Sim) -> T) -> T {
        let mut s = self.sim.lock().unwrap();
        s.calls += 1;
        f(&mut s)
    }

    /// Runs one operation that is ready; false when none is.
    fn step(&self) -> bool {
        let mut s = self.sim.lock().unwrap();
        let n = s.streams.len();
        for k in 0..n {
            let i = if self.newest_first { n - 1 - k } else { k };
            let st = &s.streams[i];
            if st.done == st.ops.len() {
                continue;
            }
            let word = self.word.load(std::sync::atomic::Ordering::Acquire);
            let ready = match &st.ops[st.done] {
                Op::Wait(o, upto) => s.streams[*o].done >= *upto,
                Op::WaitValue(v) => word.wrapping_sub(*v) as i32 >= 0,
                _ => true,
            };
            if !ready {
                continue;
            }
            let at = s.streams[i].done;
            let op = std::mem::replace(&mut s.streams[i].ops[at], Op::Batch(Vec::new()));
            let n = match op {
                Op::Copy(id) => {
                    s.ran.push(id);
                    1
                }
                Op::Batch(ids) => {
                    s.ran.extend(&ids);
                    ids.len()
                }
                Op::Wait(..) | Op::WaitValue(_) => 0,
                Op::Fail => {
                    self.fault.store(true, std::sync::atomic::Ordering::Release);
                    0
                }
                Op::WriteValue(addr, v) => {
                    // SAFETY: a word of a block mapped_words leaked for the model's life.
                    #[allow(unsafe_code)]
                    unsafe {
                        (*(addr as *const std::sync::atomic::AtomicU32)).store(v, std::sync::atomic::Ordering::Release)
                    };
                    0
                }
            };
            s.word_at_run.extend(std::iter::repeat_n(word, n));
            let phase = s.phase;
            s.phase_at_run.extend(std::iter::repeat_n(phase, n));
            s.streams[i].done += 1;
            return true;
        }
        false
    }

    fn idle(&self) -> bool {
        let s = self.sim.lock().unwrap();
        s.streams.iter().all(|st| st.done == st.ops.len())
    }

    fn event_done(s: &Sim, e: Handle) -> bool {
        match s.events[e - 1] {
            None => true,
            Some((st, n)) => s.streams[st].done >= n,
        }
    }

    fn spin_until(&self, f: impl Fn(&Sim) -> bool) {
        loop {
            if f(&self.sim.lock().unwrap()) {
                return;
            }
            if self.inline && self.step() {
                continue;
            }
            thread::yield_now();
        }
    }

    pub fn ran(&self) -> Vec<usize> {
        self.sim.lock().unwrap().ran.clone()
    }
    /// The mapped word's value when copy `id` ran (None: it did not run).
    pub fn word_when_ran(&self, id: usize) -> Option<u32> {
        let s = self.sim.lock().unwrap();
        s.ran.iter().position(|&r| r == id).map(|i| s.word_at_run[i])
    }
    /// Streams the engine destroyed (the caller's, stream 0, is never).
    pub fn destroyed_streams(&self) -> usize {
        self.sim.lock().unwrap().streams.iter().filter(|st| st.destroyed).count()
    }
    /// Launches of the batch kernel enqueued so far (failed ones included).
    pub fn launches(&self) -> usize {
        self.sim.lock().unwrap().launches
    }
    /// A new caller's stream, of device 1 (another device than the engine's).
    pub fn stream_of_another_device(&self) -> Handle {
        self.device1_stream(false)
    }
    /// A new caller's stream of device 1 whose device the driver cannot tell (`stream_device`
    /// answers -1): only a stream write or an event record in device 1's context takes it.
    pub fn stream_of_unknown_device(&self) -> Handle {
        self.device1_stream(true)
    }
    fn device1_stream(&self, unknown: bool) -> Handle {
        let mut s = self.sim.lock().unwrap();
        s.streams.push(Stream::default());
        let h = s.streams.len() - 1;
        if unknown {
            s.unknown_device.push(h)
        } else {
            s.other_device.push(h)
        }
        self.device1.lock().unwrap().push(h);
        h
    }
    /// The driver refuses a stream write or an event record on a stream of device 1 in the
    /// calling thread's context from now on, as CUDA does.
    pub fn refuse_other_context(&self) {
        self.sim.lock().unwrap().refuse_other_context = true;
    }
    /// The caller's own work on stream `st`: a copy named `id`.
    pub fn enqueue(&self, st: Handle, id: usize) {
        self.sim.lock().unwrap().streams[st].ops.push(Op::Copy(id));
    }
    /// The driver refuses every stream write from now on.
    pub fn refuse_stream_writes(&self) {
        self.sim.lock().unwrap().refuse_stream_writes = true;
    }
    /// Events made and not destroyed, and destroys of an event never made or destroyed already.
    pub fn events_leaked_and_bad_destroys(&self) -> (usize, usize) {
        let s = self.sim.lock().unwrap();
        (s.freed.iter().filter(|f| !**f).count(), s.bad_destroys)
    }
    /// The driver refuses copy `id` whenever it is issued (nothing enqueued).
    pub fn refuse_copy(&self, id: usize) {
        self.sim.lock().unwrap().refuse_copy = Some(id);
    }
    /// Stream writes enqueued so far.
    pub fn stream_writes(&self) -> usize {
        self.sim.lock().unwrap().writes
    }
    /// The next `n` copies or launches enqueued fail when the GPU runs them.
    pub fn fail_next(&self, n: u32) {
        self.sim.lock().unwrap().fail_next = n;
    }
    /// `op`, or a failing one in its place.
    fn maybe_failing(s: &mut Sim, op: Op) -> Op {
        if s.fail_next == 0 {
            return op;
        }
        s.fail_next -= 1;
        match op {
            Op::Copy(_) | Op::Batch(_) => Op::Fail,
            other => other,
        }
    }
    /// The context's sticky fault. A plain atomic, not a model lock: the engine asks at times it
    /// chooses by the clock (at most one probe a millisecond), which a lock would make part of the
    /// explored schedule.
    fn faulted(&self) -> Result<(), Code> {
        if self.fault.load(std::sync::atomic::Ordering::Acquire) { Err(FAULT) } else { Ok(()) }
    }
    /// The host is in phase `p` from now on (what a copy that runs records).
    pub fn set_phase(&self, p: u32) {
        self.sim.lock().unwrap().phase = p;
    }
    /// The host's phase when copy `id` ran (None: it did not run).
    pub fn phase_when_ran(&self, id: usize) -> Option<u32> {
        let s = self.sim.lock().unwrap();
        s.ran.iter().position(|&r| r == id).map(|i| s.phase_at_run[i])
    }
    /// Work enqueued on a stream in another device's context, stream queries there, and
    /// launches whose completion word's counter is not a word the model handed out.
    pub fn wrong_context(&self) -> usize {
        let s = self.sim.lock().unwrap();
        s.wrong_context + s.bad_counters + self.wrong_queries.load(std::sync::atomic::Ordering::Relaxed)
    }
    pub fn busy_destroys(&self) -> usize {
        self.sim.lock().unwrap().busy_destroys
    }
    pub fn calls(&self) -> usize {
        self.sim.lock().unwrap().calls
    }
}

impl Gpu for ModelGpu {
    /// Small, so that a few copies already fill a launch.
    const BATCH_MAX: usize = 4;
    fn fork_generation(&self) -> u32 {
        self.generation.load(Ordering::Relaxed)
    }
    fn stream_create(&self, _device: i32) -> Result<Handle, Code> {
        Ok(self.with(|s| {
            s.streams.push(Stream::default());
            s.streams.len() - 1
        }))
    }
    fn stream_destroy(&self, _device: i32, st: Handle) {
        self.with(|s| {
            if s.streams[st].done != s.streams[st].ops.len() {
                s.busy_destroys += 1; // checked by the scenarios (a panic here would be in a drop)
            }
            s.streams[st].destroyed = true;
        })
    }
    fn event_create(&self, _ctx: Option<i32>) -> Result<Handle, Code> {
        Ok(self.with(|s| {
            s.events.push(None);
            s.freed.push(false);
            s.events.len()
        }))
    }
    fn event_destroy(&self, e: Handle) {
        self.with(|s| match s.freed.get_mut(e.wrapping_sub(1)) {
            Some(f) if !*f => *f = true,
            _ => s.bad_destroys += 1, // checked by the scenarios (a panic here may be in a drop)
        })
    }
    fn event_record(&self, e: Handle, st: Handle, ctx: Option<i32>) -> Result<(), Code> {
        self.with(|s| {
            Self::admit(s, st, ctx)?;
            assert!(!s.streams[st].destroyed, "an event recorded on a destroyed stream");
            let n = s.streams[st].ops.len();
            s.events[e - 1] = Some((st, n));
            Ok(())
        })
    }
    fn event_query(&self, e: Handle) -> Result<(), Code> {
        if self.inline {
            self.step();
        }
        if self.with(|s| Self::event_done(s, e)) { self.faulted() } else { Err(NOT_READY) }
    }
    fn event_synchronize(&self, e: Handle) -> Result<(), Code> {
        self.spin_until(|s| Self::event_done(s, e));
        self.faulted()
    }
    fn stream_synchronize(&self, st: Handle, _ctx: Option<i32>) -> Result<(), Code> {
        self.spin_until(|s| s.streams[st].done == s.streams[st].ops.len());
        self.faulted()
    }
    fn stream_wait_event(&self, st: Handle, e: Handle, _ctx: Option<i32>) -> Result<(), Code> {
        self.with(|s| {
            if let Some((o, n)) = s.events[e - 1] {
                s.streams[st].ops.push(Op::Wait(o, n));
            }
        });
        Ok(())
    }
    fn memcpy_async(&self, _dst: usize, src: usize, _bytes: usize, st: Handle, ctx: Option<i32>) -> Result<(), Code> {
        self.with(|s| {
            Self::in_context(s, st, ctx);
            if s.refuse_copy == Some(src) {
                return Err(REFUSED);
            }
            assert!(!s.streams[st].destroyed, "a copy on a destroyed stream");
            let op = Self::maybe_failing(s, Op::Copy(src));
            s.streams[st].ops.push(op);
            Ok(())
        })
    }
    fn launch_batch(&self, device: i32, st: Handle, batch: &[Desc], signal: Option<Signal>) -> Result<(), String> {
        self.with(|s| {
            Self::in_context(s, st, Some(device));
            if s.refuse_launches > 0 {
                s.refuse_launches -= 1;
                return Err("the model refuses this launch".to_string());
            }
            assert!((1..=Self::BATCH_MAX).contains(&batch.len()), "a launch of {} copies", batch.len());
            s.launches += 1;
            let op = Self::maybe_failing(s, Op::Batch(batch.iter().map(|d| d.src).collect()));
            let fails = matches!(op, Op::Fail);
            s.streams[st].ops.push(op);
            if let Some(g) = signal
                && !s.device_blocks.iter().any(|&(a, n)| g.counter >= a && g.counter < a + 4 * n && (g.counter - a) % 4 == 0)
            {
                s.bad_counters += 1;
            }
            if let Some(g) = signal
                && !fails
            {
                // The launch's last block stores the word once every copy of it landed (a launch
                // that faults never gets there).
                s.streams[st].ops.push(Op::WriteValue(g.word, g.value));
            }
            Ok(())
        })
    }
    fn stream_device(&self, s: Handle) -> i32 {
        let sim = self.sim.lock().unwrap();
        if sim.unknown_device.contains(&s) { -1 } else { i32::from(sim.other_device.contains(&s)) }
    }
    fn stream_capturing(&self, s: Handle) -> Result<Option<bool>, Code> {
        match s {
            CAPTURED => Ok(Some(false)),
            INVALIDATED => Ok(Some(true)),
            CAPTURE_UNKNOWN => Err(FAULT),
            _ => Ok(None),
        }
    }
    fn device_count(&self) -> i32 {
        2
    }
    fn mapped_word(&self, _device: i32) -> Result<(usize, usize), Code> {
        let a = self.word as *const _ as usize;
        Ok((a, a))
    }
    fn mapped_words(&self, _device: i32, words: usize) -> Result<(usize, usize), Code> {
        let block: &'static [std::sync::atomic::AtomicU32] =
            Box::leak((0..words).map(|_| std::sync::atomic::AtomicU32::new(0)).collect::<Vec<_>>().into_boxed_slice());
        let a = block.as_ptr() as usize;
        Ok((a, a))
    }
    fn device_words(&self, _device: i32, words: usize) -> Result<usize, Code> {
        let block: &'static [std::sync::atomic::AtomicU32] =
            Box::leak((0..words).map(|_| std::sync::atomic::AtomicU32::new(0)).collect::<Vec<_>>().into_boxed_slice());
        let a = block.as_ptr() as usize;
        self.with(|s| s.device_blocks.push((a, words)));
        Ok(a)
    }
    fn stream_write_value32(&self, st: Handle, addr: usize, value: u32, ctx: Option<i32>) -> Result<(), Code> {
        self.with(|s| {
            Self::admit(s, st, ctx)?;
            if s.refuse_stream_writes {
                return Err(REFUSED);
            }
            assert!(!s.streams[st].destroyed, "a write on a destroyed stream");
            s.writes += 1;
            s.streams[st].ops.push(Op::WriteValue(addr, value));
            Ok(())
        })
    }
    fn stream_query(&self, st: Handle, ctx: Option<i32>) -> Result<(), Code> {
        if self.inline {
            self.step();
        }
        // A stream of another device than the context's (the legacy handle 0 is any context's
        // own). Without the model's lock, as `faulted`.
        let dev = i32::from(self.device1.lock().unwrap().contains(&st));
        if st != 0 && ctx.is_some_and(|d| d != dev) {
            self.wrong_queries.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        self.faulted()
    }
    fn stream_wait_value32(&self, device: i32, st: Handle, addr: usize, value: u32) -> Result<(), String> {
        assert_eq!(addr, self.word as *const _ as usize, "a wait on a word the model did not map");
        self.with(|s| {
            Self::in_context(s, st, Some(device));
            s.streams[st].ops.push(Op::WaitValue(value))
        });
        Ok(())
    }
    fn result_name(&self, c: Code) -> String {
        format!("model error {c}")
    }
}

/// The GPU thread: runs the streams' work until the host says stop and nothing is left.
fn gpu_thread(g: ModelGpu) -> thread::JoinHandle<()> {
    thread::spawn(move || {
        loop {
            if g.step() {
                continue;
            }
            if g.stop.load(Ordering::Acquire) && g.idle() {
                return;
            }
            thread::yield_now();
        }
    })
}

fn model(f: impl Fn() + Sync + Send + 'static) {
    model_bounded(3, f)
}

fn model_bounded(bound: usize, f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(bound);
    }
    // The host and the GPU thread spin (polls, synchronizes): each spin is a yield, a branch.
    b.max_branches = 100_000;
    b.check(f);
}

/// A copy named `id` (its source address) of `bytes` bytes.
fn req(id: usize, bytes: usize, flags: u32) -> CopyReq {
    CopyReq { dst: 0x1000 + id, src: id, bytes, src_rank: 0, dst_rank: 1, flags, stream: 0 }
}

/// Polls ticket `t` of copy `id` until it is over; when it landed, copy `id` ran.
fn wait_landed(e: &Engine<ModelGpu>, g: &ModelGpu, t: u64, id: usize) -> Result<(), String> {
    let mut asked = 0;
    loop {
        let r = e.poll(t, Some(&mut asked)).map_err(|x| format!("polling copy {id}: {x:?}"))?;
        if r != NOT_READY {
            check(r == SUCCESS, format!("copy {id} failed ({r})"))?;
            check(g.ran().contains(&id), format!("copy {id} was reported landed before it ran"))?;
            let settled = e.complete(t, r, &req(id, 0, 0)).map_err(|x| format!("settling copy {id}: {x:?}"))?;
            return check(settled == Settled::Landed, format!("copy {id} did not settle as landed"));
        }
        thread::yield_now();
    }
}

fn check(ok: bool, why: String) -> Result<(), String> {
    if ok { Ok(()) } else { Err(why) }
}

/// One model run: an engine over a model GPU (`refuse` launches refused), `body` with it (the
/// body drops the engine); the GPU thread is stopped and joined before a failure panics, so no
/// loom object is dropped while a model thread unwinds.
fn run(batch_bytes: usize, refuse: u32, body: fn(Engine<ModelGpu>, &ModelGpu) -> Result<(), String>) {
    run_with(batch_bytes, refuse, false, body)
}

fn run_with(batch_bytes: usize, refuse: u32, newest_first: bool, body: fn(Engine<ModelGpu>, &ModelGpu) -> Result<(), String>) {
    model(move || {
        let mut g = ModelGpu::new(refuse);
        g.newest_first = newest_first;
        let gpu = gpu_thread(g.clone());
        let r = body(Engine::new(g.clone(), 0, batch_bytes), &g);
        g.stop.store(true, Ordering::Release);
        gpu.join().unwrap();
        let busy = g.busy_destroys();
        let (leaked, bad) = g.events_leaked_and_bad_destroys();
        let wrong = g.wrong_context();
        if let Err(why) = r {
            panic!("{why}");
        }
        assert_eq!(busy, 0, "a stream destroyed with work queued on it");
        assert_eq!(bad, 0, "an event destroyed twice, or one never made");
        assert_eq!(wrong, 0, "work enqueued on a stream in another device's context, or a launch counter out of its block");
        // The engine is dropped: every event it made is destroyed (in a fork() child it forgets
        // them: the parent's).
        if g.generation.load(Ordering::Relaxed) == 0 {
            assert_eq!(leaked, 0, "events the dropped engine did not destroy");
        }
    });
}

/// A small copy joins the batch; a large one after it is not batched: the batch goes on the
/// stream first, so the copies run in issue order.
pub fn scenario_order() {
    run(64, 0, |e, g| {
        let a = e.copy(&req(1, 8, DEVICE_ENDS)).unwrap();
        let b = e.copy(&req(2, 4096, DEVICE_ENDS)).unwrap();
        wait_landed(&e, g, b, 2)?;
        wait_landed(&e, g, a, 1)?;
        drop(e);
        check(g.destroyed_streams() == 1, "dropping the engine did not release its stream".into())?;
        check(g.ran() == vec![1, 2], format!("the stream ran the copies out of issue order: {:?}", g.ran()))
    });
}

/// A lone batched copy: the poll that finds it uncovered launches the batch and records a mark
/// after it; the copy lands only once the launch ran.
pub fn scenario_lone_batched() {
    run(64, 0, |e, g| {
        let a = e.copy(&req(1, 8, DEVICE_ENDS)).unwrap();
        wait_landed(&e, g, a, 1)
    });
}

/// Two unbatched copies, two marks pending (the second recorded by the second copy's poll): the
/// older mark landing says nothing of the newer copy.
pub fn scenario_two_marks() {
    run(0, 0, |e, g| {
        let a = e.copy(&req(1, 8, 0)).unwrap(); // a mark of its own
        let b = e.copy(&req(2, 8, 0)).unwrap(); // a mark is pending: none
        wait_landed(&e, g, b, 2)?; // records the second mark
        wait_landed(&e, g, a, 1)
    });
}

/// drain(): every copy ran, nothing left on the stream it destroys.
pub fn scenario_drain() {
    run(64, 0, |e, g| {
        e.copy(&req(1, 8, DEVICE_ENDS)).unwrap();
        e.copy(&req(2, 4096, 0)).unwrap();
        // And copies on a caller's stream (stream 0): one launch, one cuMemcpyAsync.
        e.copy(&CopyReq { flags: ON_STREAM | DEVICE_ENDS, ..req(3, 8, 0) }).unwrap();
        e.copy(&CopyReq { flags: ON_STREAM, ..req(4, 4096, 0) }).unwrap();
        check(e.drain() == 0, "drain() reported failed copies".into())?;
        check(g.busy_destroys() == 0, "drain() destroyed the stream with work queued on it".into())?;
        let mut ran = g.ran();
        ran.sort();
        check(ran == vec![1, 2, 3, 4], format!("drain() returned before every copy ran: {ran:?}"))
    });
}

/// In a fork() child the engine refuses copies, and nothing reaches the GPU (drop included).
pub fn scenario_fork() {
    run(64, 0, |e, g| {
        let a = e.copy(&req(1, 4096, 0)).unwrap();
        wait_landed(&e, g, a, 1)?;
        g.generation.fetch_add(1, Ordering::Relaxed); // fork()
        let before = g.calls();
        let r = e.copy(&req(2, 8, DEVICE_ENDS)).map_err(|x| x.status);
        let on = e.copy(&CopyReq { flags: ON_STREAM | DEVICE_ENDS, ..req(3, 8, 0) }).map_err(|x| x.status);
        let batch = e.copy_batch_on_stream(0, &[req(4, 8, DEVICE_ENDS)]).map_err(|x| x.status);
        let after = e.after(0).map_err(|x| x.status);
        let gate = e.stream_waits_for(0, e.stream_ticket()).map_err(|x| x.status);
        let waited = e.wait_all().map_err(|x| x.status);
        let drained = e.drain();
        drop(e);
        check(r == Err(Status::Forked), format!("a copy issued in a fork() child: {r:?}"))?;
        for (what, got) in [
            ("copy_on_stream", on.map(|_| ())),
            ("copies_on_stream", batch.map(|_| ())),
            ("after()", after.map(|_| ())),
            ("a gate wait", gate),
        ] {
            check(got == Err(Status::Forked), format!("{what} in a fork() child: {got:?}"))?;
        }
        check(waited == Err(Status::Forked), format!("wait_all() in a fork() child: {waited:?}"))?;
        check(drained == 0, "drain() in a fork() child".into())?;
        check(g.calls() == before, "the engine reached the GPU in a fork() child".into())
    });
}

/// A refused launch: batching goes off, the batch's copies are one copy each, every ticket lands,
/// and the reason is kept.
pub fn scenario_failed_launch() {
    run(64, 1, |e, g| {
        let a = e.copy(&req(1, 8, DEVICE_ENDS)).unwrap();
        let b = e.copy(&req(2, 8, DEVICE_ENDS)).unwrap();
        e.flush_batch().unwrap();
        check(e.batch_bytes() == 0, "batching is still on after a refused launch".into())?;
        wait_landed(&e, g, a, 1)?;
        wait_landed(&e, g, b, 2)?;
        check(e.take_error().contains("batching is off"), "the refused launch was not reported".into())?;
        drop(e);
        check(g.ran() == vec![1, 2], format!("{:?}", g.ran()))
    });
}

/// Two host threads (two personas) issue and poll at once, one ordered after the caller's stream
/// (the GPU runs as they query it: the interleavings of the two threads are what this checks).
pub fn scenario_two_threads() {
    model_bounded(3, || {
        let g = ModelGpu { inline: true, ..ModelGpu::new(0) };
        let e = Arc::new(Engine::new(g.clone(), 0, 64));
        let other = {
            let (e, g) = (e.clone(), g.clone());
            thread::spawn(move || {
                let t = e.copy(&req(1, 8, DEVICE_ENDS)).unwrap();
                wait_landed(&e, &g, t, 1)
            })
        };
        let t = e.copy(&req(2, 4096, AFTER_STREAM)).unwrap();
        let mine = wait_landed(&e, &g, t, 2);
        let theirs = other.join().unwrap();
        drop(e); // the last owner: drains
        mine.and(theirs).unwrap();
        assert_eq!(g.busy_destroys(), 0);
    });
}

/// Polls the caller's-stream ticket `t` (copy_on_stream, after) until it is over and settles it.
fn wait_watched(e: &Engine<ModelGpu>, g: &ModelGpu, t: u64, what: &str) -> Result<(), String> {
    loop {
        if g.inline {
            g.step(); // a poll of a word the stream writes reaches no GPU call: the model runs a step here
        }
        let r = e.poll(t, None).map_err(|x| format!("polling {what}: {x:?}"))?;
        if r != NOT_READY {
            check(r == SUCCESS, format!("{what} failed ({r})"))?;
            let settled = e.complete(t, r, &req(0, 0, 0)).map_err(|x| format!("settling {what}: {x:?}"))?;
            return check(settled == Settled::Landed, format!("{what} did not settle as landed"));
        }
        thread::yield_now();
    }
}

/// A copy_on_stream that is upcxx::copy (a stream ticket the caller's stream waits for), then a
/// fast copy_on_stream and an after() on that stream; another host thread (another persona's
/// progress) marks the ticket done. The fast copy runs only once the ticket is done, and both
/// tickets land, whichever thread comes first.
pub fn scenario_ticket_released_by_another_thread() {
    model_bounded(2, || {
        let g = ModelGpu { inline: true, ..ModelGpu::new(0) };
        let e = Arc::new(Engine::new(g.clone(), 0, 64));
        let t = e.stream_ticket();
        e.stream_waits_for(0, t).unwrap();
        let c = e.copy(&CopyReq { flags: ON_STREAM, ..req(1, 8, 0) }).unwrap();
        let w = e.after(0).unwrap();
        let other = {
            let e = e.clone();
            thread::spawn(move || e.ticket_done(t).map_err(|x| format!("ticket_done: {x:?}")))
        };
        let mine = wait_watched(&e, &g, c, "the copy on the stream").and_then(|()| wait_watched(&e, &g, w, "after()"));
        let theirs = other.join().unwrap();
        let word = g.word_when_ran(1);
        drop(e);
        mine.and(theirs).unwrap();
        assert!(word.is_some_and(|v| v.wrapping_sub(t) as i32 >= 0), "the copy ran before its stream's ticket was done: {word:?}");
        assert_eq!(g.busy_destroys(), 0);
    });
}

/// drain() with a stream ticket that nothing will mark done (UPC++ gone, or its copy
/// abandoned), a copy_on_stream and a copy_after behind its wait: drain releases the ticket and
/// returns with every copy run, instead of waiting forever for work held behind it.
pub fn scenario_drain_releases_tickets() {
    run(64, 0, |e, g| {
        let t = e.stream_ticket();
        e.stream_waits_for(0, t).unwrap();
        e.copy(&CopyReq { flags: ON_STREAM, ..req(1, 8, 0) }).unwrap();
        e.copy(&req(2, 8, AFTER_STREAM)).unwrap();
        check(e.drain() == 0, "drain() reported failed copies".into())?;
        let mut ran = g.ran();
        ran.sort();
        check(ran == vec![1, 2], format!("drain() returned before every copy ran: {ran:?}"))?;
        check(e.ticket_done(t).is_err(), "the ticket drain() released was still pending".into())
    });
}

/// Copies on a caller's stream, one (copy_on_stream) then a batch of a small and a large one
/// (copy_batch_on_stream), then an after(), with the GPU on its own thread: each ticket is the
/// word the stream writes, and none is reported over before every copy queued before it ran, in
/// the order issued. Only small copies of device memory are launched, up to 4 a launch (the
/// model's), and where the work ends with a launch that launch writes the word (no stream write).
/// A second batch of one launch takes the pool's fourth word (its launch counter must be that
/// word's), and wait_all() returns only once every copy of the batches told by words ran.
pub fn scenario_stream_words() {
    run(64, 0, |e, g| {
        let c = e.copy(&CopyReq { flags: ON_STREAM | DEVICE_ENDS, ..req(1, 8, 0) }).unwrap();
        check(
            g.launches() == 1 && g.stream_writes() == 0,
            format!("a small copy: {} launches, {} writes", g.launches(), g.stream_writes()),
        )?;
        let b = e.copy_batch_on_stream(0, &[req(2, 8, DEVICE_ENDS), req(3, 4096, DEVICE_ENDS), req(10, 8, 0)]).unwrap();
        check(
            g.launches() == 2 && g.stream_writes() == 1,
            format!("a batch ending with a copy: {} launches, {} writes", g.launches(), g.stream_writes()),
        )?;
        // Ends with two launches (the model's launch holds 4): the last one writes the word.
        let small: Vec<CopyReq> = (5..=9).map(|id| req(id, 8, DEVICE_ENDS)).collect();
        let l = e.copy_batch_on_stream(0, &[&[req(4, 4096, DEVICE_ENDS)], &small[..]].concat()).unwrap();
        check(
            g.launches() == 4 && g.stream_writes() == 1,
            format!("a batch ending with launches: {} launches, {} writes", g.launches(), g.stream_writes()),
        )?;
        let counts = e.counts();
        check(counts.fast == 10 && counts.batched == 7, format!("counts {counts:?}: want 10 issued, 7 batched"))?;
        let w = e.after(0).unwrap();
        // The fourth word of the pool: its launch's completion counter must be that word's (the
        // model checks every launch's counter).
        let l2 = e.copy_batch_on_stream(0, &[req(11, 8, DEVICE_ENDS), req(12, 8, DEVICE_ENDS)]).unwrap();
        check(g.launches() == 5, format!("a batch of one launch: {} launches in all", g.launches()))?;
        // The host's wait for every copy issued waits for the batches told by words too.
        e.wait_all().map_err(|x| format!("wait_all: {x:?}"))?;
        let order = [1, 2, 3, 10, 4, 5, 6, 7, 8, 9, 11, 12];
        check(g.ran() == order, format!("wait_all() returned with only {:?} run", g.ran()))?;
        for (t, upto, what) in [
            (c, 1, "the copy on the stream"),
            (b, 4, "the batch on the stream"),
            (l, 10, "the batch ending with launches"),
            (w, 10, "after()"),
            (l2, 12, "the second batch ending with a launch"),
        ] {
            wait_watched_batch(&e, t, what)?;
            let ran = g.ran();
            check(ran.len() >= upto && ran[..upto] == order[..upto], format!("{what} was reported over with only {ran:?} run"))?;
        }
        check(e.drain() == 0, "drain() reported failed copies".into())
    });
}

/// wait_watched for a ticket that may be a batch's (settled LANDED when it landed).
fn wait_watched_batch(e: &Engine<ModelGpu>, t: u64, what: &str) -> Result<(), String> {
    loop {
        let r = e.poll(t, None).map_err(|x| format!("polling {what}: {x:?}"))?;
        if r != NOT_READY {
            check(r == SUCCESS, format!("{what} failed ({r})"))?;
            let settled = e.complete(t, r, &req(0, 0, 0)).map_err(|x| format!("settling {what}: {x:?}"))?;
            return check(settled == Settled::Landed, format!("{what} did not settle as landed"));
        }
        thread::yield_now();
    }
}

/// Gate tickets done out of order: the word callers' streams wait on counts the tickets done in
/// issue order only, so a copy behind the first ticket runs once that one is done, though the
/// second was done first; a ticket is done once, and one never issued is refused.
pub fn scenario_gate_out_of_order() {
    run(64, 0, |e, g| {
        let t1 = e.stream_ticket();
        let t2 = e.stream_ticket();
        e.stream_waits_for(0, t1).map_err(|x| format!("stream_waits_for: {x:?}"))?;
        let c = e.copy(&CopyReq { flags: ON_STREAM | DEVICE_ENDS, ..req(1, 8, 0) }).unwrap();
        e.ticket_done(t2).map_err(|x| format!("ticket_done(t2): {x:?}"))?;
        check(e.tickets_pending(), "no ticket pending with ticket 1 not done".into())?;
        check(!e.ticket_done_by(t1) && !e.ticket_done_by(t2), "ticket 1 counts as done after ticket 2 alone".into())?;
        check(e.ticket_done(t2).is_err(), "ticket 2 done twice".into())?;
        g.set_phase(1);
        e.ticket_done(t1).map_err(|x| format!("ticket_done(t1): {x:?}"))?;
        check(!e.tickets_pending() && e.ticket_done_by(t1) && e.ticket_done_by(t2), "both done, yet pending".into())?;
        check(e.ticket_done(t1).is_err(), "ticket 1 done twice".into())?;
        check(e.ticket_done(t2.wrapping_add(1)).is_err(), "a ticket never issued was taken".into())?;
        wait_watched_batch(&e, c, "the copy behind ticket 1")?;
        let phase = g.phase_when_ran(1);
        check(phase == Some(1), format!("the copy behind ticket 1 ran before ticket 1 was done ({phase:?})"))
    });
}

/// Settles ticket `t`, whose poll gave the failure `r`, on an open engine: it must say REDO.
/// `what` names the copy in the message.
fn settle_redo(e: &Engine<ModelGpu>, t: u64, r: Code, copy: &CopyReq, what: &str) -> Result<(), String> {
    let settled = e.complete(t, r, copy).map_err(|x| format!("settling {what}: {x:?}"))?;
    check(settled == Settled::Redo, format!("{what} settled {settled:?}"))
}

/// Polls ticket `t` (a copy's or a caller's stream's) until it is over; its outcome.
fn outcome(e: &Engine<ModelGpu>, t: u64) -> Result<Code, String> {
    let mut asked = 0;
    loop {
        let r = e.poll(t, Some(&mut asked)).map_err(|x| format!("polling: {x:?}"))?;
        if r != NOT_READY {
            return Ok(r);
        }
        thread::yield_now();
    }
}

/// A copy the GPU fails: its poll reports the fault, and settling it says REDO while the engine
/// is open (the failure named once by take_error, "it was redone"), REPORT once it is closed, and
/// drain() counts only the failures not redone.
pub fn scenario_failed_copy() {
    run(0, 0, |e, g| {
        g.fail_next(1);
        let a = e.copy(&req(1, 4096, 0)).unwrap();
        let r = outcome(&e, a)?;
        check(r == FAULT, format!("a failed copy polled {r}"))?;
        check(!g.ran().contains(&1), "the failed copy ran".into())?;
        settle_redo(&e, a, r, &req(1, 4096, 0), "a failure on an open engine")?;
        check(e.complete(a, r, &req(1, 4096, 0)).is_err(), "a failure settled twice".into())?;
        let text = e.take_error();
        check(
            text.contains("4096 bytes") && text.contains("model error 700") && text.contains("it was redone"),
            format!("take_error: {text:?}"),
        )?;
        check(e.take_error().is_empty(), "the failure was named twice".into())?;
        check(e.drain() == 0, "drain() counted a redone failure".into())
    });
}

/// A failure settled once the engine is closed is only reported: drain() counts it.
pub fn scenario_failed_copy_closed() {
    run(0, 0, |e, g| {
        g.fail_next(1);
        let a = e.copy(&req(1, 4096, 0)).unwrap();
        e.close();
        check(e.copy(&req(2, 8, 0)).is_err(), "a copy issued on a closed engine".into())?;
        let r = outcome(&e, a)?;
        let settled = e.complete(a, r, &req(1, 4096, 0)).map_err(|x| format!("{x:?}"))?;
        check(settled == Settled::Report, format!("a failure settled {settled:?} on a closed engine"))?;
        check(e.take_error().contains("only reported"), "the report does not say it was not redone".into())?;
        check(e.drain() == 1, "drain() did not count the failure not redone".into())
    });
}

/// On a caller's stream: a failed copy (one launch that writes its word) is redone while the
/// engine is open; a failed batch is reported, never redone; after() behind a fault completes
/// with it and is reported.
pub fn scenario_failed_on_stream() {
    run(64, 0, |e, g| {
        g.fail_next(1);
        let c = e.copy(&CopyReq { flags: ON_STREAM | DEVICE_ENDS, ..req(1, 8, 0) }).unwrap();
        let r = outcome(&e, c)?;
        check(r == FAULT, format!("a failed copy on the stream polled {r}"))?;
        settle_redo(&e, c, r, &req(1, 8, 0), "a failed copy_on_stream")?;
        check(e.take_error().contains("caller's stream"), "the failure does not name the caller's stream".into())?;
        let b = e.copy_batch_on_stream(0, &[req(2, 8, DEVICE_ENDS), req(3, 8, DEVICE_ENDS)]).unwrap();
        let r = outcome(&e, b)?;
        let settled = e.complete(b, r, &req(0, 0, 0)).map_err(|x| format!("{x:?}"))?;
        check(r == FAULT && settled == Settled::Report, format!("a batch behind the fault: {r}, {settled:?}"))?;
        check(e.take_error().contains("not redone"), "the batch's failure does not say it was not redone".into())?;
        let w = e.after(0).unwrap();
        let r = outcome(&e, w)?;
        let settled = e.complete(w, r, &req(0, 0, 0)).map_err(|x| format!("{x:?}"))?;
        check(r == FAULT && settled == Settled::Report, format!("after() behind the fault: {r}, {settled:?}"))?;
        check(e.take_error().contains("after()"), "the wait's failure is not named".into())?;
        check(e.drain() == 0, "drain() counted failures of callers' streams".into())
    });
}

/// Tickets never issued poll UNKNOWN and are refused by complete(); a closed engine reopened
/// copies again; the counts say what was issued and batched, and a batch size set to 0 batches
/// nothing from then on; a full batch is launched at once (the model's launch holds 4).
pub fn scenario_tickets_and_counts() {
    run(64, 0, |e, g| {
        for t in [0, 99, CALLER_TICKET | 7] {
            check(e.poll(t, None) == Ok(UNKNOWN), format!("ticket {t} never issued polled {:?}", e.poll(t, None)))?;
            check(e.complete(t, SUCCESS, &req(0, 0, 0)).is_err(), format!("ticket {t} never issued was settled"))?;
        }
        e.close();
        e.reopen();
        let mut tickets = Vec::new();
        for id in 1..=5 {
            tickets.push((e.copy(&req(id, 8, DEVICE_ENDS)).map_err(|x| format!("copy {id} after reopen(): {x:?}"))?, id));
        }
        check(g.launches() == 1, format!("4 batched copies (a full launch) made {} launches", g.launches()))?;
        e.set_batch_bytes(0);
        tickets.push((e.copy(&req(6, 8, DEVICE_ENDS)).unwrap(), 6));
        for (t, id) in tickets {
            wait_landed(&e, g, t, id)?;
        }
        let c = e.counts();
        check(c.fast == 6 && c.batched == 5, format!("counts {c:?}: want 6 issued, 5 batched"))?;
        check(g.launches() == 2, format!("5 batched copies made {} launches", g.launches()))
    });
}

/// copy_after: a copy ordered after the work queued on a caller's stream (a large copy there)
/// runs after it, batched size or not (it never joins the batch, which nothing orders after that
/// stream), on a GPU that runs the engine's stream first whenever it can.
pub fn scenario_copy_after() {
    run_with(64, 0, true, |e, g| {
        let on = e.copy(&CopyReq { flags: ON_STREAM, ..req(1, 4096, 0) }).unwrap();
        let small = e.copy(&CopyReq { flags: AFTER_STREAM | DEVICE_ENDS, ..req(2, 8, 0) }).unwrap();
        let large = e.copy(&CopyReq { flags: AFTER_STREAM, ..req(3, 4096, 0) }).unwrap();
        check(e.copy(&CopyReq { flags: AFTER_STREAM | ON_STREAM, ..req(4, 8, 0) }).is_err(), "on and after at once".into())?;
        wait_landed(&e, g, small, 2)?;
        wait_landed(&e, g, large, 3)?;
        wait_watched_batch(&e, on, "the copy on the stream")?;
        let ran = g.ran();
        let at = |id| ran.iter().position(|&r| r == id);
        check(at(1) < at(2) && at(1) < at(3), format!("copy_after ran before the stream's earlier work: {ran:?}"))
    });
}

/// wait_all(): the host waits for every copy issued so far, and their outcomes are known from
/// then on (a poll answers at once). First a batch not yet launched (no mark pending: wait_all
/// launches it and waits); then two copies under one mark that covers only the first (the second
/// was issued while that mark was pending): wait_all records a mark after the second instead of
/// trusting the stale one.
pub fn scenario_wait_all() {
    run(64, 0, |e, g| {
        let a = e.copy(&req(1, 8, DEVICE_ENDS)).unwrap();
        let b = e.copy(&req(2, 8, DEVICE_ENDS)).unwrap();
        e.wait_all().map_err(|x| format!("wait_all: {x:?}"))?;
        check(g.ran() == vec![1, 2], format!("wait_all() returned with the batch not run: {:?}", g.ran()))?;
        for t in [a, b] {
            check(e.poll(t, None) == Ok(SUCCESS), format!("ticket {t} after wait_all(): {:?}", e.poll(t, None)))?;
        }
        let c = e.copy(&req(3, 4096, 0)).unwrap(); // a mark of its own
        let d = e.copy(&req(4, 4096, 0)).unwrap(); // that mark pending: none
        e.wait_all().map_err(|x| format!("wait_all: {x:?}"))?;
        check(g.ran() == vec![1, 2, 3, 4], format!("wait_all() returned before the last copy ran: {:?}", g.ran()))?;
        for t in [c, d] {
            check(e.poll(t, None) == Ok(SUCCESS), format!("ticket {t} after wait_all(): {:?}", e.poll(t, None)))?;
        }
        check(e.drain() == 0, "drain() reported failed copies".into())
    });
}

/// A copy that landed, then one the GPU fails: the failing copy's mark blames the copies since
/// the mark before it, that one alone; the landed copy still polls SUCCESS, and once the failure
/// is redone drain() counts nothing.
pub fn scenario_failure_blames_its_copies_only() {
    run(0, 0, |e, g| {
        let a = e.copy(&req(1, 4096, 0)).unwrap();
        wait_landed(&e, g, a, 1)?;
        g.fail_next(1);
        let b = e.copy(&req(2, 4096, 0)).unwrap();
        let r = outcome(&e, b)?;
        check(r == FAULT, format!("a failed copy polled {r}"))?;
        check(e.poll(a, None) == Ok(SUCCESS), format!("the landed copy blamed for the failure: {:?}", e.poll(a, None)))?;
        settle_redo(&e, b, r, &req(2, 4096, 0), "a failure on an open engine")?;
        check(e.drain() == 0, "drain() counted a redone failure, or a copy that landed".into())
    });
}

/// Streams being captured into a CUDA graph (or whose capture the driver cannot tell): a copy on
/// one or after one, a batch on one and after() are refused (STREAM_CAPTURE, naming the capture's
/// state) with nothing reaching the stream; a copy that is neither on nor after a stream ignores
/// the handle it carries and lands.
pub fn scenario_stream_capture() {
    run(64, 0, |e, g| {
        for (s, why) in [
            (CAPTURED, "CU_STREAM_CAPTURE_STATUS_ACTIVE"),
            (INVALIDATED, "CU_STREAM_CAPTURE_STATUS_INVALIDATED"),
            (CAPTURE_UNKNOWN, "model error 700"),
        ] {
            for flags in [ON_STREAM, ON_STREAM | DEVICE_ENDS, AFTER_STREAM, AFTER_STREAM | DEVICE_ENDS] {
                let r = e.copy(&CopyReq { flags, stream: s, ..req(1, 8, 0) });
                check(
                    r.as_ref().is_err_and(|x| x.status == Status::StreamCapture && x.message.contains(why)),
                    format!("a copy with flags {flags} on stream {s}: {r:?}"),
                )?;
            }
            let r = e.copy_batch_on_stream(s, &[req(2, 8, DEVICE_ENDS)]);
            check(r.as_ref().is_err_and(|x| x.status == Status::StreamCapture), format!("a batch on stream {s}: {r:?}"))?;
            let r = e.after(s);
            check(r.as_ref().is_err_and(|x| x.status == Status::StreamCapture), format!("after() on stream {s}: {r:?}"))?;
        }
        check(g.ran().is_empty() && g.launches() == 0, format!("a refused copy ran: {:?}", g.ran()))?;
        let c = e.counts();
        check(c.fast == 0, format!("refused copies counted: {c:?}"))?;
        // Neither on nor after a stream: the handle is not looked at.
        let t = e.copy(&CopyReq { stream: CAPTURED, ..req(3, 8, DEVICE_ENDS) }).map_err(|x| format!("a plain copy: {x:?}"))?;
        let u = e.copy(&CopyReq { stream: CAPTURED, ..req(4, 4096, 0) }).map_err(|x| format!("a plain copy: {x:?}"))?;
        wait_landed(&e, g, t, 3)?;
        wait_landed(&e, g, u, 4)
    });
}

/// A refused launch whose fallback copies the driver refuses in part: the batch's first copy is
/// issued (and fails on the GPU, faulting the context), the second is refused. The first copy is
/// over with the fault the host's wait found, the second and those after it with the refusal,
/// none of them run; a copy issued later is not taken for landed (it polls the context's fault).
/// Settled on a closed engine, drain() counts each failure once.
pub fn scenario_refused_fallback_copy() {
    run(64, 1, |e, g| {
        let a = e.copy(&req(1, 8, DEVICE_ENDS)).unwrap();
        let b = e.copy(&req(2, 8, DEVICE_ENDS)).unwrap();
        let c = e.copy(&req(3, 8, DEVICE_ENDS)).unwrap();
        g.fail_next(1);
        g.refuse_copy(2);
        e.flush_batch().unwrap();
        check(e.take_error().contains("batching is off"), "the refused launch was not reported".into())?;
        let d = e.copy(&req(4, 4096, 0)).unwrap();
        for (t, want) in [(a, FAULT), (b, REFUSED), (c, REFUSED), (d, FAULT)] {
            let r = outcome(&e, t)?;
            check(r == want, format!("ticket {t} polled {r}, not {want}"))?;
        }
        check(!g.ran().iter().any(|&id| id == 2 || id == 3), format!("a refused copy ran: {:?}", g.ran()))?;
        e.close();
        for (t, id) in [(a, 1), (b, 2), (c, 3), (d, 4)] {
            let settled = e.complete(t, outcome(&e, t)?, &req(id, 8, 0)).map_err(|x| format!("{x:?}"))?;
            check(settled == Settled::Report, format!("ticket {t} settled {settled:?} on a closed engine"))?;
        }
        let n = e.drain();
        check(n == 4, format!("drain() counted {n} failures not redone, not 4"))
    });
}

/// Callers' tickets told by events, where the driver refuses stream writes: a copy on the stream
/// polled until it landed, an after() settled without a poll (the caller gave up on it), a copy
/// settled as failed without a poll, one polled only after drain(), and one never polled nor
/// settled (the engine is dropped with it): each ticket's event is destroyed once, none leaked
/// (run() checks, once the engine is dropped), and the copies run.
pub fn scenario_event_tickets() {
    run(64, 0, |e, g| {
        g.refuse_stream_writes();
        let c1 = e.copy(&CopyReq { flags: ON_STREAM, ..req(1, 4096, 0) }).unwrap();
        wait_watched_batch(&e, c1, "a copy on the stream told by an event")?;
        check(g.ran().contains(&1), "the copy on the stream was reported over before it ran".into())?;
        let c2 = e.copy(&CopyReq { flags: ON_STREAM, ..req(2, 4096, 0) }).unwrap();
        let w = e.after(0).map_err(|x| format!("after(): {x:?}"))?;
        let settled = e.complete(w, SUCCESS, &req(0, 0, 0)).map_err(|x| format!("settling after(): {x:?}"))?;
        check(settled == Settled::Landed, format!("after() settled {settled:?}"))?;
        check(e.poll(w, None) == Ok(UNKNOWN), "a settled ticket still polled".into())?;
        // Settled as failed with a number the engine did not learn from the GPU (never polled):
        // the text names it as the caller's number, no driver name.
        let c3 = e.copy(&CopyReq { flags: ON_STREAM, ..req(3, 4096, 0) }).unwrap();
        settle_redo(&e, c3, 4, &req(3, 4096, 0), "a failed copy on the stream")?;
        let text = e.take_error();
        check(text.contains("(CUDA error 4)"), format!("take_error: {text:?}"))?;
        let _c4 = e.copy(&CopyReq { flags: ON_STREAM, ..req(4, 4096, 0) }).unwrap();
        // Both pending copies run before drain() waits for them: its waits then take no turn, in
        // whichever order it takes the tickets (a hash map's, not the same in every execution).
        while !(g.ran().contains(&2) && g.ran().contains(&4)) {
            thread::yield_now();
        }
        check(e.drain() == 0, "drain() reported failed copies".into())?;
        wait_watched_batch(&e, c2, "a copy polled after drain()")
    });
}

/// A copy with a mark of its own, then a batched copy whose launch is refused and whose fallback
/// copy the driver refuses: the host's wait lands the first copy and retires its mark (its event
/// back to the pool, destroyed by drain: run() checks none leaked), the second is over with the
/// refusal.
pub fn scenario_refused_copy_retires_marks() {
    run(64, 1, |e, g| {
        let z = e.copy(&req(9, 4096, 0)).unwrap(); // a mark of its own
        g.refuse_copy(1);
        let a = e.copy(&req(1, 8, DEVICE_ENDS)).unwrap();
        e.flush_batch().unwrap();
        check(g.ran() == vec![9], format!("the host's wait did not run the copy before the refused one: {:?}", g.ran()))?;
        check(e.poll(z, None) == Ok(SUCCESS), format!("the copy before the refused one: {:?}", e.poll(z, None)))?;
        check(e.poll(a, None) == Ok(REFUSED), format!("the refused copy: {:?}", e.poll(a, None)))?;
        settle_redo(&e, a, REFUSED, &req(1, 8, 0), "the refused copy")?;
        check(e.drain() == 0, "drain() counted a redone failure".into())
    });
}

/// copy_on_stream's paths on a stream of the engine's device: a copy with device memory at both
/// ends, up to ON_STREAM_KERNEL_MAX, is one launch of the copy kernel (counted as batched)
/// followed by an event; a larger one, one of host memory, one of 0 bytes and one whose launch
/// the driver refuses are a cuMemcpyAsync (then an event); with batching off (0 bytes) every copy
/// is. Each lands after it ran; none is a stream write.
pub fn scenario_on_stream_paths() {
    fn body(e: Engine<ModelGpu>, g: &ModelGpu, table: &[(usize, usize, u32, usize)], batched: usize) -> Result<(), String> {
        for &(id, bytes, flags, launches) in table {
            let t = e.copy(&CopyReq { flags: ON_STREAM | flags, ..req(id, bytes, 0) }).map_err(|x| format!("copy {id}: {x:?}"))?;
            check(g.launches() == launches, format!("copy {id} ({bytes} bytes, flags {flags}): {} launches", g.launches()))?;
            wait_watched_batch(&e, t, "a copy on the stream")?;
            check(g.ran().contains(&id), format!("copy {id} reported over before it ran: {:?}", g.ran()))?;
        }
        check(g.stream_writes() == 0, format!("{} stream writes for copies on a stream", g.stream_writes()))?;
        let c = e.counts();
        check(c.fast == table.len() && c.batched == batched, format!("counts {c:?}: want {} issued, {batched} batched", table.len()))
    }
    const MAX: usize = ON_STREAM_KERNEL_MAX;
    run(64, 0, |e, g| {
        let table = [(1, 8, DEVICE_ENDS, 1), (2, 8, 0, 1), (3, MAX, DEVICE_ENDS, 2), (4, MAX + 1, DEVICE_ENDS, 2), (5, 0, DEVICE_ENDS, 2)];
        body(e, g, &table, 2)
    });
    run(64, 1, |e, g| body(e, g, &[(1, 8, DEVICE_ENDS, 0), (2, 4096, DEVICE_ENDS, 1)], 1)); // the launch of copy 1 refused
    run(0, 0, |e, g| body(e, g, &[(1, 8, DEVICE_ENDS, 0), (2, 4096, DEVICE_ENDS, 0)], 0));
}

/// copy_on_stream and copy_batch_on_stream on a caller's stream of another device: the copies
/// run on the engine's stream between the caller's work queued before (100) and after (101, 102)
/// the call, whichever stream the GPU favours; a single copy is never batched (nothing would
/// order a batch after the caller's stream); nothing is enqueued on the caller's stream in the
/// engine's device's context (run() checks).
pub fn scenario_other_device_stream() {
    fn body(e: Engine<ModelGpu>, g: &ModelGpu) -> Result<(), String> {
        let s1 = g.stream_of_another_device();
        g.enqueue(s1, 100);
        let t = e.copy(&CopyReq { flags: ON_STREAM | DEVICE_ENDS, stream: s1, ..req(1, 8, 0) }).map_err(|x| format!("{x:?}"))?;
        g.enqueue(s1, 101);
        let b = e.copy_batch_on_stream(s1, &[req(2, 8, DEVICE_ENDS), req(3, 4096, 0)]).map_err(|x| format!("{x:?}"))?;
        g.enqueue(s1, 102);
        let w = e.after(s1).map_err(|x| format!("after(): {x:?}"))?;
        check(t & CALLER_TICKET == 0, "a copy on another device's stream is not the engine stream's".into())?;
        wait_landed(&e, g, t, 1)?;
        wait_watched_batch(&e, b, "the batch on another device's stream")?;
        wait_watched_batch(&e, w, "after()")?;
        let ran = g.ran();
        let at = |id| ran.iter().position(|&r| r == id).unwrap_or(usize::MAX);
        check(
            at(100) < at(1) && at(1) < at(101) && at(101) < at(2) && at(101) < at(3) && at(2) < at(102) && at(3) < at(102),
            format!("out of the caller's stream's order: {ran:?}"),
        )?;
        // A gate wait on that stream (in its device's context: run() checks) holds its later work
        // until the ticket is done.
        let gt = e.stream_ticket();
        e.stream_waits_for(s1, gt).map_err(|x| format!("stream_waits_for: {x:?}"))?;
        g.enqueue(s1, 103);
        g.set_phase(1);
        e.ticket_done(gt).map_err(|x| format!("ticket_done: {x:?}"))?;
        let w = e.after(s1).map_err(|x| format!("after(): {x:?}"))?;
        wait_watched_batch(&e, w, "after() behind the gate")?;
        check(g.phase_when_ran(103) == Some(1), format!("work behind the gate ran at phase {:?}", g.phase_when_ran(103)))?;
        check(e.drain() == 0, "drain() reported failed copies".into())
    }
    run_with(64, 0, false, body);
    run_with(64, 0, true, body);
}

/// The engine's own stream: an upcxx::copy's plain copies (neither on nor after a stream) do not
/// wait for a caller's stream, which here waits for that very copy's stream ticket (a copy that
/// waited would never land). Only small copies of device memory join the batch (the kernel copies
/// device memory only): a small one of host memory and a large one are a cuMemcpyAsync each.
pub fn scenario_plain_copies() {
    run(64, 0, |e, g| {
        let t = e.stream_ticket();
        e.stream_waits_for(0, t).map_err(|x| format!("stream_waits_for: {x:?}"))?;
        let behind = e.copy(&CopyReq { flags: ON_STREAM, ..req(9, 4096, 0) }).unwrap();
        let mut tickets = Vec::new();
        for (id, bytes, flags) in [(1, 8, 0), (2, 8, DEVICE_ENDS), (3, 4096, DEVICE_ENDS), (4, 8, DEVICE_ENDS)] {
            tickets.push((e.copy(&req(id, bytes, flags)).map_err(|x| format!("copy {id}: {x:?}"))?, id));
        }
        for (t, id) in tickets {
            wait_landed(&e, g, t, id)?;
        }
        check(g.launches() == 2, format!("{} launches for two small copies of device memory, apart", g.launches()))?;
        let c = e.counts();
        check(c.fast == 5 && c.batched == 2, format!("counts {c:?}: want 5 issued, 2 batched"))?;
        check(!g.ran().contains(&9), "the copy behind the stream ticket ran before it was done".into())?;
        e.ticket_done(t).map_err(|x| format!("ticket_done: {x:?}"))?;
        wait_watched_batch(&e, behind, "the copy behind the stream ticket")
    });
}

/// after() on a stream of another device whose stream write the calling thread's context refuses
/// (as CUDA does): the word is written in that device's context, and once it lands the engine
/// asks that context for a fault about a stream of its own (the legacy one), not about the
/// engine's stream of device 0 (run() checks the context of every stream query). The engine's
/// stream exists (a plain copy first).
pub fn scenario_word_in_another_context() {
    run(64, 0, |e, g| {
        g.refuse_other_context();
        let t = e.copy(&req(1, 4096, 0)).unwrap();
        wait_landed(&e, g, t, 1)?;
        let s1 = g.stream_of_another_device();
        g.enqueue(s1, 100);
        let w = e.after(s1).map_err(|x| format!("after() on another device's stream: {x:?}"))?;
        check(
            g.stream_writes() == 1,
            format!("after() is told by a word written in device 1's context: {} stream writes", g.stream_writes()),
        )?;
        wait_watched_batch(&e, w, "after() on another device's stream")?;
        check(g.ran().contains(&100), "after() was over before the caller's work ran".into())?;
        check(e.drain() == 0, "drain() reported failed copies".into())
    });
}

/// after() on a caller's stream of device 1 whose device the driver cannot tell: the calling
/// thread's context refuses both the stream write and the event record, so the engine records
/// the ticket's event trying each device's context, and device 1's takes it; the ticket lands
/// after the caller's work (and its events are destroyed: run() checks).
pub fn scenario_stream_of_unknown_device() {
    run(64, 0, |e, g| {
        let s = g.stream_of_unknown_device();
        g.enqueue(s, 100);
        let w = e.after(s).map_err(|x| format!("after() on a stream whose device the driver cannot tell: {x:?}"))?;
        check(g.stream_writes() == 0, format!("{} stream writes taken on a stream of another device", g.stream_writes()))?;
        wait_watched_batch(&e, w, "after() on a stream whose device the driver cannot tell")?;
        check(g.ran().contains(&100), "after() was over before the caller's work ran".into())?;
        check(e.drain() == 0, "drain() reported failed copies".into())
    });
}
