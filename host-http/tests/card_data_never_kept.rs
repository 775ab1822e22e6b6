//! Card numbers and CVCs typed into the payment page reach neither the server's log (at
//! `RUST_LOG=debug`) nor its database file, whatever the outcome: a field error, a declined
//! card, a payment. Through the real binary, on SQLite, whose file is read byte by byte.

mod binary;

use std::process::Stdio;

use binary::{Running, checkout_server, free_port, provider_create, request};

/// The CVC of every attempt: four digits, looked for as a token of its own (see [`holds_cvc`]).
const CVC: &str = "7391";

/// The card numbers typed, as typed and as the form sends them.
const CARDS: [(&str, u16); 3] = [
    // Fails the Luhn check: a field error.
    ("4242 4242 4242 4241", 422),
    // The sandbox's declined card.
    ("4000 0000 0000 0002", 402),
    // The sandbox's good card: paid, then the confirmation (303).
    ("4242 4242 4242 4242", 303),
];

/// Whether `haystack` holds `CVC` as a value of its own: not inside a longer run of letters,
/// digits, `-` or `_` (which random identifiers, hashes and timestamps are made of).
fn holds_cvc(haystack: &[u8]) -> bool {
    let part_of_a_word = |b: u8| b.is_ascii_alphanumeric() || b == b'-' || b == b'_';
    haystack.windows(CVC.len()).enumerate().any(|(at, window)| {
        window == CVC.as_bytes()
            && (at == 0 || !part_of_a_word(haystack[at - 1]))
            && haystack
                .get(at + CVC.len())
                .is_none_or(|&b| !part_of_a_word(b))
    })
}

/// Every way a card number could be written down: as typed, its digits alone, and
/// form-encoded.
fn spellings(card: &str) -> Vec<String> {
    vec![
        card.to_owned(),
        card.replace(' ', ""),
        card.replace(' ', "+"),
        card.replace(' ', "%20"),
    ]
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

fn form_token(page: &str) -> String {
    let marker = "name=\"form_token\" value=\"";
    let start = page.find(marker).expect("a form token") + marker.len();
    page[start..].split('"').next().expect("quote").to_owned()
}

#[test]
fn card_numbers_and_cvcs_are_never_logged_or_stored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let db = dir.path().join("checkout.db");
    let authorization = provider_create(&db, "Acme");

    let log_path = dir.path().join("server.log");
    let log = std::fs::File::create(&log_path).expect("log file");
    let addr = free_port();
    let mut command = checkout_server();
    command
        .args(["serve", "--sandbox", "--listen", &addr.to_string(), "--db"])
        .arg(&db)
        .env("RUST_LOG", "debug")
        .stdout(Stdio::null())
        .stderr(log);
    let server = Running::start(command, addr);

    let answer = request(
        addr,
        "POST",
        "/initialize",
        &[
            ("Authorization", &authorization),
            ("Content-Type", "application/json"),
        ],
        br#"{"title":"Trip","currency":"EUR","items":[{"name":"Fee","category":"FEE","price":10}]}"#,
    );
    assert_eq!(answer.status, 201, "{}", answer.body);
    let id = answer.json()["transactionId"]
        .as_str()
        .expect("id")
        .to_owned();
    let url = answer.json()["paymentUrl"]
        .as_str()
        .expect("paymentUrl")
        .to_owned();
    let path = url
        .strip_prefix(&format!("http://{addr}"))
        .expect("a link to this server")
        .to_owned();
    let mut page = request(addr, "GET", &path, &[], b"").body;
    for (card, status) in CARDS {
        let form = form_urlencoded::Serializer::new(String::new())
            .append_pair("form_token", &form_token(&page))
            .append_pair("name_on_card", "Ada Lovelace")
            .append_pair("card_number", card)
            .append_pair("expiry", "12/34")
            .append_pair("cvc", CVC)
            .append_pair("first_name", "Ada")
            .append_pair("last_name", "Lovelace")
            .append_pair("email", "ada@example.com")
            .finish();
        let answer = request(
            addr,
            "POST",
            &path,
            &[("Content-Type", "application/x-www-form-urlencoded")],
            form.as_bytes(),
        );
        assert_eq!(answer.status, status, "{card}: {}", answer.body);
        if status != 303 {
            page = answer.body;
        }
    }
    let record = request(
        addr,
        "GET",
        &format!("/status/{id}"),
        &[("Authorization", &authorization)],
        b"",
    )
    .json();
    assert_eq!(record["status"], "PAID");
    assert_eq!(record["checkout"]["card"]["last4"], "4242");
    // Stopped with SIGTERM: the log is flushed and the database closed (its WAL checkpointed).
    server.stop();

    let log = std::fs::read(&log_path).expect("the log");
    let text = String::from_utf8_lossy(&log);
    assert!(
        text.contains(" DEBUG "),
        "the server logged at debug:\n{text}"
    );
    assert!(
        text.contains("/initialize"),
        "the requests are in the log:\n{text}"
    );
    let mut files: Vec<(String, Vec<u8>)> = vec![("the log".to_owned(), log)];
    for entry in std::fs::read_dir(dir.path()).expect("read_dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name().to_string_lossy().into_owned();
        // checkout.db and whatever SQLite keeps beside it (-wal, -shm, -journal).
        if name.starts_with("checkout.db") {
            files.push((name, std::fs::read(entry.path()).expect("read")));
        }
    }
    let database: Vec<u8> = files[1..].iter().flat_map(|(_, b)| b.clone()).collect();
    assert!(
        contains(&database, "ada@example.com") && contains(&database, "4242"),
        "the database files are read, with what the payment stored (e-mail, last four digits)"
    );
    for (name, bytes) in &files {
        for (card, _) in CARDS {
            for spelling in spellings(card) {
                assert!(!contains(bytes, &spelling), "{name} holds {spelling:?}");
            }
        }
        assert!(!holds_cvc(bytes), "{name} holds the CVC {CVC}");
    }
}
