//! A swarm world rendered as an ordinary scenario file (TOML), so a world
//! the swarm found broken replays with `harness`.

use super::attacks::{AttackEvent, ATTACKER, USERS};
use super::spec::*;
use crate::spec::names::INSTANCE_NAMES;
use std::fmt::Write as _;

/// Renders the world as a scenario file that the ordinary `harness`
/// command replays (`name` must be the file's stem).
pub fn render(world: &WorldSpec, name: &str, description: &str) -> String {
    let mut out = String::new();
    let w = &mut out;
    let _ = writeln!(w, "schema_version = {}", schema_version(world));
    let _ = writeln!(w, "name = {name:?}");
    let _ = writeln!(w, "description = {description:?}");
    let _ = writeln!(w, "seed = {}", world.seed);
    let _ = writeln!(w, "live = false");
    if world.kinds.has(Kind::Buggify) {
        let _ = writeln!(w, "buggify = true");
    }
    render_peers(w, world);
    for (k, f) in world.link_faults.iter().enumerate() {
        render_link_fault(w, k, f);
    }
    for (k, r) in world.reboots.iter().enumerate() {
        let _ = writeln!(
            w,
            "\n[[faults]]\nname = \"reboot{k}\"\nkind = \"reboot\"\ninstance = {:?}\nwindow = [\"{}ms\", \"{}ms\"]\nfor = \"{}ms\"",
            r.instance, r.from_ms, r.to_ms, r.down_ms
        );
    }
    for (k, l) in world.loads.iter().enumerate() {
        render_load(w, k, l);
    }
    if world
        .events
        .iter()
        .any(|e| matches!(e.event, Event::ProviderFault(_) | Event::Router { .. }))
    {
        let _ = writeln!(w, "\n[router]\nallow_private_hosted = false");
    }
    render_pairings(w, world);
    for t in &world.events {
        if t.after_ms > 0 {
            let _ = writeln!(w, "\n[[steps]]\nadvance = \"{}ms\"", t.after_ms);
        }
        match &t.event {
            Event::Commit(c) if world.user_auth && c.private => render_signed_commit(w, c),
            Event::Attack(a) => render_attack(w, world, a),
            event => render_event(w, event),
        }
    }
    if world.heal {
        if world.kinds.has(Kind::Buggify) {
            render_buggify(w, "off", "liveness phase: fault points stop");
        }
        render_heal(w, world);
        let _ = writeln!(w, "\n[invariants]\nall_jobs_terminal = true");
    }
    if !out.contains("\n[[steps]]\n") {
        // A scenario needs a step; a world shrunk to its set-up has none.
        let _ = writeln!(
            out,
            "\n[[steps]]\nname = \"nothing else: the run is its set-up\"\nadvance = \"0ms\""
        );
    }
    out
}

/// The set-up pairings; in a `buggify` world the fault points wait while
/// they run (they fire in the timeline only, not in the set-up nor in the
/// liveness phase, see [`render`]'s heal).
fn render_pairings(w: &mut String, world: &WorldSpec) {
    let switched = world.kinds.has(Kind::Buggify) && !world.pairings.is_empty();
    if switched {
        render_buggify(w, "off", "set-up: fault points wait");
    }
    for (k, p) in world.pairings.iter().enumerate() {
        if world.user_auth {
            render_proven_pairing(w, k, p);
        } else {
            render_pairing(w, k, p);
        }
    }
    if switched {
        render_buggify(w, "on", "timeline: fault points fire");
    }
}

/// A `buggify` step that stops or resumes the fault points.
fn render_buggify(w: &mut String, on: &str, why: &str) {
    let _ = writeln!(w, "\n[[steps]]\nname = {why:?}\nbuggify = {on:?}");
}

