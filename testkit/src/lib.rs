//! Test support shared by the router's tests, worker-sim, the harness, the
//! x402 and coordinator tests and the benches: one copy of every stub, so
//! production libraries ship none.
//!
//! Layout:
//! - [`provider`]: axum stubs of the OpenAI Chat Completions and Anthropic
//!   Messages APIs ([`ProviderStub`]), scriptable faults, recorded calls.
//! - [`facilitator`]: a scriptable x402 facilitator ([`FacilitatorStub`]) and
//!   [`RouterTransport`], the x402 settler's in-process way to reach it.
//! - [`in_process`]: [`InProcessTransport`], the router's `HttpTransport`
//!   into `axum::Router`s by origin, with no sockets.
//! - [`loopback`]: [`serve_loopback`], an axum service on an ephemeral
//!   loopback port, for tests that need real sockets.
//! - [`outputs`]: deterministic job outputs derived from the payload, which
//!   simulated workers and the provider stubs both answer with.
//!
//! Everything waits through `tokio::time` and reads time from an injected
//! clock, so it all runs under the simulation's paused clock.

pub mod facilitator;
pub mod in_process;
pub mod loopback;
pub mod outputs;
pub mod provider;

pub use facilitator::{FacilitatorStub, RouterTransport, StubCall, StubScript};
pub use in_process::InProcessTransport;
pub use loopback::serve_loopback;
pub use provider::{
    ProviderKind, ProviderStub, RecordedCall, StubConfig, StubFault, StubFaultRule,
};
