//! Telemetry of the server: the log subscriber and where its lines go. Metrics are
//! [`crate::metrics`].

pub mod log_output;

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

/// The server's log: as [`init_logging`], but request threads only format their line into a
/// queue and a thread of its own writes it to stderr, so that a slow or busy stderr never holds
/// a request. The queue is not lossy (a full queue waits rather than drops a line); the guard
/// flushes it when the server stops. A stderr that is a file is written out to its disk every
/// few megabytes ([`log_output`]).
pub fn init_server_logging() -> Option<tracing_appender::non_blocking::WorkerGuard> {
    let (writer, guard) = tracing_appender::non_blocking::NonBlockingBuilder::default()
        .lossy(false)
        .thread_name("log-writer")
        .finish(log_output::LogOutput::stderr());
    subscriber()
        .with_writer(writer)
        .try_init()
        .ok()
        .map(|()| guard)
}
