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

fn core_dispatch(c: &mut Criterion) {
    let mut group = c.benchmark_group("dispatch_core");
    group.throughput(Throughput::Elements(1));
    for workers in WORKERS {
        let mut rig = CoreRig::new(workers, SLOTS, QUEUE_DEPTH);
        group.bench_with_input(BenchmarkId::from_parameter(workers), &workers, |b, &w| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    if rig.jobs() > JOBS_BEFORE_REBUILD {
                        rig = CoreRig::new(w, SLOTS, QUEUE_DEPTH);
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

fn shell_dispatch(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let _guard = rt.enter();
    let mut group = c.benchmark_group("dispatch_shell");
    group.throughput(Throughput::Elements(1));
    for workers in WORKERS {
        let mut rig = ShellRig::new(workers, SLOTS, QUEUE_DEPTH);
        group.bench_with_input(BenchmarkId::from_parameter(workers), &workers, |b, &w| {
            b.iter_custom(|iters| {
                let mut total = Duration::ZERO;
                let mut left = iters;
                while left > 0 {
                    if rig.jobs() > JOBS_BEFORE_REBUILD {
                        rig = ShellRig::new(w, SLOTS, QUEUE_DEPTH);
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

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(4)).warm_up_time(Duration::from_secs(1));
    targets = core_dispatch, shell_dispatch
}
criterion_main!(benches);
