//! The database schema as a static, versioned list of migrations, applied in order on open and
//! tracked in `PRAGMA user_version`.
//!
//! A migration is never edited once released: a change of the schema is a new entry at the end.
//! Amounts are `TEXT` decimals (never `REAL`, R-1.1); JSON columns hold the wire types as
//! serialised by `checkout_engine::api`; instants are RFC 3339 UTC text, which sorts chronologically.

use rusqlite::Connection;

/// One step of the schema: the `user_version` it produces and the SQL that gets there.
#[derive(Debug, Clone, Copy)]
pub struct Migration {
    /// `user_version` after this migration; the list is numbered 1, 2, 3, … without gaps.
    pub version: u32,
    /// What the migration is for, for logs and reviews.
    pub description: &'static str,
    /// SQL run inside one write transaction.
    pub sql: &'static str,
}

/// Every migration, oldest first.
pub static MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "providers, credentials, transactions, items, cancellations, idempotency keys",
        sql: r#"
CREATE TABLE providers (
    id                 TEXT PRIMARY KEY,
    name               TEXT NOT NULL,
    time_zone          TEXT NOT NULL DEFAULT 'UTC',
    default_policy     TEXT,                       -- CancellationPolicy JSON or NULL (R-5.1)
    category_policies  TEXT NOT NULL DEFAULT '{}', -- {CATEGORY: CancellationPolicy} JSON
    next_receipt_no    INTEGER NOT NULL DEFAULT 1, -- receipt numbers per provider (R-10.2)
    created_at         TEXT NOT NULL
);
CREATE INDEX providers_name ON providers(name);

CREATE TABLE credentials (
    widget_id    TEXT PRIMARY KEY,
    provider_id  TEXT NOT NULL REFERENCES providers(id),
    secret_hash  BLOB NOT NULL,                    -- SHA-256 of the backend secret (R-7.1)
    scopes       TEXT NOT NULL,                    -- comma-separated (R-7.3)
    created_at   TEXT NOT NULL,
    revoked_at   TEXT
) WITHOUT ROWID;
CREATE INDEX credentials_provider ON credentials(provider_id);

