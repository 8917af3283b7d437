//! The fixed peer names a scenario may use, written once: the checker, the
//! loader's defaults and the world all read them from here.

/// The coordinator instances a scenario can declare.
pub const INSTANCE_NAMES: [&str; 2] = ["chain_a", "chain_b"];

/// The hosted-provider stubs a scenario can name (the router's two routes).
pub const STUB_NAMES: [&str; 2] = ["provider_a", "provider_b"];

/// The instance a step or worker addresses when it names none.
pub const DEFAULT_INSTANCE: &str = INSTANCE_NAMES[0];

/// [`DEFAULT_INSTANCE`] as a serde default.
pub fn chain_a() -> String {
    DEFAULT_INSTANCE.into()
}
