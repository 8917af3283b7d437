//! The load tool's SVG: throughput over time above, the latency
//! distributions (as cumulative curves) below.

use plotters::prelude::*;
use std::path::Path;

/// One latency distribution to draw: its name and samples in µs.
pub struct LatencySeries<'a> {
    pub name: &'a str,
    pub samples_us: &'a [u64],
}

const COLORS: [RGBColor; 5] = [
    RGBColor(31, 119, 180),
    RGBColor(214, 39, 40),
    RGBColor(44, 160, 44),
    RGBColor(255, 127, 14),
    RGBColor(148, 103, 189),
];

type Area<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;
type PlotResult = Result<(), Box<dyn std::error::Error>>;

/// `throughput`: (seconds since start, completions per second) per bucket.
pub fn write_svg(
    path: &Path,
    title: &str,
    throughput: &[(f64, f64)],
    latencies: &[LatencySeries<'_>],
) -> PlotResult {
    let root = SVGBackend::new(path, (1000, 820)).into_drawing_area();
    root.fill(&WHITE)?;
    let (top, bottom) = root.split_vertically(400);
    draw_throughput(&top, title, throughput)?;
    draw_latencies(&bottom, latencies)?;
    root.present()?;
    Ok(())
}

/// Completed jobs per second over the run.
fn draw_throughput(area: &Area<'_>, title: &str, throughput: &[(f64, f64)]) -> PlotResult {
    let x_max = throughput.iter().map(|p| p.0).fold(1.0, f64::max);
    let y_max = throughput.iter().map(|p| p.1).fold(1.0, f64::max) * 1.1;
    let mut chart = ChartBuilder::on(area)
        .caption(
            format!("{title}: completed jobs per second"),
            ("sans-serif", 20),
        )
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max, 0f64..y_max)?;
    chart
        .configure_mesh()
        .x_desc("seconds since start")
        .y_desc("jobs/s")
        .draw()?;
    chart.draw_series(LineSeries::new(throughput.iter().copied(), &COLORS[0]))?;
    Ok(())
}

/// Each non-empty latency series as a cumulative curve, with a legend.
fn draw_latencies(area: &Area<'_>, latencies: &[LatencySeries<'_>]) -> PlotResult {
    let mut sorted: Vec<Vec<u64>> = latencies
        .iter()
        .map(|s| {
            let mut v = s.samples_us.to_vec();
            v.sort_unstable();
            v
        })
        .collect();
    sorted.retain(|v| !v.is_empty());
    // Cut the x axis at the largest p99.9 so one outlier does not flatten the curves.
    let x_max_ms = sorted
        .iter()
        .map(|v| crate::stats::percentile(v, 0.999) as f64 / 1e3)
        .fold(0.1, f64::max)
        * 1.05;
    let mut chart = ChartBuilder::on(area)
        .caption("latency distribution (cumulative)", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(40)
        .y_label_area_size(70)
        .build_cartesian_2d(0f64..x_max_ms, 0f64..100f64)?;
    chart
        .configure_mesh()
        .x_desc("latency (ms)")
        .y_desc("% of requests at or below")
        .draw()?;
    for (i, series) in latencies
        .iter()
        .filter(|s| !s.samples_us.is_empty())
        .enumerate()
    {
        let color = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(cumulative(&sorted[i], x_max_ms), &color))?
            .label(series.name)
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], color));
    }
    chart
        .configure_series_labels()
        .position(SeriesLabelPosition::LowerRight)
        .background_style(WHITE.mix(0.8))
        .border_style(BLACK)
        .draw()?;
    Ok(())
}

/// (ms, % at or below) of sorted, non-empty `v`: about 2,000 points and the
/// last, none beyond `x_max_ms`.
fn cumulative(v: &[u64], x_max_ms: f64) -> Vec<(f64, f64)> {
    let n = v.len();
    let step = (n / 2_000).max(1);
    (0..n)
        .step_by(step)
        .chain(std::iter::once(n - 1))
        .map(|k| (v[k] as f64 / 1e3, (k + 1) as f64 * 100.0 / n as f64))
        .filter(|p| p.0 <= x_max_ms)
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn writes_an_svg() {
        let dir = std::env::temp_dir().join(format!("benches-plot-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("p.svg");
        let samples: Vec<u64> = (1..1000).collect();
        super::write_svg(
            &path,
            "t",
            &[(0.0, 1.0), (1.0, 3.0)],
            &[super::LatencySeries {
                name: "x",
                samples_us: &samples,
            }],
        )
        .unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains("<svg") && text.contains("polyline"));
    }
}