/// 1, unless the world uses what version 2 added (link faults, user auth,
/// workloads, reboots, duplicate sessions, cancels, streams or a streaming
/// worker, polls, slow heads, workers dialling from a named client).
fn schema_version(world: &WorldSpec) -> u32 {
    let plain = world.link_faults.is_empty()
        && !world.user_auth
        && world.loads.is_empty()
        && world.reboots.is_empty()
        && world
            .workers
            .iter()
            .all(|w| w.key_of.is_none() && !w.stream)
        && !world.kinds.has(Kind::Cancels)
        && !world.kinds.has(Kind::Streams)
        && !world.kinds.has(Kind::Buggify)
        && !world.kinds.has(Kind::SlowHeads)
        && !world.kinds.has(Kind::Sybils)
        && !world.kinds.has(Kind::PollHoards)
        && !world.kinds.has(Kind::Garbage)
        && !(world.events.iter()).any(|t| matches!(t.event, Event::Poll { .. }));
    if plain {
        1
    } else {
        2
    }
}

/// The instances (with user auth, when on), the users and the workers.
fn render_peers(w: &mut String, world: &WorldSpec) {
    for i in &world.instances {
        render_instance(w, i);
        if world.user_auth {
            let _ = writeln!(w, "user_auth = \"on\"");
        }
    }
    if world.user_auth {
        for user in USERS.iter().chain([&ATTACKER]) {
            let _ = writeln!(w, "\n[users.{user}]");
        }
    }
    for worker in &world.workers {
        render_worker(w, worker);
    }
    for i in &world.instances {
        if let Some(s) = &i.sybils {
            let _ = write!(w, "{}", super::sybils::render(i.name, s));
        }
    }
}

/// The per-address worker caps of an instance with Sybils: sessions, and
/// slots where the `slot_caps` kind drew a cap.
fn sybil_limits(s: &super::sybils::Sybils) -> Vec<String> {
    let sessions = format!("worker_sessions_per_client_max = {}", s.per_client_max);
    let slots = (s.slot_cap).map(|c| format!("worker_slots_per_client_max = {}", c.per_client_max));
    std::iter::once(sessions).chain(slots).collect()
}

fn render_instance(w: &mut String, i: &InstanceSpec) {
    let _ = writeln!(w, "\n[instances.{}]\nnetwork = {:?}", i.name, i.network);
    if i.nodes > 1 {
        let _ = writeln!(
            w,
            "nodes = {}\nnode_lease_ms = {}",
            i.nodes, i.node_lease_ms
        );
    }
    let heartbeat = i.heartbeat_timeout_ms.map_or(String::new(), |ms| {
        format!(
            ", heartbeat_interval_ms = {}, heartbeat_timeout_ms = {ms}",
            ms / 4
        )
    });
    let head = i.http_bounds.map_or(String::new(), |b| {
        format!(", http_head_timeout_ms = {}", b.head_timeout_ms)
    });
    let ttl =
        (i.pairing_code_ttl_ms).map_or(String::new(), |ms| format!(", pairing_code_ttl_ms = {ms}"));
    let _ = writeln!(
        w,
        "timing = {{ lease_ms = {}, pending_timeout_ms = {}, attempts_max = {}{heartbeat}{head}{ttl} }}",
        i.lease_ms, i.pending_timeout_ms, i.attempts_max
    );
    if let Some(script) = i.payment {
        let window = i
            .payment_window_s
            .map_or(String::new(), |s| format!(", max_timeout_seconds = {s}"));
        let _ = writeln!(w, "payment = {{ facilitator = {script:?}{window} }}");
    }
    let mut limits = Vec::new();
    if let Some(n) = i.finished_jobs_cached_max {
        limits.push(format!("finished_jobs_cached_max = {n}"));
    }
    if let Some(bytes) = i.retention_kept_bytes_max {
        limits.push(format!("kept_bytes_max = {bytes}"));
        let hours = i.retention_hours.unwrap_or(24);
        let _ = writeln!(w, "retention_hours = {hours}");
    }
    if let Some(percent) = i.kept_share_percent {
        limits.push(format!("kept_share_per_client_percent = {percent}"));
    }
    if let Some(b) = i.http_bounds {
        let _ = writeln!(w, "http_bounds = true");
        limits.push(format!(
            "http_connections_per_client_max = {}",
            b.per_client_max
        ));
    }
    if let Some(s) = i.sybils {
        limits.extend(sybil_limits(&s));
    }
    if let Some((all, per_client)) = i.held_polls {
        limits.push(format!(
            "held_polls_max = {all}, held_polls_per_client_max = {per_client}"
        ));
    }
    if let Some((all, per_client)) = i.queued_bytes {
        limits.push(format!(
            "queued_bytes_max = {all}, queued_bytes_per_client_max = {per_client}"
        ));
    }
    if !limits.is_empty() {
        let _ = writeln!(w, "limits = {{ {} }}", limits.join(", "));
    }
}

