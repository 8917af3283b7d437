//! What a run reports: a table on stdout (each figure beside the bare
//! handler's and their ratio), the JSON report and the SVG next to it.

use crate::bare::Ceiling;
use crate::cli::{Args, Mode};
use crate::clock::unix_us;
use crate::endpoints::EndpointResult;
use crate::load::{throughput_series, LoadResult, WARM_UP};
use benches::plot::{write_svg, LatencySeries};
use benches::procfs::ProcSample;
use benches::stats::fmt_us;
use serde::Serialize;
use serde_json::{json, Value};

/// Everything a run measured.
pub struct Measured {
    pub ceiling: Ceiling,
    pub endpoints: Vec<EndpointResult>,
    pub loads: Vec<LoadResult>,
    pub idle: Option<Value>,
    pub coord_start: Option<ProcSample>,
    pub coord_end: Option<ProcSample>,
}

#[derive(Debug, Serialize)]
struct Report {
    mode: Mode,
    machine: Value,
    settings: Value,
    ceiling_get: Option<EndpointResult>,
    ceiling_post: Option<EndpointResult>,
    endpoints: Vec<EndpointResult>,
    load: Vec<LoadResult>,
    idle: Option<Value>,
    coordinator: Option<ProcSample>,
    ratios: Value,
}

/// Prints the table, then writes `--out` and the SVG beside it.
pub fn report(args: &Args, base: &str, m: &Measured) -> Result<(), String> {
    let mut table = Table(Vec::new());
    let mut ratios = serde_json::Map::new();
    let cg = m.ceiling.get.as_ref();
    if let Some(c) = cg {
        table.row(
            "bare axum GET req/s",
            format!("{:.0}", c.req_per_s),
            format!("{:.0}", c.req_per_s),
            "1.00".into(),
        );
    }
    for e in &m.endpoints {
        let ceiling = if e.name.starts_with("commit") {
            m.ceiling.post.as_ref()
        } else {
            cg
        };
        endpoint_rows(&mut table, &mut ratios, e, ceiling);
    }
    for l in m.loads.iter().filter(|l| l.label != WARM_UP) {
        load_rows(&mut table, &mut ratios, l, cg);
    }
    if let Some(i) = &m.idle {
        idle_rows(&mut table, i);
    }
    if let Some(s) = m.coord_end {
        table.plain("coordinator peak RSS (VmHWM)", mib(s.peak_rss_bytes));
    }
    println!();
    println!(
        "loadgen {:?}: {} workers x {} slots, {} clients, coordinator {}",
        args.mode, args.workers, args.slots, args.clients, base
    );
    table.print();
    write_json(args, m, ratios)?;
    let svg = args.out.with_extension("svg");
    write_plot(args, m, &svg)?;
    println!("\nwrote {} and {}", args.out.display(), svg.display());
    Ok(())
}

/// An endpoint's req/s, latency, server CPU and failures beside its
/// ceiling's (the bare POST for commits, the bare GET otherwise).
fn endpoint_rows(
    table: &mut Table,
    ratios: &mut serde_json::Map<String, Value>,
    e: &EndpointResult,
    ceiling: Option<&EndpointResult>,
) {
    let c = ceiling.map_or(0.0, |c| c.req_per_s);
    table.row(
        &format!("{} req/s", e.name),
        format!("{:.0}", e.req_per_s),
        format!("{c:.0}"),
        ratio(e.req_per_s, c),
    );
    table.row(
        &format!("{} latency p50 / p99", e.name),
        format!(
            "{} / {}",
            fmt_us(e.latency.p50_us),
            fmt_us(e.latency.p99_us)
        ),
        ceiling.map_or("-".into(), |c| {
            format!(
                "{} / {}",
                fmt_us(c.latency.p50_us),
                fmt_us(c.latency.p99_us)
            )
        }),
        ceiling.map_or("-".into(), |c| {
            ratio(e.latency.p99_us as f64, c.latency.p99_us as f64)
        }),
    );
    if let Some(cpu) = e.server_cpu_us_per_req {
        let cc = ceiling.and_then(|c| c.server_cpu_us_per_req);
        table.row(
            &format!("{} server CPU / req", e.name),
            format!("{cpu:.1} µs"),
            cc.map_or("-".into(), |v| format!("{v:.1} µs")),
            cc.map_or("-".into(), |v| ratio(cpu, v)),
        );
    }
    if e.failures > 0 {
        table.plain(&format!("{} failures", e.name), e.failures.to_string());
    }
    ratios.insert(
        format!("{}_req_per_s", e.name),
        json!(e.req_per_s / c.max(1e-9)),
    );
}

