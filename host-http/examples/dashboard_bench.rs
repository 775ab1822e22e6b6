//! Benchmark of the provider dashboard's transaction list (issue 24: p99 under 100 ms with one
//! million transactions in the store, on both stores). Run by `scripts/dashboard-bench.sh`,
//! which creates the first transaction through the real server; figures go to
//! `docs/PERFORMANCE.md`.
//!
//! ```text
//! dashboard_bench seed  --db DB --provider ID [--count 1000000] [--other-count 100000]
//! dashboard_bench time  --db DB --provider ID [--calls 300] [--budget-secs 30]
//! dashboard_bench plans --db DB --provider ID
//! ```
//!
//! `seed` copies the provider's newest transaction (made by `POST /initialize`) `--count` times
//! in SQL, in one statement (a recursive CTE on SQLite, `generate_series` on PostgreSQL), with
//! varied ids, references, titles, statuses, currencies, customers and creation instants spread
//! over two years before the template; then a second provider with `--other-count` rows
//! interleaved in the same two years. `time` calls `DashboardStore::list_transactions` (the
//! store the server uses, with its default pool) for each scenario and prints p50/p95/p99/max.
//! `plans` prints each scenario's query plan: `EXPLAIN QUERY PLAN` on SQLite,
//! `EXPLAIN (ANALYZE, BUFFERS)` on PostgreSQL, of the statement the store builds
//! (`list_statement` of each store), with its values.

use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use host_http::store::dashboard::TransactionFilter;
use host_http::store::{Db, PoolSettings};

/// Rows of a page: the dashboard's `PAGE_SIZE` (50) plus one to know whether a next page exists.
const LIMIT: u32 = 51;
/// The second provider's id (made by `seed`).
const OTHER_PROVIDER: &str = "prv_dashboard_bench_other";
/// Two years, in milliseconds.
const SPAN_MS: i64 = 730 * 86_400 * 1_000;

const PURPOSES: &[&str] = &[
    "Sales visit",
    "Team offsite",
    "Customer workshop",
    "Trade fair",
    "Board meeting",
    "Training course",
    "Project kick-off",
    "Site inspection",
];
const CITIES: &[&str] = &[
    "Berlin",
    "Lisbon",
    "Madrid",
    "Paris",
    "Vienna",
    "Zurich",
    "Prague",
    "Warsaw",
    "Oslo",
    "Helsinki",
    "Dublin",
    "Brussels",
    "Amsterdam",
    "Copenhagen",
    "Stockholm",
    "Milan",
    "Rome",
    "Barcelona",
    "Munich",
    "Hamburg",
    "Frankfurt",
    "Cologne",
    "Lyon",
    "Marseille",
    "Porto",
    "Seville",
    "Valencia",
    "Athens",
    "Budapest",
    "Bucharest",
    "Sofia",
    "Zagreb",
    "Ljubljana",
    "Bratislava",
    "Tallinn",
    "Riga",
    "Vilnius",
    "Edinburgh",
    "Manchester",
    "Luxembourg",
];
const FIRST_NAMES: &[&str] = &[
    "anna", "ben", "clara", "david", "eva", "felix", "greta", "hugo", "ines", "jonas", "karla",
    "lukas", "mia", "noah", "olga", "paul", "rosa", "simon", "tara", "viktor",
];
const LAST_NAMES: &[&str] = &[
    "weber",
    "fischer",
    "schmidt",
    "meyer",
    "wagner",
    "becker",
    "hoffmann",
    "koch",
    "richter",
    "klein",
    "wolf",
    "neumann",
    "schwarz",
    "zimmermann",
    "braun",
    "krueger",
    "hartmann",
    "lange",
    "werner",
    "krause",
    "lehmann",
    "koehler",
    "maier",
    "roth",
    "vogel",
];
const DOMAINS: &[&str] = &[
    "acme-travel.example",
    "globex.example",
    "initech.example",
    "umbrella.example",
    "hooli.example",
];
/// Distinct customers: each pays about 140 of the million transactions.
const CUSTOMERS: i64 = 5_000;

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    if let Err(message) = run().await {
        eprintln!("dashboard_bench: {message}");
        std::process::exit(1);
    }
}

