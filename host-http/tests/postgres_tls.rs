//! TLS to PostgreSQL as libpq makes it (`sslmode`, `sslrootcert` in the `--db` URL), against a
//! PostgreSQL cluster this test starts itself: a certificate authority and a server
//! certificate for `localhost` and `127.0.0.1` made here (rcgen), `initdb` and `pg_ctl` on a
//! spare loopback port in a temporary directory (as the `postgres` user when the test runs as
//! root), `ssl=on`, trust authentication (and one SCRAM user for channel binding). The cluster
//! is stopped by a guard, also when an assertion fails.
//!
//! Needs `CHECKOUT_TEST_PG_URL` like the other PostgreSQL tests (only as the sign that
//! PostgreSQL is installed; the server it names is not used), and the PostgreSQL binaries
//! (`CHECKOUT_TEST_PG_BIN`, or the newest `/usr/lib/postgresql/*/bin`).

mod support;

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use host_http::store::Db;
use hyper::{Method, StatusCode};
use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use serde_json::json;
use support::{Http, Launch, spawn};

/// The PostgreSQL binaries' directory, or `None` when there are none.
fn pg_bin() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("CHECKOUT_TEST_PG_BIN") {
        return Some(PathBuf::from(dir));
    }
    let mut dirs: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let version = entry.file_name().to_str()?.parse().ok()?;
            let bin = entry.path().join("bin");
            bin.join("initdb").is_file().then_some((version, bin))
        })
        .collect();
    dirs.sort();
    dirs.pop().map(|(_, bin)| bin)
}

fn is_root() -> bool {
    Command::new("id")
        .arg("-u")
        .output()
        .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0")
}

/// A PostgreSQL cluster of this test's own, stopped (immediately) when dropped.
struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    as_postgres: bool,
    port: u16,
}

impl Cluster {
    /// A program of the cluster's, run as its owner.
    fn command(&self, program: &str) -> Command {
        let program = self.bin.join(program);
        let mut command = if self.as_postgres {
            let mut command = Command::new("runuser");
            command.args(["-u", "postgres", "--"]).arg(program);
            command
        } else {
            Command::new(program)
        };
        command.current_dir(self.dir.path());
        command
    }

