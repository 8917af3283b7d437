//! One step of a scenario: exactly one action (named by its keyword, from
//! the ONE table [`ActionKey`]), then optional expectations and captures.

use super::*;
use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, Visitor};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::fmt;

/// One step: exactly one action, then optional expectations and captures.
/// In TOML the action is a key of the step table (`http = { ... }`);
/// `Deserialize` is written by hand to find it (see `StepVisitor`).
#[derive(Debug, Clone)]
pub struct Step {
    pub name: Option<String>,
    pub action: Action,
    pub expect: Option<Expect>,
    pub capture: BTreeMap<String, String>,
    /// `repeat` / `for_each` (version 2), expanded at load.
    pub each: Option<crate::spec::matrix::Each>,
}

#[derive(Debug, Clone)]
pub enum Action {
    Http(HttpCall),
    Router(RouterCall),
    Advance(SimDuration),
    WaitUntil(WaitUntil),
    Worker(Control<WorkerAction>),
    Instance(InstanceControl),
    Stub(StubControl),
    CommitMany(CommitMany),
    Facilitator(FacilitatorControl),
    Sockets(Sockets),
    ExpectFrames(crate::spec::frames::ExpectFrames),
    ExpectCalls(crate::spec::frames::ExpectCalls),
    SendFrame(crate::spec::frames::SendFrame),
    /// Steps run in order, repeated together (version 2); expanded at load.
    Group(Vec<Step>),
    /// `wait_until = { workload }` (version 2).
    WaitWorkload(WaitWorkload),
}

choice!(
    /// The key that names an action in a step table.
    ActionKey {
        Http => "http",
        Router => "router",
        Advance => "advance",
        WaitUntil => "wait_until",
        Worker => "worker",
        Instance => "instance",
        Stub => "stub",
        CommitMany => "commit_many",
        Facilitator => "facilitator",
        Sockets => "sockets",
        ExpectFrames => "expect_frames",
        ExpectCalls => "expect_calls",
        SendFrame => "send_frame",
        Group => "group",
    }
);

/// Every key a step table may hold: `name`, the actions, `expect`, `capture`.
pub(crate) const STEP_KEYS: &[&str] = &[
    "name",
    "http",
    "router",
    "advance",
    "wait_until",
    "worker",
    "instance",
    "stub",
    "commit_many",
    "facilitator",
    "sockets",
    "expect_frames",
    "expect_calls",
    "send_frame",
    "group",
    "expect",
    "capture",
    "repeat",
    "for_each",
];

impl Action {
    pub fn key(&self) -> ActionKey {
        match self {
            Action::Http(_) => ActionKey::Http,
            Action::Router(_) => ActionKey::Router,
            Action::Advance(_) => ActionKey::Advance,
            Action::WaitUntil(_) | Action::WaitWorkload(_) => ActionKey::WaitUntil,
            Action::Worker(_) => ActionKey::Worker,
            Action::Instance(_) => ActionKey::Instance,
            Action::Stub(_) => ActionKey::Stub,
            Action::CommitMany(_) => ActionKey::CommitMany,
            Action::Facilitator(_) => ActionKey::Facilitator,
            Action::Sockets(_) => ActionKey::Sockets,
            Action::ExpectFrames(_) => ActionKey::ExpectFrames,
            Action::ExpectCalls(_) => ActionKey::ExpectCalls,
            Action::SendFrame(_) => ActionKey::SendFrame,
            Action::Group(_) => ActionKey::Group,
        }
    }

    /// Whether the action gives an answer that `expect` and `capture` read.
    pub fn answers(&self) -> bool {
        matches!(
            self,
            Action::Http(_)
                | Action::Router(_)
                | Action::WaitUntil(_)
                | Action::WaitWorkload(_)
                | Action::CommitMany(_)
                | Action::Sockets(_)
        )
    }

    /// Whether the action advances simulated time or injects a fault, which
    /// a live run cannot do.
    pub fn simulation_only(&self) -> bool {
        matches!(
            self,
            Action::Advance(_)
                | Action::Worker(_)
                | Action::Instance(_)
                | Action::Stub(_)
                | Action::Facilitator(_)
                | Action::Sockets(_)
                | Action::ExpectFrames(_)
                | Action::ExpectCalls(_)
                | Action::SendFrame(_)
        )
    }