struct Args {
    command: String,
    db: String,
    provider: String,
    count: i64,
    other_count: i64,
    calls: usize,
    budget: Duration,
    statement_timeout_ms: u64,
}

fn args() -> Result<Args, String> {
    let mut raw = std::env::args().skip(1);
    let command = raw
        .next()
        .ok_or("usage: dashboard_bench seed|time|plans --db DB --provider ID")?;
    let mut args = Args {
        command,
        db: String::new(),
        provider: String::new(),
        count: 1_000_000,
        other_count: 100_000,
        calls: 300,
        budget: Duration::from_secs(30),
        statement_timeout_ms: 0,
    };
    while let Some(flag) = raw.next() {
        let value = raw.next().ok_or(format!("{flag} needs a value"))?;
        let number = || value.parse::<u64>().map_err(|e| format!("{flag}: {e}"));
        match flag.as_str() {
            "--db" => args.db = value.clone(),
            "--provider" => args.provider = value.clone(),
            "--count" => args.count = i64::try_from(number()?).map_err(|e| e.to_string())?,
            "--other-count" => {
                args.other_count = i64::try_from(number()?).map_err(|e| e.to_string())?;
            }
            "--calls" => args.calls = usize::try_from(number()?).map_err(|e| e.to_string())?,
            "--budget-secs" => args.budget = Duration::from_secs(number()?),
            "--statement-timeout-ms" => args.statement_timeout_ms = number()?,
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if args.db.is_empty() || args.provider.is_empty() {
        return Err("--db and --provider are required".to_owned());
    }
    Ok(args)
}

async fn run() -> Result<(), String> {
    let args = args()?;
    let db = Db::parse(&args.db).map_err(|e| e.to_string())?;
    match args.command.as_str() {
        "seed" => seed(&db, &args).await,
        "time" => time(&db, &args).await,
        "plans" => plans(&db, &args).await,
        other => Err(format!("unknown command {other} (seed, time, plans)")),
    }
}

// ---------------------------------------------------------------------------------------------
// Seeding

/// `CASE <expr> WHEN 0 THEN 'a' WHEN 1 THEN 'b' … END`: a word list in SQL both stores read.
fn pick(expr: &str, words: &[&str]) -> String {
    let mut sql = format!("(CASE ({expr})");
    for (index, word) in words.iter().enumerate() {
        sql.push_str(&format!(" WHEN {index} THEN '{word}'"));
    }
    sql.push_str(" END)");
    sql
}

/// The expressions of one seeded row, over `i` (0 = oldest) and `h` (a hash of `i`), in SQL
/// common to both stores. `tag` keeps the two providers' ids and references apart.
struct RowSql {
    status: String,
    currency: String,
    title: String,
    email: String,
    reference: String,
}

fn row_sql(tag: i64) -> RowSql {
    // h: a multiplicative hash of i, 32 bits; c: the customer, from another hash.
    let status = "(CASE WHEN h % 100 < 30 THEN 'PENDING' WHEN h % 100 < 80 THEN 'PAID' \
                  WHEN h % 100 < 85 THEN 'PARTIALLY_CANCELLED' ELSE 'CANCELLED' END)"
        .to_owned();
    let currency =
        "(CASE WHEN (h / 100) % 10 < 6 THEN 'EUR' WHEN (h / 100) % 10 < 9 THEN 'USD' ELSE 'GBP' END)"
            .to_owned();
    // The second provider's titles start with a word the first's never hold.
    let title = format!(
        "{}{} || ' ' || {} || ': flight and ' || ((h / 40000) % 9 + 1) || ' nights'",
        if tag == 0 { "" } else { "'Charter ' || " },
        pick(&format!("(h / 1000) % {}", PURPOSES.len()), PURPOSES),
        pick(&format!("(h / 8000) % {}", CITIES.len()), CITIES),
    );
    let email = format!(
        "{} || '.' || {} || '.' || c || '@' || {}",
        pick(&format!("c % {}", FIRST_NAMES.len()), FIRST_NAMES),
        pick(
            &format!("(c / {}) % {}", FIRST_NAMES.len(), LAST_NAMES.len()),
            LAST_NAMES
        ),
        pick(&format!("c % {}", DOMAINS.len()), DOMAINS),
    );
    // Eight characters of Crockford's base 32 from a bijection of i (odd multiplier modulo
    // 2^40): unique within a provider; the tag's top bit keeps providers apart.
    let alphabet = "'0123456789ABCDEFGHJKMNPQRSTVWXYZ'";
    let mut reference = "'CHK-'".to_owned();
    for shift in (0..8).rev() {
        reference.push_str(&format!(
            " || substr({alphabet}, (((r >> {}) & 31) + 1)::INT, 1)",
            5 * shift
        ));
    }
    let reference = reference.replace(
        "r >>",
        &format!(
            "(((i * 1099511627) % 549755813888) + {}) >>",
            tag * 549_755_813_888
        ),
    );
    RowSql {
        status,
        currency,
        title,
        email,
        reference,
    }
}

/// The payment details of a paid row, as the payment page stores them.
fn payment_sql(email: &str) -> String {
    format!(
        "'{{\"payment\":{{\"reference\":\"pay_' || i || '\",\"provider\":\"sandbox\"}},\
         \"customer\":{{\"firstName\":\"Alex\",\"lastName\":\"Example\",\"email\":\"' || {email} || '\"}},\
         \"beneficiary\":{{\"firstName\":\"Alex\",\"lastName\":\"Example\",\"email\":\"' || {email} || '\"}},\
         \"billing\":{{\"name\":\"Alex Example\",\"email\":\"' || {email} || '\"}},\
         \"card\":{{\"brand\":\"visa\",\"last4\":\"4242\",\"expMonth\":12,\"expYear\":2030}}}}'"
    )
}

async fn seed(db: &Db, args: &Args) -> Result<(), String> {
    // The database exists already, migrated: the script made it with the server.
    match db {
        Db::Sqlite(path) => seed_sqlite(path, args),
        Db::Postgres(url) => seed_postgres(url, args).await,
    }
}

fn seed_sqlite(path: &std::path::Path, args: &Args) -> Result<(), String> {
    use rusqlite::{Connection, params};
    let err = |e: rusqlite::Error| e.to_string();
    let conn = Connection::open(path).map_err(err)?;
    // The one connection: no WAL while a few GB go in, no fsync; WAL again at the end.
    conn.pragma_update(None, "journal_mode", "DELETE")
        .map_err(err)?;
    conn.pragma_update(None, "synchronous", "OFF")
        .map_err(err)?;
    conn.pragma_update(None, "cache_size", -262_144)
        .map_err(err)?;
    let (template, created): (String, String) = conn
        .query_row(
            "SELECT id, created_at FROM transactions WHERE provider_id = ?1 \
             ORDER BY created_at DESC LIMIT 1",
            [&args.provider],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .map_err(|e| format!("no transaction of {} to copy: {e}", args.provider))?;
    let end_ms = DateTime::parse_from_rfc3339(&created)
        .map_err(|e| e.to_string())?
        .timestamp_millis();
    let start_ms = end_ms - SPAN_MS;
    let now = host_http::store::format_instant(Utc::now());
    conn.execute(
        "INSERT OR IGNORE INTO providers (id, name, created_at) VALUES (?1, 'Bench other', ?2)",
        params![OTHER_PROVIDER, now],
    )
    .map_err(err)?;
    for (provider, count, tag) in [
        (args.provider.as_str(), args.count, 0),
        (OTHER_PROVIDER, args.other_count, 1),
    ] {
        if count == 0 {
            continue;
        }
        let started = Instant::now();
        let row = row_sql(tag);
        let reference = row.reference.replace("::INT", "");
        let email = row.email;
        let payment = payment_sql("v.cust_email");
        // ms: creation instant in milliseconds, increasing with i (a step of SPAN/count plus
        // under a second of jitter); the id is a UUID v7 of that instant.
        let sql = format!(
            "WITH RECURSIVE n(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM n WHERE i < ?1 - 1), \
             k AS (SELECT i, (i * 2654435761) % 4294967296 AS h, \
                          ((i * 48271) % 2147483647) % {CUSTOMERS} AS c, \
                          ?2 + i * (({SPAN_MS}) / ?1) + ((i * 2654435761) % 4294967296) % 997 AS ms \
                   FROM n), \
             v AS (SELECT i, h, c, ms, {status} AS status, {email} AS cust_email FROM k) \
             INSERT INTO transactions (rowid, id, provider_id, reference, status, title, \
                 currency, ref_ids, note, attachments, email, payload, time_zone, total, \
                 paid_amount, refunded_amount, paid_at, payment, created_at, updated_at, \
                 pay_token_hash, pay_expires_at) \
             SELECT ?5 + 1 + v.i, \
                    printf('%08x-%04x-7%03x-%04x-%012x', ms >> 16, ms & 65535, h & 4095, \
                        32768 + (h >> 20) % 16384, ?4 * 1099511627776 + i), \
                    ?3, {reference}, v.status, {title}, {currency}, \
                    t.ref_ids, t.note, t.attachments, t.email, t.payload, t.time_zone, t.total, \
                    CASE WHEN v.status = 'PENDING' THEN NULL ELSE t.total END, \
                    CASE v.status WHEN 'CANCELLED' THEN t.total \
                                  WHEN 'PARTIALLY_CANCELLED' THEN '10' ELSE '0' END, \
                    CASE WHEN v.status = 'PENDING' THEN NULL ELSE {paid_at} END, \
                    CASE WHEN v.status = 'PENDING' THEN NULL ELSE {payment} END, \
                    {created_at}, {created_at}, \
                    CASE WHEN v.status = 'PENDING' THEN randomblob(32) END, \
                    CASE WHEN v.status = 'PENDING' THEN {created_at} END \
             FROM v, bench_template t",
            status = row.status,
            currency = row.currency,
            title = row.title,
            paid_at = instant_sqlite("ms + 600000"),
            created_at = instant_sqlite("ms"),
        );
        conn.execute_batch("BEGIN").map_err(err)?;
        // The template in a table of its own: SQLite would otherwise copy every selected row
        // to a temporary table before inserting into the table it reads.
        conn.execute(
            "CREATE TEMP TABLE bench_template AS SELECT * FROM transactions WHERE id = ?1",
            [&template],
        )
        .map_err(err)?;
        // The rows' rowids are their search keys, the next ones of the provider's range
        // (migration 26), as the writer gives them.
        let last_key: i64 = conn
            .query_row(
                "SELECT coalesce( \
                     (SELECT t.rowid FROM transactions t \
                      WHERE t.rowid > n.number * 1099511627776 \
                        AND t.rowid < (n.number + 1) * 1099511627776 \
                      ORDER BY t.rowid DESC LIMIT 1), \
                     n.number * 1099511627776) \
                 FROM search_providers n WHERE n.provider_id = ?1",
                [provider],
                |r| r.get(0),
            )
            .map_err(err)?;
        let inserted = conn
            .execute(&sql, params![count, start_ms, provider, tag, last_key])
            .map_err(err)?;
        conn.execute_batch("DROP TABLE bench_template; COMMIT")
            .map_err(err)?;
        println!(
            "seeded {inserted} transactions of {provider} in {} s",
            started.elapsed().as_secs()
        );
    }
    conn.pragma_update(None, "journal_mode", "WAL")
        .map_err(err)?;
    drop(conn);
    // The triggers noted every row for the search index; the server's indexer takes the notes
    // 512 at a time every 50 ms. The same, in one step.
    let indexing = Instant::now();
    let indexed = host_http::store::sqlite::index_search(path).map_err(|e| e.to_string())?;
    println!(
        "indexed {indexed} for search in {} s",
        indexing.elapsed().as_secs()
    );
    Ok(())
}

/// An instant in milliseconds as `format_instant` writes it (microseconds, `Z`).
fn instant_sqlite(ms: &str) -> String {
    format!(
        "(strftime('%Y-%m-%dT%H:%M:%S', ({ms}) / 1000, 'unixepoch') || '.' || \
         printf('%06d', (({ms}) % 1000) * 1000) || 'Z')"
    )
}

async fn seed_postgres(url: &str, args: &Args) -> Result<(), String> {
    let client = pg_connect(url).await?;
    let err = |e: tokio_postgres::Error| match e.as_db_error() {
        Some(db) => format!("{db}"),
        None => e.to_string(),
    };
    let row = client
        .query_one(
            "SELECT id, (extract(epoch FROM created_at) * 1000)::bigint FROM transactions \
             WHERE provider_id = $1 ORDER BY created_at DESC LIMIT 1",
            &[&args.provider],
        )
        .await
        .map_err(|e| format!("no transaction of {} to copy: {e}", args.provider))?;
    let template: String = row.get(0);
    let end_ms: i64 = row.get(1);
    let start_ms = end_ms - SPAN_MS;
    client
        .execute(
            "INSERT INTO providers (id, name, created_at) VALUES ($1, 'Bench other', now()) \
             ON CONFLICT DO NOTHING",
            &[&OTHER_PROVIDER],
        )
        .await
        .map_err(err)?;
    for (provider, count, tag) in [
        (args.provider.as_str(), args.count, 0_i64),
        (OTHER_PROVIDER, args.other_count, 1),
    ] {
        if count == 0 {
            continue;
        }
        let started = Instant::now();
        let row = row_sql(tag);
        let payment = payment_sql("v.cust_email");
        let ts = |ms: &str| format!("(timestamptz 'epoch' + ({ms}) * interval '1 millisecond')");
        let sql = format!(
            "WITH k AS (SELECT i, (i * 2654435761) % 4294967296 AS h, \
                          ((i * 48271) % 2147483647) % {CUSTOMERS} AS c, \
                          $2::bigint + i * ({SPAN_MS} / $1::bigint) \
                            + ((i * 2654435761) % 4294967296) % 997 AS ms \
                   FROM generate_series(0::bigint, $1::bigint - 1) AS i), \
             v AS (SELECT i, h, c, ms, {status} AS status, {email} AS cust_email FROM k), \
             s AS (INSERT INTO transactions (id, provider_id, reference, status, title, currency, \
                 ref_ids, note, attachments, email, payload, time_zone, total, paid_amount, \
                 refunded_amount, paid_at, payment, created_at, updated_at, pay_token_hash, \
                 pay_expires_at) \
             SELECT lpad(to_hex(ms >> 16), 8, '0') || '-' || lpad(to_hex(ms & 65535), 4, '0') \
                      || '-7' || lpad(to_hex(h & 4095), 3, '0') || '-' \
                      || to_hex(32768 + (h >> 20) % 16384) || '-' \
                      || lpad(to_hex($4::bigint * 1099511627776 + i), 12, '0'), \
                    $3, {reference}, v.status, {title}, {currency}, \
                    t.ref_ids, t.note, t.attachments, t.email, t.payload, t.time_zone, t.total, \
                    CASE WHEN v.status = 'PENDING' THEN NULL ELSE t.total END, \
                    CASE v.status WHEN 'CANCELLED' THEN t.total \
                                  WHEN 'PARTIALLY_CANCELLED' THEN 10 ELSE 0 END, \
                    CASE WHEN v.status = 'PENDING' THEN NULL ELSE {paid_at} END, \
                    CASE WHEN v.status = 'PENDING' THEN NULL ELSE ({payment})::json END, \
                    {created_at}, {created_at}, \
                    CASE WHEN v.status = 'PENDING' \
                         THEN decode(md5('a' || $4::bigint || ':' || i) \
                                     || md5('b' || $4::bigint || ':' || i), 'hex') END, \
                    CASE WHEN v.status = 'PENDING' THEN {created_at} END \
             FROM v, transactions t WHERE t.id = $5 RETURNING id, provider_id) \
             INSERT INTO transaction_versions (id, provider_id) SELECT id, provider_id FROM s",
            status = row.status,
            currency = row.currency,
            title = row.title,
            email = row.email,
            reference = row.reference,
            paid_at = ts("ms + 600000"),
            created_at = ts("ms"),
        );
        let inserted = client
            .execute(&sql, &[&count, &start_ms, &provider, &tag, &template])
            .await
            .map_err(err)?;
        println!(
            "seeded {inserted} transactions of {provider} in {} s",
            started.elapsed().as_secs()
        );
    }
    // What autovacuum does on its own after such a load; done here so the plans do not
    // depend on when it runs.
    let started = Instant::now();
    // One statement a call: VACUUM cannot run in the implicit transaction of a batch.
    for table in ["transactions", "transaction_versions"] {
        client
            .batch_execute(&format!("VACUUM (ANALYZE) {table}"))
            .await
            .map_err(err)?;
    }
    println!("vacuum analyze in {} s", started.elapsed().as_secs());
    Ok(())
}

async fn pg_connect(url: &str) -> Result<tokio_postgres::Client, String> {
    let (client, connection) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .map_err(|e| e.to_string())?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            eprintln!("connection: {e}");
        }
    });
    Ok(client)
}