CREATE TABLE transactions (
    id               TEXT PRIMARY KEY,             -- UUID v7, lower-case (R-3.1)
    provider_id      TEXT NOT NULL REFERENCES providers(id),
    reference        TEXT NOT NULL UNIQUE,         -- CHK-XXXXXXXX (R-3.2)
    status           TEXT NOT NULL,                -- PENDING, PAID, PARTIALLY_CANCELLED, CANCELLED
    title            TEXT NOT NULL,
    currency         TEXT NOT NULL,
    ref_ids          TEXT NOT NULL DEFAULT '{}',
    note             TEXT,
    attachments      TEXT NOT NULL DEFAULT '[]',
    email            TEXT,
    payload          TEXT NOT NULL,                -- creation body exactly as received
    total            TEXT NOT NULL,
    paid_amount      TEXT,
    refunded_amount  TEXT NOT NULL DEFAULT '0',
    paid_at          TEXT,
    payment          TEXT,                         -- {payment, customer, beneficiary, billing, card, reporting}
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX transactions_provider ON transactions(provider_id, created_at);

CREATE TABLE items (
    transaction_id  TEXT NOT NULL REFERENCES transactions(id),
    order_no        INTEGER NOT NULL CHECK (order_no >= 1),  -- from 1 (R-4.1)
    name            TEXT,
    category        TEXT,
    total           TEXT NOT NULL,
    policy          TEXT,                          -- effective policy resolved at creation (R-3.5)
    period          TEXT,                          -- Period JSON as given
    status          TEXT NOT NULL DEFAULT 'ACTIVE',-- ACTIVE, CANCELLING, CANCELLED (R-10.2)
    refunded        TEXT NOT NULL DEFAULT '0',
    PRIMARY KEY (transaction_id, order_no)
) WITHOUT ROWID;

CREATE TABLE cancellations (
    id              TEXT PRIMARY KEY,
    transaction_id  TEXT NOT NULL REFERENCES transactions(id),
    provider_id     TEXT NOT NULL REFERENCES providers(id),
    receipt_number  TEXT,                          -- CR-000042, unique per provider once SUCCESS
    items           TEXT NOT NULL,                 -- JSON list of order numbers
    breakdown       TEXT,                          -- JSON per-item penalty/refund lines
    refund          TEXT NOT NULL,
    outcome         TEXT NOT NULL,                 -- PENDING, SUCCESS, FAILED (R-4.8)
    error_message   TEXT,
    invoice_title   TEXT,
    invoice_number  TEXT,
    invoice_file    BLOB,
    gateway_key     TEXT NOT NULL UNIQUE,          -- stable refund idempotency key (R-4.8)
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX cancellations_transaction ON cancellations(transaction_id, created_at);
CREATE UNIQUE INDEX cancellations_receipt ON cancellations(provider_id, receipt_number)
    WHERE receipt_number IS NOT NULL;

CREATE TABLE idempotency_keys (
    provider_id    TEXT NOT NULL REFERENCES providers(id),
    key            TEXT NOT NULL,
    route          TEXT NOT NULL,
    body_hash      BLOB NOT NULL,                  -- SHA-256 of the request body (R-9.1)
    state          TEXT NOT NULL,                  -- running, done
    status_code    INTEGER,
    response_body  TEXT,
    created_at     TEXT NOT NULL,
    PRIMARY KEY (provider_id, key)
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_created ON idempotency_keys(created_at);
"#,
    },
    Migration {
        version: 2,
        description: "cancellation refunds: invoice files, receipts, idempotency of cancellations",
        sql: crate::store::cancellation::CANCELLATION_MIGRATION,
    },
    Migration {
        version: 3,
        description: "ledger refund gateway's own table",
        sql: crate::store::sqlite::ledger::LEDGER_MIGRATION,
    },
    Migration {
        version: 4,
        description: "provider time zone fixed on each transaction at creation (R-3.5)",
        // Rows created before this migration have NULL and keep reading the provider's zone.
        sql: "ALTER TABLE transactions ADD COLUMN time_zone TEXT;",
    },
    Migration {
        version: 5,
        description: "leases of pending refunds: one instance drives each at a time (R-4.8)",
        // Refunds pending before this migration have no lease: the first recovery claims them.
        sql: "ALTER TABLE cancellations ADD COLUMN lease_owner TEXT;
              ALTER TABLE cancellations ADD COLUMN lease_until TEXT;",
    },
    Migration {
        version: 6,
        description: "payment pages: hashed capability tokens, failed attempts, service keys",
        // Transactions created before this migration have no payment page.
        sql: r#"
ALTER TABLE transactions ADD COLUMN pay_token_hash BLOB;   -- SHA-256 of the page's token
ALTER TABLE transactions ADD COLUMN pay_expires_at TEXT;
CREATE UNIQUE INDEX transactions_pay_token ON transactions(pay_token_hash)
    WHERE pay_token_hash IS NOT NULL;

CREATE TABLE payment_failures (
    transaction_id  TEXT NOT NULL REFERENCES transactions(id),
    at              TEXT NOT NULL
);
CREATE INDEX payment_failures_transaction ON payment_failures(transaction_id, at);

CREATE TABLE service_keys (
    name        TEXT PRIMARY KEY,
    key         BLOB NOT NULL,                  -- 32 random bytes
    created_at  TEXT NOT NULL
) WITHOUT ROWID;
"#,
    },
    Migration {
        version: 7,
        description: "outbox: events, webhook endpoints and deliveries, e-mails",
        sql: OUTBOX_MIGRATION,
    },
    Migration {
        version: 8,
        description: "shared file links expire; the owner renews or deletes them",
        // Links shared before this migration have NULL: they expire the configured lifetime
        // after their upload (`app::files`).
        sql: "ALTER TABLE files ADD COLUMN share_expires_at TEXT;",
    },
    Migration {
        version: 9,
        description: "access epoch: bumped by every change of a credential or provider settings",
        sql: ACCESS_EPOCH_MIGRATION,
    },
    Migration {
        version: 10,
        description: "transaction versions: bumped by every change of what a status record shows",
        sql: VERSION_MIGRATION,
    },
    Migration {
        version: 11,
        description: "transaction versions in a narrow table of their own",
        sql: VERSION_TABLE_MIGRATION,
    },
    Migration {
        version: 12,
        description: "outbox: deliveries under a lease, by lease end",
        // A claim counts each endpoint's deliveries under a live lease (at most
        // `--webhook-endpoint-concurrency` at a time); only attempts in flight, or left by an
        // instance that stopped, have a lease, so the index holds few rows however long the
        // backlog is.
        sql: "CREATE INDEX webhook_deliveries_leased ON webhook_deliveries(lease_until) \
              WHERE lease_until IS NOT NULL;",
    },
    Migration {
        version: 13,
        description: "e-mails keep what they show of their transaction as it was at their event",
        // JSON of `store::outbox::MailSnapshot`. E-mails queued before have NULL and are
        // rendered from the transaction as it is when sent, as they were.
        sql: "ALTER TABLE email_messages ADD COLUMN snapshot TEXT;",
    },
    Migration {
        version: 14,
        description: "payment attempts: one in flight per transaction, counted before sent",
        sql: r#"
CREATE TABLE payment_attempts (
    id              TEXT PRIMARY KEY,
    transaction_id  TEXT NOT NULL REFERENCES transactions(id),
    state           TEXT NOT NULL,  -- IN_FLIGHT, APPROVED, DECLINED, FAILED, VOIDED, ABANDONED
    started_at      TEXT NOT NULL,
    lease_until     TEXT NOT NULL,
    finished_at     TEXT,
    reference       TEXT
);
CREATE UNIQUE INDEX payment_attempts_in_flight ON payment_attempts(transaction_id)
    WHERE state = 'IN_FLIGHT';
"#,
    },
    Migration {
        version: 15,
        description: "per-provider payment processors (Stripe keys sealed), Stripe events handled",
        // No row in provider_processors: the sandbox. Secrets only sealed (`crate::secrets`).
        sql: r#"
CREATE TABLE provider_processors (
    provider_id            TEXT PRIMARY KEY REFERENCES providers(id),
    processor              TEXT NOT NULL CHECK (processor IN ('stripe')),
    publishable_key        TEXT NOT NULL,
    secret_key_sealed      TEXT NOT NULL,
    secret_key_last4       TEXT NOT NULL,
    webhook_secret_sealed  TEXT NOT NULL,
    webhook_secret_last4   TEXT NOT NULL,
    updated_at             TEXT NOT NULL
);
CREATE TABLE stripe_events (
    provider_id  TEXT NOT NULL,
    event_id     TEXT NOT NULL,
    event_type   TEXT NOT NULL,
    received_at  TEXT NOT NULL,
    PRIMARY KEY (provider_id, event_id)
);
"#,
    },
    Migration {
        version: 16,
        description: "Stripe PaymentIntents of payment attempts, with the customer they pay for",
        // state: OPEN (created, outcome not yet known here), SUCCEEDED (the payment recorded),
        // FAILED (declined, authentication failed, cancelled), REFUNDED (succeeded for a
        // transaction that could no longer take it, and refunded in full).
        sql: r#"
CREATE TABLE stripe_intents (
    intent_id       TEXT PRIMARY KEY,
    transaction_id  TEXT NOT NULL REFERENCES transactions(id),
    attempt_id      TEXT NOT NULL,
    state           TEXT NOT NULL,
    customer        TEXT NOT NULL,
    created_at      TEXT NOT NULL,
    updated_at      TEXT NOT NULL
);
CREATE INDEX stripe_intents_open ON stripe_intents(transaction_id) WHERE state = 'OPEN';
"#,
    },
    Migration {
        version: 17,
        description: "the provider's dashboard: users, sessions, failed sign-ins, the audit log",
        // Passwords only as Argon2id hashes; invitation and session tokens only as SHA-256.
        sql: r#"
CREATE TABLE dashboard_users (
    id                 TEXT PRIMARY KEY,
    provider_id        TEXT NOT NULL REFERENCES providers(id),
    email              TEXT NOT NULL UNIQUE,            -- lower-case, the sign-in name
    role               TEXT NOT NULL CHECK (role IN ('admin', 'viewer')),
    password_hash      TEXT,                            -- Argon2id PHC string; NULL while invited
    invite_hash        BLOB UNIQUE CHECK (invite_hash IS NULL OR length(invite_hash) = 32),
    invite_expires_at  TEXT,
    created_at         TEXT NOT NULL
);
CREATE INDEX dashboard_users_provider ON dashboard_users(provider_id);

CREATE TABLE dashboard_sessions (
    token_hash    BLOB PRIMARY KEY CHECK (length(token_hash) = 32),
    user_id       TEXT NOT NULL REFERENCES dashboard_users(id) ON DELETE CASCADE,
    csrf_token    TEXT NOT NULL,
    created_at    TEXT NOT NULL,
    last_seen_at  TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX dashboard_sessions_user ON dashboard_sessions(user_id);

CREATE TABLE dashboard_sign_in_failures (
    key  TEXT NOT NULL,                                  -- account:EMAIL or address:IP
    at   TEXT NOT NULL
);
CREATE INDEX dashboard_sign_in_failures_key ON dashboard_sign_in_failures(key, at);

CREATE TABLE audit_log (
    seq          INTEGER PRIMARY KEY AUTOINCREMENT,
    provider_id  TEXT NOT NULL REFERENCES providers(id),
    actor        TEXT NOT NULL,
    action       TEXT NOT NULL,
    detail       TEXT NOT NULL,
    at           TEXT NOT NULL
);
CREATE INDEX audit_log_provider ON audit_log(provider_id, seq);
"#,
    },
    Migration {
        version: 18,
        description: "the dashboard's second factor: one-time code secrets and recovery codes",
        // TOTP secrets only sealed with the operator's secrets key; recovery codes only as
        // SHA-256. A session whose second factor is due is not signed in yet.
        sql: r#"
ALTER TABLE dashboard_users ADD COLUMN totp_secret TEXT;          -- sealed; NULL: no second factor
ALTER TABLE dashboard_users ADD COLUMN totp_pending TEXT;         -- sealed; being set up
ALTER TABLE dashboard_users ADD COLUMN totp_last_step INTEGER;    -- the last code's step, never again
ALTER TABLE dashboard_sessions ADD COLUMN second_factor_due INTEGER NOT NULL DEFAULT 0;

CREATE TABLE dashboard_recovery_codes (
    user_id    TEXT NOT NULL REFERENCES dashboard_users(id) ON DELETE CASCADE,
    code_hash  BLOB NOT NULL CHECK (length(code_hash) = 32),
    used_at    TEXT,
    PRIMARY KEY (user_id, code_hash)
) WITHOUT ROWID;
"#,
    },
    Migration {
        version: 19,
        description: "webhook delivery attempts: each one's answer and duration",
        sql: r#"
CREATE TABLE webhook_attempts (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    event_seq    INTEGER NOT NULL,
    endpoint_id  TEXT NOT NULL,
    attempt      INTEGER NOT NULL,                 -- 1, 2, … (from 1 again after "send again")
    at           TEXT NOT NULL,                    -- when it ended
    duration_ms  INTEGER NOT NULL,
    status_code  INTEGER,                          -- the endpoint's answer, if any
    error        TEXT,                             -- why it failed
    FOREIGN KEY (event_seq, endpoint_id) REFERENCES webhook_deliveries(event_seq, endpoint_id)
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts(event_seq, endpoint_id);
"#,
    },
    Migration {
        version: 20,
        description: "when each credential was last used",
        // A table of its own: a change of `credentials` moves the access epoch (and empties
        // every instance's cache), a use must not.
        sql: r#"
CREATE TABLE credential_usage (
    widget_id     TEXT PRIMARY KEY REFERENCES credentials(widget_id),
    last_used_at  TEXT NOT NULL
) WITHOUT ROWID;
"#,
    },
    Migration {
        version: 21,
        description: "the dashboard's transaction list: a narrower index and a trigram search",
        // The list filters by status and currency and pages by (created_at, id): the index
        // carries all four, so a filter never reads the (multi-kilobyte) rows it skips.
        //
        // Search ("contains", in reference, title and customer e-mail) is an FTS5 trigram
        // index. Its rowid is the transaction's search key: the provider's number times 2^40
        // plus the provider's count of transactions at insertion, so one provider's
        // transactions are one rowid range, newest last. A search reads that range backwards
        // and stops at the page's end: a rare text costs its few matches, a common one the
        // first page of them, and another provider's matches are never read.
        //
        // The triggers only note which keys changed (`transaction_search_pending`); the writer
        // indexed them every 50 ms, 512 at a time (since migration 25 a thread of its own does,
        // into a file of its own: `search_index.rs`), and a search tests the noted ones one by
        // one. FTS5 writes a segment each time it is written to (at every savepoint, and
        // the writer runs each job in one; at every commit): indexed by the triggers, or once
        // per batch of a few creates, it cost 40-60 us a create (creates fell from 9,000/s to
        // 5,500-5,900/s); a few hundred at once cost about 20 us each, notes included.
        sql: r#"
DROP INDEX transactions_provider;
CREATE INDEX transactions_list ON transactions(provider_id, created_at, id, status, currency);

CREATE TABLE search_providers (
    number       INTEGER PRIMARY KEY,              -- the provider's range of search keys
    provider_id  TEXT NOT NULL UNIQUE REFERENCES providers(id)
);
INSERT INTO search_providers (provider_id) SELECT id FROM providers ORDER BY created_at, id;
CREATE TRIGGER providers_search AFTER INSERT ON providers
BEGIN INSERT INTO search_providers (provider_id) VALUES (NEW.id); END;

CREATE TABLE transaction_search_keys (
    key             INTEGER PRIMARY KEY,           -- number * 2^40 + 1, 2, 3, … in insertion order
    transaction_id  TEXT NOT NULL UNIQUE,
    created_at      TEXT NOT NULL
);
CREATE VIRTUAL TABLE transaction_search USING fts5(reference, title, email, tokenize = 'trigram',
                                                  content = '', contentless_delete = 1);
CREATE TABLE transaction_search_pending (     -- keys whose index entry is to be written
    seq        INTEGER PRIMARY KEY,                -- first noted, first indexed
    key        INTEGER NOT NULL UNIQUE,
    stale      INTEGER NOT NULL,                   -- 1: an entry may exist, to be removed first
    reference  TEXT,                               -- what to index; NULL: the transaction is gone
    title      TEXT,
    email      TEXT
);

INSERT INTO transaction_search_keys (key, transaction_id, created_at)
SELECT n.number * 1099511627776
       + row_number() OVER (PARTITION BY t.provider_id ORDER BY t.created_at, t.id),
       t.id, t.created_at
FROM transactions t JOIN search_providers n ON n.provider_id = t.provider_id;
INSERT INTO transaction_search (rowid, reference, title, email)
SELECT k.key, t.reference, t.title, json_extract(t.payment, '$.customer.email')
FROM transaction_search_keys k JOIN transactions t ON t.id = k.transaction_id;

CREATE TRIGGER transactions_search_insert AFTER INSERT ON transactions
BEGIN
    INSERT INTO transaction_search_keys (key, transaction_id, created_at)
    SELECT coalesce(
               (SELECT key FROM transaction_search_keys
                WHERE key > n.number * 1099511627776 AND key < (n.number + 1) * 1099511627776
                ORDER BY key DESC LIMIT 1),
               n.number * 1099511627776) + 1,
           NEW.id, NEW.created_at
    FROM search_providers n WHERE n.provider_id = NEW.provider_id;
    INSERT INTO transaction_search_pending (key, stale, reference, title, email)
    SELECT key, 0, NEW.reference, NEW.title, json_extract(NEW.payment, '$.customer.email')
    FROM transaction_search_keys WHERE transaction_id = NEW.id;
END;
CREATE TRIGGER transactions_search_update AFTER UPDATE OF reference, title, payment ON transactions
WHEN OLD.reference IS NOT NEW.reference OR OLD.title IS NOT NEW.title
     OR OLD.payment IS NOT NEW.payment
BEGIN
    INSERT INTO transaction_search_pending (key, stale, reference, title, email)
    SELECT key, 1, NEW.reference, NEW.title, json_extract(NEW.payment, '$.customer.email')
    FROM transaction_search_keys WHERE transaction_id = NEW.id
    ON CONFLICT (key) DO UPDATE SET reference = excluded.reference, title = excluded.title,
                                    email = excluded.email;
END;
CREATE TRIGGER transactions_search_delete AFTER DELETE ON transactions
BEGIN
    INSERT INTO transaction_search_pending (key, stale, reference, title, email)
    SELECT key, 1, NULL, NULL, NULL FROM transaction_search_keys WHERE transaction_id = OLD.id
    ON CONFLICT (key) DO UPDATE SET reference = NULL, title = NULL, email = NULL;
    DELETE FROM transaction_search_keys WHERE transaction_id = OLD.id;
END;
"#,
    },
    Migration {
        version: 22,
        description: "the dashboard's overview and transaction page read by index",
        // The overview sums a provider's payments and refunds of the last 32 days and counts
        // its failing endpoints. Without these it read every transaction of the provider
        // (several kilobytes each), every cancellation (the refunds' creation time lies behind
        // the invoice file in the row: `outcome` makes the index covering) and every delivery
        // of each endpoint. Only paid transactions, succeeded cancellations and retried or
        // failed deliveries enter those indexes, so creates do not write them. A transaction's
        // page read the events of the whole provider to find the transaction's:
        // `events_transaction` finds them directly, at one index entry per event. And each
        // deletion of a file had its foreign-key check (`cancellations.invoice_file_id`) read
        // every cancellation: 10,000 deletions took minutes at 30,000 cancellations.
        sql: r#"
CREATE INDEX transactions_paid ON transactions(provider_id, paid_at, currency, paid_amount)
    WHERE paid_at IS NOT NULL;
CREATE INDEX cancellations_succeeded ON cancellations(provider_id, created_at, refund, currency,
                                                      transaction_id, outcome)
    WHERE outcome = 'SUCCESS';
CREATE INDEX webhook_deliveries_retried ON webhook_deliveries(endpoint_id)
    WHERE status = 'QUEUED' AND attempts > 0;
CREATE INDEX webhook_deliveries_failed ON webhook_deliveries(endpoint_id, last_attempt_at)
    WHERE status = 'FAILED';
CREATE INDEX events_transaction ON events(transaction_id, seq);
CREATE INDEX cancellations_invoice_file ON cancellations(invoice_file_id);
"#,
    },
    Migration {
        version: 23,
        description: "the dashboard overview's sums per quarter hour",
        // The overview read every payment and refund of the last 32 days: 1.1 s an overview
        // at 100,000 payments in the month, and memory for all of them. It reads these sums
        // instead, a row per quarter hour and currency (at most 3,072 per currency), added to
        // in the transaction that records each payment or successful refund. The rows are
        // filled from those already recorded by `dashboard::backfill_overview_sums` (its step
        // in `CODE_STEPS`), in this migration's transaction: SQLite cannot add decimals
        // exactly. The partial indexes of paid transactions and succeeded cancellations that
        // migration 22 made for the overview go: nothing reads them now, and each payment and
        // each refund wrote them.
        sql: r#"
DROP INDEX transactions_paid;
DROP INDEX cancellations_succeeded;
CREATE TABLE overview_sums (
    provider_id TEXT NOT NULL,
    bucket      TEXT NOT NULL,   -- the quarter hour's start, RFC 3339 UTC
    currency    TEXT NOT NULL,
    paid        TEXT NOT NULL,   -- exact decimals
    refunded    TEXT NOT NULL,
    PRIMARY KEY (provider_id, bucket, currency)
) STRICT, WITHOUT ROWID;
"#,
    },
    Migration {
        version: 24,
        description: "transactions in a rowid table: a 2.8 KB row in one page, no overflow page",
        // A WITHOUT ROWID table keeps its rows in an index b-tree, whose cells hold at most
        // about a quarter of a page: every transaction of a few kilobytes (its creation body
        // is kept whole) spilled into an overflow page, so each read of a row, and each
        // column after the body, cost a second page, and each write of the row two.
        // A rowid table's cell holds up to a page. The step is in code
        // (`rebuild_transactions`): it keeps the table's columns, indexes and triggers as the
        // file has them.
        sql: "",
    },
    Migration {
        version: 25,
        description: "the search index in a file of its own",
        // The trigram index (migration 21) moves to the search file, written by a thread of
        // its own (`search_index.rs`); the main file keeps the keys and the notes of what
        // the index must learn. A note is now made anew (a new number) each time its
        // transaction changes, rather than changed in place: the indexer remembers the last
        // number it indexed, and a note changed in place under a number it had passed would
        // be missed. AUTOINCREMENT keeps numbers from being given twice. The generation is
        // NULL until the search file is built, which notes every transaction again.
        sql: r#"
DROP TRIGGER transactions_search_insert;
DROP TRIGGER transactions_search_update;
DROP TRIGGER transactions_search_delete;
DROP TABLE transaction_search;
DROP TABLE transaction_search_pending;
CREATE TABLE transaction_search_pending (     -- keys whose index entry is to be written
    seq        INTEGER PRIMARY KEY AUTOINCREMENT,  -- first noted, first indexed
    key        INTEGER NOT NULL UNIQUE,
    reference  TEXT,                               -- what to index; NULL: the transaction is gone
    title      TEXT,
    email      TEXT
);
CREATE TABLE search_generation (
    id          INTEGER PRIMARY KEY CHECK (id = 1),
    generation  TEXT                               -- = the search file's; NULL: not built
);
INSERT INTO search_generation (id, generation) VALUES (1, NULL);

CREATE TRIGGER transactions_search_insert AFTER INSERT ON transactions
BEGIN
    INSERT INTO transaction_search_keys (key, transaction_id, created_at)
    SELECT coalesce(
               (SELECT key FROM transaction_search_keys
                WHERE key > n.number * 1099511627776 AND key < (n.number + 1) * 1099511627776
                ORDER BY key DESC LIMIT 1),
               n.number * 1099511627776) + 1,
           NEW.id, NEW.created_at
    FROM search_providers n WHERE n.provider_id = NEW.provider_id;
    INSERT INTO transaction_search_pending (key, reference, title, email)
    SELECT key, NEW.reference, NEW.title, json_extract(NEW.payment, '$.customer.email')
    FROM transaction_search_keys WHERE transaction_id = NEW.id;
END;
CREATE TRIGGER transactions_search_update AFTER UPDATE OF reference, title, payment ON transactions
WHEN OLD.reference IS NOT NEW.reference OR OLD.title IS NOT NEW.title
     OR OLD.payment IS NOT NEW.payment
BEGIN
    DELETE FROM transaction_search_pending
    WHERE key = (SELECT key FROM transaction_search_keys WHERE transaction_id = NEW.id);
    INSERT INTO transaction_search_pending (key, reference, title, email)
    SELECT key, NEW.reference, NEW.title, json_extract(NEW.payment, '$.customer.email')
    FROM transaction_search_keys WHERE transaction_id = NEW.id;
END;
CREATE TRIGGER transactions_search_delete AFTER DELETE ON transactions
BEGIN
    DELETE FROM transaction_search_pending
    WHERE key = (SELECT key FROM transaction_search_keys WHERE transaction_id = OLD.id);
    INSERT INTO transaction_search_pending (key, reference, title, email)
    SELECT key, NULL, NULL, NULL FROM transaction_search_keys WHERE transaction_id = OLD.id;
    DELETE FROM transaction_search_keys WHERE transaction_id = OLD.id;
END;
"#,
    },
    Migration {
        version: 26,
        description: "a transaction's search key is its rowid",
        // Each create wrote a row of `transaction_search_keys` (its key, given in its
        // provider's range by a trigger) and that row's index of transaction ids: about a
        // sixth of the writer's time per create (docs/PERFORMANCE.md, "The search key as the
        // rowid"). The key becomes the transaction's rowid, which the writer gives in the
        // insert itself; the keys table goes. The numbers stay those of the keys table, so
        // the search file stays true. A transaction inserted without such a rowid (by SQL
        // of its own) is moved to the next key of its provider's range by a trigger of its own
        // (`transactions_search_insert_keyed`).
        // The versions' update trigger is taken off while the rows move: moving is no change.
        sql: r#"
DROP TRIGGER transactions_search_insert;
DROP TRIGGER transactions_search_update;
DROP TRIGGER transactions_search_delete;
DROP TRIGGER transactions_updated_version;
UPDATE transactions
SET rowid = (SELECT k.key FROM transaction_search_keys k WHERE k.transaction_id = transactions.id);
DROP TABLE transaction_search_keys;
CREATE TRIGGER transactions_updated_version AFTER UPDATE ON transactions
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.id; END;

CREATE TRIGGER transactions_search_insert AFTER INSERT ON transactions
WHEN EXISTS (SELECT 1 FROM search_providers n
             WHERE n.provider_id = NEW.provider_id
               AND NEW.rowid > n.number * 1099511627776
               AND NEW.rowid < (n.number + 1) * 1099511627776)
BEGIN
    INSERT INTO transaction_search_pending (key, reference, title, email)
    VALUES (NEW.rowid, NEW.reference, NEW.title, json_extract(NEW.payment, '$.customer.email'));
END;
CREATE TRIGGER transactions_search_insert_keyed AFTER INSERT ON transactions
WHEN NOT EXISTS (SELECT 1 FROM search_providers n
                 WHERE n.provider_id = NEW.provider_id
                   AND NEW.rowid > n.number * 1099511627776
                   AND NEW.rowid < (n.number + 1) * 1099511627776)
BEGIN
    UPDATE transactions SET rowid = (
        SELECT coalesce(
                   (SELECT t.rowid FROM transactions t
                    WHERE t.rowid > n.number * 1099511627776
                      AND t.rowid < (n.number + 1) * 1099511627776
                    ORDER BY t.rowid DESC LIMIT 1),
                   n.number * 1099511627776) + 1
        FROM search_providers n WHERE n.provider_id = NEW.provider_id)
    WHERE rowid = NEW.rowid;
    INSERT INTO transaction_search_pending (key, reference, title, email)
    SELECT rowid, NEW.reference, NEW.title, json_extract(NEW.payment, '$.customer.email')
    FROM transactions WHERE id = NEW.id;
END;
CREATE TRIGGER transactions_search_update AFTER UPDATE OF reference, title, payment ON transactions
WHEN OLD.reference IS NOT NEW.reference OR OLD.title IS NOT NEW.title
     OR OLD.payment IS NOT NEW.payment
BEGIN
    DELETE FROM transaction_search_pending WHERE key = NEW.rowid;
    INSERT INTO transaction_search_pending (key, reference, title, email)
    VALUES (NEW.rowid, NEW.reference, NEW.title, json_extract(NEW.payment, '$.customer.email'));
END;
CREATE TRIGGER transactions_search_delete AFTER DELETE ON transactions
BEGIN
    DELETE FROM transaction_search_pending WHERE key = OLD.rowid;
    INSERT INTO transaction_search_pending (key, reference, title, email)
    VALUES (OLD.rowid, NULL, NULL, NULL);
END;
"#,
    },
    Migration {
        version: 27,
        description: "new transactions are indexed by key, without a note",
        // A create noted its transaction for the search index (a row of
        // `transaction_search_pending`, its unique index of keys and AUTOINCREMENT, then the
        // note's deletion): a sixth of the writer's time per create (docs/PERFORMANCE.md, "The
        // search's watermarks"). A provider's new transactions are the end of its range of
        // keys, so the indexer now takes them from there, past the key it last indexed (its
        // watermark, in the search file); notes stay for what changes or goes, and for rows
        // the keyed trigger moved. `noted_until` keeps each range's last key noted the old
        // way, from which a search file made before this starts its watermark.
        sql: r#"
DROP TRIGGER transactions_search_insert;
ALTER TABLE search_providers ADD COLUMN noted_until INTEGER;
UPDATE search_providers SET noted_until = (
    SELECT t.rowid FROM transactions t
    WHERE t.rowid > search_providers.number * 1099511627776
      AND t.rowid < (search_providers.number + 1) * 1099511627776
    ORDER BY t.rowid DESC LIMIT 1);
"#,
    },
    Migration {
        version: 28,
        description: "a long note kept once, in the creation body; items inserted untriggered",
        // A creation body of 2.8 KB with a note of 1.2 KB made a row of 4.3 KB, past the 4 KB
        // a page holds: each create wrote an overflow page (to the log, then the checkpoint),
        // for a copy of what the body already holds. `note_in_payload` = 1: the note is the
        // creation body's own (`note` is NULL), until an update (R-8.6) replaces it.
        // Items are inserted only with their transaction, whose version nobody has read
        // before that commit: their trigger moved nothing anyone could see, and a statement
        // with a trigger keeps a statement journal (a copy of each page it changes).
        sql: r#"
ALTER TABLE transactions ADD COLUMN note_in_payload INTEGER NOT NULL DEFAULT 0;
DROP TRIGGER items_inserted_version;
"#,
    },
    Migration {
        version: 29,
        description: "transactions inserted without triggers",
        // `transactions` kept two insert triggers: one made the transaction's row of
        // `transaction_versions` (owner, version 0), the other moved a row inserted without its
        // search key into its provider's range. A table with an insert trigger makes its insert
        // a "multi-write" statement, and with the foreign key on `provider_id` SQLite then keeps
        // a statement journal for it: with both gone the writer's instructions per create fell
        // by a fifth (docs/PERFORMANCE.md, "What the transaction's insert triggers cost"). A
        // transaction without a version row is at version 0 and its first change makes the row
        // at 1 (each bump an upsert), the numbers as before; readers take the owner from
        // `transactions`. Every insert gives its search key, as the store's always did
        // (`search_index.rs`).
        sql: r#"
DROP TRIGGER transactions_inserted_version;
DROP TRIGGER transactions_search_insert_keyed;
DROP TRIGGER transactions_updated_version;
CREATE TRIGGER transactions_updated_version AFTER UPDATE ON transactions
BEGIN
INSERT INTO transaction_versions (id, provider_id, version) VALUES (NEW.id, NEW.provider_id, 1)
ON CONFLICT (id) DO UPDATE SET version = version + 1;
END;
DROP TRIGGER items_updated_version;
CREATE TRIGGER items_updated_version
AFTER UPDATE ON items
BEGIN
INSERT INTO transaction_versions (id, provider_id, version)
SELECT id, provider_id, 1 FROM transactions WHERE id = NEW.transaction_id
ON CONFLICT (id) DO UPDATE SET version = version + 1;
END;
DROP TRIGGER items_deleted_version;
CREATE TRIGGER items_deleted_version
AFTER DELETE ON items
BEGIN
INSERT INTO transaction_versions (id, provider_id, version)
SELECT id, provider_id, 1 FROM transactions WHERE id = OLD.transaction_id
ON CONFLICT (id) DO UPDATE SET version = version + 1;
END;
DROP TRIGGER cancellations_inserted_version;
CREATE TRIGGER cancellations_inserted_version
AFTER INSERT ON cancellations
BEGIN
INSERT INTO transaction_versions (id, provider_id, version)
SELECT id, provider_id, 1 FROM transactions WHERE id = NEW.transaction_id
ON CONFLICT (id) DO UPDATE SET version = version + 1;
END;
DROP TRIGGER cancellations_updated_version;
CREATE TRIGGER cancellations_updated_version
AFTER UPDATE OF receipt_number, items, refund, outcome, created_at ON cancellations
BEGIN
INSERT INTO transaction_versions (id, provider_id, version)
SELECT id, provider_id, 1 FROM transactions WHERE id = NEW.transaction_id
ON CONFLICT (id) DO UPDATE SET version = version + 1;
END;
DROP TRIGGER cancellations_deleted_version;
CREATE TRIGGER cancellations_deleted_version
AFTER DELETE ON cancellations
BEGIN
INSERT INTO transaction_versions (id, provider_id, version)
SELECT id, provider_id, 1 FROM transactions WHERE id = OLD.transaction_id
ON CONFLICT (id) DO UPDATE SET version = version + 1;
END;
DROP TRIGGER email_messages_inserted_version;
CREATE TRIGGER email_messages_inserted_version
AFTER INSERT ON email_messages
BEGIN
INSERT INTO transaction_versions (id, provider_id, version)
SELECT id, provider_id, 1 FROM transactions WHERE id = NEW.transaction_id
ON CONFLICT (id) DO UPDATE SET version = version + 1;
END;
DROP TRIGGER email_messages_updated_version;
CREATE TRIGGER email_messages_updated_version
AFTER UPDATE OF kind, receipt_number, recipients, status, updated_at ON email_messages
BEGIN
INSERT INTO transaction_versions (id, provider_id, version)
SELECT id, provider_id, 1 FROM transactions WHERE id = NEW.transaction_id
ON CONFLICT (id) DO UPDATE SET version = version + 1;
END;
DROP TRIGGER email_messages_deleted_version;
CREATE TRIGGER email_messages_deleted_version
AFTER DELETE ON email_messages
BEGIN
INSERT INTO transaction_versions (id, provider_id, version)
SELECT id, provider_id, 1 FROM transactions WHERE id = OLD.transaction_id
ON CONFLICT (id) DO UPDATE SET version = version + 1;
END;
"#,
    },
    Migration {
        version: 30,
        description: "creation bodies kept compressed",
        // `transactions.payload` of a new transaction holds its creation body as an LZ4 block
        // with the body's length in front, a BLOB (`stored_body.rs`); rows written before keep
        // their TEXT and read as before. Nothing in the file changes here: the version tells
        // a build older than this one, which could not read such a body, to refuse the file
        // (`MigrationError::TooNew`) rather than fail on the first transaction it reads.
        sql: "",
    },
];

/// A migration's step that SQL cannot take, run after its SQL in its transaction.
type CodeStep = fn(&Connection) -> Result<(), crate::store::StoreError>;

/// The migrations with a step in code, by version.
static CODE_STEPS: &[(u32, CodeStep)] = &[
    (23, super::dashboard::backfill_overview_sums),
    (24, rebuild_transactions),
];

/// Migration 24: `transactions` rebuilt as a rowid table, with the same columns, rows,
/// indexes and triggers. The old table is renamed aside with `legacy_alter_table` on, so that
/// the foreign keys and triggers of other tables, which name `transactions`, keep naming it
/// (and not the table renamed aside); its rows are copied; it is dropped with its indexes and
/// triggers, which are then made again on the new table from their SQL as it was.
fn rebuild_transactions(conn: &Connection) -> Result<(), crate::store::StoreError> {
    let table: String = conn.query_row(
        "SELECT sql FROM sqlite_schema WHERE type = 'table' AND name = 'transactions'",
        [],
        |r| r.get(0),
    )?;
    let Some(columns) = table.trim_end().strip_suffix("WITHOUT ROWID") else {
        // Already a rowid table: nothing to do.
        return Ok(());
    };
    let attached: Vec<String> = conn
        .prepare(
            "SELECT sql FROM sqlite_schema WHERE tbl_name = 'transactions' \
             AND type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY type, name",
        )?
        .query_map([], |r| r.get(0))?
        .collect::<Result<_, _>>()?;
    conn.execute_batch(&format!(
        "PRAGMA legacy_alter_table = ON;
         ALTER TABLE transactions RENAME TO transactions_rebuilt;
         {columns};
         INSERT INTO transactions SELECT * FROM transactions_rebuilt;
         DROP TABLE transactions_rebuilt;
         PRAGMA legacy_alter_table = OFF;",
        columns = columns.trim_end()
    ))?;
    for sql in &attached {
        conn.execute_batch(sql)?;
    }
    Ok(())
}

/// Why the schema could not be brought up to date.
#[derive(Debug, thiserror::Error)]
pub enum MigrationError {
    /// The file was written by a newer build with migrations this build does not know.
    #[error("database schema version {found} is newer than this build's {known}")]
    TooNew {
        /// `user_version` of the file.
        found: u32,
        /// Latest version this build knows.
        known: u32,
    },
    /// SQLite refused a statement.
    #[error("migration failed: {0}")]
    Sql(#[from] rusqlite::Error),
    /// A row could not be carried over (a stored amount that is not a decimal).
    #[error("migration failed: {0}")]
    Data(String),
}

/// Latest schema version this build knows.
pub fn latest_version() -> u32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Applies every migration newer than the file's `user_version`, each in its own IMMEDIATE
/// transaction, so that two processes opening a fresh file at once do not both migrate it.
pub fn migrate(conn: &mut Connection) -> Result<u32, MigrationError> {
    migrate_to(conn, latest_version())
}

/// [`migrate`], up to version `last`.
fn migrate_to(conn: &mut Connection, last: u32) -> Result<u32, MigrationError> {
    for migration in MIGRATIONS.iter().filter(|m| m.version <= last) {
        let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
        let current: u32 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if current > latest_version() {
            return Err(MigrationError::TooNew {
                found: current,
                known: latest_version(),
            });
        }
        if current >= migration.version {
            continue;
        }
        if REBUILDS.contains(&migration.version) {
            // SQLite's procedure for a change ALTER TABLE cannot make: foreign keys off while
            // a table is made again (they can only be set outside a transaction), checked
            // before the commit.
            drop(tx);
            let enforced: bool = conn.query_row("PRAGMA foreign_keys", [], |r| r.get(0))?;
            conn.pragma_update(None, "foreign_keys", false)?;
            let applied = apply(conn, migration);
            conn.pragma_update(None, "foreign_keys", enforced)?;
            if !applied? {
                continue;
            }
        } else {
            apply_in(&tx, migration)?;
            tx.commit()?;
        }
        tracing::info!(
            version = migration.version,
            description = migration.description,
            "database migrated"
        );
    }
    Ok(last)
}

/// The migrations that make a table again, with foreign keys off (see [`migrate`]).
const REBUILDS: &[u32] = &[24];

/// `migration` in an IMMEDIATE transaction of its own, its foreign keys checked before the
/// commit; `false` when another process had applied it meanwhile.
fn apply(conn: &mut Connection, migration: &Migration) -> Result<bool, MigrationError> {
    let tx = conn.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)?;
    let current: u32 = tx.query_row("PRAGMA user_version", [], |r| r.get(0))?;
    if current >= migration.version {
        return Ok(false);
    }
    apply_in(&tx, migration)?;
    let problems: i64 = tx.query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
        r.get(0)
    })?;
    if problems > 0 {
        return Err(MigrationError::Data(format!(
            "migration {} would leave {problems} rows whose foreign key points nowhere",
            migration.version
        )));
    }
    tx.commit()?;
    Ok(true)
}

/// `migration`'s SQL, its step in code, and its version, inside `tx`.
fn apply_in(tx: &rusqlite::Transaction<'_>, migration: &Migration) -> Result<(), MigrationError> {
    tx.execute_batch(migration.sql)?;
    for (_, step) in CODE_STEPS.iter().filter(|(v, _)| *v == migration.version) {
        step(tx).map_err(|error| MigrationError::Data(error.to_string()))?;
    }
    tx.pragma_update(None, "user_version", migration.version)?;
    Ok(())
}

/// The outbox tables (migration 7; the PostgreSQL schema has the same tables with its types).
pub const OUTBOX_MIGRATION: &str = r#"
ALTER TABLE cancellations ADD COLUMN unknown_since TEXT;   -- the gateway's answer was unknown

CREATE TABLE events (
    seq             INTEGER PRIMARY KEY AUTOINCREMENT, -- the order events happened in
    id              TEXT NOT NULL UNIQUE,              -- evt_…, the webhook-id
    provider_id     TEXT NOT NULL,
    transaction_id  TEXT NOT NULL,
    type            TEXT NOT NULL,
    payload         TEXT NOT NULL,                     -- the Standard Webhooks payload as sent
    created_at      TEXT NOT NULL
);
CREATE INDEX events_provider ON events(provider_id, seq);

CREATE TABLE webhook_endpoints (
    id               TEXT PRIMARY KEY,                 -- ep_…
    provider_id      TEXT NOT NULL REFERENCES providers(id),
    url              TEXT NOT NULL,
    event_types      TEXT,                             -- comma-separated; NULL: every type
    secret           TEXT NOT NULL,                    -- whsec_…: it signs, so it is kept
    previous_secret  TEXT,                             -- still signs until previous_until
    previous_until   TEXT,
    created_at       TEXT NOT NULL,
    removed_at       TEXT
);
CREATE INDEX webhook_endpoints_provider ON webhook_endpoints(provider_id);

CREATE TABLE webhook_deliveries (
    event_seq         INTEGER NOT NULL REFERENCES events(seq),
    endpoint_id       TEXT NOT NULL REFERENCES webhook_endpoints(id),
    transaction_id    TEXT NOT NULL,
    status            TEXT NOT NULL,                   -- QUEUED, SENT, FAILED
    attempts          INTEGER NOT NULL,
    next_attempt_at   TEXT NOT NULL,
    first_attempt_at  TEXT,
    last_attempt_at   TEXT,
    last_result       TEXT,
    delivered_at      TEXT,
    lease_owner       TEXT,
    lease_until       TEXT,
    created_at        TEXT NOT NULL,
    PRIMARY KEY (event_seq, endpoint_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(status, next_attempt_at);
CREATE INDEX webhook_deliveries_order ON webhook_deliveries(endpoint_id, transaction_id, status);

CREATE TABLE email_messages (
    id               TEXT PRIMARY KEY,
    event_seq        INTEGER NOT NULL REFERENCES events(seq),
    provider_id      TEXT NOT NULL,
    transaction_id   TEXT NOT NULL,
    kind             TEXT NOT NULL,                    -- CONTRACT, RECEIPT
    receipt_number   TEXT,
    recipients       TEXT NOT NULL,                    -- JSON array
    message_id       TEXT NOT NULL,
    status           TEXT NOT NULL,                    -- QUEUED, SENT, FAILED
    attempts         INTEGER NOT NULL,
    next_attempt_at  TEXT NOT NULL,
    last_error       TEXT,
    sent_at          TEXT,
    lease_owner      TEXT,
    lease_until      TEXT,
    created_at       TEXT NOT NULL,
    updated_at       TEXT NOT NULL
);
CREATE INDEX email_messages_due ON email_messages(status, next_attempt_at);
CREATE INDEX email_messages_transaction ON email_messages(transaction_id);
"#;

/// The access epoch (migration 9): one counter that triggers bump in the same transaction as
/// any change of a credential (added, revoked, removed) or of a provider's name, zone or
/// policies — whoever makes it, the server or the `provider` commands in another process.
/// The server keeps credentials and provider settings in memory and trusts them only while the
/// counter it read them under is unchanged (`app::access`), so a revoked secret is refused by
/// the first request after the revoking commit. The receipt counter of `providers` is not a
/// setting and bumps nothing.
pub const ACCESS_EPOCH_MIGRATION: &str = r#"
CREATE TABLE access_epoch (
    id     INTEGER PRIMARY KEY CHECK (id = 1),
    value  INTEGER NOT NULL
);
INSERT INTO access_epoch (id, value) VALUES (1, 0);
CREATE TRIGGER credentials_added AFTER INSERT ON credentials
BEGIN UPDATE access_epoch SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER credentials_changed AFTER UPDATE ON credentials
BEGIN UPDATE access_epoch SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER credentials_removed AFTER DELETE ON credentials
BEGIN UPDATE access_epoch SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER providers_added AFTER INSERT ON providers
BEGIN UPDATE access_epoch SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER providers_changed
AFTER UPDATE OF id, name, time_zone, default_policy, category_policies ON providers
BEGIN UPDATE access_epoch SET value = value + 1 WHERE id = 1; END;
CREATE TRIGGER providers_removed AFTER DELETE ON providers
BEGIN UPDATE access_epoch SET value = value + 1 WHERE id = 1; END;
"#;

/// Transaction versions (migration 10): a counter on each transaction that triggers bump in
/// the same transaction as any change of the row or of its items, or of the columns of its
/// cancellations and e-mails that its status record (R-10) shows (not their leases). A status record rendered at one version is the
/// record as long as the version stays (`app::transactions`).
pub const VERSION_MIGRATION: &str = r#"
ALTER TABLE transactions ADD COLUMN version INTEGER NOT NULL DEFAULT 0;
CREATE TRIGGER transactions_version AFTER UPDATE ON transactions
WHEN NEW.version = OLD.version
BEGIN UPDATE transactions SET version = OLD.version + 1 WHERE id = NEW.id; END;
CREATE TRIGGER items_inserted_version AFTER INSERT ON items
BEGIN UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER items_updated_version AFTER UPDATE ON items
BEGIN UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER items_deleted_version AFTER DELETE ON items
BEGIN UPDATE transactions SET version = version + 1 WHERE id = OLD.transaction_id; END;
CREATE TRIGGER cancellations_inserted_version AFTER INSERT ON cancellations
BEGIN UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER cancellations_updated_version
AFTER UPDATE OF receipt_number, items, refund, outcome, created_at ON cancellations
BEGIN UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER cancellations_deleted_version AFTER DELETE ON cancellations
BEGIN UPDATE transactions SET version = version + 1 WHERE id = OLD.transaction_id; END;
CREATE TRIGGER email_messages_inserted_version AFTER INSERT ON email_messages
BEGIN UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER email_messages_updated_version
AFTER UPDATE OF kind, receipt_number, recipients, status, updated_at ON email_messages
BEGIN UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER email_messages_deleted_version AFTER DELETE ON email_messages
BEGIN UPDATE transactions SET version = version + 1 WHERE id = OLD.transaction_id; END;
"#;

/// Transaction versions in a table of their own (migration 11). Migration 10 kept the counter
/// in `transactions`, whose rows hold the creation body (a few KB): every item inserted at
/// creation rewrote that row through its trigger, and a status read looked it up in the wide
/// table. The counter now lives in a narrow row per transaction, with the owner, so that a
/// status read (`SELECT provider_id, version`) and each bump touch only that row. The triggers
/// and what moves the version are those of migration 10.
pub const VERSION_TABLE_MIGRATION: &str = r#"
CREATE TABLE transaction_versions (
    id           TEXT PRIMARY KEY,
    provider_id  TEXT NOT NULL,
    version      INTEGER NOT NULL DEFAULT 0
) WITHOUT ROWID;
INSERT INTO transaction_versions (id, provider_id, version)
SELECT id, provider_id, version FROM transactions;
DROP TRIGGER transactions_version;
DROP TRIGGER items_inserted_version;
DROP TRIGGER items_updated_version;
DROP TRIGGER items_deleted_version;
DROP TRIGGER cancellations_inserted_version;
DROP TRIGGER cancellations_updated_version;
DROP TRIGGER cancellations_deleted_version;
DROP TRIGGER email_messages_inserted_version;
DROP TRIGGER email_messages_updated_version;
DROP TRIGGER email_messages_deleted_version;
ALTER TABLE transactions DROP COLUMN version;
CREATE TRIGGER transactions_inserted_version AFTER INSERT ON transactions
BEGIN INSERT INTO transaction_versions (id, provider_id) VALUES (NEW.id, NEW.provider_id); END;
CREATE TRIGGER transactions_updated_version AFTER UPDATE ON transactions
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.id; END;
CREATE TRIGGER transactions_deleted_version AFTER DELETE ON transactions
BEGIN DELETE FROM transaction_versions WHERE id = OLD.id; END;
CREATE TRIGGER items_inserted_version AFTER INSERT ON items
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER items_updated_version AFTER UPDATE ON items
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER items_deleted_version AFTER DELETE ON items
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = OLD.transaction_id; END;
CREATE TRIGGER cancellations_inserted_version AFTER INSERT ON cancellations
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER cancellations_updated_version
AFTER UPDATE OF receipt_number, items, refund, outcome, created_at ON cancellations
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER cancellations_deleted_version AFTER DELETE ON cancellations
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = OLD.transaction_id; END;
CREATE TRIGGER email_messages_inserted_version AFTER INSERT ON email_messages
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER email_messages_updated_version
AFTER UPDATE OF kind, receipt_number, recipients, status, updated_at ON email_messages
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id; END;
CREATE TRIGGER email_messages_deleted_version AFTER DELETE ON email_messages
BEGIN UPDATE transaction_versions SET version = version + 1 WHERE id = OLD.transaction_id; END;
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::sqlite::search_index;

    #[test]
    fn versions_are_numbered_from_one_without_gaps() {
        for (index, migration) in MIGRATIONS.iter().enumerate() {
            assert_eq!(
                migration.version as usize,
                index + 1,
                "{}",
                migration.description
            );
        }
    }

    /// Migration 24 rebuilds `transactions` as a rowid table: the rows, the indexes and
    /// triggers on it, and the foreign keys pointing at it stay as they were, and work.
    #[test]
    fn migration_24_keeps_the_rows_indexes_triggers_and_foreign_keys_of_transactions() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "foreign_keys", true).unwrap();
        let before_24 = &MIGRATIONS[..23];
        assert_eq!(before_24.last().unwrap().version, 23);
        let apply = |conn: &mut Connection, migration: &Migration| {
            let tx = conn.transaction().unwrap();
            tx.execute_batch(migration.sql).unwrap();
            for (_, step) in CODE_STEPS.iter().filter(|(v, _)| *v == migration.version) {
                step(&tx).unwrap();
            }
            tx.pragma_update(None, "user_version", migration.version)
                .unwrap();
            tx.commit().unwrap();
        };
        for migration in before_24 {
            apply(&mut conn, migration);
        }
        conn.execute_batch(
            "INSERT INTO providers (id, name, created_at) VALUES ('p1', 'P', '2026-01-01T00:00:00Z');
             INSERT INTO transactions (id, provider_id, reference, status, title, currency,
                 payload, total, created_at, updated_at, time_zone)
             VALUES ('t1', 'p1', 'CHK-AAAAAAAA', 'PENDING', 'Trip', 'EUR', '{\"x\":1}', '10.00',
                 '2026-01-01T00:00:00Z', '2026-01-01T00:00:00Z', 'Europe/Berlin');
             INSERT INTO items (transaction_id, order_no, total) VALUES ('t1', 1, '10.00');",
        )
        .unwrap();
        let schema = |conn: &Connection, of: &str| -> Vec<(String, String)> {
            conn.prepare(
                "SELECT name, sql FROM sqlite_schema WHERE tbl_name = ?1 \
                 AND type IN ('index', 'trigger') AND sql IS NOT NULL ORDER BY name",
            )
            .unwrap()
            .query_map([of], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
        };
        let rows = |conn: &Connection| -> Vec<String> {
            conn.prepare("SELECT json_array(*) FROM (SELECT * FROM transactions ORDER BY id)")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        let attached = schema(&conn, "transactions");
        assert!(attached.len() >= 8, "{attached:?}");
        let stored = rows(&conn);
        let searched: i64 = conn
            .query_row("SELECT count(*) FROM transaction_search_keys", [], |r| {
                r.get(0)
            })
            .unwrap();

        assert_eq!(migrate_to(&mut conn, 24).unwrap(), 24);

        let table: String = conn
            .query_row(
                "SELECT sql FROM sqlite_schema WHERE name = 'transactions'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert!(!table.contains("WITHOUT ROWID"), "{table}");
        assert!(
            table.contains("pay_expires_at"),
            "every column kept: {table}"
        );
        assert_eq!(schema(&conn, "transactions"), attached);
        assert_eq!(rows(&conn), stored);
        assert!(
            !conn
                .query_row(
                    "SELECT count(*) FROM sqlite_schema WHERE sql LIKE '%transactions_rebuilt%'",
                    [],
                    |r| r.get::<_, i64>(0)
                )
                .unwrap()
                .is_positive(),
            "nothing names the table set aside"
        );
        let parents: Vec<String> = conn
            .prepare("SELECT \"table\" FROM pragma_foreign_key_list('items')")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(parents, ["transactions"]);
        let problems: i64 = conn
            .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(problems, 0);
        // The triggers work on the new table, and the foreign keys are enforced.
        conn.execute_batch(
            "INSERT INTO transactions (id, provider_id, reference, status, title, currency,
                 payload, total, created_at, updated_at)
             VALUES ('t2', 'p1', 'CHK-BBBBBBBB', 'PENDING', 'Trip', 'EUR', '{}', '1.00',
                 '2026-01-02T00:00:00Z', '2026-01-02T00:00:00Z');",
        )
        .unwrap();
        let searched_after: i64 = conn
            .query_row("SELECT count(*) FROM transaction_search_keys", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(searched_after, searched + 1, "the search trigger noted t2");
        assert!(
            conn.execute(
                "INSERT INTO items (transaction_id, order_no, total) VALUES ('nope', 1, '1')",
                []
            )
            .is_err(),
            "an item of no transaction is refused"
        );
        assert!(
            conn.execute("DELETE FROM transactions WHERE id = 't1'", [])
                .is_err(),
            "a transaction with items cannot go"
        );
    }

    #[test]
    fn migrations_apply_to_an_empty_database_and_are_idempotent() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "foreign_keys", true).unwrap();
        assert_eq!(migrate(&mut conn).unwrap(), latest_version());
        assert_eq!(migrate(&mut conn).unwrap(), latest_version());
        let version: u32 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(version, latest_version());
        let fk_problems: i64 = conn
            .query_row("SELECT count(*) FROM pragma_foreign_key_check", [], |r| {
                r.get(0)
            })
            .unwrap();
        assert_eq!(fk_problems, 0);
    }

    /// A deletion of a parent row checks each foreign key pointing at it: without an index on
    /// the referencing column that check reads the whole child table (a file's deletion read
    /// every cancellation before migration 22).
    #[test]
    fn every_foreign_key_of_a_deletable_parent_is_indexed() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let tables: Vec<String> = conn
            .prepare("SELECT name FROM sqlite_master WHERE type = 'table'")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let mut checked = 0;
        for table in &tables {
            // The first column of each index, and of the primary key.
            let mut leading: Vec<String> = conn
                .prepare(&format!(
                    "SELECT ii.name FROM pragma_index_list('{table}') il, \
                     pragma_index_info(il.name) ii WHERE ii.seqno = 0"
                ))
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            leading.extend(
                conn.prepare(&format!(
                    "SELECT name FROM pragma_table_info('{table}') WHERE pk = 1"
                ))
                .unwrap()
                .query_map([], |r| r.get::<_, String>(0))
                .unwrap()
                .map(Result::unwrap),
            );
            let keys: Vec<(String, String)> = conn
                .prepare(&format!(
                    "SELECT \"table\", \"from\" FROM pragma_foreign_key_list('{table}')"
                ))
                .unwrap()
                .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap();
            for (parent, column) in keys {
                checked += 1;
                assert!(
                    crate::store::NEVER_DELETED_PARENTS.contains(&parent.as_str())
                        || leading.contains(&column),
                    "{table}.{column} references {parent} without an index"
                );
            }
        }
        assert!(checked > 10, "only {checked} foreign keys found");
    }

    #[test]
    fn amounts_are_never_stored_as_real() {
        let mut conn = Connection::open_in_memory().unwrap();
        migrate(&mut conn).unwrap();
        let real_columns: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master m, pragma_table_info(m.name) c \
                 WHERE m.type = 'table' AND upper(c.type) IN ('REAL', 'FLOAT', 'DOUBLE')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(real_columns, 0);
    }

    /// Migration 11 moves each transaction's version to `transaction_versions` with its owner,
    /// keeps its value, and the triggers go on moving it there (since migration 29 the first
    /// change of a new transaction makes its row).
    #[test]
    fn versions_move_to_their_own_table_with_their_values() {
        let mut conn = Connection::open_in_memory().unwrap();
        for migration in MIGRATIONS.iter().filter(|m| m.version <= 10) {
            conn.execute_batch(migration.sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 10).unwrap();
        conn.execute_batch(
            "INSERT INTO providers (id, name, created_at) VALUES ('p1', 'Acme', 't');
             INSERT INTO transactions (id, provider_id, reference, status, title, currency, \
               payload, total, created_at, updated_at) \
               VALUES ('tx1', 'p1', 'CHK-1', 'PENDING', 'a', 'EUR', '{}', '1', 't', 't');
             INSERT INTO items (transaction_id, order_no, total) VALUES ('tx1', 1, '1');
             UPDATE transactions SET title = 'b' WHERE id = 'tx1';",
        )
        .unwrap();
        let before: i64 = conn
            .query_row(
                "SELECT version FROM transactions WHERE id = 'tx1'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(before, 2, "an item insert and an update, each once");

        migrate(&mut conn).unwrap();
        let version = |conn: &Connection| -> (String, i64) {
            conn.query_row(
                "SELECT provider_id, version FROM transaction_versions WHERE id = 'tx1'",
                [],
                |r| Ok((r.get(0)?, r.get(1)?)),
            )
            .unwrap()
        };
        assert_eq!(version(&conn), ("p1".to_owned(), before));
        conn.execute("UPDATE items SET status = 'CANCELLED'", [])
            .unwrap();
        assert_eq!(version(&conn).1, before + 1, "an item change moves it");
        conn.execute("UPDATE transactions SET status = 'CANCELLED'", [])
            .unwrap();
        assert_eq!(
            version(&conn).1,
            before + 2,
            "a transaction change moves it"
        );
        conn.execute_batch(
            "INSERT INTO transactions (id, provider_id, reference, status, title, currency, \
               payload, total, created_at, updated_at) \
               VALUES ('tx2', 'p1', 'CHK-2', 'PENDING', 'a', 'EUR', '{}', '1', 't', 't');",
        )
        .unwrap();
        let rows = |conn: &Connection| -> Vec<i64> {
            conn.prepare("SELECT version FROM transaction_versions WHERE id = 'tx2'")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<Result<_, _>>()
                .unwrap()
        };
        // Since migration 29 a new transaction has no row (version 0) until its first change.
        assert_eq!(rows(&conn), Vec::<i64>::new(), "no row from the insert");
        conn.execute("UPDATE transactions SET title = 'c' WHERE id = 'tx2'", [])
            .unwrap();
        assert_eq!(rows(&conn), vec![1], "the first change makes it, at 1");
    }

    /// Migration 23 fills the overview's sums from the payments and successful refunds
    /// already recorded, per provider, quarter hour and currency, in exact decimals; a refund
    /// recorded before cancellations kept their currency takes its transaction's.
    #[test]
    fn overview_sums_are_filled_from_what_was_recorded() {
        let mut conn = Connection::open_in_memory().unwrap();
        for migration in MIGRATIONS.iter().filter(|m| m.version <= 22) {
            conn.execute_batch(migration.sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 22).unwrap();
        let transaction = |id: &str, provider: &str, currency: &str, paid: Option<(&str, &str)>| {
            let (amount, at) = paid.unzip();
            conn.execute(
                "INSERT INTO transactions (id, provider_id, reference, status, title, currency, \
                   payload, total, created_at, updated_at, paid_amount, paid_at) \
                   VALUES (?1, ?2, ?1, 'PAID', 'a', ?3, '{}', '1', 't', 't', ?4, ?5)",
                rusqlite::params![id, provider, currency, amount, at],
            )
            .unwrap();
        };
        conn.execute_batch(
            "INSERT INTO providers (id, name, created_at) VALUES ('p1', 'Acme', 't'), \
             ('p2', 'Globex', 't');",
        )
        .unwrap();
        transaction(
            "a",
            "p1",
            "EUR",
            Some(("0.10", "2030-01-02T10:00:00.000000Z")),
        );
        transaction(
            "b",
            "p1",
            "EUR",
            Some(("0.20", "2030-01-02T10:14:59.999999Z")),
        );
        transaction(
            "c",
            "p1",
            "EUR",
            Some(("1.00", "2030-01-02T10:15:00.000000Z")),
        );
        transaction(
            "d",
            "p1",
            "KWD",
            Some(("1.000", "2030-01-02T10:15:00.000000Z")),
        );
        transaction(
            "e",
            "p2",
            "EUR",
            Some(("5.00", "2030-01-02T10:01:00.000000Z")),
        );
        transaction("f", "p1", "EUR", None);
        let cancellation = |id: &str,
                            tx: &str,
                            outcome: &str,
                            refund: &str,
                            currency: Option<&str>| {
            conn.execute(
                "INSERT INTO cancellations (id, transaction_id, provider_id, items, refund, \
                   outcome, gateway_key, created_at, updated_at, currency) \
                   VALUES (?1, ?2, 'p1', '[1]', ?3, ?4, ?1, '2030-01-02T10:20:00.000000Z', 't', ?5)",
                rusqlite::params![id, tx, refund, outcome, currency],
            )
            .unwrap();
        };
        cancellation("r1", "a", "SUCCESS", "0.05", Some("EUR"));
        cancellation("r2", "d", "SUCCESS", "0.250", None);
        cancellation("r3", "c", "FAILED", "1.00", Some("EUR"));
        cancellation("r4", "c", "PENDING", "1.00", Some("EUR"));

        migrate(&mut conn).unwrap();
        let rows: Vec<(String, String, String, String, String)> = conn
            .prepare("SELECT * FROM overview_sums ORDER BY provider_id, bucket, currency")
            .unwrap()
            .query_map([], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        let row = |p: &str, bucket: &str, currency: &str, paid: &str, refunded: &str| {
            (
                p.to_owned(),
                format!("2030-01-02T{bucket}:00.000000Z"),
                currency.to_owned(),
                paid.to_owned(),
                refunded.to_owned(),
            )
        };
        assert_eq!(
            rows,
            vec![
                row("p1", "10:00", "EUR", "0.30", "0"),
                row("p1", "10:15", "EUR", "1.00", "0.05"),
                row("p1", "10:15", "KWD", "1.000", "0.250"),
                row("p2", "10:00", "EUR", "5.00", "0"),
            ]
        );
        let dropped: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_master WHERE type = 'index' \
                 AND name IN ('transactions_paid', 'cancellations_succeeded')",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(dropped, 0, "the indexes only the overview read are gone");
    }

    /// An insert of a transaction with the columns the search reads (the search tests).
    fn insert_sql(id: &str, provider: &str, reference: &str, title: &str, at: &str) -> String {
        insert_sql_keyed(None, id, provider, reference, title, at)
    }

    /// [`insert_sql`], with the rowid given by `key` (SQL) when there is one.
    fn insert_sql_keyed(
        key: Option<&str>,
        id: &str,
        provider: &str,
        reference: &str,
        title: &str,
        at: &str,
    ) -> String {
        let (rowid, value) = key.map_or((String::new(), String::new()), |key| {
            ("rowid, ".to_owned(), format!("{key}, "))
        });
        format!(
            "INSERT INTO transactions ({rowid}id, provider_id, reference, status, title, \
               currency, payload, total, created_at, updated_at) \
               VALUES ({value}'{id}', '{provider}', '{reference}', 'PENDING', '{title}', 'EUR', \
               '{{}}', '1', '{at}', '{at}');"
        )
    }

    /// Rows of two columns, a text and a number, in the order `sql` gives.
    fn pairs(conn: &Connection, sql: &str) -> Vec<(String, i64)> {
        conn.prepare(sql)
            .unwrap()
            .query_map([], |r| Ok((r.get(0)?, r.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    }

    /// The keys the search file's index finds for `text`, in order.
    fn found(conn: &Connection, text: &str) -> Vec<i64> {
        conn.prepare(
            "SELECT rowid FROM search.transaction_search WHERE transaction_search MATCH ?1 \
             ORDER BY rowid",
        )
        .unwrap()
        .query_map([format!("\"{text}\"")], |r| r.get(0))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap()
    }

    /// Migration 21 gives the transactions already there their search keys, one range per
    /// provider in creation order, and the triggers keep the search index true after it (in
    /// its own file since migration 25). Since migration 26 a key is its transaction's rowid;
    /// the rows inserted before, without one, are moved to their provider's next key, and
    /// since migration 29 an insert gives it.
    #[test]
    fn search_keys_are_given_per_provider_in_creation_order() {
        let mut conn = Connection::open_in_memory().unwrap();
        for migration in MIGRATIONS.iter().filter(|m| m.version <= 20) {
            conn.execute_batch(migration.sql).unwrap();
        }
        conn.pragma_update(None, "user_version", 20).unwrap();
        let insert = insert_sql;
        conn.execute_batch(&format!(
            "INSERT INTO providers (id, name, created_at) VALUES ('p1', 'Acme', '1');
             INSERT INTO providers (id, name, created_at) VALUES ('p2', 'Globex', '2');
             {}{}{}",
            insert("b", "p1", "CHK-B", "Lisbon", "2025-01-02"),
            insert("a", "p1", "CHK-A", "Porto", "2025-01-01"),
            insert("c", "p2", "CHK-C", "Lisbon", "2025-01-01"),
        ))
        .unwrap();
        migrate(&mut conn).unwrap();
        // The index in a search file of its own (migration 25), built from every transaction.
        conn.execute_batch("ATTACH DATABASE ':memory:' AS search")
            .unwrap();
        assert_eq!(search_index::prepare(&conn).unwrap(), 0);
        let mut sweep = search_index::Sweep::default();
        let mut step = |conn: &Connection| {
            search_index::index_step(conn, search_index::STEP, &mut sweep).unwrap()
        };
        assert_eq!(step(&conn).1, 3, "the three already there");
        // Since migration 29 an insert gives its key (the store's always did).
        let keyed = |id: &str, provider: &str, reference: &str, title: &str, at: &str| {
            let key = search_index::next_key_sql(provider);
            insert_sql_keyed(Some(&key), id, provider, reference, title, at)
        };
        conn.execute_batch(&format!(
            "INSERT INTO providers (id, name, created_at) VALUES ('p3', 'Initech', '3');
             {}{}",
            keyed("d", "p1", "CHK-D", "Lisbon again", "2025-01-03"),
            keyed("e", "p3", "CHK-E", "Faro", "2025-01-03"),
        ))
        .unwrap();
        // Inserted without events: found when the indexer looks at every range.
        let (indexed, taken) =
            search_index::index_step(&conn, search_index::STEP, &mut Default::default()).unwrap();
        assert_eq!(taken, 2, "the two new ones wait for the indexer");
        assert_eq!(step(&conn), (indexed, 0), "nothing is indexed twice");
        assert_eq!(
            search_index::forget_indexed(&conn, indexed).unwrap(),
            0,
            "no notes: keyed inserts are taken from their ranges"
        );
        let keys = pairs(&conn, "SELECT id, rowid FROM transactions ORDER BY rowid");
        let range = 1_i64 << 40;
        let expected: Vec<(String, i64)> = [
            ("a", range + 1),
            ("b", range + 2),
            ("d", range + 3),
            ("c", 2 * range + 1),
            ("e", 3 * range + 1),
        ]
        .into_iter()
        .map(|(id, key)| (id.to_owned(), key))
        .collect();
        assert_eq!(keys, expected);
        assert_eq!(
            found(&conn, "lisbo"),
            vec![range + 2, range + 3, 2 * range + 1]
        );
        assert_eq!(found(&conn, "chk-e"), vec![3 * range + 1]);
        conn.execute_batch(
            "UPDATE transactions SET payment = '{\"customer\":{\"email\":\"Ada@Example.com\"}}' \
             WHERE id = 'a'",
        )
        .unwrap();
        assert!(
            found(&conn, "ada@example").is_empty(),
            "not before the indexer's step"
        );
        step(&conn);
        assert_eq!(found(&conn, "ada@example"), vec![range + 1]);
        assert_eq!(found(&conn, "porto"), vec![range + 1], "the rest stays");
        conn.execute_batch("DELETE FROM transactions WHERE id = 'b'")
            .unwrap();
        step(&conn);
        assert_eq!(found(&conn, "lisbon"), vec![range + 3, 2 * range + 1]);
    }

    /// Migration 26: each transaction's rowid becomes its search key, the keys table goes, and
    /// the search file built before stays true (its keys are the same numbers); the versions
    /// do not move.
    #[test]
    fn migration_26_makes_the_search_keys_the_rowids_and_keeps_the_search_file() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate_to(&mut conn, 25).unwrap(), 25);
        let insert = |id: &str, provider: &str, title: &str, at: &str| {
            insert_sql(id, provider, &format!("CHK-{id}"), title, at)
        };
        conn.execute_batch(&format!(
            "INSERT INTO providers (id, name, created_at) VALUES ('p1', 'Acme', '1');
             INSERT INTO providers (id, name, created_at) VALUES ('p2', 'Globex', '2');
             {}{}{}",
            insert("a", "p1", "Lisbon", "2025-01-01"),
            insert("c", "p2", "Lisbon", "2025-01-01"),
            insert("b", "p1", "Porto", "2025-01-02"),
        ))
        .unwrap();
        conn.execute_batch("UPDATE transactions SET status = 'PAID' WHERE id = 'b'")
            .unwrap();
        conn.execute_batch("ATTACH DATABASE ':memory:' AS search")
            .unwrap();
        // The search file as this build makes it, its notes as the build of migration 25 made
        // them (by the keys table).
        search_index::prepare(&conn).unwrap();
        conn.execute_batch(
            "DELETE FROM transaction_search_pending;
             INSERT INTO transaction_search_pending (key, reference, title, email)
             SELECT k.key, t.reference, t.title, NULL
             FROM transaction_search_keys k JOIN transactions t ON t.id = k.transaction_id
             ORDER BY k.key;",
        )
        .unwrap();
        let (indexed, taken) = search_index::index_step(
            &conn,
            search_index::STEP,
            &mut search_index::Sweep::notes_only(),
        )
        .unwrap();
        assert_eq!(taken, 3);
        search_index::forget_indexed(&conn, indexed).unwrap();
        let keys = pairs(
            &conn,
            "SELECT transaction_id, key FROM transaction_search_keys ORDER BY key",
        );
        let versions = |conn: &Connection| {
            pairs(
                conn,
                "SELECT id, version FROM transaction_versions ORDER BY id",
            )
        };
        let versions_before = versions(&conn);

        migrate(&mut conn).unwrap();

        let rowids = pairs(&conn, "SELECT id, rowid FROM transactions ORDER BY rowid");
        assert_eq!(rowids, keys);
        let range = 1_i64 << 40;
        assert_eq!(
            rowids.iter().map(|(_, key)| *key).collect::<Vec<_>>(),
            vec![range + 1, range + 2, 2 * range + 1]
        );
        assert_eq!(
            versions(&conn),
            versions_before,
            "moving a row is no change"
        );
        let tables: i64 = conn
            .query_row(
                "SELECT count(*) FROM sqlite_schema WHERE name = 'transaction_search_keys'",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(tables, 0);
        assert_eq!(
            search_index::prepare(&conn).unwrap(),
            indexed,
            "the search file is kept, not built again"
        );
        assert_eq!(found(&conn, "lisbon"), vec![range + 1, 2 * range + 1]);
        // The triggers note by rowid: a title changed; a new transaction at its provider's
        // next key is not noted (migration 27), the indexer takes it from its range.
        conn.execute_batch(&format!(
            "UPDATE transactions SET title = 'Lisbon too' WHERE id = 'b'; {}",
            insert("d", "p2", "Lisbon again", "2025-01-03")
        ))
        .unwrap();
        let noted: Vec<i64> = conn
            .prepare("SELECT key FROM transaction_search_pending ORDER BY seq")
            .unwrap()
            .query_map([], |r| r.get(0))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(noted, vec![range + 2]);
        search_index::index_step(
            &conn,
            search_index::STEP,
            &mut search_index::Sweep::default(),
        )
        .unwrap();
        assert_eq!(
            found(&conn, "lisbon"),
            vec![range + 1, range + 2, 2 * range + 1, 2 * range + 2]
        );
    }

    /// Migration 27: a new transaction is no longer noted. A search file made before it keeps
    /// its index; each range's watermark starts at the last key noted before the migration,
    /// so what was indexed is not read again, and what was noted is still indexed from its note.
    #[test]
    fn migration_27_keeps_the_search_file_and_starts_its_watermarks() {
        let mut conn = Connection::open_in_memory().unwrap();
        assert_eq!(migrate_to(&mut conn, 26).unwrap(), 26);
        let insert = |id: &str, provider: &str, title: &str| {
            insert_sql(id, provider, &format!("CHK-{id}"), title, "2025-01-01")
        };
        conn.execute_batch(&format!(
            "INSERT INTO providers (id, name, created_at) VALUES ('p1', 'Acme', '1');
             INSERT INTO providers (id, name, created_at) VALUES ('p2', 'Globex', '2');
             {}{}{}",
            insert("a", "p1", "Lisbon"),
            insert("b", "p2", "Lisbon"),
            insert("c", "p1", "Porto"),
        ))
        .unwrap();
        // The search file as the build of migration 26 made it: indexed from the notes, and
        // without watermarks.
        conn.execute_batch("ATTACH DATABASE ':memory:' AS search")
            .unwrap();
        search_index::prepare(&conn).unwrap();
        conn.execute_batch("UPDATE search.search_state SET indexed_seq = 0")
            .unwrap();
        let notes_only = || search_index::Sweep::notes_only();
        let (indexed, taken) =
            search_index::index_step(&conn, search_index::STEP, &mut notes_only()).unwrap();
        assert_eq!(taken, 3);
        search_index::forget_indexed(&conn, indexed).unwrap();
        conn.execute_batch("DROP TABLE search.search_watermarks")
            .unwrap();
        // Noted by migration 26's trigger, not yet indexed.
        conn.execute_batch(&insert("d", "p2", "Faro")).unwrap();

        migrate(&mut conn).unwrap();

        let range = 1_i64 << 40;
        assert_eq!(
            pairs(
                &conn,
                "SELECT provider_id, noted_until FROM search_providers ORDER BY number"
            ),
            vec![
                ("p1".to_owned(), range + 2),
                ("p2".to_owned(), 2 * range + 2)
            ]
        );
        assert_eq!(
            search_index::prepare(&conn).unwrap(),
            indexed,
            "the search file is kept, not built again"
        );
        let (_, taken) =
            search_index::index_step(&conn, search_index::STEP, &mut Default::default()).unwrap();
        assert_eq!(taken, 1, "the note of d only: the rest is not read again");
        assert_eq!(found(&conn, "lisbon"), vec![range + 1, 2 * range + 1]);
        assert_eq!(found(&conn, "faro"), vec![2 * range + 2]);
        // A new transaction at its provider's next key: no note, found in its range.
        conn.execute_batch(&insert("e", "p2", "Braga")).unwrap();
        let notes: i64 = conn
            .query_row(
                "SELECT count(*) FROM transaction_search_pending WHERE key = ?1",
                [2 * range + 3],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(notes, 0);
        let (_, taken) =
            search_index::index_step(&conn, search_index::STEP, &mut Default::default()).unwrap();
        assert_eq!(taken, 1);
        assert_eq!(found(&conn, "braga"), vec![2 * range + 3]);
    }

    #[test]
    fn a_newer_file_is_refused() {
        let mut conn = Connection::open_in_memory().unwrap();
        conn.pragma_update(None, "user_version", latest_version() + 1)
            .unwrap();
        assert!(matches!(
            migrate(&mut conn),
            Err(MigrationError::TooNew { .. })
        ));
    }
}
