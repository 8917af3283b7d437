//! Expressions inside scenario values: `{{var | filter}}` templates, the
//! matchers expected values use (`any_uuid`, `regex`, ...), captures' paths,
//! and the one duration syntax. Pure functions over JSON; nothing of the run.

pub mod duration;
pub mod matcher;
pub mod template;

/// An expression that does not parse, or does not evaluate. The message is
/// what `harness check`, a load error or a failed step shows.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ExprError {
    /// `{{text}}: what is wrong with it`.
    #[error("{{{{{text}}}}}: {problem}")]
    Template { text: String, problem: String },
    #[error("unclosed {{{{ in {0:?}")]
    Unclosed(String),
    /// The expression, as written.
    #[error("unknown variable {0}")]
    UnknownVariable(String),
    /// A filter that cannot apply to its value: `{{expr}}: why`.
    #[error("{expr}: {problem}")]
    Filter { expr: String, problem: String },
    #[error("{0:?} is not a duration")]
    NotADuration(String),
    #[error("{0:?}: unit must be ms, s, m or h")]
    DurationUnit(String),
}

/// The layers above still report text.
impl From<ExprError> for String {
    fn from(e: ExprError) -> Self {
        e.to_string()
    }
}
