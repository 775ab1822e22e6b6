//! The PostgreSQL schema as a static, versioned list of migrations, tracked in the table
//! `schema_migrations` and applied under a session advisory lock, so that instances starting
//! together migrate once and the others wait, then find the schema up to date.
//!
//! A migration is never edited once released: a change of the schema is a new entry at the end.
//! The schema matches the SQLite one table for table (see `store::sqlite::migrations`); types
//! are PostgreSQL's own: `NUMERIC` amounts (R-1.1), `timestamptz` instants, `jsonb` documents,
//! `json` where a provider's object is echoed with its keys in the order written.

use tokio_postgres::Client;

use crate::store::StoreError;
use crate::store::sqlite::migrations::{Migration, MigrationError};

/// Key of the advisory lock held while migrating (any constant unique to this schema).
const MIGRATION_LOCK: i64 = 0x0C4E_C0D7_5EC0_0001;

/// Every migration, oldest first.
pub static MIGRATIONS: &[Migration] = &[
    Migration {
        version: 1,
        description: "providers, credentials, transactions, items, files, cancellations with \
                  leases, idempotency keys, the ledger gateway's refunds",
        sql: r#"
CREATE TABLE providers (
    id                 text PRIMARY KEY,
    name               text NOT NULL,
    time_zone          text NOT NULL DEFAULT 'UTC',
    default_policy     jsonb,                          -- CancellationPolicy or NULL (R-5.1)
    category_policies  jsonb NOT NULL DEFAULT '{}',    -- {CATEGORY: CancellationPolicy}
    next_receipt_no    bigint NOT NULL DEFAULT 1,      -- receipt numbers per provider (R-10.2)
    created_at         timestamptz NOT NULL
);
CREATE INDEX providers_name ON providers(name, created_at);

CREATE TABLE credentials (
    widget_id    text PRIMARY KEY,
    provider_id  text NOT NULL REFERENCES providers(id),
    secret_hash  bytea NOT NULL CHECK (length(secret_hash) = 32),  -- SHA-256 (R-7.1)
    scopes       text NOT NULL,                                    -- comma-separated (R-7.3)
    created_at   timestamptz NOT NULL,
    revoked_at   timestamptz
);
CREATE INDEX credentials_provider ON credentials(provider_id);

CREATE TABLE transactions (
    id               text PRIMARY KEY,                 -- UUID v7, lower-case (R-3.1)
    provider_id      text NOT NULL REFERENCES providers(id),
    reference        text NOT NULL UNIQUE,             -- CHK-XXXXXXXX (R-3.2)
    status           text NOT NULL,
    title            text NOT NULL,
    currency         text NOT NULL,
    ref_ids          json NOT NULL,                    -- as written: keys keep their order
    note             text,
    attachments      jsonb NOT NULL,
    email            jsonb,
    payload          text NOT NULL,                    -- creation body exactly as received
    time_zone        text,                             -- provider zone at creation (R-3.5)
    total            numeric NOT NULL,
    paid_amount      numeric,
    refunded_amount  numeric NOT NULL DEFAULT 0,
    paid_at          timestamptz,
    payment          json,                             -- payment, customer, card, … as written
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL
);
CREATE INDEX transactions_provider ON transactions(provider_id, created_at);

CREATE TABLE items (
    transaction_id  text NOT NULL REFERENCES transactions(id),
    order_no        integer NOT NULL CHECK (order_no >= 1),        -- from 1 (R-4.1)
    name            text,
    category        text,
    total           numeric NOT NULL,
    policy          jsonb,                             -- effective policy at creation (R-3.5)
    period          jsonb,
    status          text NOT NULL DEFAULT 'ACTIVE',    -- ACTIVE, CANCELLING, CANCELLED
    refunded        numeric NOT NULL DEFAULT 0,
    PRIMARY KEY (transaction_id, order_no)
);

CREATE TABLE files (
    id            text PRIMARY KEY,
    provider_id   text NOT NULL REFERENCES providers(id),
    name          text,
    content_type  text NOT NULL,
    size_bytes    bigint NOT NULL CHECK (size_bytes >= 0),
    sha256        text NOT NULL,
    share_token   text UNIQUE,
    content       bytea NOT NULL,
    created_at    timestamptz NOT NULL
);
CREATE INDEX files_provider ON files(provider_id, created_at);

CREATE TABLE cancellations (
    id                  text PRIMARY KEY,              -- refund id, the gateway's key (R-4.8)
    transaction_id      text NOT NULL REFERENCES transactions(id),
    provider_id         text NOT NULL REFERENCES providers(id),
    receipt_number      text,                          -- CR-000042 once SUCCESS
    items               jsonb NOT NULL,                -- order numbers
    breakdown           jsonb NOT NULL,                -- per-item penalty and refund lines
    refund              numeric NOT NULL,
    currency            text NOT NULL,
    outcome             text NOT NULL,                 -- PENDING, SUCCESS, FAILED
    error_message       text,
    invoice_title       text,
    invoice_number      text,
    invoice_file_id     text REFERENCES files(id),
    payment_reference   text,
    transaction_status  text,
    gateway_reference   text,
    idempotency_key     text,
    idempotency_route   text,
    idempotency_hash    bytea,
    lease_owner         text,                          -- instance driving the refund
    lease_until         timestamptz,
    created_at          timestamptz NOT NULL,
    updated_at          timestamptz NOT NULL,
    completed_at        timestamptz
);
CREATE INDEX cancellations_transaction ON cancellations(transaction_id, created_at, id);
CREATE UNIQUE INDEX cancellations_receipt ON cancellations(provider_id, receipt_number)
    WHERE receipt_number IS NOT NULL;
CREATE INDEX cancellations_pending ON cancellations(created_at, id) WHERE outcome = 'PENDING';

CREATE TABLE idempotency_keys (
    provider_id    text NOT NULL REFERENCES providers(id),
    key            text NOT NULL,
    route          text NOT NULL,
    body_hash      bytea NOT NULL,
    state          text NOT NULL,                      -- running, done
    status_code    integer,
    response_body  text,
    created_at     timestamptz NOT NULL,
    PRIMARY KEY (provider_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys(created_at);

CREATE TABLE ledger_refunds (
    refund_id       text PRIMARY KEY,
    transaction_id  text NOT NULL,
    amount          text NOT NULL,
    currency        text NOT NULL,
    recorded_at     text NOT NULL
);
CREATE INDEX ledger_refunds_by_transaction ON ledger_refunds(transaction_id);
"#,
    },
    Migration {
        version: 2,
        description: "payment pages: hashed capability tokens, failed attempts, service keys",
        sql: r#"
ALTER TABLE transactions ADD COLUMN pay_token_hash bytea;   -- SHA-256 of the page's token
ALTER TABLE transactions ADD COLUMN pay_expires_at timestamptz;
CREATE UNIQUE INDEX transactions_pay_token ON transactions(pay_token_hash)
    WHERE pay_token_hash IS NOT NULL;

CREATE TABLE payment_failures (
    transaction_id  text NOT NULL REFERENCES transactions(id),
    at              timestamptz NOT NULL
);
CREATE INDEX payment_failures_transaction ON payment_failures(transaction_id, at);

CREATE TABLE service_keys (
    name        text PRIMARY KEY,
    key         bytea NOT NULL,                  -- 32 random bytes
    created_at  timestamptz NOT NULL
);
"#,
    },
    Migration {
        version: 3,
        description: "outbox: events, webhook endpoints and deliveries, e-mails",
        sql: r#"
ALTER TABLE cancellations ADD COLUMN unknown_since timestamptz;

CREATE TABLE events (
    seq             bigserial PRIMARY KEY,              -- the order events happened in
    id              text NOT NULL UNIQUE,               -- evt_…, the webhook-id
    provider_id     text NOT NULL,
    transaction_id  text NOT NULL,
    type            text NOT NULL,
    payload         text NOT NULL,                      -- the Standard Webhooks payload as sent
    created_at      timestamptz NOT NULL
);
CREATE INDEX events_provider ON events(provider_id, seq);

CREATE TABLE webhook_endpoints (
    id               text PRIMARY KEY,                  -- ep_…
    provider_id      text NOT NULL REFERENCES providers(id),
    url              text NOT NULL,
    event_types      text,                              -- comma-separated; NULL: every type
    secret           text NOT NULL,                     -- whsec_…: it signs, so it is kept
    previous_secret  text,                              -- still signs until previous_until
    previous_until   timestamptz,
    created_at       timestamptz NOT NULL,
    removed_at       timestamptz
);
CREATE INDEX webhook_endpoints_provider ON webhook_endpoints(provider_id);

CREATE TABLE webhook_deliveries (
    event_seq         bigint NOT NULL REFERENCES events(seq),
    endpoint_id       text NOT NULL REFERENCES webhook_endpoints(id),
    transaction_id    text NOT NULL,
    status            text NOT NULL,                    -- QUEUED, SENT, FAILED
    attempts          integer NOT NULL,
    next_attempt_at   timestamptz NOT NULL,
    first_attempt_at  timestamptz,
    last_attempt_at   timestamptz,
    last_result       text,
    delivered_at      timestamptz,
    lease_owner       text,
    lease_until       timestamptz,
    created_at        timestamptz NOT NULL,
    PRIMARY KEY (event_seq, endpoint_id)
);
CREATE INDEX webhook_deliveries_due ON webhook_deliveries(status, next_attempt_at);
CREATE INDEX webhook_deliveries_order ON webhook_deliveries(endpoint_id, transaction_id, status);

CREATE TABLE email_messages (
    id               text PRIMARY KEY,
    event_seq        bigint NOT NULL REFERENCES events(seq),
    provider_id      text NOT NULL,
    transaction_id   text NOT NULL,
    kind             text NOT NULL,                     -- CONTRACT, RECEIPT
    receipt_number   text,
    recipients       jsonb NOT NULL,
    message_id       text NOT NULL,
    status           text NOT NULL,                     -- QUEUED, SENT, FAILED
    attempts         integer NOT NULL,
    next_attempt_at  timestamptz NOT NULL,
    last_error       text,
    sent_at          timestamptz,
    lease_owner      text,
    lease_until      timestamptz,
    created_at       timestamptz NOT NULL,
    updated_at       timestamptz NOT NULL
);
CREATE INDEX email_messages_due ON email_messages(status, next_attempt_at);
CREATE INDEX email_messages_transaction ON email_messages(transaction_id);
"#,
    },
    Migration {
        version: 4,
        description: "shared file links expire; the owner renews or deletes them",
        // Links shared before this migration have NULL: they expire the configured lifetime
        // after their upload (`app::files`).
        sql: "ALTER TABLE files ADD COLUMN share_expires_at timestamptz;",
    },
    Migration {
        version: 5,
        description: "access epoch: bumped by every change of a credential or provider settings",
        // The receipt counter of `providers` is not a setting and bumps nothing.
        sql: r#"
CREATE TABLE access_epoch (
    id     integer PRIMARY KEY CHECK (id = 1),
    value  bigint NOT NULL
);
INSERT INTO access_epoch (id, value) VALUES (1, 0);
CREATE FUNCTION access_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE access_epoch SET value = value + 1 WHERE id = 1;
    RETURN NULL;
END
$$;
CREATE TRIGGER credentials_access_changed
    AFTER INSERT OR UPDATE OR DELETE ON credentials
    FOR EACH STATEMENT EXECUTE FUNCTION access_changed();
CREATE TRIGGER providers_access_changed
    AFTER INSERT OR DELETE OR UPDATE OF id, name, time_zone, default_policy, category_policies
    ON providers
    FOR EACH STATEMENT EXECUTE FUNCTION access_changed();
"#,
    },
    Migration {
        version: 6,
        description: "events: the writing transaction's id, so that GET /events pages in an \
                      order no later commit can fall behind",
        // `seq` is taken when an event is written, not when it commits: two transactions can
        // commit in the other order, and a page read between the two commits would list the
        // later event while the earlier one is not yet visible. Pages are ordered by the
        // writer's transaction id and list only events of transactions older than every one
        // still running on the database (`store::postgres::outbox`). Events written before this migration all
        // get the migration's transaction id and keep their `seq` order.
        sql: r#"
ALTER TABLE events ADD COLUMN txid xid8 NOT NULL DEFAULT pg_current_xact_id();
CREATE INDEX events_provider_txid ON events(provider_id, txid, seq);
DROP INDEX events_provider;
"#,
    },
    Migration {
        version: 7,
        description: "transaction versions: bumped by every change of what a status record shows",
        // The same counter as SQLite's migration 10 (`store::sqlite::migrations::VERSION_MIGRATION`). A
        // change of a shown column of an item, cancellation or e-mail updates its transaction's
        // row, which every writer of the transaction has locked first anyway. Lease columns are
        // not shown and bump nothing, so renewing a refund's lease never takes the transaction's
        // lock after the cancellation's (lock order: transaction first). The dispatcher updates
        // an e-mail's status without the transaction's lock and takes it last; no writer holds
        // a transaction's lock and then waits for an existing e-mail row.
        sql: r#"
ALTER TABLE transactions ADD COLUMN version bigint NOT NULL DEFAULT 0;
CREATE FUNCTION transactions_next_version() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    NEW.version := OLD.version + 1;
    RETURN NEW;
END
$$;
CREATE TRIGGER transactions_version BEFORE UPDATE ON transactions
    FOR EACH ROW EXECUTE FUNCTION transactions_next_version();
CREATE FUNCTION transaction_part_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE transactions SET version = version + 1 WHERE id = OLD.transaction_id;
    ELSE
        UPDATE transactions SET version = version + 1 WHERE id = NEW.transaction_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER items_version AFTER INSERT OR UPDATE OR DELETE ON items
    FOR EACH ROW EXECUTE FUNCTION transaction_part_changed();
CREATE TRIGGER cancellations_version
    AFTER INSERT OR DELETE OR UPDATE OF receipt_number, items, refund, outcome, created_at
    ON cancellations
    FOR EACH ROW EXECUTE FUNCTION transaction_part_changed();
CREATE TRIGGER email_messages_version
    AFTER INSERT OR DELETE OR UPDATE OF kind, receipt_number, recipients, status, updated_at
    ON email_messages
    FOR EACH ROW EXECUTE FUNCTION transaction_part_changed();
"#,
    },
    Migration {
        version: 8,
        description: "transaction versions in a narrow table of their own",
        // As SQLite's migration 11 (`store::sqlite::migrations::VERSION_TABLE_MIGRATION`): migration 7's
        // counter lived in `transactions`, whose rows hold the creation body, so each item
        // inserted at creation wrote a new version of that wide row (and, its page being full,
        // of every index on it). The counter now lives in a narrow row per transaction, with
        // the owner a status read needs. Lock order is unchanged: every writer of a
        // transaction locks its `transactions` row first and reaches the version row only
        // through these triggers; the dispatcher, which updates an e-mail's status without the
        // transaction's lock, takes the version row last, as it took the transaction's row.
        sql: r#"
CREATE TABLE transaction_versions (
    id           text PRIMARY KEY,
    provider_id  text NOT NULL,
    version      bigint NOT NULL DEFAULT 0
);
INSERT INTO transaction_versions (id, provider_id, version)
SELECT id, provider_id, version FROM transactions;
DROP TRIGGER transactions_version ON transactions;
DROP FUNCTION transactions_next_version();
ALTER TABLE transactions DROP COLUMN version;
CREATE OR REPLACE FUNCTION transaction_part_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'DELETE' THEN
        UPDATE transaction_versions SET version = version + 1 WHERE id = OLD.transaction_id;
    ELSE
        UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.transaction_id;
    END IF;
    RETURN NULL;
END
$$;
CREATE FUNCTION transaction_changed() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO transaction_versions (id, provider_id) VALUES (NEW.id, NEW.provider_id);
    ELSIF TG_OP = 'UPDATE' THEN
        UPDATE transaction_versions SET version = version + 1 WHERE id = NEW.id;
    ELSE
        DELETE FROM transaction_versions WHERE id = OLD.id;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER transactions_version AFTER INSERT OR UPDATE OR DELETE ON transactions
    FOR EACH ROW EXECUTE FUNCTION transaction_changed();
"#,
    },
    Migration {
        version: 9,
        description: "outbox: deliveries under a lease, by lease end",
        // As SQLite's migration 12: a claim counts each endpoint's deliveries under a live
        // lease; only attempts in flight (or left by a stopped instance) have one.
        sql: "CREATE INDEX webhook_deliveries_leased ON webhook_deliveries(lease_until) \
              WHERE lease_until IS NOT NULL;",
    },
    Migration {
        version: 10,
        description: "e-mails keep what they show of their transaction as it was at their event",
        // As SQLite's migration 13; NULL for e-mails queued before (rendered when sent).
        sql: "ALTER TABLE email_messages ADD COLUMN snapshot jsonb;",
    },
    Migration {
        version: 11,
        description: "payment attempts: one in flight per transaction, counted before sent",
        // Every writer locks the transaction's row first, so the partial unique index is a
        // second line: two attempts in flight on one transaction cannot both be stored.
        sql: r#"
CREATE TABLE payment_attempts (
    id              text PRIMARY KEY,
    transaction_id  text NOT NULL REFERENCES transactions(id),
    state           text NOT NULL,  -- IN_FLIGHT, APPROVED, DECLINED, FAILED, VOIDED, ABANDONED
    started_at      timestamptz NOT NULL,
    lease_until     timestamptz NOT NULL,
    finished_at     timestamptz,
    reference       text
);
CREATE UNIQUE INDEX payment_attempts_in_flight ON payment_attempts(transaction_id)
    WHERE state = 'IN_FLIGHT';
"#,
    },
    Migration {
        version: 12,
        description: "per-provider payment processors (Stripe keys sealed), Stripe events handled",
        // As SQLite's migration 15.
        sql: r#"
CREATE TABLE provider_processors (
    provider_id            text PRIMARY KEY REFERENCES providers(id),
    processor              text NOT NULL CHECK (processor IN ('stripe')),
    publishable_key        text NOT NULL,
    secret_key_sealed      text NOT NULL,
    secret_key_last4       text NOT NULL,
    webhook_secret_sealed  text NOT NULL,
    webhook_secret_last4   text NOT NULL,
    updated_at             timestamptz NOT NULL
);
CREATE TABLE stripe_events (
    provider_id  text NOT NULL,
    event_id     text NOT NULL,
    event_type   text NOT NULL,
    received_at  timestamptz NOT NULL,
    PRIMARY KEY (provider_id, event_id)
);
"#,
    },
    Migration {
        version: 13,
        description: "Stripe PaymentIntents of payment attempts, with the customer they pay for",
        // As SQLite's migration 16.
        sql: r#"
CREATE TABLE stripe_intents (
    intent_id       text PRIMARY KEY,
    transaction_id  text NOT NULL REFERENCES transactions(id),
    attempt_id      text NOT NULL,
    state           text NOT NULL,
    customer        jsonb NOT NULL,
    created_at      timestamptz NOT NULL,
    updated_at      timestamptz NOT NULL
);
CREATE INDEX stripe_intents_open ON stripe_intents(transaction_id) WHERE state = 'OPEN';
"#,
    },
    Migration {
        version: 14,
        description: "the provider's dashboard: users, sessions, failed sign-ins, the audit log",
        // As SQLite's migration 17.
        sql: r#"
CREATE TABLE dashboard_users (
    id                 text PRIMARY KEY,
    provider_id        text NOT NULL REFERENCES providers(id),
    email              text NOT NULL UNIQUE,
    role               text NOT NULL CHECK (role IN ('admin', 'viewer')),
    password_hash      text,
    invite_hash        bytea UNIQUE CHECK (invite_hash IS NULL OR length(invite_hash) = 32),
    invite_expires_at  timestamptz,
    created_at         timestamptz NOT NULL
);
CREATE INDEX dashboard_users_provider ON dashboard_users(provider_id);

CREATE TABLE dashboard_sessions (
    token_hash    bytea PRIMARY KEY CHECK (length(token_hash) = 32),
    user_id       text NOT NULL REFERENCES dashboard_users(id) ON DELETE CASCADE,
    csrf_token    text NOT NULL,
    created_at    timestamptz NOT NULL,
    last_seen_at  timestamptz NOT NULL
);
CREATE INDEX dashboard_sessions_user ON dashboard_sessions(user_id);

CREATE TABLE dashboard_sign_in_failures (
    key  text NOT NULL,
    at   timestamptz NOT NULL
);
CREATE INDEX dashboard_sign_in_failures_key ON dashboard_sign_in_failures(key, at);

CREATE TABLE audit_log (
    seq          bigserial PRIMARY KEY,
    provider_id  text NOT NULL REFERENCES providers(id),
    actor        text NOT NULL,
    action       text NOT NULL,
    detail       text NOT NULL,
    at           timestamptz NOT NULL
);
CREATE INDEX audit_log_provider ON audit_log(provider_id, seq);
"#,
    },
    Migration {
        version: 15,
        description: "the dashboard's second factor: one-time code secrets and recovery codes",
        // As SQLite's migration 18.
        sql: r#"
ALTER TABLE dashboard_users ADD COLUMN totp_secret text;
ALTER TABLE dashboard_users ADD COLUMN totp_pending text;
ALTER TABLE dashboard_users ADD COLUMN totp_last_step bigint;
ALTER TABLE dashboard_sessions ADD COLUMN second_factor_due boolean NOT NULL DEFAULT false;

CREATE TABLE dashboard_recovery_codes (
    user_id    text NOT NULL REFERENCES dashboard_users(id) ON DELETE CASCADE,
    code_hash  bytea NOT NULL CHECK (length(code_hash) = 32),
    used_at    timestamptz,
    PRIMARY KEY (user_id, code_hash)
);
"#,
    },
    Migration {
        version: 16,
        description: "webhook delivery attempts: each one's answer and duration",
        // As SQLite's migration 19.
        sql: r#"
CREATE TABLE webhook_attempts (
    id           bigserial PRIMARY KEY,
    event_seq    bigint NOT NULL,
    endpoint_id  text NOT NULL,
    attempt      integer NOT NULL,
    at           timestamptz NOT NULL,
    duration_ms  integer NOT NULL,
    status_code  integer,
    error        text,
    FOREIGN KEY (event_seq, endpoint_id) REFERENCES webhook_deliveries(event_seq, endpoint_id)
);
CREATE INDEX webhook_attempts_delivery ON webhook_attempts(event_seq, endpoint_id);
"#,
    },
    Migration {
        version: 17,
        description: "when each credential was last used",
        // As SQLite's migration 20.
        sql: r#"
CREATE TABLE credential_usage (
    widget_id     text PRIMARY KEY REFERENCES credentials(widget_id),
    last_used_at  timestamptz NOT NULL
);
"#,
    },
    Migration {
        version: 18,
        description: "the dashboard's transaction list: a trigram search index",
        // The search ("contains", in reference, title and customer e-mail) reads one
        // expression (`super::dashboard::SEARCH_TEXT`, the same text) through a GIN index of
        // its trigrams (pg_trgm) beside the provider, status and currency (btree_gin), so that
        // a rare text, or a common one with a rare status or currency, costs its matches, and
        // another provider's matches are never read. A common text is read in list order
        // (`super::dashboard::list_statements`). Both extensions ship with PostgreSQL and are
        // trusted (a database owner may create them); where they cannot be created the
        // migration warns and the search reads the list in order.
        sql: r#"
DO $$
BEGIN
    CREATE EXTENSION IF NOT EXISTS pg_trgm;
    CREATE EXTENSION IF NOT EXISTS btree_gin;
EXCEPTION WHEN OTHERS THEN
    RAISE WARNING 'transaction search without its index (pg_trgm, btree_gin): %', SQLERRM;
END $$;
DO $$
BEGIN
    IF (SELECT count(*) FROM pg_extension WHERE extname IN ('pg_trgm', 'btree_gin')) = 2 THEN
        CREATE INDEX transactions_search ON transactions USING gin (
            provider_id, status, currency,
            (lower(reference) || chr(31) || lower(title) || chr(31)
             || coalesce(lower(payment -> 'customer' ->> 'email'), '')) gin_trgm_ops
        );
    END IF;
END $$;
"#,
    },
    Migration {
        version: 19,
        description: "a new transaction's items leave its version at 0",
        // Items are inserted only with their transaction, in the statement that inserts it
        // (and its version row): counting each item as a change of a transaction nobody could
        // see yet updated the version row once per item in every create. Their updates and
        // deletions still count.
        sql: r#"
DROP TRIGGER items_version ON items;
CREATE TRIGGER items_version AFTER UPDATE OR DELETE ON items
    FOR EACH ROW EXECUTE FUNCTION transaction_part_changed();
"#,
    },
    Migration {
        version: 20,
        description: "a new transaction's version row is inserted with it, not by a trigger",
        // The creation statement (`super::INSERT_TRANSACTIONS`) inserts the version row in one
        // of its parts: a row trigger ran a PL/pgSQL function per create for it. Updates and
        // deletions of transactions still move or remove the row by the trigger.
        sql: r#"
DROP TRIGGER transactions_version ON transactions;
CREATE TRIGGER transactions_version AFTER UPDATE OR DELETE ON transactions
    FOR EACH ROW EXECUTE FUNCTION transaction_changed();
"#,
    },
    Migration {
        version: 21,
        description: "the dashboard's overview and transaction page read by index",
        // As SQLite's migration 22: the overview read every transaction of the provider, every
        // cancellation and every delivery of each endpoint; only paid transactions, succeeded
        // cancellations and retried or failed deliveries enter these indexes. A transaction's
        // page read the events of the whole provider to find the transaction's, and each
        // deletion of a file its foreign-key check read every cancellation.
        sql: r#"
CREATE INDEX transactions_paid ON transactions(provider_id, paid_at)
    INCLUDE (currency, paid_amount) WHERE paid_at IS NOT NULL;
CREATE INDEX cancellations_succeeded ON cancellations(provider_id, created_at)
    INCLUDE (refund, currency, transaction_id) WHERE outcome = 'SUCCESS';
CREATE INDEX webhook_deliveries_retried ON webhook_deliveries(endpoint_id)
    WHERE status = 'QUEUED' AND attempts > 0;
CREATE INDEX webhook_deliveries_failed ON webhook_deliveries(endpoint_id, last_attempt_at)
    WHERE status = 'FAILED';
CREATE INDEX events_transaction ON events(transaction_id, seq);
CREATE INDEX cancellations_invoice_file ON cancellations(invoice_file_id)
    WHERE invoice_file_id IS NOT NULL;
"#,
    },
    Migration {
        version: 22,
        description: "the dashboard overview's sums per quarter hour",
        // As SQLite's migration 23: the overview read every payment and refund of the last 32
        // days; it reads a row per quarter hour and currency instead, added to in the
        // transaction that records each payment or successful refund, and filled here from
        // those already recorded.
        sql: r#"
CREATE TABLE overview_sums (
    provider_id text NOT NULL,
    bucket      timestamptz NOT NULL,   -- the quarter hour's start
    currency    text NOT NULL,
    paid        numeric NOT NULL,
    refunded    numeric NOT NULL,
    PRIMARY KEY (provider_id, bucket, currency)
);
INSERT INTO overview_sums (provider_id, bucket, currency, paid, refunded)
SELECT provider_id, bucket, currency, sum(paid), sum(refunded) FROM (
    SELECT provider_id, date_bin('15 minutes', paid_at, TIMESTAMPTZ '2000-01-01 00:00:00+00')
               AS bucket, currency, paid_amount AS paid, 0::numeric AS refunded
    FROM transactions WHERE paid_at IS NOT NULL AND paid_amount IS NOT NULL
    UNION ALL
    SELECT provider_id, date_bin('15 minutes', created_at, TIMESTAMPTZ '2000-01-01 00:00:00+00'),
           currency, 0::numeric, refund
    FROM cancellations WHERE outcome = 'SUCCESS'
) recorded GROUP BY provider_id, bucket, currency;
-- Made for the overview by migration 21; nothing reads them now, and each payment and each
-- refund wrote them.
DROP INDEX transactions_paid;
DROP INDEX cancellations_succeeded;
"#,
    },
    Migration {
        version: 23,
        description: "the search index takes its new entries in small steps",
        // A GIN index keeps new entries in a pending list and moves them into its tree when
        // the list passes `gin_pending_list_limit` (4 MB by default), in the statement that
        // passed it. Under creates that list filled every second or so, and the batch that
        // moved it, with every create queued behind it, waited up to 0.2 s: the creates' p99
        // was 111-157 ms at 3,200-4,000 creates a second. At 256 kB it is 40 ms at the same
        // rate (docs/PERFORMANCE.md, "The search index's pending list"). Not where migration
        // 18 could not make the index.
        sql: r#"
DO $$
BEGIN
    IF to_regclass('transactions_search') IS NOT NULL THEN
        ALTER INDEX transactions_search SET (gin_pending_list_limit = 256);
    END IF;
END $$;
"#,
    },
];

/// Latest schema version this build knows.
pub fn latest_version() -> u32 {
    MIGRATIONS.last().map_or(0, |m| m.version)
}

/// Connects to `url` on a connection of its own (not a pooled one: the advisory lock belongs
/// to the session), with the URL's TLS settings, and migrates.
pub async fn migrate_url(url: &str) -> Result<u32, StoreError> {
    let (mut client, driver) = super::connect(url).await?;
    let result = migrate(&mut client).await;
    drop(client);
    let _ = driver.await;
    result
}

/// Applies every migration newer than the database's version, each in its own transaction,
/// while holding the advisory lock; returns the version reached.
pub async fn migrate(client: &mut Client) -> Result<u32, StoreError> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    let result = apply(client).await;
    // Unlocked explicitly; the lock would also end with the session.
    let unlocked = client
        .execute("SELECT pg_advisory_unlock($1)", &[&MIGRATION_LOCK])
        .await;
    let version = result?;
    unlocked?;
    Ok(version)
}

async fn apply(client: &mut Client) -> Result<u32, StoreError> {
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS schema_migrations (
                 version      integer PRIMARY KEY,
                 description  text NOT NULL,
                 applied_at   timestamptz NOT NULL DEFAULT now()
             )",
        )
        .await?;
    let current: i32 = client
        .query_one(
            "SELECT COALESCE(max(version), 0) FROM schema_migrations",
            &[],
        )
        .await?
        .try_get(0)?;
    let current = u32::try_from(current).unwrap_or(0);
    if current > latest_version() {
        return Err(MigrationError::TooNew {
            found: current,
            known: latest_version(),
        }
        .into());
    }
    for migration in MIGRATIONS.iter().filter(|m| m.version > current) {
        let tx = client.transaction().await?;
        tx.batch_execute(migration.sql).await?;
        tx.execute(
            "INSERT INTO schema_migrations (version, description) VALUES ($1, $2)",
            &[
                &i32::try_from(migration.version).unwrap_or(i32::MAX),
                &migration.description,
            ],
        )
        .await?;
        tx.commit().await?;
        tracing::info!(
            version = migration.version,
            description = migration.description,
            "database migrated"
        );
    }
    Ok(latest_version())
}

