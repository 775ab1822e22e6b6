//! Library of the checkout-server host: the HTTP service ([`App`]), its stores (SQLite, the
//! embedded default, and PostgreSQL for several instances on one database), and the provider
//! administration used by the command line.
//!
//! ```no_run
//! # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
//! let db = host_http::store::Db::parse("checkout.db")?;
//! let config = host_http::Config::new("127.0.0.1:0".parse().unwrap(), db);
//! let app = host_http::App::build(config).await?;
//! println!("listening on {}", app.local_addr());
//! app.run().await?;
//! # Ok(())
//! # }
//! ```

pub mod app;
pub mod auth;
pub mod cli;
pub mod events;
pub mod fault;
pub mod http;
pub mod i18n;
pub mod mail;
pub mod metrics;
pub mod processors;
pub mod secrets;
mod startup;
pub mod store;
pub mod telemetry;

pub use startup::{
    App, Config, DEFAULT_FILE_LINK_TTL, DEFAULT_PAYMENT_LINK_TTL, DEFAULT_STALE_CLAIM_AFTER,
    StartupError,
};
