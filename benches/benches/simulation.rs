//! The simulation: a 1,000-job, 50-worker scenario with in-memory workers
//! (real sessions, real signed and verified receipts) on a paused
//! current-thread runtime. Reported as simulated jobs per wall second; the
//! time to connect the 50 workers is not counted.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use std::time::Duration;

fn simulation(c: &mut Criterion) {
    let mut group = c.benchmark_group("simulation");
    group.sample_size(10);
    for (jobs, workers) in [(1_000usize, 50u32), (200, 10)] {
        group.throughput(Throughput::Elements(jobs as u64));
        group.bench_with_input(
            BenchmarkId::new("jobs_workers", format!("{jobs}x{workers}")),
            &(jobs, workers),
            |b, &(jobs, workers)| {
                b.iter_custom(|iters| {
                    let mut total = Duration::ZERO;
                    for i in 0..iters {
                        let out = benches::sim::run(jobs, workers, i);
                        assert_eq!(out.completed, jobs, "{out:?}");
                        total += out.wall;
                    }
                    total
                })
            },
        );
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(5)).warm_up_time(Duration::from_secs(1));
    targets = simulation
}
criterion_main!(benches);
