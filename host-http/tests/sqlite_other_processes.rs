#![cfg(target_os = "linux")]

//! A running server's SQLite file opened by other processes at the same time, as the
//! `provider` commands, `sqlite3` or a backup tool open it: the server keeps SQLite's lock on
//! the file's WAL index (`-shm`) for as long as it runs, so that another process's connection
//! joins the index instead of taking it for abandoned and truncating it under the server.
//! (The server once closed a descriptor of that file after mapping its header, which released
//! the lock; under creates it then died of a SIGBUS when another process opened the file.)

mod binary;

use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use binary::{Running, checkout_server, free_port, provider_create, request};

/// Whether process `pid` holds a POSIX lock on the "DMS" byte (offset 128) of the `-shm` file
/// of `db`, as `/proc/locks` lists it: SQLite's sign to other processes that the file is in
/// use. Read a few times: the kernel lists the locks one `read` at a time and may skip a line
/// when a lock elsewhere goes between two of them.
fn holds_sqlite_lock(pid: u32, db: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mut shm = db.as_os_str().to_owned();
    shm.push("-shm");
    let inode = std::fs::metadata(shm).expect("-shm").ino().to_string();
    let pid = pid.to_string();
    let covers = |start: &str, end: &str| {
        start.parse::<u64>().is_ok_and(|start| start <= 128)
            && (end == "EOF" || end.parse::<u64>().is_ok_and(|end| end >= 128))
    };
    (0..5).any(|_| {
        std::fs::read_to_string("/proc/locks")
            .expect("/proc/locks")
            .lines()
            .map(|line| line.split_whitespace().collect::<Vec<_>>())
            .any(|f| {
                f.len() == 8
                    && f[1] == "POSIX"
                    && f[4] == pid
                    && f[5].rsplit(':').next() == Some(inode.as_str())
                    && covers(f[6], f[7])
            })
    })
}

const BODY: &[u8] =
    br#"{"title":"Trip","currency":"EUR","items":[{"name":"Fee","category":"FEE","price":10}]}"#;

#[test]
fn other_processes_open_the_file_while_the_server_writes() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("checkout.db");
    let authorization = provider_create(&db, "Acme");
    let addr = free_port();
    let mut command = checkout_server();
    command
        .args(["serve", "--listen", &addr.to_string(), "--db"])
        .arg(&db)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut server = Running::start(command, addr);
    let headers = [
        ("Authorization", authorization.as_str()),
        ("Content-Type", "application/json"),
    ];
    assert_eq!(
        request(addr, "POST", "/initialize", &headers, BODY).status,
        201
    );
    assert_eq!(request(addr, "GET", "/status", &headers, b"").status, 200);
    assert!(
        holds_sqlite_lock(server.child.id(), &db),
        "the server holds SQLite's lock on its WAL index"
    );

    // Creates and authenticated reads keep coming while other processes open the file: each
    // reads the WAL index's header, which a truncated file would fault on.
    let stop = Arc::new(AtomicBool::new(false));
    let created = Arc::new(AtomicUsize::new(0));
    let load = {
        let (stop, created, authorization) = (stop.clone(), created.clone(), authorization.clone());
        std::thread::spawn(move || {
            let headers = [
                ("Authorization", authorization.as_str()),
                ("Content-Type", "application/json"),
            ];
            while !stop.load(Ordering::Relaxed) {
                assert_eq!(
                    request(addr, "POST", "/initialize", &headers, BODY).status,
                    201
                );
                assert_eq!(request(addr, "GET", "/status", &headers, b"").status, 200);
                created.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    for n in 0..5 {
        let other = provider_create(&db, &format!("Other {n}"));
        assert_eq!(
            request(addr, "GET", "/status", &[("Authorization", &other)], b"").status,
            200,
            "a provider made by another process is served at once"
        );
    }
    stop.store(true, Ordering::Relaxed);
    load.join().expect("every request answered as expected");
    assert!(created.load(Ordering::Relaxed) > 0);

    assert!(
        server.child.try_wait().expect("try_wait").is_none(),
        "the server still runs"
    );
    assert!(holds_sqlite_lock(server.child.id(), &db));
    assert_eq!(request(addr, "GET", "/status", &headers, b"").status, 200);
    server.stop();
}