fn render_worker(w: &mut String, spec: &WorkerSpec) {
    let _ = writeln!(w, "\n[[workers]]\nname = {:?}", spec.name);
    if let Some(original) = &spec.key_of {
        let _ = writeln!(w, "key_of = {original:?}");
    }
    if spec.instance != INSTANCE_NAMES[0] {
        let _ = writeln!(w, "instance = {:?}", spec.instance);
    }
    if let Some(node) = spec.node {
        let _ = writeln!(w, "node = {node}");
    }
    if !spec.capabilities.is_empty() {
        let _ = writeln!(w, "capabilities = {:?}", spec.capabilities);
    }
    if spec.slots != 1 {
        let _ = writeln!(w, "slots = {}", spec.slots);
    }
    if spec.stream {
        let _ = writeln!(w, "stream = true");
    }
    let _ = writeln!(w, "latency = {:?}", spec.latency);
    let mut faults = Vec::new();
    if !spec.faults.is_empty() {
        let random: Vec<String> = spec
            .faults
            .iter()
            .map(|f| {
                let (whole, hundredths) = (f.percent / 100, f.percent % 100);
                format!("{{ probability = {whole}.{hundredths:02}, {} }}", f.toml)
            })
            .collect();
        faults.push(format!("random = [{}]", random.join(", ")));
    }
    if let Some(h) = &spec.heartbeat {
        faults.push(format!("heartbeat = {h}"));
    }
    if !faults.is_empty() {
        let _ = writeln!(w, "faults = {{ {} }}", faults.join(", "));
    }
}

fn render_link_fault(w: &mut String, k: usize, f: &LinkFault) {
    let delay = if f.kind == "delay" {
        format!(", delay = \"{}ms\"", f.delay_ms)
    } else {
        String::new()
    };
    let _ = writeln!(
        w,
        "\n[[faults]]\nname = \"link{k}\"\nkind = {:?}\nbetween = [{:?}, {:?}]\nat = \"{}ms\"\nfor = \"{}ms\"{}",
        f.kind,
        f.worker,
        f.instance,
        f.at_ms,
        f.for_ms,
        if delay.is_empty() { String::new() } else { format!("\n{}", &delay[2..]) }
    );
}

fn render_load(w: &mut String, k: usize, l: &Load) {
    let (privacy, user) = match &l.private_user {
        Some(user) => ("{ PRIVATE = 1 }", format!("\nuser = {user:?}")),
        None => ("{ PUBLIC = 1 }", String::new()),
    };
    let payers = if l.paid {
        "{ paid = 1 }"
    } else {
        "{ unpaid = 1 }"
    };
    let _ = writeln!(
        w,
        "\n[[workloads]]\nname = \"load{k}\"\ninstances = [{:?}]\ncount = {}\nstart = \"{}ms\"\nover = \"{}ms\"\ntiers = {{ fast = 1, cheap = 1 }}\njob_types = {{ LLM_INFER = 1, TASK = 1 }}\nprivacy = {privacy}\npayers = {payers}{user}\nuntil = \"answered\"",
        l.instance, l.count, l.start_ms, l.over_ms
    );
}