#[cfg(test)]
mod tests {
    use super::*;

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

    /// A database of its own named `name`, migrated, and a connection to it with its driver
    /// (the connection is to be dropped, and the driver awaited, before the database).
    #[cfg(feature = "test-support")]
    async fn migrated(
        name: &str,
    ) -> (
        super::super::testing::TestDatabase,
        tokio_postgres::Client,
        tokio::task::JoinHandle<()>,
    ) {
        let db = super::super::testing::TestDatabase::create(name);
        migrate_url(db.url()).await.expect("migrate");
        let (client, driver) = super::super::connect(db.url()).await.expect("connect");
        (db, client, driver)
    }

    /// As on SQLite: a deletion of a parent row checks each foreign key pointing at it, and
    /// without an index leading with the referencing columns that check reads the whole child
    /// table. Every foreign key of a parent that is ever deleted has one. Needs
    /// `CHECKOUT_TEST_PG_URL`.
    #[cfg(feature = "test-support")]
    #[tokio::test]
    #[ignore = "needs PostgreSQL: set CHECKOUT_TEST_PG_URL, run with -- --include-ignored"]
    async fn every_foreign_key_of_a_deletable_parent_is_indexed() {
        let (_db, client, driver) =
            migrated("every_foreign_key_of_a_deletable_parent_is_indexed").await;
        // Each foreign key, its parent, and whether an index's leading columns are its columns
        // (in any order).
        let rows = client
            .query(
                "SELECT c.conrelid::regclass::text, c.confrelid::regclass::text, \
                        c.conname::text, \
                        EXISTS (SELECT 1 FROM pg_index i \
                                WHERE i.indrelid = c.conrelid \
                                  AND (i.indkey::int2[])[0:cardinality(c.conkey) - 1] \
                                      @> c.conkey \
                                  AND cardinality(c.conkey) <= i.indnkeyatts) \
                 FROM pg_constraint c \
                 WHERE c.contype = 'f' AND c.connamespace = 'public'::regnamespace",
                &[],
            )
            .await
            .expect("foreign keys");
        assert!(rows.len() > 10, "only {} foreign keys found", rows.len());
        for row in &rows {
            let (table, parent, name, indexed): (String, String, String, bool) =
                (row.get(0), row.get(1), row.get(2), row.get(3));
            assert!(
                indexed || crate::store::NEVER_DELETED_PARENTS.contains(&parent.as_str()),
                "{table}.{name} references {parent} without an index"
            );
        }
        drop(client);
        let _ = driver.await;
    }

    /// Migration 23: the search index moves its pending entries into its tree 256 kB at a
    /// time. Needs `CHECKOUT_TEST_PG_URL`.
    #[cfg(feature = "test-support")]
    #[tokio::test]
    #[ignore = "needs PostgreSQL: set CHECKOUT_TEST_PG_URL, run with -- --include-ignored"]
    async fn the_search_index_takes_new_entries_in_small_steps_migration_23() {
        let (_db, client, driver) =
            migrated("the_search_index_takes_new_entries_in_small_steps_migration_23").await;
        let options: Option<Vec<String>> = client
            .query_one(
                "SELECT reloptions FROM pg_class WHERE oid = 'transactions_search'::regclass",
                &[],
            )
            .await
            .expect("the search index exists")
            .get(0);
        assert_eq!(
            options.unwrap_or_default(),
            vec!["gin_pending_list_limit=256".to_owned()]
        );
        drop(client);
        let _ = driver.await;
    }

    #[test]
    fn amounts_are_never_floating_point() {
        for migration in MIGRATIONS {
            let sql = migration.sql.to_lowercase();
            for float in ["real", "double precision", "float"] {
                assert!(
                    !sql.contains(float),
                    "{float} in migration {}",
                    migration.version
                );
            }
        }
    }
}
