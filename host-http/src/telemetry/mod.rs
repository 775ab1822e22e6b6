//! Telemetry of the server: the log subscriber and where its lines go. Metrics are
//! [`crate::metrics`].

pub mod log_output;
pub mod request_log;

/// Installs the log subscriber: `RUST_LOG` filters, lines on stderr. The default is `info`,
/// except that the PostgreSQL driver's server notices (`relation … already exists, skipping`
/// at every start, from the idempotent schema statements) are left out below `warn`.
pub fn init_logging() {
    let _ = subscriber().with_writer(std::io::stderr).try_init();
}

fn subscriber() -> tracing_subscriber::fmt::SubscriberBuilder<
    tracing_subscriber::fmt::format::DefaultFields,
    tracing_subscriber::fmt::format::Format,
    tracing_subscriber::EnvFilter,
> {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,tokio_postgres=warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
}

/// The server's log: as [`init_logging`], but lines are formatted (`format`) and written by a
/// thread of their own ([`request_log`]): a request hands its line to a queue and never waits,
/// so a slow or busy stderr never holds a request. Other events wait for room in the queue
/// rather than being lost; the guard writes out the queue when the server stops. A stderr that
/// is a file is written out to its disk every few megabytes ([`log_output`]).
pub fn init_server_logging(format: request_log::LogFormat) -> Option<request_log::LogGuard> {
    let (writer, guard) = request_log::start(log_output::LogOutput::stderr(), format);
    let installed = match format {
        request_log::LogFormat::Text => subscriber().with_writer(writer).try_init(),
        request_log::LogFormat::Json => subscriber()
            .json()
            .with_ansi(false)
            .with_writer(writer)
            .try_init(),
    };
    installed.ok().map(|()| guard)
}
