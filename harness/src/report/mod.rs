//! `report.html`: one self-contained page (inline CSS and JS, no network)
//! listing every scenario with pass/fail and, for each, a swimlane timeline
//! of its transcript.
//!
//! The transcript lines are parsed here, not in the page, so the parsing is
//! tested in Rust; the page only lays the events out. A line this parser
//! does not know becomes a note on its actor's lane (or the harness's), so
//! a new transcript format degrades the picture, never the report.

pub mod junit;

use crate::run::{Outcome, RunReport};
use crate::Scenario;
use serde::Serialize;

/// The page; `/*REPORT_DATA*/` is replaced by the scenarios as JSON.
const TEMPLATE: &str = include_str!("report.html");
const DATA_MARKER: &str = "/*REPORT_DATA*/";

/// A label on a lane longer than this is cut (the whole line stays in the tooltip).
const LABEL_CHARS_MAX: usize = 48;
/// Step and failure labels span the page: longer, but still bounded.
const BANNER_CHARS_MAX: usize = 200;

/// Lanes a scenario's events can be drawn on, grouped left to right.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LaneGroup {
    Harness,
    Client,
    Instance,
    Worker,
    Stub,
    Facilitator,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Lane {
    pub id: String,
    pub group: LaneGroup,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// A request or a WebSocket frame: an arrow `from` → `to`.
    Arrow,
    /// Something one peer did or saw: a mark on `from`.
    Note,
    /// A scenario step begins.
    Step,
    /// A restart, crash, stop or a scripted fault: a red mark on `from`.
    Fault,
    /// The line that failed the run.
    Failure,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    pub t_ms: i64,
    pub kind: EventKind,
    pub from: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub to: Option<String>,
    pub label: String,
    /// The transcript line, whole.
    pub line: String,
    /// The step this event belongs to (0: before the first step).
    pub step: usize,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub heartbeat: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct ScenarioReport {
    pub name: String,
    pub description: String,
    pub passed: bool,
    pub failure: Option<String>,
    /// The step that failed, when one did.
    pub failed_step: Option<usize>,
    /// `(expected, actual)` when the failure names both.
    pub expected_actual: Option<(String, String)>,
    pub sim_ms: i64,
    pub lanes: Vec<Lane>,
    pub events: Vec<Event>,
}

impl ScenarioReport {
    /// `failure` is the run's verdict (a failed step, or two runs that differ).
    pub fn new(scenario: &Scenario, report: &RunReport, failure: Option<&str>) -> Self {
        let mut lanes = Lanes::of(scenario);
        let events = parse_transcript(&report.transcript, &mut lanes);
        let failed_step = match &report.outcome {
            Outcome::Failed { step, .. } => Some(*step),
            Outcome::Passed | Outcome::InvariantBroken { .. } => None,
        };
        Self {
            name: report.name.clone(),
            description: scenario.description.clone(),
            passed: failure.is_none(),
            failure: failure.map(str::to_owned),
            failed_step,
            expected_actual: failure.and_then(expected_actual),
            sim_ms: report.sim_ms,
            lanes: lanes.used(&events),
            events,
        }
    }
}

/// The whole page.
pub fn render(scenarios: &[ScenarioReport]) -> String {
    let json = serde_json::to_string(scenarios).expect("report data serialises");
    // Inside <script>, "</script>" or "<!--" in a transcript would end the
    // block; JSON allows `<` as `\u003c`, so no `<` is left at all.
    let json = json.replace('<', "\\u003c");
    debug_assert_eq!(TEMPLATE.matches(DATA_MARKER).count(), 1);
    TEMPLATE.replacen(DATA_MARKER, &json, 1)
}

/// `path: expected X, got Y` (the matcher's wording) split in two.
pub fn expected_actual(message: &str) -> Option<(String, String)> {
    let start = message.find("expected ")?;
    let rest = &message[start + "expected ".len()..];
    let (expected, actual) = rest.split_once(", got ")?;
    Some((expected.to_owned(), actual.to_owned()))
}

/// The lanes known from the scenario, plus any actor the transcript adds.
struct Lanes {
    lanes: Vec<Lane>,
    /// Each worker's instance, for its frames' arrows.
    worker_instance: Vec<(String, String)>,
}

impl Lanes {
    fn of(scenario: &Scenario) -> Self {
        let mut lanes = vec![
            lane("harness", LaneGroup::Harness),
            lane("clients", LaneGroup::Client),
            lane("router", LaneGroup::Client),
        ];
        lanes.extend(
            scenario
                .instances
                .keys()
                .map(|name| lane(name, LaneGroup::Instance)),
        );
        let mut worker_instance = Vec::new();
        for spec in &scenario.workers {
            for i in 0..spec.count {
                let name = if spec.count == 1 {
                    spec.name.clone()
                } else {
                    format!("{}-{i}", spec.name)
                };
                lanes.push(lane(&name, LaneGroup::Worker));
                worker_instance.push((name, spec.instance.clone()));
            }
        }
        lanes.extend(
            scenario
                .stubs
                .keys()
                .map(|name| lane(name, LaneGroup::Stub)),
        );
        lanes.push(lane("facilitator", LaneGroup::Facilitator));
        Self {
            lanes,
            worker_instance,
        }
    }

    fn group(&self, actor: &str) -> Option<LaneGroup> {
        self.lanes.iter().find(|l| l.id == actor).map(|l| l.group)
    }

    /// The lane of an actor the scenario did not declare (a named client).
    fn add(&mut self, actor: &str, group: LaneGroup) {
        if self.group(actor).is_none() {
            self.lanes.push(lane(actor, group));
        }
    }

    fn instance_of(&self, worker: &str) -> String {
        self.worker_instance
            .iter()
            .find(|(w, _)| w == worker)
            .map(|(_, i)| i.clone())
            .or_else(|| self.first(LaneGroup::Instance))
            .unwrap_or_else(|| "harness".to_owned())
    }

    fn first(&self, group: LaneGroup) -> Option<String> {
        self.lanes
            .iter()
            .find(|l| l.group == group)
            .map(|l| l.id.clone())
    }

    /// The lane a router URL's host names: `chain-a.sim` → `chain_a`.
    fn for_host(&self, url: &str) -> String {
        let host = url
            .split("://")
            .nth(1)
            .unwrap_or(url)
            .split(['/', ':'])
            .next()
            .unwrap_or("");
        let name = host.trim_end_matches(".sim").replace('-', "_");
        match self.group(&name) {
            Some(_) => name,
            None => "facilitator".to_owned(),
        }
    }

    /// Declared lanes with at least one event, plus every instance and
    /// worker (an idle worker is worth seeing), in group order.
    fn used(self, events: &[Event]) -> Vec<Lane> {
        let mut lanes: Vec<Lane> = self
            .lanes
            .into_iter()
            .filter(|l| {
                matches!(l.group, LaneGroup::Instance | LaneGroup::Worker)
                    || events
                        .iter()
                        .any(|e| e.from == l.id || e.to.as_ref() == Some(&l.id))
            })
            .collect();
        lanes.sort_by_key(|l| l.group);
        lanes
    }
}

fn lane(id: &str, group: LaneGroup) -> Lane {
    Lane {
        id: id.to_owned(),
        group,
    }
}

/// Parses `[+S.mmms] ACTOR TEXT` lines into events.
fn parse_transcript(lines: &[String], lanes: &mut Lanes) -> Vec<Event> {
    let mut parser = Parser {
        lanes,
        t_ms: 0,
        step: 0,
        router_targets: Vec::new(),
    };
    lines.iter().map(|line| parser.event(line)).collect()
}

struct Parser<'a> {
    lanes: &'a mut Lanes,
    t_ms: i64,
    step: usize,
    /// Where the router's requests in flight went, for the answers' arrows.
    router_targets: Vec<String>,
}

