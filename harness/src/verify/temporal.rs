//! Checks the run's `[[temporal]]` properties (`crate::spec::temporal`)
//! after the last step, over every worker frame recorded.

use crate::expr::matcher::Vars;
use crate::spec::frames::{FramePattern, FrameRecord};
use crate::spec::temporal::{Kind, Per, Temporal};
use crate::world::{Driver, World};
use std::collections::{BTreeMap, BTreeSet};

/// Checks every property; the first violated one is the error.
pub fn check(temporal: &[Temporal], world: &World, vars: &Vars) -> Result<(), String> {
    if temporal.is_empty() {
        return Ok(());
    }
    let frames = world.frames.all()?;
    for (i, property) in temporal.iter().enumerate() {
        let title = property.title(i + 1);
        let event = property
            .event
            .render(vars)
            .map_err(|e| format!("{title}: {e}"))?;
        let first = match &property.first {
            Some(p) => Some(p.render(vars).map_err(|e| format!("{title}: {e}"))?),
            None => None,
        };
        let violation = match property.kind {
            Kind::Never => never(&event, &frames),
            Kind::ExactlyOnce => exactly_once(&event, property.per, &frames, world),
            Kind::AtLeastOnce => at_least_once(&event, property.per, &frames, world),
            Kind::Before => before(
                first.as_ref().unwrap_or(&event),
                &event,
                property.per.map(|per| judged_jobs(per, &frames, world)),
                &frames,
            ),
        };
        if let Some(v) = violation {
            return Err(format!("{title}: {v}"));
        }
        world.transcript.log("harness", format!("{title} holds"));
    }
    Ok(())
}

fn job_of(record: &FrameRecord) -> Option<&str> {
    record.frame.get("job_id").and_then(|v| v.as_str())
}

fn at(record: &FrameRecord) -> String {
    format!(
        "{} {} {} at transcript line {}",
        record.worker,
        record.direction.as_str(),
        record.frame,
        record.line
    )
}

fn never(event: &FramePattern, frames: &[FrameRecord]) -> Option<String> {
    let hit = frames.iter().find(|r| event.matches(r))?;
    let job = job_of(hit).map_or(String::new(), |j| format!("job {j}: "));
    Some(format!("{job}it happened: {}", at(hit)))
}

fn exactly_once(
    event: &FramePattern,
    per: Option<Per>,
    frames: &[FrameRecord],
    world: &World,
) -> Option<String> {
    let Some(per) = per else {
        let hits: Vec<&FrameRecord> = frames.iter().filter(|r| event.matches(r)).collect();
        return (hits.len() != 1).then(|| {
            let lines: Vec<String> = hits.iter().map(|r| r.line.to_string()).collect();
            format!(
                "it happened {} times (lines {})",
                hits.len(),
                lines.join(", ")
            )
        });
    };
    let jobs = judged_jobs(per, frames, world);
    hits_per_job(event, &jobs, frames)
        .into_iter()
        .find_map(|(job, lines)| match lines.len() {
            1 => None,
            0 => Some(format!("job {job}: it never happened")),
            n => {
                let lines: Vec<String> = lines.iter().map(usize::to_string).collect();
                Some(format!(
                    "job {job}: it happened {n} times, at transcript lines {}",
                    lines.join(", ")
                ))
            }
        })
}

fn at_least_once(
    event: &FramePattern,
    per: Option<Per>,
    frames: &[FrameRecord],
    world: &World,
) -> Option<String> {
    let Some(per) = per else {
        let reached = frames.iter().any(|r| event.matches(r));
        return (!reached).then(|| "it never happened".to_owned());
    };
    let jobs = judged_jobs(per, frames, world);
    hits_per_job(event, &jobs, frames)
        .into_iter()
        .find(|(_, lines)| lines.is_empty())
        .map(|(job, _)| format!("job {job}: it never happened"))
}

/// The jobs a `per` property judges: with `job`, every job the run knows
/// of (in a store at the end, or named by a frame); with
/// `acknowledged_job`, those a harness step was answered 201 for.
fn judged_jobs(per: Per, frames: &[FrameRecord], world: &World) -> BTreeSet<String> {
    match per {
        Per::AcknowledgedJob => world.acknowledged.all(),
        Per::Job => {
            let named = frames.iter().filter_map(job_of).map(str::to_owned);
            stored_jobs(world).into_iter().chain(named).collect()
        }
    }
}