fn render_pairing(w: &mut String, k: usize, p: &Pairing) {
    let _ = writeln!(
        w,
        "\n[[steps]]\nname = \"pair {user} with {worker}\"\nhttp = {{ instance = {instance:?}, method = \"POST\", path = \"/v1/trust/create\", body = {{ user_id = {user:?} }} }}\ncapture = {{ code{k} = \"$.pairing_code\" }}",
        user = p.user,
        worker = p.worker,
        instance = p.instance,
    );
    let _ = writeln!(
        w,
        "\n[[steps]]\nhttp = {{ instance = {instance:?}{node}, method = \"POST\", path = \"/v1/trust/claim\", body = {{ pairing_code = \"{{{{code{k}}}}}\", provider_pubkey = \"{{{{pubkey.{worker}}}}}\" }} }}\nexpect = {{ status = 200 }}",
        instance = p.instance,
        node = node_key(p.claim_node),
        worker = p.worker,
    );
    if let Some(attacker) = &p.overclaim {
        if p.overclaim_restart {
            // A crash between the two claims: the owner's claim, answered
            // 200, must still hold the code after it.
            let _ = writeln!(
                w,
                "\n[[steps]]\ninstance = {{ name = {:?}, action = \"restart\" }}",
                p.instance
            );
        }
        // Read over the owner's shoulder: the code again, for the
        // attacker's worker; `pairing_claimed_twice` judges the answer.
        let _ = writeln!(
            w,
            "\n[[steps]]\nname = \"claim {user}'s code again for {attacker}\"\nhttp = {{ instance = {instance:?}, method = \"POST\", path = \"/v1/trust/claim\", body = {{ pairing_code = \"{{{{code{k}}}}}\", provider_pubkey = \"{{{{pubkey.{attacker}}}}}\" }} }}",
            user = p.user,
            instance = p.instance,
        );
    }
}

/// A pairing with user auth on: the user creates the code with its proof,
/// bound to its worker's key; an attacker may claim it first (refused).
fn render_proven_pairing(w: &mut String, k: usize, p: &Pairing) {
    let _ = writeln!(
        w,
        "\n[[steps]]\nname = \"pair {user} with {worker}\"\nhttp = {{ instance = {instance:?}, method = \"POST\", path = \"/v1/trust/create\", body = {{ user_id = \"{{{{user.{user}}}}}\", provider_pubkey = \"{{{{pubkey.{worker}}}}}\" }}, user_proof = {{ user = {user:?} }} }}\ncapture = {{ code{k} = \"$.pairing_code\" }}",
        user = p.user,
        worker = p.worker,
        instance = p.instance,
    );
    if let Some(attacker) = &p.intercept {
        let _ = writeln!(
            w,
            "\n[[steps]]\nattack = {{ instance = {:?}, kind = \"claim_victim_code\", victim = {:?}, attacker = {ATTACKER:?}, worker = {attacker:?} }}",
            p.instance, p.user
        );
    }
    let _ = writeln!(
        w,
        "\n[[steps]]\nhttp = {{ instance = {instance:?}{node}, method = \"POST\", path = \"/v1/trust/claim\", body = {{ pairing_code = \"{{{{code{k}}}}}\", provider_pubkey = \"{{{{pubkey.{worker}}}}}\" }} }}\nexpect = {{ status = 200 }}",
        instance = p.instance,
        node = node_key(p.claim_node),
        worker = p.worker,
    );
}

/// A PRIVATE commit with user auth on: the user's id and its proof.
fn render_signed_commit(w: &mut String, c: &Commit) {
    let pay = match c.pay {
        None => String::new(),
        Some("none") => ", pay = {}".into(),
        Some(alter) => format!(", pay = {{ alter = {alter:?} }}"),
    };
    let signed = Commit {
        user: format!("{{{{user.{}}}}}", c.user),
        ..c.clone()
    };
    let _ = writeln!(
        w,
        "\n[[steps]]\nhttp = {{ instance = {:?}{}, method = \"POST\", path = \"/v1/jobs/commit/{}\", body = {}, user_proof = {{ user = {:?} }}{pay} }}",
        c.instance,
        node_key(c.node),
        c.tier,
        commit_body(&signed),
        c.user
    );
}

