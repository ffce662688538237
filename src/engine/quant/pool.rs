//! A small thread pool for the decode matmuls: the calling thread takes the first share
//! of a job and `threads - 1` parked workers the rest. Workers spin briefly after a job
//! (the next matmul of a token follows within microseconds), then park until woken, so an
//! idle model costs no CPU. Jobs are borrowed closures; `run` returns only when every
//! share has finished, which is what makes lending them to other threads sound.
//! `run_units` hands out a job's units in chunks to whichever thread asks next, so a
//! thread the system holds up (the machine is shared) leaves its work to the others
//! instead of making them wait.

use std::cell::UnsafeCell;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Spin rounds a worker waits for the next job before parking (about 100 µs).
const SPIN_ROUNDS: usize = 2_000;

type Job = dyn Fn(usize, usize) + Sync;

/// A share of a job panicked.
#[derive(Debug)]
pub struct JobPanicked;

pub struct ThreadPool {
    shared: Arc<Shared>,
    workers: Vec<JoinHandle<()>>,
    /// Serializes callers: one job at a time.
    running: Mutex<()>,
}

struct Shared {
    /// The job of the current epoch, with its lifetime erased (see `run`).
    job: UnsafeCell<Option<*const Job>>,
    epoch: AtomicUsize,
    remaining: AtomicUsize,
    panicked: AtomicBool,
    sleeping: Vec<AtomicBool>,
    shutdown: AtomicBool,
}

// SAFETY: `job` is written only by the caller holding `running`, before the epoch is
// published, and read by workers only after they observe that epoch; the pointee is `Sync`
// and outlives every read because `run` waits for all shares.
unsafe impl Sync for Shared {}
unsafe impl Send for Shared {}

impl ThreadPool {
    /// A pool running jobs on `threads` threads in all (the caller included). A worker
    /// that cannot be started leaves a pool running on the caller alone, not a broken one.
    pub fn new(threads: usize) -> Self {
        let extra = threads.max(1) - 1;
        let shared = Arc::new(Shared::new(extra));
        let mut workers = Vec::with_capacity(extra);
        for index in 0..extra {
            let worker_shared = shared.clone();
            match std::thread::Builder::new()
                .name(format!("warden-matmul-{}", index + 1))
                .spawn(move || worker(&worker_shared, index, extra + 1))
            {
                Ok(handle) => workers.push(handle),
                Err(_) => {
                    shutdown(&shared, &mut workers);
                    return Self::with(Arc::new(Shared::new(0)), Vec::new());
                }
            }
        }
        Self::with(shared, workers)
    }

    fn with(shared: Arc<Shared>, workers: Vec<JoinHandle<()>>) -> Self {
        Self {
            shared,
            workers,
            running: Mutex::new(()),
        }
    }

    /// Threads a job is split over.
    pub fn threads(&self) -> usize {
        self.workers.len() + 1
    }