// ---------------------------------------------------------------------------------------------
// Scenarios

struct Scenario {
    name: &'static str,
    filter: TransactionFilter,
}

/// Facts of the seeded data the scenarios are built from, read from the database.
struct Facts {
    rows: i64,
    newest: DateTime<Utc>,
    /// The row about 500,000 down the list: (created at, id, reference, customer e-mail).
    middle: (DateTime<Utc>, String, String),
    email: String,
    /// The 50th newest transaction with "lisbon" in its title: where its second page starts.
    lisbon_cursor: (DateTime<Utc>, String),
}

/// The 50th newest transaction with "lisbon" in its title (`$1`: the provider), in SQL both
/// stores read (SQLite with `?1`).
const LISBON_CURSOR: &str = "SELECT created_at, id FROM transactions WHERE provider_id = $1 \
     AND lower(title) LIKE '%lisbon%' ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET 49";

async fn facts(db: &Db, provider: &str) -> Result<Facts, String> {
    match db {
        Db::Sqlite(path) => {
            let conn = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
            let err = |e: rusqlite::Error| e.to_string();
            let rows: i64 = conn
                .query_row(
                    "SELECT count(*) FROM transactions WHERE provider_id = ?1",
                    [provider],
                    |r| r.get(0),
                )
                .map_err(err)?;
            let newest: String = conn
                .query_row(
                    "SELECT max(created_at) FROM transactions WHERE provider_id = ?1",
                    [provider],
                    |r| r.get(0),
                )
                .map_err(err)?;
            let (created, id, reference): (String, String, String) = conn
                .query_row(
                    "SELECT created_at, id, reference FROM transactions WHERE provider_id = ?1 \
                     ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET ?2",
                    rusqlite::params![provider, rows / 2],
                    |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
                )
                .map_err(err)?;
            let email: String = conn
                .query_row(
                    "SELECT json_extract(payment, '$.customer.email') FROM transactions \
                     WHERE provider_id = ?1 AND created_at <= ?2 AND payment IS NOT NULL \
                     ORDER BY created_at DESC LIMIT 1",
                    [provider, created.as_str()],
                    |r| r.get(0),
                )
                .map_err(err)?;
            let (lisbon_at, lisbon_id): (String, String) = conn
                .query_row(LISBON_CURSOR.replace('$', "?").as_str(), [provider], |r| {
                    Ok((r.get(0)?, r.get(1)?))
                })
                .map_err(err)?;
            let parse = |text: &str| {
                DateTime::parse_from_rfc3339(text)
                    .map(|at| at.with_timezone(&Utc))
                    .map_err(|e| e.to_string())
            };
            Ok(Facts {
                rows,
                newest: parse(&newest)?,
                middle: (parse(&created)?, id, reference),
                email,
                lisbon_cursor: (parse(&lisbon_at)?, lisbon_id),
            })
        }
        Db::Postgres(url) => {
            let client = pg_connect(url).await?;
            let err = |e: tokio_postgres::Error| e.to_string();
            let row = client
                .query_one(
                    "SELECT count(*), max(created_at) FROM transactions WHERE provider_id = $1",
                    &[&provider],
                )
                .await
                .map_err(err)?;
            let rows: i64 = row.get(0);
            let newest: DateTime<Utc> = row.get(1);
            let middle = client
                .query_one(
                    "SELECT created_at, id, reference FROM transactions WHERE provider_id = $1 \
                     ORDER BY created_at DESC, id DESC LIMIT 1 OFFSET $2",
                    &[&provider, &(rows / 2)],
                )
                .await
                .map_err(err)?;
            let created: DateTime<Utc> = middle.get(0);
            let email: String = client
                .query_one(
                    "SELECT payment->'customer'->>'email' FROM transactions \
                     WHERE provider_id = $1 AND created_at <= $2 AND payment IS NOT NULL \
                     ORDER BY created_at DESC LIMIT 1",
                    &[&provider, &created],
                )
                .await
                .map_err(err)?
                .get(0);
            let lisbon = client
                .query_one(LISBON_CURSOR, &[&provider])
                .await
                .map_err(err)?;
            Ok(Facts {
                rows,
                newest,
                middle: (created, middle.get(1), middle.get(2)),
                email,
                lisbon_cursor: (lisbon.get(0), lisbon.get(1)),
            })
        }
    }
}

