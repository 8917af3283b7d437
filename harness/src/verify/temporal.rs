//! Checks the run's `[[temporal]]` properties (`crate::spec::temporal`)
//! after the last step, over every worker frame recorded.

use crate::expr::matcher::Vars;
use crate::spec::frames::{FramePattern, FrameRecord};
use crate::spec::temporal::{Kind, Per, Temporal};
use crate::world::{Driver, World};
use std::collections::BTreeMap;

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
            Kind::Before => before(
                first.as_ref().unwrap_or(&event),
                &event,
                property.per,
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
    let hits: Vec<&FrameRecord> = frames.iter().filter(|r| event.matches(r)).collect();
    let Some(Per::Job) = per else {
        return (hits.len() != 1).then(|| {
            let lines: Vec<String> = hits.iter().map(|r| r.line.to_string()).collect();
            format!(
                "it happened {} times (lines {})",
                hits.len(),
                lines.join(", ")
            )
        });
    };
    // Every job the run knows of: in a store at the end, or named by a frame.
    let mut counts: BTreeMap<String, Vec<usize>> = BTreeMap::new();
    for id in stored_jobs(world) {
        counts.entry(id).or_default();
    }
    for r in frames {
        if let Some(id) = job_of(r) {
            counts.entry(id.to_owned()).or_default();
        }
    }
    for r in &hits {
        if let Some(id) = job_of(r) {
            counts.entry(id.to_owned()).or_default().push(r.line);
        }
    }
    counts
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

fn before(
    first: &FramePattern,
    event: &FramePattern,
    per: Option<Per>,
    frames: &[FrameRecord],
) -> Option<String> {
    // Jobs (or "" for the whole run) for which `first` has happened so far.
    let mut seen: BTreeMap<String, ()> = BTreeMap::new();
    let key = |r: &FrameRecord| match per {
        Some(Per::Job) => job_of(r).unwrap_or_default().to_owned(),
        None => String::new(),
    };
    for r in frames {
        if first.matches(r) {
            seen.insert(key(r), ());
        }
        if event.matches(r) && !seen.contains_key(&key(r)) {
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
        log.all().unwrap()
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
        let v = before(&accept, &result, Some(Per::Job), &log()).unwrap();
        assert!(v.starts_with("job b: v sent"), "{v}");
        assert!(v.contains("line 4"), "{v}");
    }
}
