//! One step of a scenario: exactly one action (named by its keyword, from
//! the one keyword table below), then optional expectations and captures.

use super::frames::{ExpectCalls, ExpectFrames, SendFrame};
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

/// Builds the step actions from [`actions!`]'s one table: the `Action`
/// enum, its keyword enum `ActionKey`, the keys a step table may hold, and
/// what each action is (answers, simulation only) and how it is read.
macro_rules! actions {
    ($(
        $(#[$meta:meta])*
        $variant:ident($arg:ty) => $key:literal,
            answers: $answers:literal, simulation_only: $sim:literal, version: $version:literal;
    )+) => {
        #[derive(Debug, Clone)]
        pub enum Action {
            $($(#[$meta])* $variant($arg),)+
            /// `wait_until = { workload }` (version 2): read under the
            /// `wait_until` keyword (see [`WaitSpec`]).
            WaitWorkload(WaitWorkload),
        }

        choice!(
            /// The key that names an action in a step table.
            ActionKey { $($variant => $key),+ }
        );

        /// Every key a step table may hold: `name`, the actions, `expect`,
        /// `capture`, `repeat`, `for_each`.
        pub(crate) const STEP_KEYS: &[&str] =
            &["name", $($key,)+ "expect", "capture", "repeat", "for_each"];

        impl Action {
            pub fn key(&self) -> ActionKey {
                match self {
                    $(Action::$variant(_) => ActionKey::$variant,)+
                    Action::WaitWorkload(_) => ActionKey::WaitUntil,
                }
            }

            /// Whether the action gives an answer that `expect` and `capture` read.
            pub fn answers(&self) -> bool {
                match self {
                    $(Action::$variant(_) => $answers,)+
                    Action::WaitWorkload(_) => true,
                }
            }

            /// Whether the action advances simulated time, injects a fault or
            /// looks inside the simulation, which a live run cannot do.
            pub fn simulation_only(&self) -> bool {
                match self {
                    $(Action::$variant(_) => $sim,)+
                    Action::WaitWorkload(_) => false,
                }
            }

            /// The schema version that introduced the keyword (a version-1
            /// file that uses a version-2 keyword is refused at load).
            /// `wait_until = { workload }` is refused by
            /// `Scenario::check_version_2` instead, under its own words.
            pub fn version(&self) -> u32 {
                match self {
                    $(Action::$variant(_) => $version,)+
                    Action::WaitWorkload(_) => 1,
                }
            }

            /// Reads the value of the action `key` names from the step table.
            fn next_value<'de, A: MapAccess<'de>>(
                key: ActionKey,
                map: &mut A,
            ) -> Result<Self, A::Error> {
                if key == ActionKey::WaitUntil {
                    // A job and a status, or a workload: two actions, one keyword.
                    return map
                        .next_value::<WaitSpec>()?
                        .into_action()
                        .map_err(de::Error::custom);
                }
                Ok(match key {
                    $(ActionKey::$variant => Action::$variant(map.next_value()?),)+
                })
            }
        }
    };
}

// THE keyword table of step actions: one row per keyword, in the order the
// load errors list them. A new keyword is a row here, its arguments in
// `calls.rs`, its `run_*` in `run/steps.rs` and its references in
// `check/refs.rs`.
actions! {
    Http(HttpCall) => "http",
        answers: true, simulation_only: false, version: 1;
    Router(RouterCall) => "router",
        answers: true, simulation_only: false, version: 1;
    Advance(SimDuration) => "advance",
        answers: false, simulation_only: true, version: 1;
    WaitUntil(WaitUntil) => "wait_until",
        answers: true, simulation_only: false, version: 1;
    Worker(Control<WorkerAction>) => "worker",
        answers: false, simulation_only: true, version: 1;
    Instance(InstanceControl) => "instance",
        answers: false, simulation_only: true, version: 1;
    Stub(StubControl) => "stub",
        answers: false, simulation_only: true, version: 1;
    CommitMany(CommitMany) => "commit_many",
        answers: true, simulation_only: false, version: 1;
    Facilitator(FacilitatorControl) => "facilitator",
        answers: false, simulation_only: true, version: 1;
    Sockets(Sockets) => "sockets",
        answers: true, simulation_only: true, version: 1;
    ExpectFrames(ExpectFrames) => "expect_frames",
        answers: false, simulation_only: true, version: 2;
    ExpectCalls(ExpectCalls) => "expect_calls",
        answers: false, simulation_only: true, version: 2;
    SendFrame(SendFrame) => "send_frame",
        answers: false, simulation_only: true, version: 2;
    ExpectStore(StoreRead) => "expect_store",
        answers: true, simulation_only: true, version: 2;
    /// Steps run in order, repeated together (version 2); expanded at load.
    Group(Vec<Step>) => "group",
        answers: false, simulation_only: false, version: 2;
    /// An attacker acting for a user without its key (`calls::Attack`).
    Attack(Attack) => "attack",
        answers: true, simulation_only: false, version: 2;
    /// `POST /v1/jobs/{id}/cancel`, optionally across a held poll (`calls::CancelCall`).
    Cancel(CancelCall) => "cancel",
        answers: true, simulation_only: false, version: 2;
    /// `GET /v1/jobs/{id}` of a named or the latest job (`calls::PollCall`).
    Poll(PollCall) => "poll",
        answers: true, simulation_only: false, version: 2;
    /// Server-sent events read as they come (`calls::StreamCall`).
    Stream(StreamCall) => "stream",
        answers: true, simulation_only: true, version: 2;
    /// A user pairs a worker: create with its proof, then claim (`calls::Pair`).
    Pair(Pair) => "pair",
        answers: true, simulation_only: false, version: 2;
    /// The coordinator's fault points stop (`"off"`) or fire again
    /// (`"on"`) in a `buggify = true` run (decision 0024).
    Buggify(BuggifySwitch) => "buggify",
        answers: false, simulation_only: true, version: 2;
    /// Unfinished request heads or silent connections from one client
    /// (`calls::SlowHeads`).
    SlowHeads(SlowHeads) => "slow_heads",
        answers: true, simulation_only: true, version: 2;
    /// Bytes sent as they are, for request heads no HTTP client sends
    /// (`calls::RawRequest`).
    RawRequest(RawRequest) => "raw_request",
        answers: true, simulation_only: false, version: 2;
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
