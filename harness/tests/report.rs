//! `harness --out DIR` writes report.html beside the transcripts, with every
//! scenario it ran (scripts/report-check.sh then renders it in Chromium).

use std::process::Command;

#[test]
fn out_dir_gets_a_self_contained_report_of_every_scenario() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/..");
    let out = std::env::temp_dir().join(format!("harness-report-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    let scenarios = ["health-both-networks", "worker-disconnect-mid-job-requeued"];
    let status = Command::new(env!("CARGO_BIN_EXE_harness"))
        .args(scenarios.map(|s| format!("{root}/scenarios/{s}.toml")))
        .arg("--out")
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    let html = std::fs::read_to_string(out.join("report.html")).unwrap();
    let data_start = html.find(r#"<script type="application/json" id="report-data">"#);
    let data = &html[data_start.expect("the data block")..];
    let data = &data[data.find('>').unwrap() + 1..data.find("</script>").unwrap()];
    let report: serde_json::Value = serde_json::from_str(data).unwrap();
    let names: Vec<&str> = report
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, scenarios);
    let worker = &report[1];
    assert_eq!(worker["passed"], true);
    let arrows = worker["events"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "arrow")
        .count();
    assert!(arrows > 5, "frames and HTTP calls drawn as arrows");
    std::fs::remove_dir_all(out).unwrap();
}