/// An attack; after a pairing attack, the victim's signed PRIVATE commits
/// (the jobs that would reach the attacker's worker had it got through).
fn render_attack(w: &mut String, world: &WorldSpec, a: &AttackEvent) {
    // A paid impostor commits through an ordinary paid `http` step, with
    // no user proof, not through an `attack` step.
    if a.kind == super::paid_impostors::KIND {
        return super::paid_impostors::render(w, a);
    }
    let worker = a
        .worker
        .as_ref()
        .map_or(String::new(), |name| format!(", worker = {name:?}"));
    let edge = (a.replay_edge_ms).map_or(String::new(), |d| format!(", replay_edge_ms = {d}"));
    let expect = if a.worker.is_none() {
        "\nexpect = { body = { refused = true } }"
    } else {
        ""
    };
    let _ = writeln!(
        w,
        "\n[[steps]]\nname = \"attack: {kind} on {victim}\"\nattack = {{ instance = {instance:?}, kind = {kind:?}, victim = {victim:?}, attacker = {ATTACKER:?}{worker}{edge} }}{expect}",
        kind = a.kind,
        victim = a.victim,
        instance = a.instance,
    );
    let paid = world
        .instances
        .iter()
        .any(|i| i.name == a.instance && i.payment.is_some());
    for n in 0..a.commits {
        let c = Commit {
            instance: a.instance,
            tier: "fast",
            job_type: "TASK",
            user: a.victim.clone(),
            private: true,
            pay: paid.then_some("none"),
            index: a.index + n,
            node: 0,
        };
        render_signed_commit(w, &c);
    }
}

fn commit_body(c: &Commit) -> String {
    let privacy = if c.private {
        ", privacy_class = \"PRIVATE\""
    } else {
        ""
    };
    let payload = if c.job_type == "TASK" {
        format!(
            "{{ task_type = \"classify\", input = \"job {}\" }}",
            c.index
        )
    } else {
        format!("{{ prompt = \"job {}\", max_tokens = 8 }}", c.index)
    };
    format!(
        "{{ job_type = {:?}, user_id = {:?}{privacy}, payload = {payload} }}",
        c.job_type, c.user
    )
}

/// A late pairing, a flood or a worker's freeze or thaw.
fn render_user_event(w: &mut String, event: &Event) {
    let _ = match event {
        Event::Pair {
            instance,
            user,
            worker,
            claim_edge_ms,
        } => writeln!(
            w,
            "\n[[steps]]\nname = \"{user} pairs {worker}\"\npair = {{ instance = {instance:?}, user = {user:?}, worker = {worker:?}{} }}",
            claim_edge_ms.map_or(String::new(), |d| format!(", claim_edge_ms = {d}"))
        ),
        Event::Flood(f) => render_flood(w, f),
        Event::Freeze { worker, frozen } => writeln!(
            w,
            "\n[[steps]]\nworker = {{ name = {worker:?}, action = {:?} }}",
            if *frozen { "freeze" } else { "thaw" }
        ),
        Event::SlowHeads(s) => write!(w, "{}", super::slow_heads::render(s)),
        _ => Ok(()),
    };
}