    fn run(&self, program: &str, args: &[&str]) {
        let output = self
            .command(program)
            .args(args)
            .output()
            .unwrap_or_else(|e| panic!("{program}: {e}"));
        assert!(
            output.status.success(),
            "{program} {args:?}: {}{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }

    fn data(&self) -> String {
        self.dir.path().join("data").display().to_string()
    }

    fn path(&self, file: &str) -> String {
        self.dir.path().join(file).display().to_string()
    }

    /// A URL of this cluster: `host` (and `extra` query parameters) as given.
    fn url(&self, user: &str, host: &str, query: &str) -> String {
        format!("postgres://{user}@{host}:{}/postgres?{query}", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let _ = self
            .command("pg_ctl")
            .args(["-D", &self.data(), "stop", "-m", "immediate"])
            .output();
    }
}

/// Writes a PEM file (the key readable by its owner only).
fn write(dir: &Path, name: &str, text: &str) {
    use std::os::unix::fs::PermissionsExt as _;
    let path = dir.join(name);
    std::fs::write(&path, text).expect("write");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

fn new_ca(name: &str) -> CertifiedIssuer<'static, KeyPair> {
    let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
    params.distinguished_name.push(DnType::CommonName, name);
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    CertifiedIssuer::self_signed(params, KeyPair::generate().expect("key")).expect("CA")
}

/// Certificates (ca.pem, other-ca.pem, server.crt, server.key), initdb, configuration, start.
fn start_cluster() -> Cluster {
    assert!(
        std::env::var_os(host_http::store::postgres::testing::TEST_URL_VAR).is_some(),
        "postgres_tls needs PostgreSQL: set {}",
        host_http::store::postgres::testing::TEST_URL_VAR
    );
    let bin = pg_bin().expect(
        "CHECKOUT_TEST_PG_URL is set but no PostgreSQL binaries were found (initdb under \
         /usr/lib/postgresql/*/bin, or set CHECKOUT_TEST_PG_BIN)",
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let as_postgres = is_root();

    let ca = new_ca("checkout test CA");
    let other_ca = new_ca("checkout other CA");
    let mut server = CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()])
        .expect("server params");
    server
        .distinguished_name
        .push(DnType::CommonName, "localhost");
    let server_key = KeyPair::generate().expect("server key");
    let server_cert = server.signed_by(&server_key, &ca).expect("server cert");
    write(dir.path(), "ca.pem", &ca.pem());
    write(dir.path(), "other-ca.pem", &other_ca.pem());
    write(dir.path(), "server.crt", &server_cert.pem());
    write(dir.path(), "server.key", &server_key.serialize_pem());

    let port = TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    if as_postgres {
        // The server runs as postgres: the directory, the certificates and the key are its.
        let status = Command::new("chown")
            .args(["-R", "postgres:postgres"])
            .arg(dir.path())
            .status()
            .expect("chown");
        assert!(status.success(), "chown");
    }
    let cluster = Cluster {
        dir,
        bin,
        as_postgres,
        port,
    };
    cluster.run(
        "initdb",
        &[
            "-D",
            &cluster.data(),
            "-U",
            "postgres",
            "--auth=trust",
            "--no-sync",
            "-E",
            "UTF8",
        ],
    );
    let conf = format!(
        "port = {port}\nlisten_addresses = '127.0.0.1'\nunix_socket_directories = '{dir}'\n\
         ssl = on\nssl_cert_file = '{dir}/server.crt'\nssl_key_file = '{dir}/server.key'\n\
         fsync = off\nmax_connections = 60\n",
        dir = cluster.dir.path().display()
    );
    let conf_path = cluster.dir.path().join("data").join("postgresql.conf");
    let mut text = std::fs::read_to_string(&conf_path).expect("postgresql.conf");
    text.push_str(&conf);
    std::fs::write(&conf_path, text).expect("postgresql.conf");
    // tls_scram: SCRAM over TLS only (channel binding); everyone else trusted, with or without
    // TLS.
    let hba = "local all all trust\n\
               hostssl all tls_scram 127.0.0.1/32 scram-sha-256\n\
               hostnossl all tls_scram 127.0.0.1/32 reject\n\
               hostssl all all 127.0.0.1/32 trust\n\
               hostnossl all all 127.0.0.1/32 trust\n";
    std::fs::write(cluster.dir.path().join("data").join("pg_hba.conf"), hba).expect("pg_hba");
    cluster.run(
        "pg_ctl",
        &[
            "-D",
            &cluster.data(),
            "-l",
            &cluster.path("server.log"),
            "-w",
            "-t",
            "60",
            "start",
        ],
    );
    cluster
}

/// Whether a connection made from `url` by the program's own connector uses TLS.
async fn is_tls(url: &str) -> Result<bool, String> {
    let (client, driver) = host_http::store::postgres::connect(url)
        .await
        .map_err(|e| e.to_string())?;
    let ssl: bool = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .map_err(|e| e.to_string())?
        .get(0);
    drop(client);
    let _ = driver.await;
    Ok(ssl)
}

async fn execute(url: &str, sql: &str) {
    let (client, driver) = host_http::store::postgres::connect(url)
        .await
        .expect("connect");
    client.batch_execute(sql).await.expect(sql);
    drop(client);
    let _ = driver.await;
}

/// `checkout-server migrate --db URL`: its output, for the start-up messages.
fn migrate(url: &str) -> Output {
    Command::new(env!("CARGO_BIN_EXE_checkout-server"))
        .args(["migrate", "--db", url])
        .env("RUST_LOG", "warn")
        .env_remove("CHECKOUT_DB")
        .output()
        .expect("run checkout-server")
}

fn migrate_fails(url: &str, expected: &[&str]) -> String {
    let output = migrate(url);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert!(!output.status.success(), "{url} was accepted: {stderr}");
    for part in expected {
        assert!(stderr.contains(part), "{url}: {part:?} not in: {stderr}");
    }
    eprint!("refused as expected: {stderr}");
    stderr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set CHECKOUT_TEST_PG_URL, run with -- --include-ignored"]
async fn sslmode_and_sslrootcert_are_honoured_as_libpq_does() {
    let cluster = start_cluster();
    let ca = cluster.path("ca.pem");
    let other_ca = cluster.path("other-ca.pem");
    // The certificate names localhost and 127.0.0.1; this name is in neither, and hostaddr
    // sends the connection to 127.0.0.1 all the same (nothing but loopback, no DNS).
    let wrong_host = "not-in-the-certificate.invalid";
    let wrong_host_query = |query: &str| format!("{query}&hostaddr=127.0.0.1");

    // require: TLS, the certificate unchecked.
    assert_eq!(
        is_tls(&cluster.url("postgres", "127.0.0.1", "sslmode=require")).await,
        Ok(true)
    );
    // verify-full with the right CA and a name in the certificate: the DNS name and the IP.
    for host in ["localhost", "127.0.0.1"] {
        let url = cluster.url(
            "postgres",
            host,
            &format!("sslmode=verify-full&sslrootcert={ca}"),
        );
        assert_eq!(is_tls(&url).await, Ok(true), "{url}");
    }
    // verify-full with a name the certificate does not hold: refused, and said so.
    let url = cluster.url(
        "postgres",
        wrong_host,
        &wrong_host_query(&format!("sslmode=verify-full&sslrootcert={ca}")),
    );
    let error = is_tls(&url).await.expect_err("verify-full, wrong name");
    assert!(
        error.contains("name mismatch") && error.contains(wrong_host),
        "{error}"
    );
    // verify-ca with the right CA does not check the name.
    let url = cluster.url(
        "postgres",
        wrong_host,
        &wrong_host_query(&format!("sslmode=verify-ca&sslrootcert={ca}")),
    );
    assert_eq!(is_tls(&url).await, Ok(true));
    // verify-ca (and verify-full, and require with a root file) with the wrong CA: refused.
    for mode in ["verify-ca", "verify-full", "require"] {
        let url = cluster.url(
            "postgres",
            "localhost",
            &format!("sslmode={mode}&sslrootcert={other_ca}"),
        );
        let error = is_tls(&url).await.expect_err("wrong CA");
        assert!(
            error.contains("unknown CA") && error.contains(&other_ca),
            "{mode}: {error}"
        );
    }
    // verify-ca without sslrootcert: the webpki roots, which do not hold the test CA.
    let url = cluster.url("postgres", "localhost", "sslmode=verify-ca");
    let error = is_tls(&url).await.expect_err("webpki roots");
    assert!(error.contains("unknown CA"), "{error}");
    // disable: plain. prefer (and no sslmode): TLS when the server offers it.
    assert_eq!(
        is_tls(&cluster.url("postgres", "127.0.0.1", "sslmode=disable")).await,
        Ok(false)
    );
    assert_eq!(
        is_tls(&cluster.url("postgres", "127.0.0.1", "sslmode=prefer")).await,
        Ok(true)
    );
    assert_eq!(
        is_tls(&format!(
            "postgres://postgres@127.0.0.1:{}/postgres",
            cluster.port
        ))
        .await,
        Ok(true)
    );
    // prefer whose handshake fails (a root file that does not vouch for the server) goes on
    // in plain, as libpq does.
    let url = cluster.url(
        "postgres",
        "localhost",
        &format!("sslmode=prefer&sslrootcert={other_ca}"),
    );
    assert_eq!(is_tls(&url).await, Ok(false));

    // SCRAM with channel binding (tls-server-end-point) required; allow, whose plain attempt
    // pg_hba refuses for this user, retries with TLS.
    execute(
        &cluster.url("postgres", "127.0.0.1", "sslmode=disable"),
        "CREATE ROLE tls_scram LOGIN PASSWORD 'scram-secret'",
    )
    .await;
    let url = cluster.url(
        "tls_scram:scram-secret",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}&channel_binding=require"),
    );
    assert_eq!(is_tls(&url).await, Ok(true));
    let url = cluster.url("tls_scram:scram-secret", "127.0.0.1", "sslmode=allow");
    assert_eq!(is_tls(&url).await, Ok(true));
    assert_eq!(
        is_tls(&cluster.url("postgres", "127.0.0.1", "sslmode=allow")).await,
        Ok(false)
    );

    // The command line: migrate over verify-full; operator mistakes said clearly at start-up,
    // never with the password.
    let url = cluster.url(
        "postgres",
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let output = migrate(&url);
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let stderr = migrate_fails(
        &cluster.url(
            "tls_scram:scram-secret",
            wrong_host,
            &wrong_host_query(&format!("sslmode=verify-full&sslrootcert={ca}")),
        ),
        &["name mismatch", wrong_host, "TLS"],
    );
    assert!(!stderr.contains("scram-secret"), "{stderr}");
    migrate_fails(
        &cluster.url(
            "postgres",
            "localhost",
            &format!("sslmode=verify-ca&sslrootcert={other_ca}"),
        ),
        &["unknown CA", "other-ca.pem"],
    );
    migrate_fails(
        &cluster.url("postgres", "localhost", "sslmode=verify"),
        &["invalid sslmode \"verify\""],
    );
    migrate_fails(
        &cluster.url(
            "postgres",
            "localhost",
            "sslmode=verify-full&sslrootcert=/nonexistent/root.pem",
        ),
        &["/nonexistent/root.pem", "cannot be read"],
    );

    // End to end: a server on verify-full, a provider made by the admin path, one request; every
    // pooled connection of the server is TLS.
    let issued = support::acme_provider(&Db::Postgres(url.clone()));
    let server = spawn(&Launch {
        db: &url,
        ..Launch::default()
    });
    let http = Http::new(&issued.widget_id, &issued.backend_secret);
    http.wait_ready(server.addr).await;
    let (status, body) = http
        .send(
            server.addr,
            Method::POST,
            "/initialize",
            Some(json!({
                "title": "TLS",
                "currency": "EUR",
                "items": [{"name": "Fee", "category": "FEE", "price": 10}],
            })),
        )
        .await
        .expect("initialize");
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (client, driver) = host_http::store::postgres::connect(&url)
        .await
        .expect("connect");
    let row = client
        .query_one(
            "SELECT count(*), bool_and(s.ssl) FROM pg_stat_activity a \
             JOIN pg_stat_ssl s USING (pid) WHERE a.application_name = 'checkout-server'",
            &[],
        )
        .await
        .expect("pg_stat_ssl");
    let (count, all_tls): (i64, Option<bool>) = (row.get(0), row.get(1));
    assert!(count > 0 && all_tls == Some(true), "{count} {all_tls:?}");
    drop(client);
    let _ = driver.await;
    drop(server);

    // A server that stops offering TLS: prefer goes on in plain, require refuses.
    let admin = cluster.url("postgres", "127.0.0.1", "sslmode=disable");
    execute(&admin, "ALTER SYSTEM SET ssl = off").await;
    execute(&admin, "SELECT pg_reload_conf()").await;
    let plain = cluster.url("postgres", "127.0.0.1", "sslmode=prefer");
    for _ in 0..50 {
        if is_tls(&plain).await == Ok(false) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(is_tls(&plain).await, Ok(false));
    let error = is_tls(&cluster.url("postgres", "127.0.0.1", "sslmode=require"))
        .await
        .expect_err("require without TLS");
    assert!(error.contains("TLS"), "{error}");
}