    /// Runs `job(share, shares)` for every share in `0..threads()`; returns when all are
    /// done. A share that panicked (a bug, never input) is reported, not propagated.
    pub fn run(&self, job: &(dyn Fn(usize, usize) + Sync)) -> Result<(), JobPanicked> {
        let shares = self.threads();
        if shares == 1 {
            return catch_unwind(AssertUnwindSafe(|| job(0, 1))).map_err(|_| JobPanicked);
        }
        let _guard = self
            .running
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        let shared = &*self.shared;
        // SAFETY: only the lock holder writes the slot, and no worker reads it until the
        // epoch below is published. The erased lifetime is sound because this function
        // does not return before `remaining` is zero, i.e. before every worker is done
        // with the job.
        unsafe {
            let erased: *const Job =
                std::mem::transmute::<*const (dyn Fn(usize, usize) + Sync + '_), *const Job>(job);
            *shared.job.get() = Some(erased);
        }
        shared.remaining.store(shares - 1, Ordering::SeqCst);
        shared.epoch.fetch_add(1, Ordering::SeqCst);
        for (index, sleeping) in shared.sleeping.iter().enumerate() {
            if sleeping.load(Ordering::SeqCst) {
                self.workers[index].thread().unpark();
            }
        }
        let own = catch_unwind(AssertUnwindSafe(|| job(0, shares)));
        let mut spins = 0usize;
        while shared.remaining.load(Ordering::Acquire) != 0 {
            spins += 1;
            if spins < SPIN_ROUNDS * 16 {
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        let worker_panicked = shared.panicked.swap(false, Ordering::SeqCst);
        if own.is_err() || worker_panicked {
            return Err(JobPanicked);
        }
        Ok(())
    }

    /// Runs `job` over `0..units` in chunks of `chunk` units, each claimed by the next
    /// free thread; returns when all are done. Which thread runs a unit must not change
    /// what the unit computes.
    pub fn run_units(
        &self,
        units: usize,
        chunk: usize,
        job: &(dyn Fn(std::ops::Range<usize>) + Sync),
    ) -> Result<(), JobPanicked> {
        self.run_units_with(units, chunk, &|_: &mut (), range| job(range))
    }

    /// `run_units` where each thread keeps scratch `S` across the chunks it claims.
    pub fn run_units_with<S: Default>(
        &self,
        units: usize,
        chunk: usize,
        job: &(dyn Fn(&mut S, std::ops::Range<usize>) + Sync),
    ) -> Result<(), JobPanicked> {
        let chunk = chunk.max(1);
        if self.threads() == 1 || units <= chunk {
            return catch_unwind(AssertUnwindSafe(|| job(&mut S::default(), 0..units)))
                .map_err(|_| JobPanicked);
        }
        let next = AtomicUsize::new(0);
        self.run(&|_, _| {
            let mut scratch = S::default();
            loop {
                let start = next.fetch_add(chunk, Ordering::Relaxed);
                if start >= units {
                    break;
                }
                job(&mut scratch, start..(start + chunk).min(units));
            }
        })
    }

    /// A chunk size giving each thread about `per_thread` chunks of `units`.
    pub fn chunk(&self, units: usize, per_thread: usize) -> usize {
        units.div_ceil(self.threads() * per_thread.max(1)).max(1)
    }
}

impl Drop for ThreadPool {
    fn drop(&mut self) {
        shutdown(&self.shared, &mut self.workers);
    }
}

impl Shared {
    fn new(workers: usize) -> Self {
        Self {
            job: UnsafeCell::new(None),
            epoch: AtomicUsize::new(0),
            remaining: AtomicUsize::new(0),
            panicked: AtomicBool::new(false),
            sleeping: (0..workers).map(|_| AtomicBool::new(false)).collect(),
            shutdown: AtomicBool::new(false),
        }
    }
}

fn shutdown(shared: &Shared, workers: &mut Vec<JoinHandle<()>>) {
    shared.shutdown.store(true, Ordering::SeqCst);
    for w in workers.iter() {
        w.thread().unpark();
    }
    for w in workers.drain(..) {
        let _ = w.join();
    }
}

fn worker(shared: &Shared, index: usize, shares: usize) {
    let mut seen = 0usize;
    loop {
        let mut spins = 0usize;
        loop {
            if shared.shutdown.load(Ordering::SeqCst) {
                return;
            }
            let epoch = shared.epoch.load(Ordering::Acquire);
            if epoch != seen {
                seen = epoch;
                break;
            }
            if spins < SPIN_ROUNDS {
                spins += 1;
                std::hint::spin_loop();
                continue;
            }
            shared.sleeping[index].store(true, Ordering::SeqCst);
            if shared.epoch.load(Ordering::SeqCst) == seen
                && !shared.shutdown.load(Ordering::SeqCst)
            {
                std::thread::park();
            }
            shared.sleeping[index].store(false, Ordering::SeqCst);
        }
        // SAFETY: the epoch was published after the slot was written (see `run`).
        let job = unsafe { *shared.job.get() };
        if let Some(job) = job {
            // SAFETY: `run` keeps the closure alive until `remaining` reaches zero.
            let job = unsafe { &*job };
            if catch_unwind(AssertUnwindSafe(|| job(index + 1, shares))).is_err() {
                shared.panicked.store(true, Ordering::SeqCst);
            }
        }
        shared.remaining.fetch_sub(1, Ordering::Release);
    }
}

/// One buffer that a job's shares write in disjoint parts.
pub struct SharedRows<'a, T> {
    ptr: *mut T,
    len: usize,
    _buffer: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: shares write disjoint ranges (the contract of `slice`), and the borrow keeps the
// buffer alive for the whole job.
unsafe impl<T: Send> Send for SharedRows<'_, T> {}
unsafe impl<T: Send> Sync for SharedRows<'_, T> {}

impl<'a, T> SharedRows<'a, T> {
    pub fn new(buffer: &'a mut [T]) -> Self {
        Self {
            ptr: buffer.as_mut_ptr(),
            len: buffer.len(),
            _buffer: std::marker::PhantomData,
        }
    }

    /// `len` values from `start`.
    ///
    /// # Safety
    /// No other share touches this range while the slice lives.
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice(&self, start: usize, len: usize) -> &mut [T] {
        assert!(start + len <= self.len, "shared range out of bounds");
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(start), len) }
    }
}

/// The part of `0..len` that share `share` of `shares` covers (contiguous, balanced).
pub fn share_range(len: usize, share: usize, shares: usize) -> std::ops::Range<usize> {
    let start = len * share / shares;
    let end = len * (share + 1) / shares;
    start..end
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU64;

    #[test]
    fn every_share_runs_once_per_job_and_run_waits_for_all() {
        let pool = ThreadPool::new(3);
        assert_eq!(pool.threads(), 3);
        for round in 0..500u64 {
            let hits: Vec<AtomicU64> = (0..3).map(|_| AtomicU64::new(0)).collect();
            pool.run(&|share, shares| {
                assert_eq!(shares, 3);
                hits[share].fetch_add(round + 1, Ordering::SeqCst);
            })
            .unwrap();
            for h in &hits {
                assert_eq!(h.load(Ordering::SeqCst), round + 1);
            }
            if round % 100 == 0 {
                // Long enough for the workers to park: the next job must wake them.
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
    }

    #[test]
    fn claimed_units_run_once_each_even_when_a_thread_is_held_up() {
        let pool = ThreadPool::new(2);
        for (units, chunk) in [(0, 1), (1, 4), (7, 2), (500, 3), (64, 64)] {
            let hits: Vec<AtomicU64> = (0..units).map(|_| AtomicU64::new(0)).collect();
            pool.run_units(units, chunk, &|range| {
                if range.start == 0 {
                    // The thread holding the first chunk stalls; the other takes the rest.
                    std::thread::sleep(std::time::Duration::from_millis(2));
                }
                for unit in range {
                    hits[unit].fetch_add(1, Ordering::SeqCst);
                }
            })
            .unwrap();
            assert!(hits.iter().all(|h| h.load(Ordering::SeqCst) == 1));
        }
        assert_eq!(pool.chunk(60, 4), 8);
        assert_eq!(pool.chunk(0, 4), 1);
    }

    #[test]
    fn one_thread_runs_on_the_caller() {
        let pool = ThreadPool::new(1);
        let caller = std::thread::current().id();
        pool.run(&|share, shares| {
            assert_eq!((share, shares), (0, 1));
            assert_eq!(std::thread::current().id(), caller);
        })
        .unwrap();
    }

    #[test]
    fn shares_cover_the_range_once() {
        for len in [0, 1, 7, 576, 49_152] {
            let mut covered = 0;
            for s in 0..3 {
                let r = share_range(len, s, 3);
                assert_eq!(r.start, covered);
                covered = r.end;
            }
            assert_eq!(covered, len);
        }
    }
}
