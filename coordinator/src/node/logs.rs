//! Log lines that name the node.

use crate::cluster::NodeId;

/// Log lines that name the node: a text line starts with `node=ID `, a
/// JSON object gets a `"node"` field first.
pub struct NodeLogs<F> {
    pub node: NodeId,
    pub inner: F,
}

impl<S, N, F> tracing_subscriber::fmt::FormatEvent<S, N> for NodeLogs<F>
where
    S: tracing::Subscriber + for<'a> tracing_subscriber::registry::LookupSpan<'a>,
    N: for<'a> tracing_subscriber::fmt::FormatFields<'a> + 'static,
    F: tracing_subscriber::fmt::FormatEvent<S, N>,
{
    fn format_event(
        &self,
        ctx: &tracing_subscriber::fmt::FmtContext<'_, S, N>,
        mut writer: tracing_subscriber::fmt::format::Writer<'_>,
        event: &tracing::Event<'_>,
    ) -> std::fmt::Result {
        let mut line = String::new();
        let into = tracing_subscriber::fmt::format::Writer::new(&mut line);
        self.inner.format_event(ctx, into, event)?;
        match line.strip_prefix('{') {
            Some(rest) => {
                let node = serde_json::to_string(&self.node).map_err(|_| std::fmt::Error)?;
                write!(writer, "{{\"node\":{node},{rest}")
            }
            None => write!(writer, "node={} {line}", self.node),
        }
    }
}