/// `(t_ms, actor, text)` of a transcript line.
pub fn split_line(line: &str) -> Option<(i64, &str, &str)> {
    let rest = line.strip_prefix("[+")?;
    let (time, rest) = rest.split_once("s] ")?;
    let (secs, millis) = time.split_once('.')?;
    let t_ms = secs.parse::<i64>().ok()? * 1000 + millis.parse::<i64>().ok()?;
    let (actor, text) = rest.split_once(' ').unwrap_or((rest, ""));
    Some((t_ms, actor, text))
}

impl Parser<'_> {
    fn event(&mut self, line: &str) -> Event {
        let Some((t_ms, actor, text)) = split_line(line) else {
            return self.make(EventKind::Note, "harness", None, line, line);
        };
        self.t_ms = t_ms;
        match (actor, self.lanes.group(actor)) {
            ("harness", _) => self.harness(text, line),
            ("router", _) => self.router(text, line),
            (_, Some(LaneGroup::Instance)) => self.instance(actor, text, line),
            (_, Some(LaneGroup::Worker)) => self.worker(actor, text, line),
            (_, Some(_)) => self.make(EventKind::Note, actor, None, text, line),
            (_, None) => {
                self.lanes.add(actor, LaneGroup::Client);
                self.make(EventKind::Note, actor, None, text, line)
            }
        }
    }

    fn make(
        &self,
        kind: EventKind,
        from: &str,
        to: Option<String>,
        label: &str,
        line: &str,
    ) -> Event {
        let label_max = match kind {
            EventKind::Step | EventKind::Failure => BANNER_CHARS_MAX,
            _ => LABEL_CHARS_MAX,
        };
        Event {
            t_ms: self.t_ms,
            kind,
            from: from.to_owned(),
            to,
            label: short(label, label_max),
            line: line.to_owned(),
            step: self.step,
            heartbeat: false,
        }
    }

    fn harness(&mut self, text: &str, line: &str) -> Event {
        if let Some(rest) = text.strip_prefix("step ") {
            if let Some(number) = rest.split(':').next().and_then(|n| n.parse().ok()) {
                self.step = number;
            }
            return self.make(EventKind::Step, "harness", None, text, line);
        }
        if text.starts_with("FAILED") {
            return self.make(EventKind::Failure, "harness", None, text, line);
        }
        if let Some(rest) = text.strip_prefix("instance ") {
            let (name, what) = rest.split_once(' ').unwrap_or((rest, ""));
            return self.make(EventKind::Fault, name, None, what, line);
        }
        if let Some(rest) = text.strip_prefix("facilitator of ") {
            return self.make(EventKind::Fault, "facilitator", None, rest, line);
        }
        // `stub NAME fault KIND`, `worker NAME start|stop`: on that lane.
        for (prefix, group) in [("stub ", LaneGroup::Stub), ("worker ", LaneGroup::Worker)] {
            let Some(rest) = text.strip_prefix(prefix) else {
                continue;
            };
            let (name, what) = rest.split_once(' ').unwrap_or((rest, ""));
            if self.lanes.group(name) == Some(group) {
                let kind = if what == "start" {
                    EventKind::Note
                } else {
                    EventKind::Fault
                };
                return self.make(kind, name, None, what, line);
            }
        }
        if let Some((name, _)) = text.split_once(" crashed") {
            if self.lanes.group(name) == Some(LaneGroup::Instance) {
                return self.make(EventKind::Fault, name, None, "crashed; restarting", line);
            }
        }
        self.make(EventKind::Note, "harness", None, text, line)
    }

    /// `> METHOD path body (from client)` and `< STATUS body` of the harness's HTTP calls.
    fn instance(&mut self, instance: &str, text: &str, line: &str) -> Event {
        let client = text
            .rsplit_once(" (from ")
            .and_then(|(_, c)| c.strip_suffix(')'))
            .unwrap_or("clients")
            .to_owned();
        if client != "clients" {
            self.lanes.add(&client, LaneGroup::Client);
        }
        if let Some(request) = text.strip_prefix("> ") {
            let label = request_label(request);
            return self.make(
                EventKind::Arrow,
                &client,
                Some(instance.to_owned()),
                &label,
                line,
            );
        }
        if let Some(answer) = text.strip_prefix("< ") {
            let label = answer.split(' ').next().unwrap_or(answer);
            let label = if label == "transport" {
                "transport error"
            } else {
                label
            };
            return self.make(EventKind::Arrow, instance, Some(client), label, line);
        }
        self.make(EventKind::Note, instance, None, text, line)
    }

    /// `-> frame` (worker to instance), `<- frame`, and `{"event":...}` notes.
    fn worker(&mut self, worker: &str, text: &str, line: &str) -> Event {
        let instance = self.lanes.instance_of(worker);
        let (kind, from, to, body) = if let Some(frame) = text.strip_prefix("-> ") {
            (EventKind::Arrow, worker.to_owned(), Some(instance), frame)
        } else if let Some(frame) = text.strip_prefix("<- ") {
            (EventKind::Arrow, instance, Some(worker.to_owned()), frame)
        } else {
            (EventKind::Note, worker.to_owned(), None, text)
        };
        let value = serde_json::from_str::<serde_json::Value>(body).ok();
        let field = |name: &str| {
            value
                .as_ref()
                .and_then(|v| v.get(name))
                .and_then(serde_json::Value::as_str)
                .map(str::to_owned)
        };
        let label = field("type")
            .or_else(|| field("event"))
            .unwrap_or_else(|| body.to_owned());
        let kind = match (kind, label.as_str()) {
            (EventKind::Note, "fault_fired" | "disconnected" | "stopped" | "job_dropped") => {
                EventKind::Fault
            }
            (kind, _) => kind,
        };
        let mut event = self.make(kind, &from, to, &label, line);
        event.heartbeat = label == "heartbeat";
        event
    }

    /// `> run_llm {...}` / `< {...}` notes, `http > METHOD url` arrows to the
    /// instance or stub the URL names, and `http < STATUS` answers back.
    fn router(&mut self, text: &str, line: &str) -> Event {
        if let Some(request) = text.strip_prefix("http > ") {
            let url = request.split(' ').nth(1).unwrap_or("");
            let target = self.lanes.for_host(url);
            self.router_targets.push(target.clone());
            let label = request_label(request);
            return self.make(EventKind::Arrow, "router", Some(target), &label, line);
        }
        if let Some(answer) = text.strip_prefix("http < ") {
            let from = self
                .router_targets
                .pop()
                .unwrap_or_else(|| "harness".to_owned());
            return self.make(
                EventKind::Arrow,
                &from,
                Some("router".to_owned()),
                answer,
                line,
            );
        }
        self.make(EventKind::Note, "router", None, text, line)
    }
}