/// The transcript lines of the frames matching `event`, for each of `jobs`
/// (a job with none has an empty list).
fn hits_per_job(
    event: &FramePattern,
    jobs: &BTreeSet<String>,
    frames: &[FrameRecord],
) -> BTreeMap<String, Vec<usize>> {
    let mut hits: BTreeMap<String, Vec<usize>> =
        jobs.iter().map(|job| (job.clone(), Vec::new())).collect();
    for r in frames.iter().filter(|r| event.matches(r)) {
        if let Some(lines) = job_of(r).and_then(|job| hits.get_mut(job)) {
            lines.push(r.line);
        }
    }
    hits
}

/// With `jobs` (a `per` property), per job and judging only those jobs'
/// events; else over the whole run.
fn before(
    first: &FramePattern,
    event: &FramePattern,
    jobs: Option<BTreeSet<String>>,
    frames: &[FrameRecord],
) -> Option<String> {
    // Jobs (or "" for the whole run) for which `first` has happened so far.
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let key = |r: &FrameRecord| match &jobs {
        Some(_) => job_of(r).unwrap_or_default().to_owned(),
        None => String::new(),
    };
    let judged = |r: &FrameRecord| {
        jobs.as_ref()
            .is_none_or(|jobs| job_of(r).is_some_and(|job| jobs.contains(job)))
    };
    for r in frames {
        if first.matches(r) {
            seen.insert(key(r));
        }
        if event.matches(r) && judged(r) && !seen.contains(&key(r)) {
            let job = job_of(r).map_or(String::new(), |j| format!("job {j}: "));
            return Some(format!(
                "{job}{} came before any {}",
                at(r),
                first.describe()
            ));
        }
    }
    None
}

/// The ids of every job in the simulated instances' stores.
fn stored_jobs(world: &World) -> Vec<String> {
    let mut ids = Vec::new();
    for instance in world.instances.values() {
        let Driver::Sim(sim) = &instance.driver else {
            continue;
        };
        let Some(store) = sim.store() else { continue };
        if let Ok(snapshot) = coordinator::store::Store::load(&*store) {
            ids.extend(snapshot.jobs.iter().map(|j| j.id.to_string()));
        }
    }
    ids
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::spec::frames::Direction;
    use crate::world::frames::FrameLog;
    use serde_json::json;

    fn log() -> Vec<FrameRecord> {
        let log = FrameLog::default();
        log.record(
            "w",
            Direction::Received,
            r#"{"type":"assign","job_id":"a"}"#,
            1,
        );
        log.record("w", Direction::Sent, r#"{"type":"accept","job_id":"a"}"#, 2);
        log.record("w", Direction::Sent, r#"{"type":"result","job_id":"a"}"#, 3);
        log.record("v", Direction::Sent, r#"{"type":"result","job_id":"b"}"#, 4);
        log.all().unwrap().to_vec()
    }

    fn pattern(direction: Direction, frame: serde_json::Value) -> FramePattern {
        FramePattern {
            worker: None,
            direction: Some(direction),
            frame,
        }
    }

    #[test]
    fn never_names_the_job_and_line() {
        let p = FramePattern {
            worker: Some("w".into()),
            ..pattern(Direction::Received, json!({"type": "assign"}))
        };
        let v = never(&p, &log()).unwrap();
        assert!(v.starts_with("job a: it happened: w received"), "{v}");
        assert!(v.ends_with("at transcript line 1"), "{v}");
        let p = FramePattern {
            worker: Some("v".into()),
            ..p
        };
        assert_eq!(never(&p, &log()), None);
    }

    #[test]
    fn before_per_job() {
        let accept = pattern(Direction::Sent, json!({"type": "accept"}));
        let result = pattern(Direction::Sent, json!({"type": "result"}));
        // Over the whole run, a's accept precedes b's result.
        assert_eq!(before(&accept, &result, None, &log()), None);
        let every_job = Some(["a", "b"].map(String::from).into());
        let v = before(&accept, &result, every_job, &log()).unwrap();
        assert!(v.starts_with("job b: v sent"), "{v}");
        assert!(v.contains("line 4"), "{v}");
        // Judging only job a (say, the only one acknowledged), it holds.
        let only_a = Some(["a".to_owned()].into());
        assert_eq!(before(&accept, &result, only_a, &log()), None);
    }

    #[test]
    fn hits_are_counted_for_the_judged_jobs_only() {
        let result = pattern(Direction::Sent, json!({"type": "result"}));
        let jobs: BTreeSet<String> = ["a", "c"].map(String::from).into();
        let hits = hits_per_job(&result, &jobs, &log());
        // b's result is not judged; c, judged, never had one.
        let want: BTreeMap<String, Vec<usize>> =
            [("a".to_owned(), vec![3]), ("c".to_owned(), vec![])].into();
        assert_eq!(hits, want);
    }
}
