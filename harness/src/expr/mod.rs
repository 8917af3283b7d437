//! Expressions inside scenario values: `{{var | filter}}` templates, the
//! matchers expected values use (`any_uuid`, `regex`, ...), captures' paths,
//! and the one duration syntax. Pure functions over JSON; nothing of the run.

pub mod duration;
pub mod matcher;
pub mod template;