/// `POST /v1/jobs/commit/cheap [paid] {...}` → `POST /v1/jobs/commit/cheap [paid]`;
/// a router's absolute URL loses its scheme and host.
fn request_label(request: &str) -> String {
    let mut words = request.split(' ');
    let method = words.next().unwrap_or("");
    let target = words.next().unwrap_or("");
    let path = match target.split_once("://") {
        Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
        None => target,
    };
    let paid = if request.contains(" [paid]") {
        " [paid]"
    } else {
        ""
    };
    format!("{method} {path}{paid}")
}

fn short(text: &str, chars_max: usize) -> String {
    if text.chars().count() <= chars_max {
        text.to_owned()
    } else {
        let cut: String = text.chars().take(chars_max - 1).collect();
        format!("{cut}…")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scenario() -> Scenario {
        toml::from_str(
            r#"
schema_version = 1
name = "t"
seed = 1
[instances.chain_a]
network = "eip155:84532"
[[workers]]
name = "w1"
[[workers]]
name = "w"
count = 2
[stubs.provider_a]
"#,
        )
        .expect("test scenario parses")
    }

    fn parse(lines: &[&str]) -> (Vec<Event>, Vec<Lane>) {
        let mut lanes = Lanes::of(&scenario());
        let lines: Vec<String> = lines.iter().map(|l| l.to_string()).collect();
        let events = parse_transcript(&lines, &mut lanes);
        let used = lanes.used(&events);
        (events, used)
    }

    fn arrow(e: &Event) -> (&str, &str, &str) {
        assert_eq!(e.kind, EventKind::Arrow, "{e:?}");
        (&e.from, e.to.as_deref().unwrap(), &e.label)
    }

    #[test]
    fn http_calls_and_frames_become_arrows_between_lanes() {
        let (events, _) = parse(&[
            r#"[+0.000s] w1 -> {"type":"hello","slots":1}"#,
            r#"[+0.000s] w1 <- {"type":"challenge"}"#,
            r#"[+1.250s] w-1 -> {"type":"heartbeat"}"#,
            r#"[+2.000s] chain_a > POST /v1/jobs/commit/cheap [paid] {"job_type":"TASK"}"#,
            r#"[+2.000s] chain_a < 402 {"error":"X-PAYMENT header is required"}"#,
            r#"[+2.001s] chain_a > GET /v1/health  (from mallory)"#,
            r#"[+2.001s] router http > POST http://provider-a.sim/v1/chat/completions"#,
            r#"[+2.001s] router http < 429"#,
        ]);
        assert_eq!(arrow(&events[0]), ("w1", "chain_a", "hello"));
        assert_eq!(arrow(&events[1]), ("chain_a", "w1", "challenge"));
        assert_eq!(arrow(&events[2]), ("w-1", "chain_a", "heartbeat"));
        assert!(events[2].heartbeat && !events[0].heartbeat);
        assert_eq!(events[2].t_ms, 1_250);
        assert_eq!(
            arrow(&events[3]),
            ("clients", "chain_a", "POST /v1/jobs/commit/cheap [paid]")
        );
        assert_eq!(arrow(&events[4]), ("chain_a", "clients", "402"));
        assert_eq!(arrow(&events[5]), ("mallory", "chain_a", "GET /v1/health"));
        assert_eq!(
            arrow(&events[6]),
            ("router", "provider_a", "POST /v1/chat/completions")
        );
        assert_eq!(arrow(&events[7]), ("provider_a", "router", "429"));
    }

    #[test]
    fn steps_faults_and_failures_are_marked() {
        let (events, lanes) = parse(&[
            "[+0.000s] harness scenario t seed 1",
            "[+0.001s] harness step 2: a paid job starts running",
            "[+0.001s] harness instance chain_a restart",
            r#"[+0.001s] w1 {"event":"disconnected","reason":"closed"}"#,
            r#"[+0.101s] w1 {"event":"connecting","attempt":1}"#,
            "[+0.101s] harness facilitator of chain_a now answers success",
            "[+0.101s] harness worker w-0 stop",
            "[+0.101s] harness FAILED step 2: $.status: expected \"completed\", got \"failed\"",
            "garbage without a stamp",
        ]);
        let kinds: Vec<EventKind> = events.iter().map(|e| e.kind).collect();
        use EventKind::*;
        assert_eq!(
            kinds,
            [Note, Step, Fault, Fault, Note, Fault, Fault, Failure, Note]
        );
        assert_eq!(events[0].step, 0);
        assert!(events[1..].iter().all(|e| e.step == 2));
        assert_eq!(
            (events[2].from.as_str(), events[2].label.as_str()),
            ("chain_a", "restart")
        );
        assert_eq!(events[5].from, "facilitator");
        assert_eq!(
            (events[6].from.as_str(), events[6].label.as_str()),
            ("w-0", "stop")
        );
        assert!(events[7].label.ends_with("got \"failed\""), "not cut");
        assert_eq!(events[8].from, "harness");
        assert_eq!(events[8].t_ms, 101, "an unstamped line keeps the last time");
        let ids: Vec<&str> = lanes.iter().map(|l| l.id.as_str()).collect();
        // Unused client and stub lanes are left out; instances and workers stay.
        assert_eq!(
            ids,
            ["harness", "chain_a", "w1", "w-0", "w-1", "facilitator"]
        );
    }

    #[test]
    fn expected_and_actual_are_split_and_scripts_cannot_escape() {
        assert_eq!(
            expected_actual("step 3: $.status: expected \"completed\", got \"failed\""),
            Some(("\"completed\"".to_owned(), "\"failed\"".to_owned()))
        );
        assert_eq!(expected_actual("not deterministic"), None);
        let mut lanes = Lanes::of(&scenario());
        let events = parse_transcript(
            &["[+0.000s] harness </script><script>alert(1)</script>".to_owned()],
            &mut lanes,
        );
        let report = ScenarioReport {
            name: "t".into(),
            description: String::new(),
            passed: true,
            failure: None,
            failed_step: None,
            expected_actual: None,
            sim_ms: 0,
            lanes: lanes.used(&events),
            events,
        };
        let html = render(&[report]);
        assert!(!html.contains("</script><script>alert"));
        assert!(html.contains("\\u003c/script>"));
        assert!(!html.contains(DATA_MARKER));
        // No network: nothing loaded from anywhere (the SVG namespace URI is a name).
        for fetch in ["<link", " src=", "@import", "url(http", "fetch("] {
            assert!(!html.contains(fetch), "{fetch}");
        }
    }
}
