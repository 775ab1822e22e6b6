//! Throw-away PostgreSQL databases for tests (feature `test-support`): each test gets a fresh
//! database on the server named by `CHECKOUT_TEST_PG_URL`, dropped when the handle is dropped.
//! Tests that need PostgreSQL are `#[ignore]`d (so that a run without a server says how many
//! it left out); run with `-- --include-ignored` where the variable names a server. Run without
//! it, they fail and say what to set.

/// The environment variable naming the PostgreSQL server of the tests, as a URL of a database
/// the tests may connect to in order to create others, e.g.
/// `postgres://postgres@127.0.0.1:5432/postgres`.
pub const TEST_URL_VAR: &str = "CHECKOUT_TEST_PG_URL";

/// A fresh database, dropped (with its connections) when this is dropped.
#[derive(Debug)]
pub struct TestDatabase {
    admin_url: String,
    name: String,
    url: String,
}

/// The URL of `url` with its database name replaced by `name`.
fn with_database(url: &str, name: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let scheme_end = base.find("://").map_or(0, |i| i + 3);
    let host_part = match base[scheme_end..].find('/') {
        Some(slash) => &base[..scheme_end + slash],
        None => base,
    };
    format!("{host_part}/{name}{query}")
}

/// Runs a future on a runtime of its own thread, so that both synchronous code and code inside
/// a runtime (a `Drop` in an async test) can wait for it.
fn block_on<T: Send>(future: impl Future<Output = T> + Send) -> T {
    std::thread::scope(|scope| {
        scope
            .spawn(|| {
                tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("test runtime")
                    .block_on(future)
            })
            .join()
            .expect("test database thread")
    })
}

async fn execute(url: &str, sql: &str) -> Result<(), crate::store::StoreError> {
    let (client, driver) = super::connect(url).await?;
    let result = client.batch_execute(sql).await;
    drop(client);
    let _ = driver.await;
    Ok(result?)
}

impl TestDatabase {
    /// A fresh, empty database for the test named `test`. Panics, saying what to set, when
    /// `CHECKOUT_TEST_PG_URL` is unset: a test that needs PostgreSQL is `#[ignore]`d, and one
    /// asked for with `--include-ignored` must not pass without having run.
    pub fn create(test: &str) -> TestDatabase {
        let admin_url = std::env::var(TEST_URL_VAR).unwrap_or_else(|_| {
            panic!(
                "{test} needs PostgreSQL: set {TEST_URL_VAR} (for example \
                 postgres://postgres@127.0.0.1:5432/postgres)"
            )
        });
        let name = format!("checkout_test_{}", uuid::Uuid::new_v4().simple());
        let sql = format!("CREATE DATABASE {name}");
        block_on(execute(&admin_url, &sql))
            .unwrap_or_else(|e| panic!("creating test database on {admin_url}: {e}"));
        let url = with_database(&admin_url, &name);
        TestDatabase {
            admin_url,
            name,
            url,
        }
    }

    /// The URL of this database.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// Runs SQL on this database (for checks and for killing connections).
    pub fn execute(&self, sql: &str) {
        block_on(execute(&self.url, sql)).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }

    /// Refuses (and cuts) or allows again every connection to this database, as a database that
    /// goes down and comes back would.
    pub fn allow_connections(&self, allowed: bool) {
        let alter = format!("ALTER DATABASE {} ALLOW_CONNECTIONS {allowed}", self.name);
        block_on(execute(&self.admin_url, &alter)).unwrap_or_else(|e| panic!("{alter}: {e}"));
        if !allowed {
            // Only once the ALTER has committed (a batch of statements would be one transaction,
            // letting a pool reconnect while it waits), and waiting up to 5 s for each backend
            // to exit: a backend still alive would go on serving its pooled connection.
            let terminate = format!(
                "SELECT pg_terminate_backend(pid, 5000) FROM pg_stat_activity WHERE datname = '{}'",
                self.name
            );
            block_on(execute(&self.admin_url, &terminate))
                .unwrap_or_else(|e| panic!("{terminate}: {e}"));
        }
    }

    /// The rows of a query, every column read as text.
    pub fn query(&self, sql: &str) -> Vec<Vec<Option<String>>> {
        block_on(async {
            let (client, driver) = super::connect(&self.url).await?;
            let messages = client.simple_query(sql).await;
            drop(client);
            let _ = driver.await;
            Ok::<_, crate::store::StoreError>(messages?)
        })
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|message| match message {
            tokio_postgres::SimpleQueryMessage::Row(row) => Some(
                (0..row.len())
                    .map(|i| row.get(i).map(str::to_owned))
                    .collect(),
            ),
            _ => None,
        })
        .collect()
    }
}

impl Drop for TestDatabase {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if let Err(error) = block_on(execute(&self.admin_url, &sql)) {
            eprintln!("could not drop test database {}: {error}", self.name);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::with_database;

    #[test]
    fn the_database_name_is_replaced() {
        assert_eq!(
            with_database("postgres://root@127.0.0.1:5432/test", "x"),
            "postgres://root@127.0.0.1:5432/x"
        );
        assert_eq!(
            with_database("postgresql://u:p@h/db?application_name=a", "x"),
            "postgresql://u:p@h/x?application_name=a"
        );
        assert_eq!(with_database("postgres://h", "x"), "postgres://h/x");
    }
}