fn render_event(w: &mut String, event: &Event) {
    let _ = match event {
        Event::Commit(c) => render_commit(w, c),
        Event::Replay { .. } | Event::PaidRetry(_) => render_payment_again(w, event),
        Event::StopWorker(name) => writeln!(w, "\n[[steps]]\nworker = {{ name = {name:?}, action = \"stop\" }}"),
        Event::StartWorker(name) => writeln!(w, "\n[[steps]]\nworker = {{ name = {name:?}, action = \"start\" }}"),
        Event::Restart(instance) => writeln!(w, "\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"restart\" }}"),
        Event::GracefulRestart(instance) => writeln!(w, "\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"graceful_restart\" }}"),
        Event::CrashAfter { instance, write } => writeln!(
            w,
            "\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"crash_after\", write = {write:?} }}"
        ),
        Event::Facilitator { instance, script } => {
            writeln!(w, "\n[[steps]]\nfacilitator = {{ instance = {instance:?}, script = {script:?} }}")
        }
        Event::ProviderFault(fault) => {
            let fault = provider_fault(fault);
            writeln!(
                w,
                "\n[[steps]]\nstub = {{ name = \"provider_a\"{fault} }}\n\n[[steps]]\nstub = {{ name = \"provider_b\"{fault} }}"
            )
        }
        Event::Router { index, private } => {
            let privacy = if *private { ", privacy_class = \"PRIVATE\"" } else { "" };
            writeln!(
                w,
                "\n[[steps]]\nrouter = {{ call = \"run_llm\", request = {{ prompt = \"routed {index}\", max_tokens = 8, user_id = \"u0\"{privacy} }} }}"
            )
        }
        Event::NodeCrash { instance, node, down_ms } => writeln!(
            w,
            "\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"crash\", node = {node}, duration_ms = {down_ms} }}"
        ),
        Event::StorePartition { instance, node, for_ms } => writeln!(
            w,
            "\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"partition\", node = {node}, duration_ms = {for_ms} }}"
        ),
        // Rendered by `render_attack`, with the commits that follow it.
        Event::Attack(_) => Ok(()),
        Event::Pair { .. } | Event::Flood(_) | Event::Freeze { .. } | Event::SlowHeads(_) => {
            render_user_event(w, event);
            Ok(())
        }
        Event::Cancel { instance, node } => writeln!(
            w,
            "\n[[steps]]\nname = \"cancel the latest job\"\ncancel = {{ instance = {instance:?}{}, job = \"latest\" }}",
            node_key(*node)
        ),
        Event::Poll {
            instance,
            node,
            hold_ms,
            edge_ms,
        } => writeln!(
            w,
            "\n[[steps]]\nname = \"poll the latest job\"\npoll = {{ instance = {instance:?}{}, job = \"latest\"{}{} }}",
            node_key(*node),
            hold_ms.map_or(String::new(), |ms| format!(", hold_ms = {ms}")),
            edge_ms.map_or(String::new(), |ms| format!(", edge_ms = {ms}"))
        ),
        Event::Read(r) => write!(w, "{}", super::streams::render(r, &node_key(r.node))),
        Event::Hoard(h) => write!(w, "{}", super::poll_hoards::render(h)),
        Event::Garbage(g) => write!(w, "{}", super::garbage::render(g)),
        Event::PairingFlood(f) => write!(w, "{}", super::pairing_floods::render(f)),
        Event::CodeBatch(b) => write!(w, "{}", super::code_batches::render(b)),
        Event::TrustRestart(t) => write!(w, "{}", super::trust_restarts::render(t)),
        Event::RetryAfter(r) => write!(w, "{}", super::retry_afters::render(r)),
        Event::LostAnswer { instance, node } => writeln!(
            w,
            "\n[[steps]]\ninstance = {{ name = {instance:?}, action = \"lose_answer\", node = {node} }}"
        ),
    };
}

/// A commit: an `http` POST to the commit endpoint of its tier.
fn render_commit(w: &mut String, c: &Commit) -> std::fmt::Result {
    let pay = match c.pay {
        None => String::new(),
        Some("none") => ", pay = {}".into(),
        Some(alter) => format!(", pay = {{ alter = {alter:?} }}"),
    };
    writeln!(
        w,
        "\n[[steps]]\nhttp = {{ instance = {:?}{}, method = \"POST\", path = \"/v1/jobs/commit/{}\", body = {}{pay} }}",
        c.instance,
        node_key(c.node),
        c.tier,
        commit_body(c)
    )
}

