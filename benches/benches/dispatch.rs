//! Core dispatch without I/O: commit → assign → accept → complete cycles with
//! 1, 64 and 1,024 busy workers (4 slots each) and 10,000 jobs queued; once
//! on the bare core and once through the coordinator shell (lock, memory
//! store, session outboxes). Receipts are signed once outside the loop.

use benches::rig::{CoreRig, ShellRig, JOBS_BEFORE_REBUILD};
use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;

const WORKERS: [u32; 3] = [1, 64, 1_024];
const SLOTS: u32 = 4;
const QUEUE_DEPTH: usize = 10_000;

// Criterion measures wall time; this bench times its own batches so that
// rebuilding a grown rig stays outside the measurement.
#[allow(clippy::disallowed_methods)]
fn now() -> std::time::Instant {
    std::time::Instant::now()
}

/// What the two rigs share: built for a worker count, run one
/// commit → assign → accept → complete cycle at a time.
trait Rig {
    fn build(workers: u32) -> Self;
    fn jobs(&self) -> usize;
    fn cycle(&mut self);
}

impl Rig for CoreRig {
    fn build(workers: u32) -> Self {
        CoreRig::new(workers, SLOTS, QUEUE_DEPTH)
    }
    fn jobs(&self) -> usize {
        CoreRig::jobs(self)
    }
    fn cycle(&mut self) {
        CoreRig::cycle(self)
    }
}

impl Rig for ShellRig {
    fn build(workers: u32) -> Self {
        ShellRig::new(workers, SLOTS, QUEUE_DEPTH)
    }
    fn jobs(&self) -> usize {
        ShellRig::jobs(self)
    }
    fn cycle(&mut self) {
        ShellRig::cycle(self)
    }
}

/// Times cycles in batches, rebuilding the rig before its job map grows
/// past `JOBS_BEFORE_REBUILD` (outside the timed part).
fn bench_rig<R: Rig>(c: &mut Criterion, name: &str) {
    let mut group = c.benchmark_group(name);
    group.throughput(Throughput::Elements(1));
    for workers in WORKERS {
        let mut rig = R::build(workers);
        group.bench_with_input(BenchmarkId::from_parameter(workers), &workers, |b, &w| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    if rig.jobs() > JOBS_BEFORE_REBUILD {
                        rig = R::build(w);
                    }
                    let batch = left.min(50_000);
                    let start = now();
                    for _ in 0..batch {
                        rig.cycle();
                    }
                    total += start.elapsed();
                    left -= batch;
                }
                total
            })
        });
    }
    group.finish();
}

fn core_dispatch(c: &mut Criterion) {
    bench_rig::<CoreRig>(c, "dispatch_core");
}

fn shell_dispatch(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    bench_rig::<ShellRig>(c, "dispatch_shell");
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = core_dispatch, shell_dispatch
}
criterion_main!(benches);