fn scenarios(facts: &Facts) -> Vec<Scenario> {
    let base = TransactionFilter {
        limit: LIMIT,
        ..TransactionFilter::default()
    };
    // One month, a year before the newest transaction.
    let from = facts.newest - chrono::Duration::days(365);
    let until = from + chrono::Duration::days(30);
    // The customer's name part of an e-mail (`anna.weber.1234`): about 140 rows of 1,000,000.
    let fragment = facts
        .email
        .split('@')
        .next()
        .unwrap_or(&facts.email)
        .to_owned();
    let with = |name: &'static str, change: &dyn Fn(&mut TransactionFilter)| {
        let mut filter = base.clone();
        change(&mut filter);
        Scenario { name, filter }
    };
    vec![
        with("first page", &|_| {}),
        with("deep keyset page (~500k down)", &|f| {
            f.before = Some((facts.middle.0, facts.middle.1.clone()));
        }),
        with("status PARTIALLY_CANCELLED (5%)", &|f| {
            f.status = Some("PARTIALLY_CANCELLED".to_owned());
        }),
        with("currency GBP (10%)", &|f| {
            f.currency = Some("GBP".to_owned())
        }),
        with("date range, one month", &|f| {
            f.from = Some(from);
            f.until = Some(until);
        }),
        with("CANCELLED + GBP + one month", &|f| {
            f.status = Some("CANCELLED".to_owned());
            f.currency = Some("GBP".to_owned());
            f.from = Some(from);
            f.until = Some(until);
        }),
        with("search: exact reference", &|f| {
            f.search = Some(facts.middle.2.to_lowercase());
        }),
        with("search: title word (lisbon)", &|f| {
            f.search = Some("lisbon".to_owned())
        }),
        with("search: e-mail fragment", &|f| {
            f.search = Some(fragment.clone())
        }),
        with("search: no match", &|f| f.search = Some("zzqxj".to_owned())),
        with("search: only the other's (charter)", &|f| {
            f.search = Some("charter".to_owned())
        }),
        with("search: lisbon + PARTIALLY_CANC.", &|f| {
            f.search = Some("lisbon".to_owned());
            f.status = Some("PARTIALLY_CANCELLED".to_owned());
        }),
        with("search: lisbon + one month", &|f| {
            f.search = Some("lisbon".to_owned());
            f.from = Some(from);
            f.until = Some(until);
        }),
        with("search: lisbon, page 2", &|f| {
            f.search = Some("lisbon".to_owned());
            f.before = Some((facts.lisbon_cursor.0, facts.lisbon_cursor.1.clone()));
        }),
        with("search: two letters (li)", &|f| {
            f.search = Some("li".to_owned())
        }),
    ]
}