/// A replay of the last payment header on a new commit.
fn render_replay(
    w: &mut String,
    instance: &'static str,
    node: u32,
    index: u32,
) -> std::fmt::Result {
    let c = Commit {
        instance,
        tier: "cheap",
        job_type: "TASK",
        user: "replayer".into(),
        private: false,
        pay: None,
        index,
        node,
    };
    writeln!(
        w,
        "\n[[steps]]\nname = \"replay the last payment\"\nhttp = {{ instance = {instance:?}{}, method = \"POST\", path = \"/v1/jobs/commit/cheap\", body = {}, headers = {{ \"{{{{last_payment_header}}}}\" = \"{{{{last_payment}}}}\" }} }}",
        node_key(node),
        commit_body(&c)
    )
}

/// A step that sends the last payment header again: a replay or a retry.
fn render_payment_again(w: &mut String, event: &Event) -> std::fmt::Result {
    match event {
        Event::Replay {
            instance,
            node,
            index,
        } => render_replay(w, instance, *node, *index),
        Event::PaidRetry(r) => render_paid_retry(w, r),
        _ => Ok(()),
    }
}

/// A paid commit sent again with the last payment header: the same body,
/// or (`other_prompt`) the same one with another prompt, on its tier.
fn render_paid_retry(w: &mut String, r: &super::paid_retries::Retry) -> std::fmt::Result {
    let c = &r.commit;
    let (name, body) = match r.other_prompt {
        false => ("retry a paid commit", commit_body(c)),
        true => {
            let index = c.index + super::reused_payments::INDEX_OFFSET;
            let other = Commit { index, ..c.clone() };
            ("the last payment with another prompt", commit_body(&other))
        }
    };
    writeln!(
        w,
        "\n[[steps]]\nname = \"{name}\"\nhttp = {{ instance = {:?}{}, method = \"POST\", path = \"/v1/jobs/commit/{}\", body = {body}, headers = {{ \"{{{{last_payment_header}}}}\" = \"{{{{last_payment}}}}\" }} }}",
        c.instance,
        node_key(c.node),
        c.tier,
    )
}

/// `, node = N` for an `http` step to node N > 0 (node 0 is the default).
/// A burst of the flooder's commits, from its own client address.
fn render_flood(w: &mut String, f: &super::floods::FloodEvent) -> std::fmt::Result {
    let flooder = super::floods::FLOODER;
    for k in 0..f.commits {
        let input = format!("flood {} {}", f.index + k, "x".repeat(f.input_bytes));
        writeln!(
            w,
            "\n[[steps]]\nhttp = {{ instance = {:?}, client = {flooder:?}, method = \"POST\", path = \"/v1/jobs/commit/cheap\", body = {{ job_type = \"TASK\", user_id = {flooder:?}, payload = {{ task_type = \"classify\", input = {input:?} }} }} }}",
            f.instance
        )?;
    }
    Ok(())
}

fn node_key(node: u32) -> String {
    match node {
        0 => String::new(),
        n => format!(", node = {n}"),
    }
}

fn provider_fault(fault: &str) -> String {
    match fault {
        "none" => String::new(),
        f => format!(", default_fault = {{ kind = {f:?} }}"),
    }
}

/// The heal: every fault stops (faulty workers leave, honest ones come
/// back, an armed crash is cleared by a restart, facilitator and stubs
/// heal), then enough simulated time for every job to end, then a few new
/// jobs that must complete.
fn render_heal(w: &mut String, world: &WorldSpec) {
    render_heal_faults(w, world);
    let _ = writeln!(w, "\n[[steps]]\nadvance = \"{}ms\"", world.heal_ms());
    if world.heal_commits == 0 {
        return;
    }
    for i in &world.instances {
        let honest = world
            .workers
            .iter()
            .filter(|w| w.instance == i.name && w.honest())
            .count();
        let _ = writeln!(
            w,
            "\n[[steps]]\nname = \"heal: workers_online: every honest worker is back, no other\"\nhttp = {{ instance = {:?}, path = \"/v1/health\" }}\nexpect = {{ status = 200, body = {{ workers_online = {honest} }} }}",
            i.name
        );
    }
    for (k, i) in world.instances.iter().enumerate() {
        for n in 0..world.heal_commits {
            render_heal_commit(w, i, k as u32 * 100 + n);
        }
    }
}