/// A load phase's throughput and latencies beside the bare GET's, then its
/// counts and CPU figures.
fn load_rows(
    table: &mut Table,
    ratios: &mut serde_json::Map<String, Value>,
    l: &LoadResult,
    ceiling: Option<&EndpointResult>,
) {
    let (c_rps, c_p50, c_p99, c_cpu) = ceiling.map_or((0.0, 0, 0, None), |c| {
        (
            c.req_per_s,
            c.latency.p50_us,
            c.latency.p99_us,
            c.server_cpu_us_per_req,
        )
    });
    let p = &l.label;
    table.row(
        &format!("[{p}] jobs/s"),
        format!("{:.0}", l.jobs_per_s),
        format!("{c_rps:.0} req/s"),
        ratio(l.jobs_per_s, c_rps),
    );
    if let Some(r) = l.offered_rate {
        table.plain(&format!("[{p}] offered rate"), format!("{r:.0}/s"));
    }
    table.plain(
        &format!("[{p}] completed / committed"),
        format!("{} / {}", l.completed, l.committed),
    );
    load_latency_rows(table, l, c_p50, c_p99);
    load_count_rows(table, l, c_cpu);
    ratios.insert(
        format!("{p}_jobs_per_s"),
        json!(l.jobs_per_s / c_rps.max(1e-9)),
    );
}

/// A load phase's latencies: commit and commit→completed beside the bare
/// GET's p50 and p99, the latter as the coordinator and as a poll saw it, and
/// in `rate` mode the lag from arrival to sending.
fn load_latency_rows(table: &mut Table, l: &LoadResult, c_p50: u64, c_p99: u64) {
    let p = &l.label;
    table.row(
        &format!("[{p}] commit latency p50 / p99"),
        format!(
            "{} / {}",
            fmt_us(l.commit_latency.p50_us),
            fmt_us(l.commit_latency.p99_us)
        ),
        format!("{} / {}", fmt_us(c_p50), fmt_us(c_p99)),
        format!(
            "{} / {}",
            ratio(l.commit_latency.p50_us as f64, c_p50 as f64),
            ratio(l.commit_latency.p99_us as f64, c_p99 as f64)
        ),
    );
    let s = &l.commit_to_completed_server;
    table.row(
        &format!("[{p}] commit→completed p50 / p99 / max (completed_at)"),
        format!(
            "{} / {} / {}",
            fmt_us(s.p50_us),
            fmt_us(s.p99_us),
            fmt_us(s.max_us)
        ),
        format!("{} / {}", fmt_us(c_p50), fmt_us(c_p99)),
        format!(
            "{} / {}",
            ratio(s.p50_us as f64, c_p50 as f64),
            ratio(s.p99_us as f64, c_p99 as f64)
        ),
    );
    let o = &l.commit_to_completed_observed;
    table.plain(
        &format!("[{p}] commit→completed p50 / p99 / max (seen by poll)"),
        format!(
            "{} / {} / {}",
            fmt_us(o.p50_us),
            fmt_us(o.p99_us),
            fmt_us(o.max_us)
        ),
    );
    if let Some(lag) = &l.start_lag {
        table.plain(&format!("[{p}] arrival → sent p99"), fmt_us(lag.p99_us));
    }
}

/// A load phase's failures, requests per job and CPU (beside the bare GET's
/// server CPU per request, `c_cpu`).
fn load_count_rows(table: &mut Table, l: &LoadResult, c_cpu: Option<f64>) {
    let p = &l.label;
    table.plain(&format!("[{p}] failures"), l.failures_total().to_string());
    table.plain(
        &format!("[{p}] polls per job"),
        format!("{:.2}", l.polls_per_job),
    );
    table.plain(
        &format!("[{p}] HTTP requests per job (commit + polls)"),
        format!("{:.2}", l.polls_per_job + 1.0),
    );
    if let Some(cpu) = l.coordinator_cpu_us_per_job {
        table.row(
            &format!("[{p}] coordinator CPU / job"),
            format!("{cpu:.0} µs"),
            c_cpu.map_or("-".into(), |v| format!("{v:.1} µs / req")),
            c_cpu.map_or("-".into(), |v| ratio(cpu, v)),
        );
    }
    if let Some(cores) = l.coordinator_cpu_cores {
        table.plain(
            &format!("[{p}] coordinator CPU cores busy"),
            format!("{cores:.2}"),
        );
    }
    if let Some(cpu) = l.loadgen_cpu_us_per_job {
        table.plain(
            &format!("[{p}] loadgen (clients + workers) CPU / job"),
            format!("{cpu:.0} µs"),
        );
    }
}

/// Idle mode's workers online, RSS and heartbeat CPU.
fn idle_rows(table: &mut Table, i: &Value) {
    table.plain("idle workers online", i["online_at_end"].to_string());
    if let Some(b) = i["rss_held_bytes"].as_u64() {
        table.plain("coordinator RSS with workers held", mib(b));
    }
    if let Some(b) = i["rss_before_workers_bytes"].as_u64() {
        table.plain("coordinator RSS before workers", mib(b));
    }
    if let Some(b) = i["rss_per_worker_bytes"].as_f64() {
        table.plain("RSS per idle worker", format!("{:.1} KiB", b / 1024.0));
    }
    if let Some(f) = i["heartbeat_cpu_fraction_of_core"].as_f64() {
        table.plain(
            "heartbeat CPU (share of one core)",
            format!("{:.2} %", f * 100.0),
        );
    }
}