// ---------------------------------------------------------------------------------------------
// Timing

/// The nearest-rank percentile of sorted microseconds.
fn percentile(sorted: &[u64], percent: usize) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (sorted.len() * percent).div_ceil(100).max(1);
    sorted[rank.min(sorted.len()) - 1]
}

fn ms(micros: u64) -> String {
    format!("{}.{:01}", micros / 1000, (micros % 1000) / 100)
}

async fn time(db: &Db, args: &Args) -> Result<(), String> {
    let settings = PoolSettings {
        statement_timeout_ms: args.statement_timeout_ms,
        ..PoolSettings::default()
    };
    let stores = host_http::store::open(db, &settings)
        .await
        .map_err(|e| e.to_string())?;
    let facts = facts(db, &args.provider).await?;
    println!(
        "{} transactions of {}; deep cursor at {}; reference {}; e-mail {}",
        facts.rows,
        args.provider,
        host_http::store::format_instant(facts.middle.0),
        facts.middle.2,
        facts.email
    );
    println!(
        "{:<34} {:>5} {:>5} {:>9} {:>9} {:>9} {:>9}  p99<100ms",
        "scenario", "rows", "calls", "p50 ms", "p95 ms", "p99 ms", "max ms"
    );
    for scenario in scenarios(&facts) {
        // Warm-up: three calls, or one when a call takes over a second.
        let mut rows = 0;
        for _ in 0..3 {
            let started = Instant::now();
            rows = stores
                .dashboard
                .list_transactions(args.provider.clone(), scenario.filter.clone())
                .await
                .map_err(|e| format!("{}: {e}", scenario.name))?
                .len();
            if started.elapsed() > Duration::from_secs(1) {
                break;
            }
        }
        let mut micros = Vec::with_capacity(args.calls);
        let began = Instant::now();
        while micros.len() < args.calls && (micros.len() < 5 || began.elapsed() < args.budget) {
            let started = Instant::now();
            let page = stores
                .dashboard
                .list_transactions(args.provider.clone(), scenario.filter.clone())
                .await
                .map_err(|e| format!("{}: {e}", scenario.name))?;
            let took = started.elapsed();
            std::hint::black_box(page);
            micros.push(u64::try_from(took.as_micros()).unwrap_or(u64::MAX));
        }
        micros.sort_unstable();
        let p99 = percentile(&micros, 99);
        println!(
            "{:<34} {:>5} {:>5} {:>9} {:>9} {:>9} {:>9}  {}",
            scenario.name,
            rows,
            micros.len(),
            ms(percentile(&micros, 50)),
            ms(percentile(&micros, 95)),
            ms(p99),
            ms(micros.last().copied().unwrap_or(0)),
            if p99 < 100_000 { "met" } else { "MISSED" }
        );
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Plans

async fn plans(db: &Db, args: &Args) -> Result<(), String> {
    let facts = facts(db, &args.provider).await?;
    match db {
        Db::Sqlite(path) => {
            use host_http::store::sqlite::dashboard::list_statement;
            let conn = rusqlite::Connection::open(path).map_err(|e| e.to_string())?;
            // The statements call the store's own functions (`fold_case`).
            host_http::store::sqlite::configure(&conn).map_err(|e| e.to_string())?;
            host_http::store::sqlite::attach_search(&conn, path).map_err(|e| e.to_string())?;
            for scenario in scenarios(&facts) {
                let Some((sql, values)) = list_statement(&conn, &args.provider, &scenario.filter)
                    .map_err(|e| e.to_string())?
                else {
                    println!(
                        "== {}
  (empty without a statement)",
                        scenario.name
                    );
                    continue;
                };
                println!(
                    "== {}
{sql}
  {values:?}",
                    scenario.name
                );
                let mut plan = conn
                    .prepare(&format!("EXPLAIN QUERY PLAN {sql}"))
                    .map_err(|e| e.to_string())?;
                let lines = plan
                    .query_map(rusqlite::params_from_iter(values), |r| {
                        r.get::<_, String>(3)
                    })
                    .map_err(|e| e.to_string())?;
                for line in lines {
                    println!("  {}", line.map_err(|e| e.to_string())?);
                }
            }
        }
        Db::Postgres(url) => {
            use host_http::store::postgres::dashboard::list_statements;
            let client = pg_connect(url).await?;
            // As the service's connections (`store::postgres`): no JIT.
            client
                .batch_execute("SET jit = off")
                .await
                .map_err(|e| e.to_string())?;
            for scenario in scenarios(&facts) {
                let (statements, values) = list_statements(&args.provider, scenario.filter.clone());
                let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = values
                    .iter()
                    .map(|value| value.as_ref() as &(dyn tokio_postgres::types::ToSql + Sync))
                    .collect();
                // Each statement the store may run, whether or not the first filled the page.
                for sql in statements {
                    println!("== {}\n{sql}", scenario.name);
                    let rows = client
                        .query(&format!("EXPLAIN (ANALYZE, BUFFERS) {sql}"), &params)
                        .await
                        .map_err(|e| e.to_string())?;
                    for row in rows {
                        println!("  {}", row.get::<_, String>(0));
                    }
                }
            }
        }
    }
    Ok(())
}