/// The heal's first steps: every fault stops (faulty workers leave,
/// honest ones come back, an armed crash is cleared by a restart,
/// facilitator and stubs heal), and every workload is answered.
fn render_heal_faults(w: &mut String, world: &WorldSpec) {
    let stopped = world.stopped_at_end();
    let _ = writeln!(w, "\n[[steps]]\nname = \"heal\"\nadvance = \"1ms\"");
    for worker in &world.workers {
        let action = match (stopped.contains(&worker.name.as_str()), worker.honest()) {
            (true, true) => "start",
            (false, false) => "stop",
            _ => continue,
        };
        let _ = writeln!(
            w,
            "\n[[steps]]\nworker = {{ name = {:?}, action = \"{action}\" }}",
            worker.name
        );
    }
    for s in world.instances.iter().filter_map(|i| i.sybils) {
        for k in 0..s.count {
            let name = format!("{}-{k}", super::sybils::SYBIL);
            let _ = writeln!(
                w,
                "\n[[steps]]\nworker = {{ name = {name:?}, action = \"stop\" }}"
            );
        }
    }
    for i in &world.instances {
        let armed = world
            .events
            .iter()
            .any(|t| matches!(t.event, Event::CrashAfter { instance, .. } if instance == i.name));
        if armed {
            let _ = writeln!(
                w,
                "\n[[steps]]\ninstance = {{ name = {:?}, action = \"restart\" }}",
                i.name
            );
        }
        let scripted = world
            .events
            .iter()
            .any(|t| matches!(t.event, Event::Facilitator { instance, .. } if instance == i.name));
        if scripted {
            let _ = writeln!(
                w,
                "\n[[steps]]\nfacilitator = {{ instance = {:?}, script = \"success\" }}",
                i.name
            );
        }
    }
    if world
        .events
        .iter()
        .any(|t| matches!(t.event, Event::ProviderFault(_)))
    {
        let _ = writeln!(w, "\n[[steps]]\nstub = {{ name = \"provider_a\" }}\n\n[[steps]]\nstub = {{ name = \"provider_b\" }}");
    }
    for (k, l) in world.loads.iter().enumerate() {
        let _ = writeln!(
            w,
            "\n[[steps]]\nname = \"heal: workload_answered: every commit of load{k} is answered\"\nwait_until = {{ workload = \"load{k}\", within = \"{}ms\" }}",
            l.start_ms + l.over_ms + 60_000
        );
    }
}

/// A PUBLIC job committed after the heal: an honest worker of every job
/// type is online, so it must complete.
fn render_heal_commit(w: &mut String, i: &InstanceSpec, n: u32) {
    let pay = if i.payment.is_some() {
        ", pay = {}"
    } else {
        ""
    };
    let _ = writeln!(
        w,
        "\n[[steps]]\nname = \"heal: heal_job_not_completed: a new job completes\"\nhttp = {{ instance = {:?}, method = \"POST\", path = \"/v1/jobs/commit/fast\", body = {{ job_type = \"TASK\", user_id = \"healer\", payload = {{ task_type = \"classify\", input = \"heal {n}\" }} }}{pay} }}\nexpect = {{ status = 201 }}\ncapture = {{ heal{n} = \"$.job_id\" }}",
        i.name
    );
    let _ = writeln!(
        w,
        "\n[[steps]]\nname = \"heal: heal_job_not_completed: a new job completes\"\nwait_until = {{ instance = {:?}, job = \"{{{{heal{n}}}}}\", status = \"completed\", within = \"30s\" }}",
        i.name
    );
}