/// The JSON report at `--out`.
fn write_json(
    args: &Args,
    m: &Measured,
    ratios: serde_json::Map<String, Value>,
) -> Result<(), String> {
    let report = Report {
        mode: args.mode,
        machine: machine(),
        settings: json!({
            "workers": args.workers, "slots": args.slots, "clients": args.clients,
            "jobs": args.jobs, "duration": args.duration, "rate": args.rate,
            "rate_of_peak": args.rate_of_peak, "worker_latency": format!("{:?}", args.worker_latency),
            "target": args.target, "coordinator_args": args.coordinator_args,
            "worker_tcp_nodelay": !args.nagle_workers, "db": args.db,
            "coordinator_cpu_seconds_at_start": m.coord_start.map(|s| s.cpu_seconds),
        }),
        ceiling_get: m.ceiling.get.clone(),
        ceiling_post: m.ceiling.post.clone(),
        endpoints: m.endpoints.clone(),
        load: m
            .loads
            .iter()
            .filter(|l| l.label != WARM_UP)
            .cloned()
            .collect(),
        idle: m.idle.clone(),
        coordinator: m.coord_end,
        ratios: Value::Object(ratios),
    };
    let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
    std::fs::write(&args.out, text).map_err(|e| format!("{}: {e}", args.out.display()))
}

/// The SVG: the last reported load phase's throughput, and the latency
/// distributions of that phase, the endpoints and the bare GET.
fn write_plot(args: &Args, m: &Measured, svg: &std::path::Path) -> Result<(), String> {
    let main_load = m.loads.iter().rev().find(|l| l.label != WARM_UP);
    let (series, title) = match main_load {
        Some(l) => (throughput_series(&l.samples, l.seconds), l.label.clone()),
        None => (Vec::new(), format!("{:?}", args.mode).to_lowercase()),
    };
    let mut lat: Vec<(String, Vec<u64>)> = Vec::new();
    if let Some(l) = main_load {
        lat.push((
            "commit".into(),
            l.samples.iter().map(|s| s.commit_us).collect(),
        ));
        lat.push((
            "commit→completed (completed_at)".into(),
            l.samples.iter().map(|s| s.server_us).collect(),
        ));
        lat.push((
            "commit→completed (seen by poll)".into(),
            l.samples.iter().map(|s| s.observed_us).collect(),
        ));
    }
    for e in &m.endpoints {
        lat.push((e.name.clone(), e.samples.clone()));
    }
    if let Some(c) = &m.ceiling.get {
        lat.push(("bare axum GET".into(), c.samples.clone()));
    }
    let series_refs: Vec<LatencySeries<'_>> = lat
        .iter()
        .map(|(n, s)| LatencySeries {
            name: n,
            samples_us: s,
        })
        .collect();
    write_svg(svg, &title, &series, &series_refs).map_err(|e| e.to_string())
}

struct Table(Vec<[String; 4]>);

impl Table {
    fn row(&mut self, metric: &str, value: String, ceiling: String, ratio: String) {
        self.0.push([metric.to_owned(), value, ceiling, ratio]);
    }

    /// A figure with nothing to compare it to.
    fn plain(&mut self, metric: &str, value: String) {
        self.row(metric, value, "-".into(), "-".into());
    }

    fn print(&self) {
        let header = [
            "metric".to_owned(),
            "value".to_owned(),
            "bare axum".to_owned(),
            "ratio".to_owned(),
        ];
        let rows: Vec<&[String; 4]> = std::iter::once(&header).chain(self.0.iter()).collect();
        let widths: Vec<usize> = (0..4)
            .map(|i| rows.iter().map(|r| r[i].chars().count()).max().unwrap_or(0))
            .collect();
        for (k, r) in rows.iter().enumerate() {
            let line: Vec<String> = (0..4)
                .map(|i| format!("{:<w$}", r[i], w = widths[i]))
                .collect();
            println!("| {} |", line.join(" | "));
            if k == 0 {
                let sep: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
                println!("|-{}-|", sep.join("-|-"));
            }
        }
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 {
        format!("{:.2}", a / b)
    } else {
        "-".to_owned()
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
}

/// The machine the figures are from. (Read when the report is written,
/// although two of its keys say "at start".)
fn machine() -> Value {
    let loadavg = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    let cpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|t| {
            t.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split(':').nth(1))
                .map(|s| s.trim().to_owned())
        })
        .unwrap_or_default();
    json!({"cpus": cpus, "cpu_model": model, "loadavg_at_start": loadavg.trim(),
           "started_unix_ms": unix_us() / 1000})
}