    /// Reads the value of the action `key` names from the step table.
    fn next_value<'de, A: MapAccess<'de>>(key: ActionKey, map: &mut A) -> Result<Self, A::Error> {
        Ok(match key {
            ActionKey::Http => Action::Http(map.next_value()?),
            ActionKey::Router => Action::Router(map.next_value()?),
            ActionKey::Advance => Action::Advance(map.next_value()?),
            ActionKey::WaitUntil => map
                .next_value::<WaitSpec>()?
                .into_action()
                .map_err(de::Error::custom)?,
            ActionKey::Worker => Action::Worker(map.next_value()?),
            ActionKey::Instance => Action::Instance(map.next_value()?),
            ActionKey::Stub => Action::Stub(map.next_value()?),
            ActionKey::CommitMany => Action::CommitMany(map.next_value()?),
            ActionKey::Facilitator => Action::Facilitator(map.next_value()?),
            ActionKey::Sockets => Action::Sockets(map.next_value()?),
            ActionKey::ExpectFrames => Action::ExpectFrames(map.next_value()?),
            ActionKey::ExpectCalls => Action::ExpectCalls(map.next_value()?),
            ActionKey::SendFrame => Action::SendFrame(map.next_value()?),
            ActionKey::Group => Action::Group(map.next_value()?),
        })
    }
}

fn exactly_one_action(has: &str) -> String {
    format!(
        "a step needs exactly one action: {} (it has {has})",
        ActionKey::NAMES.join(", ")
    )
}

impl<'de> Deserialize<'de> for Step {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_map(StepVisitor)
    }
}

struct StepVisitor;

impl<'de> Visitor<'de> for StepVisitor {
    type Value = Step;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a step table with exactly one action")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Step, A::Error> {
        let (mut name, mut action, mut expect, mut capture) = (None, None, None, None);
        let mut each = crate::spec::matrix::Each::default();
        let mut seed = StepKeySeed { action: None };
        while let Some(key) = map.next_key_seed(seed)? {
            match key {
                StepKey::Name => name = Some(map.next_value()?),
                StepKey::Expect => expect = Some(map.next_value()?),
                StepKey::Capture => capture = Some(map.next_value()?),
                StepKey::Repeat => each.repeat = Some(map.next_value()?),
                StepKey::ForEach => each.for_each = Some(map.next_value()?),
                StepKey::Action(key) => {
                    action = Some(Action::next_value(key, &mut map)?);
                    seed.action = Some(key);
                }
            }
        }
        let action = action.ok_or_else(|| de::Error::custom(exactly_one_action("none")))?;
        let capture: BTreeMap<String, String> = capture.unwrap_or_default();
        if !action.answers() && (expect.is_some() || !capture.is_empty()) {
            return Err(de::Error::custom(format!(
                "`{}` gives no answer to expect or capture from",
                action.key()
            )));
        }
        let each = each.check(&action).map_err(de::Error::custom)?;
        Ok(Step {
            name,
            action,
            expect,
            capture,
            each,
        })
    }
}

enum StepKey {
    Name,
    Action(ActionKey),
    Expect,
    Capture,
    Repeat,
    ForEach,
}

/// Reads one key of a step table. It refuses unknown keys and a second
/// action here, so the error points at the offending key's line.
#[derive(Clone, Copy)]
struct StepKeySeed {
    /// The action already read, if any.
    action: Option<ActionKey>,
}

impl<'de> DeserializeSeed<'de> for StepKeySeed {
    type Value = StepKey;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<StepKey, D::Error> {
        let text = String::deserialize(deserializer)?;
        let key = match text.as_str() {
            "name" => StepKey::Name,
            "expect" => StepKey::Expect,
            "capture" => StepKey::Capture,
            "repeat" => StepKey::Repeat,
            "for_each" => StepKey::ForEach,
            other => ActionKey::parse(other)
                .map(StepKey::Action)
                .ok_or_else(|| de::Error::unknown_field(other, STEP_KEYS))?,
        };
        match (self.action, &key) {
            (Some(first), StepKey::Action(second)) => Err(de::Error::custom(exactly_one_action(
                &format!("{first} and {second}"),
            ))),
            _ => Ok(key),
        }
    }
}
