//! Store conformance: every case is written once, against the `Store` and `CancellationStore`
//! traits and the ledger gateway of an opened database ([`Stores`]), and runs on both implementations:
//! `<case>::sqlite` on a fresh SQLite file, `<case>::postgres` on a fresh PostgreSQL database
//! (`#[ignore]`d: it runs with `-- --include-ignored` where `CHECKOUT_TEST_PG_URL` names a server).
//!
//! The cases name the rules they hold (R-…, defined in docs/SPEC.md). Instants are fixed
//! values passed to the store, so nothing here depends on the clock or on sleeping; the races
//! are real concurrent calls whose outcomes are checked exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use checkout_engine::api::{
    Attachment, AttachmentType, CancellationPolicy, CancelledItem, Category, CheckoutEmail,
    ItemStatus, PaymentInfo, Period, TransactionStatus, UpdateTransaction,
};
use chrono::{DateTime, Duration, TimeZone, Utc};
use host_http::app::idempotency::release_orphan_claims;
use host_http::app::providers::{self, NewProvider};
use host_http::auth::{Scopes, hash_secret};
use host_http::http::routes::IDEMPOTENT_ROUTES;
use host_http::processors::{GatewayOutcome, RefundRequest};
use host_http::store::cancellation::{
    CancellationView, Lease, NewCancellation, NewFile, Reserved, Settlement, outcome, result_of,
};
use host_http::store::postgres::testing::TestDatabase;
use host_http::store::{
    self, Claim, Db, IdempotencyKey, IdempotencyState, IdempotentResponse, NewItem, NewTransaction,
    OwnerChecked, PayOutcome, PaymentDetails, PaymentLink, PoolSettings, StoreError, Stores,
    format_instant,
};
use rust_decimal::Decimal;
use serde_json::Value;
use tests::http::Creds;

// ---------------------------------------------------------------------------------------------
// Running one case on both stores.
// ---------------------------------------------------------------------------------------------

/// What keeps a test database alive: the SQLite file's directory or the PostgreSQL database.
#[derive(Debug)]
enum Keep {
    Sqlite(#[allow(dead_code)] tempfile::TempDir),
    Postgres(#[allow(dead_code)] TestDatabase),
}

/// A fresh, opened database of one store.
#[derive(Debug)]
struct Env {
    opened: Stores,
    db: Db,
    _keep: Keep,
}

impl Env {
    async fn sqlite() -> Env {
        let dir = tempfile::tempdir().expect("temp dir");
        let db = Db::Sqlite(dir.path().join("checkout.db"));
        let opened = store::open(&db, &PoolSettings::default())
            .await
            .expect("sqlite store opens");
        Env {
            opened,
            db,
            _keep: Keep::Sqlite(dir),
        }
    }

    /// A fresh PostgreSQL database (`CHECKOUT_TEST_PG_URL` names the server).
    async fn postgres(case: &str) -> Env {
        let database = TestDatabase::create(&format!("store conformance {case} on PostgreSQL"));
        let db = Db::Postgres(database.url().to_owned());
        let opened = store::open(&db, &PoolSettings::default())
            .await
            .expect("postgres store opens");
        Env {
            opened,
            db,
            _keep: Keep::Postgres(database),
        }
    }

    /// Closes the store before its database goes away.
    async fn finish(self) {
        self.opened.store.close().await;
    }
}

/// `conformance!(case);` makes `mod case { sqlite(), postgres() }`, each running the async fn
/// `case(&Stores, &Db)` on a fresh database of that store.
macro_rules! conformance {
    ($($case:ident),* $(,)?) => {$(
        mod $case {
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn sqlite() {
                let env = super::Env::sqlite().await;
                super::$case(&env.opened, &env.db).await;
                env.finish().await;
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            #[ignore = "needs PostgreSQL: set CHECKOUT_TEST_PG_URL, run with -- --include-ignored"]
            async fn postgres() {
                let env = super::Env::postgres(stringify!($case)).await;
                super::$case(&env.opened, &env.db).await;
                env.finish().await;
            }
        }
    )*};
}

conformance!(
    credential_active_revoked_unknown_r_7_1,
    access_epoch_moves_with_credentials_and_settings_only_r_7_1_r_5_1,
    transaction_version_moves_with_what_the_status_record_shows_r_10,
    provider_reads_its_configuration_r_5_1_r_6_1,
    create_transaction_keeps_items_and_amount_scales_r_1_4_r_3_2,
    create_transaction_finishes_its_key_in_the_same_commit_r_9_1,
    transaction_owner_and_missing_transactions_r_7_4,
    update_transaction_checks_ownership_and_keeps_absent_fields_r_7_4_r_8_6,
    record_payment_pays_active_items_at_currency_scale_once_r_3_3_r_3_6,
    idempotency_claim_release_expiry_and_prune_r_9_1,
    a_pending_refunds_key_outlives_a_day_and_its_answer_is_kept_a_day_r_9_1,
    an_abandoned_attempt_that_ends_later_is_one_failure_r_3_6,
    outbox_never_claims_a_removed_endpoints_delivery,
    race_16_sign_ins_at_once_are_checked_at_most_the_limit,
    a_claim_taken_over_fences_out_its_first_request_r_9_1,
    reserve_then_settle_succeeded_makes_receipts_and_moves_status_r_4_8_r_10_2,
    settle_declined_fails_and_releases_items_r_4_8,
    reserve_voids_unpaid_items_without_refund_r_4_4_r_3_3,
    reserve_refuses_what_changed_underneath_r_3_4_r_4_1_r_4_5_r_7_4,
    pending_refunds_are_listed_oldest_first_r_4_8,
    claim_pending_takes_only_expired_leases_r_4_8,
    renew_lease_only_for_the_holder_of_a_pending_refund_r_4_8,
    release_orphan_claims_keeps_carried_recent_and_other_routes_r_9_1,
    orphan_claims_at_start_up_are_all_running_alone_and_old_ones_shared_r_9_1,
    files_store_read_and_share_r_4_6,
    shared_file_links_renew_and_delete_but_invoices_stay,
    receipt_is_scoped_to_its_provider_r_7_4_r_10_2,
    ledger_gateway_is_idempotent_per_refund_id_r_4_8,
    race_32_reserves_of_one_item_leave_exactly_one_pending_r_4_5_r_4_1,
    race_reserves_of_different_items_never_exceed_paid_r_4_5,
    race_16_claims_of_one_key_claim_it_once_r_9_1,
    race_creates_together_one_refused_stores_the_others_r_3_1,
    race_concurrent_settles_number_receipts_without_gaps_r_10_2,
    race_two_instances_claiming_pending_refunds_split_them_r_4_8,
    payment_links_failures_and_service_keys,
    outbox_events_deliveries_and_mails_in_order,
    outbox_rotated_secret_signs_for_24_hours_only,
    outbox_stats_count_pending_refunds_and_age_the_oldest_entry,
    outbox_a_change_that_rolls_back_leaves_no_event,
    outbox_claims_bound_each_endpoint_over_every_instance,
    processors_are_per_provider_sealed_and_rotated_all_at_once,
    overview_sums_payments_and_refunds_per_quarter_hour_exactly,
);

// ---------------------------------------------------------------------------------------------
// Builders.
// ---------------------------------------------------------------------------------------------

/// The instant every case counts from.
fn t0() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2030, 1, 2, 10, 0, 0)
        .single()
        .expect("a valid instant")
}

fn at(seconds: i64) -> DateTime<Utc> {
    t0() + Duration::seconds(seconds)
}

fn dec(text: &str) -> Decimal {
    text.parse()
        .unwrap_or_else(|e| panic!("{text} is a decimal: {e}"))
}

fn new_id() -> String {
    uuid::Uuid::now_v7().hyphenated().to_string()
}

/// The cancel route template, as idempotency keys record it.
const CANCEL_ROUTE: &str = "/cancel/{transactionId}";

/// A provider with every scope, in `zone`.
fn provider_in(db: &Db, name: &str, zone: &str) -> Creds {
    providers::create_provider(
        db,
        &NewProvider {
            name: name.to_owned(),
            time_zone: zone.to_owned(),
            default_policy: None,
            category_policies: Default::default(),
            scopes: Scopes::all(),
        },
        Utc::now(),
    )
    .expect("provider created")
    .into()
}

fn provider(db: &Db, name: &str) -> Creds {
    provider_in(db, name, "UTC")
}

/// A transaction of `provider_id` in `currency` whose items have these totals.
fn transaction(provider_id: &str, currency: &str, totals: &[&str]) -> NewTransaction {
    let items: Vec<NewItem> = totals
        .iter()
        .enumerate()
        .map(|(index, total)| NewItem {
            name: Some(format!("item {}", index + 1)),
            category: Some(Category::Event),
            total: dec(total),
            policy: None,
            period: None,
        })
        .collect();
    let total = items.iter().map(|item| item.total).sum::<Decimal>();
    // The body as a provider would send it, prices written as they are (R-1.1).
    let prices: Vec<String> = totals
        .iter()
        .map(|t| format!("{{\"price\":{t}}}"))
        .collect();
    let payload = format!(
        "{{\"title\":\"conformance\",\"currency\":\"{currency}\",\"items\":[{}]}}",
        prices.join(",")
    );
    let id = new_id();
    NewTransaction {
        id: id.clone(),
        provider_id: provider_id.to_owned(),
        title: "conformance".to_owned(),
        currency: currency.to_owned(),
        ref_ids: BTreeMap::from([("order".to_owned(), "A-1".to_owned())]),
        note: Some("first note".to_owned()),
        note_in_payload: false,
        attachments: Vec::new(),
        email: None,
        payload,
        time_zone: "Europe/Paris".to_owned(),
        total,
        items,
        created_at: t0(),
        payment_link: PaymentLink {
            token_hash: Some(host_http::app::payment_links::token_hash(&format!(
                "page of {id}"
            ))),
            expires_at: t0() + Duration::days(7),
        },
    }
}

/// A payment page of the first form is found by its token's hash only; its expiry is read back with the
/// transaction; failed attempts count per transaction within a window; a service key is made
/// once and then read back by every caller, whatever it proposes.
async fn payment_links_failures_and_service_keys(opened: &Stores, db: &Db) {
    let provider = provider(db, "pages");
    let id = create(opened, &provider.provider_id, &["10.00"]).await;
    let other = create(opened, &provider.provider_id, &["20.00"]).await;
    let store = &opened.store;
    let hash = host_http::app::payment_links::token_hash(&format!("page of {id}"));
    assert_eq!(store.payment_link(hash).await.unwrap(), Some(id.clone()));
    let unknown = host_http::app::payment_links::token_hash("no such page");
    assert_eq!(store.payment_link(unknown).await.unwrap(), None);
    let stored = record(opened, &id).await;
    let expires = stored.payment_link_expires_at.expect("expiry stored");
    assert_eq!(
        DateTime::parse_from_rfc3339(&expires).unwrap(),
        t0() + Duration::days(7)
    );
    // Today's transactions store no hash (their tokens carry the id): the expiry is kept, and
    // no hash finds them.
    let mut new = transaction(&provider.provider_id, "EUR", &["5.00"]);
    new.payment_link.token_hash = None;
    let unhashed = new.id.clone();
    store.create_transaction(new, None).await.unwrap();
    let stored = record(opened, &unhashed).await;
    assert!(stored.payment_link_expires_at.is_some());
    let derived = host_http::app::payment_links::token_hash(&format!("page of {unhashed}"));
    assert_eq!(store.payment_link(derived).await.unwrap(), None);

    let window = at(0);
    assert_eq!(store.payment_failures(id.clone(), window).await.unwrap(), 0);
    for n in 1..=3 {
        let count = store
            .add_payment_failure(id.clone(), at(n), window, None)
            .await
            .unwrap();
        assert_eq!(count, u32::try_from(n).unwrap());
    }
    assert_eq!(store.payment_failures(id.clone(), window).await.unwrap(), 3);
    // Older failures fall out of the window; other transactions count their own.
    assert_eq!(store.payment_failures(id.clone(), at(3)).await.unwrap(), 1);
    assert_eq!(
        store.payment_failures(other.clone(), window).await.unwrap(),
        0
    );

    let first = store
        .service_key("payment_link".to_owned(), [1; 32])
        .await
        .unwrap();
    assert_eq!(first, [1; 32]);
    let again = store
        .service_key("payment_link".to_owned(), [2; 32])
        .await
        .unwrap();
    assert_eq!(again, [1; 32], "the first key stays");
    let another = store
        .service_key("other".to_owned(), [3; 32])
        .await
        .unwrap();
    assert_eq!(another, [3; 32]);
}

/// Every change writes its event in its own commit, in the order of the changes; deliveries
/// fan out to the provider's endpoints by type and are claimed one per endpoint and transaction
/// at a time, oldest first, under a lease; e-mails go with creation (recipients) and receipts.
async fn outbox_events_deliveries_and_mails_in_order(opened: &Stores, db: &Db) {
    use host_http::store::outbox::{Attempt, types};
    let acme = provider(db, "acme");
    let other = provider(db, "other");
    let all = providers::set_webhook(
        db,
        &acme.provider_id,
        "https://127.0.0.1:9/all",
        &[],
        true,
        None,
        t0(),
    )
    .expect("endpoint");
    let paid_only = providers::set_webhook(
        db,
        &acme.provider_id,
        "https://127.0.0.1:9/paid",
        &[types::PAID.to_owned()],
        true,
        None,
        t0(),
    )
    .expect("endpoint");
    let outbox = &opened.outbox;

    let mut new = transaction(&acme.provider_id, "EUR", &["100.00", "20.00"]);
    new.email = Some(CheckoutEmail {
        recipients: Some(vec!["a@example.com".to_owned(), "b@example.com".to_owned()]),
        subject: Some("Your trip".to_owned()),
        content: None,
    });
    let id = new.id.clone();
    opened
        .store
        .create_transaction(new, None)
        .await
        .expect("created");
    let second = create(opened, &acme.provider_id, &["5.00"]).await;
    let change = UpdateTransaction {
        external_ids: None,
        title: Some("renamed".to_owned()),
        note: None,
        attachments: None,
    };
    opened
        .store
        .update_transaction(id.clone(), acme.provider_id.clone(), change, at(1))
        .await
        .expect("updated");
    opened
        .store
        .record_payment(
            id.clone(),
            acme.provider_id.clone(),
            payment_details(),
            at(2),
            at(2),
        )
        .await
        .expect("paid");
    opened
        .store
        .add_payment_failure(
            second.clone(),
            at(3),
            at(0),
            Some("Your card was declined.".to_owned()),
        )
        .await
        .expect("failure");
    let pending = reserve_pending(
        opened,
        paid_cancellation(&acme.provider_id, &id, vec![line(2, "20.00", "20.00")]),
    )
    .await;
    for _ in 0..2 {
        opened
            .cancellations
            .refund_unknown(pending.refund_id.clone(), at(4))
            .await
            .expect("unknown noted");
    }
    let settled = settle(opened, &pending.refund_id, succeeded("GW-1"), at(5)).await;
    let receipt = settled.receipt_number.clone().expect("receipt");

    let listed = outbox
        .events_after(acme.provider_id.clone(), None, 100)
        .await
        .unwrap()
        .unwrap();
    let payloads: Vec<Value> = listed
        .iter()
        .map(|e| serde_json::from_str(&e.payload).unwrap())
        .collect();
    let kinds: Vec<(&str, &str)> = payloads
        .iter()
        .map(|p| {
            (
                p["type"].as_str().unwrap(),
                p["data"]["transactionId"].as_str().unwrap(),
            )
        })
        .map(|(kind, tx)| (kind, if tx == id { "first" } else { "second" }))
        .collect();
    assert_eq!(
        kinds,
        vec![
            (types::CREATED, "first"),
            (types::CREATED, "second"),
            (types::UPDATED, "first"),
            (types::PAID, "first"),
            (types::PAYMENT_FAILED, "second"),
            (types::REFUND_PENDING, "first"),
            (types::CANCELLATION_SUCCEEDED, "first"),
            (types::REFUND_COMPLETED, "first"),
        ]
    );
    assert!(listed.iter().all(|e| e.id.starts_with("evt_")));
    let paid = &payloads[3]["data"];
    assert_eq!(paid["status"], "PAID");
    assert_eq!(paid["amounts"]["paid"].to_string(), "120.00");
    assert_eq!(payloads[4]["data"]["reason"], "Your card was declined.");
    let cancelled = &payloads[6]["data"];
    assert_eq!(cancelled["status"], "PARTIALLY_CANCELLED");
    assert_eq!(cancelled["cancellation"]["receiptNumber"], receipt.as_str());
    assert_eq!(cancelled["cancellation"]["refund"].to_string(), "20.00");
    assert_eq!(cancelled["amounts"]["refunded"].to_string(), "20.00");
    assert_eq!(payloads[5]["data"]["cancellation"]["outcome"], "PENDING");

    // Paging, and no provider reads another's cursor.
    let page = outbox
        .events_after(acme.provider_id.clone(), Some(listed[1].id.clone()), 2)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        page.iter().map(|e| &e.id).collect::<Vec<_>>(),
        [&listed[2].id, &listed[3].id]
    );
    assert_eq!(
        outbox
            .events_after(other.provider_id.clone(), Some(listed[0].id.clone()), 10)
            .await
            .unwrap(),
        None
    );
    assert!(
        outbox
            .events_after(other.provider_id.clone(), None, 10)
            .await
            .unwrap()
            .unwrap()
            .is_empty()
    );

    // Deliveries: one per endpoint and transaction at a time, oldest first.
    let lease = |owner: &str| Lease {
        owner: owner.to_owned(),
        until: at(100),
    };
    let claimed = outbox
        .claim_deliveries(lease("a"), at(10), 100, 100)
        .await
        .unwrap();
    let heads: Vec<(&str, &str)> = claimed
        .iter()
        .map(|job| {
            let kind = listed.iter().position(|e| e.id == job.event_id).unwrap();
            (job.endpoint_id.as_str(), kinds[kind].0)
        })
        .collect();
    assert_eq!(
        heads,
        vec![
            (all.endpoint_id.as_str(), types::CREATED),
            (all.endpoint_id.as_str(), types::CREATED),
            (paid_only.endpoint_id.as_str(), types::PAID),
        ]
    );
    assert_eq!(claimed[0].secrets, vec![all.secret.clone()]);
    assert_eq!(claimed[0].payload, listed[0].payload);
    assert_eq!(claimed[0].url, "https://127.0.0.1:9/all");
    // Leased: another instance gets none of them.
    assert!(
        outbox
            .claim_deliveries(lease("b"), at(11), 100, 100)
            .await
            .unwrap()
            .is_empty()
    );
    let first = &claimed[0];
    outbox
        .finish_delivery(
            first.event_seq,
            first.endpoint_id.clone(),
            "a".to_owned(),
            Attempt::Done,
            host_http::store::outbox::AttemptTiming::default(),
            at(12),
        )
        .await
        .unwrap();
    let retry_of = &claimed[1];
    outbox
        .finish_delivery(
            retry_of.event_seq,
            retry_of.endpoint_id.clone(),
            "a".to_owned(),
            Attempt::Retry {
                at: at(50),
                error: "endpoint answered 500".to_owned(),
            },
            host_http::store::outbox::AttemptTiming::default(),
            at(12),
        )
        .await
        .unwrap();
    // A finish by an owner that does not hold the lease changes nothing.
    outbox
        .finish_delivery(
            claimed[2].event_seq,
            claimed[2].endpoint_id.clone(),
            "b".to_owned(),
            Attempt::Done,
            host_http::store::outbox::AttemptTiming::default(),
            at(12),
        )
        .await
        .unwrap();
    let next = outbox
        .claim_deliveries(lease("b"), at(13), 100, 100)
        .await
        .unwrap();
    assert_eq!(
        next.len(),
        1,
        "the first transaction's next event; the second waits for its retry"
    );
    assert_eq!(next[0].event_id, listed[2].id);
    let retried = outbox
        .claim_deliveries(lease("c"), at(51), 100, 100)
        .await
        .unwrap();
    assert!(
        retried
            .iter()
            .any(|job| job.event_id == listed[1].id && job.attempts == 1)
    );

    // Rotation: both secrets sign until the overlap ends.
    let rotated = providers::rotate_webhook_secret(db, &all.endpoint_id, None, at(0)).unwrap();
    providers::remove_webhook(db, &paid_only.endpoint_id, at(0)).unwrap();
    let stats = outbox.outbox_stats(at(60)).await.unwrap();
    assert!(stats.deliveries_queued >= 5, "{stats:?}");
    let later = outbox
        .claim_deliveries(lease("d"), at(200), 100, 100)
        .await
        .unwrap();
    assert!(
        later.iter().all(|job| job.endpoint_id == all.endpoint_id),
        "removed endpoint"
    );
    let signing = later.first().expect("a due delivery");
    assert_eq!(
        signing.secrets,
        vec![rotated.secret.clone(), all.secret.clone()]
    );
    let listed_endpoints = providers::list_webhooks(db, Some(&acme.provider_id)).unwrap();
    assert_eq!(listed_endpoints.len(), 1);
    assert!(listed_endpoints[0].previous_secret_until.is_some());

    // E-mails: the contract e-mail at creation, the receipt after the cancellation.
    let mails = outbox.claim_mails(lease("a"), at(10), 10).await.unwrap();
    assert_eq!(
        mails.iter().map(|m| m.kind.as_str()).collect::<Vec<_>>(),
        ["CONTRACT", "RECEIPT"]
    );
    assert_eq!(mails[0].recipients, ["a@example.com", "b@example.com"]);
    assert_eq!(mails[1].receipt_number.as_deref(), Some(receipt.as_str()));
    assert!(
        mails[0]
            .message_id
            .starts_with(&format!("<{}.", listed[0].id))
    );
    assert_eq!(stats.mails_queued, 2);
    outbox
        .finish_mail(mails[0].id.clone(), "a".to_owned(), Attempt::Done, at(11))
        .await
        .unwrap();
    outbox
        .finish_mail(
            mails[1].id.clone(),
            "a".to_owned(),
            Attempt::GiveUp {
                error: "refused".to_owned(),
            },
            at(11),
        )
        .await
        .unwrap();
    let shown = record(opened, &id).await.mails;
    assert_eq!(
        shown
            .iter()
            .map(|m| (m.kind.as_str(), m.status.as_str()))
            .collect::<Vec<_>>(),
        [("CONTRACT", "SENT"), ("RECEIPT", "FAILED")]
    );
    assert!(
        outbox
            .claim_mails(lease("b"), at(20), 10)
            .await
            .unwrap()
            .is_empty()
    );
}

/// No endpoint has more than `per_endpoint` deliveries under a live lease, counted over every
/// instance (lease owner): an endpoint that does not answer holds that many attempts, and the
/// due deliveries of other endpoints are claimed past its backlog. A finished attempt or a lease
/// that ran out frees its place.
async fn outbox_claims_bound_each_endpoint_over_every_instance(opened: &Stores, db: &Db) {
    use host_http::store::outbox::Attempt;
    let acme = provider(db, "acme");
    let other = provider(db, "other");
    let slow = providers::set_webhook(
        db,
        &acme.provider_id,
        "https://127.0.0.1:9/slow",
        &[],
        true,
        None,
        t0(),
    )
    .expect("endpoint");
    let quick = providers::set_webhook(
        db,
        &other.provider_id,
        "https://127.0.0.1:9/quick",
        &[],
        true,
        None,
        t0(),
    )
    .expect("endpoint");
    for _ in 0..6 {
        create(opened, &acme.provider_id, &["10.00"]).await;
    }
    create(opened, &other.provider_id, &["5.00"]).await;
    let outbox = &opened.outbox;
    let lease = |owner: &str, until: i64| Lease {
        owner: owner.to_owned(),
        until: at(until),
    };
    let endpoints = |jobs: &[host_http::store::outbox::DeliveryJob]| {
        jobs.iter()
            .map(|job| job.endpoint_id.clone())
            .collect::<Vec<_>>()
    };
    // Instance a, room for 3, at most 2 per endpoint: the slow endpoint's first two, then the
    // quick one's delivery, written after all six of the slow one's.
    let a = outbox
        .claim_deliveries(lease("a", 100), at(10), 3, 2)
        .await
        .unwrap();
    assert_eq!(
        endpoints(&a),
        [
            slow.endpoint_id.clone(),
            slow.endpoint_id.clone(),
            quick.endpoint_id.clone()
        ]
    );
    // Instance b: the slow endpoint has its two under a's leases.
    let b = outbox
        .claim_deliveries(lease("b", 200), at(11), 10, 2)
        .await
        .unwrap();
    assert!(b.is_empty(), "{:?}", endpoints(&b));
    // One of a's attempts ends (to be retried later): its place is free, for one more.
    outbox
        .finish_delivery(
            a[0].event_seq,
            a[0].endpoint_id.clone(),
            "a".to_owned(),
            Attempt::Retry {
                at: at(500),
                error: "no answer within 15000 ms".to_owned(),
            },
            host_http::store::outbox::AttemptTiming::default(),
            at(12),
        )
        .await
        .unwrap();
    outbox
        .finish_delivery(
            a[2].event_seq,
            a[2].endpoint_id.clone(),
            "a".to_owned(),
            Attempt::Done,
            host_http::store::outbox::AttemptTiming::default(),
            at(12),
        )
        .await
        .unwrap();
    let b = outbox
        .claim_deliveries(lease("b", 200), at(13), 10, 2)
        .await
        .unwrap();
    assert_eq!(endpoints(&b), std::slice::from_ref(&slow.endpoint_id));
    assert!(
        b[0].event_seq > a[1].event_seq,
        "the next one of the backlog"
    );
    // a stopped: once its lease has run out, its delivery is taken over, and the endpoint
    // again has two under a live lease (b's and the taken-over one).
    let c = outbox
        .claim_deliveries(lease("c", 300), at(150), 10, 2)
        .await
        .unwrap();
    assert_eq!(
        c.iter().map(|job| job.event_seq).collect::<Vec<_>>(),
        [a[1].event_seq]
    );
    assert!(
        outbox
            .claim_deliveries(lease("d", 300), at(151), 10, 2)
            .await
            .unwrap()
            .is_empty()
    );
}

/// After a rotation, the previous secret signs beside the new one for 24 hours (two `v1,`
/// signatures), and from then on only the new one does.
async fn outbox_rotated_secret_signs_for_24_hours_only(opened: &Stores, db: &Db) {
    use host_http::store::outbox::Attempt;
    let acme = provider(db, "acme");
    let hook = providers::set_webhook(
        db,
        &acme.provider_id,
        "https://127.0.0.1:9/in",
        &[],
        true,
        None,
        t0(),
    )
    .expect("endpoint");
    create(opened, &acme.provider_id, &["10.00"]).await;
    let rotated = providers::rotate_webhook_secret(db, &hook.endpoint_id, None, at(0)).unwrap();
    let overlap_ends = at(0) + Duration::hours(24);
    let lease = |now: DateTime<Utc>| Lease {
        owner: "a".to_owned(),
        until: now + Duration::seconds(30),
    };
    let outbox = &opened.outbox;
    let last_second = overlap_ends - Duration::seconds(1);
    let claimed = outbox
        .claim_deliveries(lease(last_second), last_second, 10, 10)
        .await
        .unwrap();
    assert_eq!(claimed.len(), 1);
    assert_eq!(
        claimed[0].secrets,
        vec![rotated.secret.clone(), hook.secret.clone()],
        "both sign within the 24 hours"
    );
    outbox
        .finish_delivery(
            claimed[0].event_seq,
            claimed[0].endpoint_id.clone(),
            "a".to_owned(),
            Attempt::Retry {
                at: overlap_ends,
                error: "endpoint answered 500".to_owned(),
            },
            host_http::store::outbox::AttemptTiming::default(),
            last_second,
        )
        .await
        .unwrap();
    let retried = outbox
        .claim_deliveries(lease(overlap_ends), overlap_ends, 10, 10)
        .await
        .unwrap();
    assert_eq!(retried.len(), 1);
    assert_eq!(
        retried[0].secrets,
        vec![rotated.secret.clone()],
        "the old secret no longer signs once 24 hours have passed"
    );
}

/// The backlog figures of the metrics: refunds pending at the gateway, deliveries queued, and
/// the age of the oldest queued entry at the instant asked for.
async fn outbox_stats_count_pending_refunds_and_age_the_oldest_entry(opened: &Stores, db: &Db) {
    use host_http::store::outbox::Attempt;
    let acme = provider(db, "acme");
    providers::set_webhook(
        db,
        &acme.provider_id,
        "https://127.0.0.1:9/in",
        &[],
        true,
        None,
        t0(),
    )
    .expect("endpoint");
    let outbox = &opened.outbox;
    let empty = outbox.outbox_stats(at(0)).await.unwrap();
    assert_eq!((empty.refunds_pending, empty.oldest_age_secs), (0, 0));
    // Created at t0 and paid at t0 + 1 s: two deliveries queued.
    let id = paid(opened, &acme.provider_id, &["10.00", "5.00"]).await;
    reserve_pending(
        opened,
        paid_cancellation(&acme.provider_id, &id, vec![line(2, "5.00", "5.00")]),
    )
    .await;
    let stats = outbox.outbox_stats(at(100)).await.unwrap();
    assert_eq!(stats.refunds_pending, 1, "{stats:?}");
    assert_eq!(stats.deliveries_queued, 2, "{stats:?}");
    assert_eq!(stats.mails_queued, 0, "{stats:?}");
    assert_eq!(stats.oldest_age_secs, 100, "{stats:?}");
    // Once the oldest is delivered, the next one is the oldest.
    let claimed = outbox
        .claim_deliveries(
            Lease {
                owner: "a".to_owned(),
                until: at(130),
            },
            at(100),
            1,
            1,
        )
        .await
        .unwrap();
    outbox
        .finish_delivery(
            claimed[0].event_seq,
            claimed[0].endpoint_id.clone(),
            "a".to_owned(),
            Attempt::Done,
            host_http::store::outbox::AttemptTiming::default(),
            at(100),
        )
        .await
        .unwrap();
    let stats = outbox.outbox_stats(at(100)).await.unwrap();
    assert_eq!((stats.deliveries_queued, stats.oldest_age_secs), (1, 99));
}

/// A delivery added for an endpoint while it was being removed (on PostgreSQL the event's
/// insert and the removal's failing of the endpoint's queued deliveries do not wait for each
/// other) is never claimed: the claim fails it as the removal would have.
async fn outbox_never_claims_a_removed_endpoints_delivery(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let endpoint = providers::set_webhook(
        db,
        &acme.provider_id,
        "https://127.0.0.1:9/removed",
        &[],
        true,
        None,
        t0(),
    )
    .expect("endpoint");
    create(opened, &acme.provider_id, &["10.00"]).await;
    // What the race leaves: the endpoint removed, its delivery still queued.
    let removed = format!(
        "UPDATE webhook_endpoints SET removed_at = '{}' WHERE id = '{}'",
        format_instant(at(1)),
        endpoint.endpoint_id
    );
    execute_sql(db, &removed, &removed).await;
    let outbox = &opened.outbox;
    assert_eq!(
        outbox.outbox_stats(at(5)).await.unwrap().deliveries_queued,
        1
    );
    let lease = Lease {
        owner: "a".to_owned(),
        until: at(100),
    };
    let claimed = outbox
        .claim_deliveries(lease, at(10), 10, 10)
        .await
        .unwrap();
    assert!(claimed.is_empty(), "claimed for a removed endpoint");
    assert_eq!(
        outbox.outbox_stats(at(10)).await.unwrap().deliveries_queued,
        0,
        "failed as the removal fails them"
    );
}

/// Runs SQL on the database behind the store's back (to make a statement fail).
async fn execute_sql(db: &Db, sqlite: &str, postgres: &str) {
    match db {
        Db::Sqlite(path) => rusqlite::Connection::open(path)
            .expect("open")
            .execute_batch(sqlite)
            .expect("sqlite statement"),
        Db::Postgres(url) => {
            let (client, driver) = host_http::store::postgres::connect(url)
                .await
                .expect("connect");
            client.batch_execute(postgres).await.expect("statement");
            drop(client);
            let _ = driver.await;
        }
    }
}

/// A statement of the outbox that fails after the event row was written rolls the whole
/// change back: neither the change nor its event, delivery or e-mail remains; once it works
/// again, the change is written with exactly its events.
async fn outbox_a_change_that_rolls_back_leaves_no_event(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    providers::set_webhook(
        db,
        &acme.provider_id,
        "https://127.0.0.1:9/in",
        &[],
        true,
        None,
        t0(),
    )
    .expect("endpoint");
    let outbox = &opened.outbox;
    let events = || async {
        outbox
            .events_after(acme.provider_id.clone(), None, 100)
            .await
            .unwrap()
            .unwrap()
            .iter()
            .map(|e| {
                let payload: Value = serde_json::from_str(&e.payload).unwrap();
                payload["type"].as_str().unwrap().to_owned()
            })
            .collect::<Vec<_>>()
    };
    let refuse = |table: &str| {
        (
            format!(
                "CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} \
                 BEGIN SELECT RAISE(ABORT, 'refused by the test'); END;"
            ),
            format!(
                "CREATE OR REPLACE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS \
                 $$ BEGIN RAISE EXCEPTION 'refused by the test'; END $$; \
                 CREATE TRIGGER refuse_{table} BEFORE INSERT ON {table} \
                 FOR EACH ROW EXECUTE FUNCTION refuse();"
            ),
        )
    };
    let allow = |table: &str| {
        (
            format!("DROP TRIGGER refuse_{table};"),
            format!("DROP TRIGGER refuse_{table} ON {table};"),
        )
    };

    // A creation whose e-mail cannot be written (after its event): nothing of it remains.
    let (sqlite, postgres) = refuse("email_messages");
    execute_sql(db, &sqlite, &postgres).await;
    let mut new = transaction(&acme.provider_id, "EUR", &["10.00"]);
    new.email = Some(CheckoutEmail {
        recipients: Some(vec!["a@example.com".to_owned()]),
        subject: None,
        content: None,
    });
    let refused_id = new.id.clone();
    assert!(
        opened
            .store
            .create_transaction(new.clone(), None)
            .await
            .is_err()
    );
    assert!(
        opened
            .store
            .transaction(refused_id.clone())
            .await
            .unwrap()
            .is_none()
    );
    assert!(
        events().await.is_empty(),
        "no event of a rolled-back creation"
    );
    let (sqlite, postgres) = allow("email_messages");
    execute_sql(db, &sqlite, &postgres).await;

    // A payment whose webhook delivery cannot be written (after its event): still unpaid, and
    // only the creation's event.
    let id = create(opened, &acme.provider_id, &["10.00"]).await;
    let (sqlite, postgres) = refuse("webhook_deliveries");
    execute_sql(db, &sqlite, &postgres).await;
    let payment = opened
        .store
        .record_payment(
            id.clone(),
            acme.provider_id.clone(),
            payment_details(),
            at(1),
            at(1),
        )
        .await;
    assert!(payment.is_err(), "{payment:?}");
    assert_eq!(record(opened, &id).await.status, TransactionStatus::Pending);
    assert_eq!(events().await, ["transaction.created"]);
    let (sqlite, postgres) = allow("webhook_deliveries");
    execute_sql(db, &sqlite, &postgres).await;

    // Both work again, each with its event, delivery and e-mail.
    opened
        .store
        .create_transaction(new, None)
        .await
        .expect("created");
    paid_again(opened, &acme.provider_id, &id).await;
    assert_eq!(
        events().await,
        [
            "transaction.created",
            "transaction.created",
            "transaction.paid"
        ]
    );
    let stats = outbox.outbox_stats(at(10)).await.unwrap();
    assert_eq!((stats.deliveries_queued, stats.mails_queued), (3, 1));
}

async fn paid_again(opened: &Stores, provider_id: &str, id: &str) {
    let outcome = opened
        .store
        .record_payment(
            id.to_owned(),
            provider_id.to_owned(),
            payment_details(),
            at(1),
            at(1),
        )
        .await
        .expect("payment recorded");
    assert!(
        matches!(outcome, OwnerChecked::Done(PayOutcome::Paid(_))),
        "{outcome:?}"
    );
}

/// PostgreSQL: `GET /events` never lists an event past one that is still uncommitted. A
/// transaction that wrote its event first but commits last (held open here on a session of
/// its own) keeps later events out of the page until it commits; then both are listed, and a
/// client that paged on from the later one still finds the earlier one. (SQLite has one
/// writer: commit order is `seq` order there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set CHECKOUT_TEST_PG_URL, run with -- --include-ignored"]
async fn postgres_event_pages_never_skip_an_event_that_commits_late() {
    let env = Env::postgres("event pages and late commits").await;
    let Db::Postgres(url) = &env.db else {
        unreachable!("a PostgreSQL environment")
    };
    let opened = &env.opened;
    let acme = provider(&env.db, "acme");
    let first = create(opened, &acme.provider_id, &["1.00"]).await;
    let outbox = &opened.outbox;
    let provider_id = acme.provider_id.clone();
    let page = |after: Option<String>| {
        let provider_id = provider_id.clone();
        async move {
            outbox
                .events_after(provider_id, after, 100)
                .await
                .unwrap()
                .unwrap()
                .into_iter()
                .map(|e| e.id)
                .collect::<Vec<_>>()
        }
    };
    let listed = page(None).await;
    assert_eq!(listed.len(), 1);

    let mut cursor = listed.last().cloned();
    let (mut late, driver) = host_http::store::postgres::connect(url)
        .await
        .expect("connect");
    // Two cases of a late commit: an event written (its seq taken) before the later one's,
    // by a transaction that began after the later one's or before it.
    for began_first in [false, true] {
        let (mut early, early_driver) = host_http::store::postgres::connect(url)
            .await
            .expect("connect");
        let held_id = format!("evt_held_{began_first}");
        let later_id = format!("evt_later_{began_first}");
        let held = if began_first {
            // The later event's transaction takes its id first, and writes after.
            let tx = late.transaction().await.unwrap();
            tx.execute("SELECT pg_current_xact_id()", &[])
                .await
                .unwrap();
            let held = early.transaction().await.unwrap();
            insert_event(&held, &held_id, &provider_id, &first).await;
            insert_event(&tx, &later_id, &provider_id, &first).await;
            tx.commit().await.unwrap();
            held
        } else {
            let held = early.transaction().await.unwrap();
            insert_event(&held, &held_id, &provider_id, &first).await;
            let tx = late.transaction().await.unwrap();
            insert_event(&tx, &later_id, &provider_id, &first).await;
            tx.commit().await.unwrap();
            held
        };
        // The later event is committed, the held one is not: a page read now and the next
        // page read after the held commit, together, list both.
        let now = page(cursor.clone()).await;
        assert!(!now.contains(&held_id), "{now:?}");
        held.commit().await.unwrap();
        let after_commit = page(now.last().cloned().or(cursor.clone())).await;
        let seen: Vec<String> = now.into_iter().chain(after_commit).collect();
        let mut both = seen.clone();
        both.sort();
        let mut expected = vec![held_id.clone(), later_id.clone()];
        expected.sort();
        assert_eq!(
            both, expected,
            "began first: {began_first}; listed {seen:?}"
        );
        cursor = seen.last().cloned();
        drop(early);
        let _ = early_driver.await;
    }
    drop(late);
    let _ = driver.await;
    env.finish().await;
}

/// R-4.8, PostgreSQL: the ledger gateway answers a refund that another instance is recording
/// at the same moment (its recovery task took the lease over) with the refund as recorded,
/// not with an unknown outcome. The other instance's insert is held open here on a session of
/// the test's own; the ledger's insert waits for it, and its statement's snapshot, taken
/// before that commit, cannot see the row.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set CHECKOUT_TEST_PG_URL, run with -- --include-ignored"]
async fn postgres_ledger_answers_a_refund_recorded_at_once_elsewhere_r_4_8() {
    let env = Env::postgres("ledger and a concurrent insert").await;
    let Db::Postgres(url) = &env.db else {
        unreachable!("a PostgreSQL environment")
    };
    let refund = RefundRequest {
        refund_id: new_id(),
        transaction_id: new_id(),
        payment_reference: None,
        amount: dec("12.30"),
        currency: "EUR".to_owned(),
    };
    let (mut other, driver) = host_http::store::postgres::connect(url)
        .await
        .expect("connect");
    let held = other.transaction().await.unwrap();
    held.execute(
        "INSERT INTO ledger_refunds (refund_id, transaction_id, amount, currency, recorded_at) \
         VALUES ($1, $2, '12.30', 'EUR', '2026-11-27T00:00:00.000Z')",
        &[&refund.refund_id, &refund.transaction_id],
    )
    .await
    .expect("the other instance's insert");
    let ledger = Arc::clone(&env.opened.ledger);
    let sent = {
        let refund = refund.clone();
        tokio::spawn(async move { ledger.send(&refund).await })
    };
    // The ledger's statement is waiting for the held insert before it commits.
    let probe = host_http::store::postgres::connect(url)
        .await
        .expect("connect");
    let mut waited = false;
    for _ in 0..200 {
        let row = probe
            .0
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() \
                 AND wait_event_type = 'Lock' AND query LIKE '%ledger_refunds%'",
                &[],
            )
            .await
            .expect("pg_stat_activity");
        if row.get::<_, i64>(0) > 0 {
            waited = true;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    assert!(waited, "the ledger's insert waits for the held one");
    held.commit().await.unwrap();
    assert_eq!(
        sent.await.expect("send"),
        GatewayOutcome::Succeeded {
            gateway_reference: Some(format!("ledger:{}", refund.refund_id)),
        }
    );
    drop(probe);
    drop(other);
    let _ = driver.await;
    env.finish().await;
}

/// The dashboard overview reads its sums per quarter hour of UTC and currency: each payment
/// added at its instant and each successful refund at its request's instant, in exact
/// decimals; a declined refund, another provider's money and quarter hours before the one
/// holding `since` are not in them.
async fn overview_sums_payments_and_refunds_per_quarter_hour_exactly(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let globex = provider(db, "globex");
    let pay = async |provider_id: &str, currency: &str, totals: &[&str], paid_at| {
        let new = transaction(provider_id, currency, totals);
        let id = new.id.clone();
        opened.store.create_transaction(new, None).await.unwrap();
        let outcome = opened
            .store
            .record_payment(
                id.clone(),
                provider_id.to_owned(),
                payment_details(),
                paid_at,
                paid_at,
            )
            .await
            .unwrap();
        assert!(matches!(outcome, OwnerChecked::Done(PayOutcome::Paid(_))));
        id
    };
    let quarter = |minutes: i64| t0() + Duration::minutes(minutes);
    // 10:00–10:14:59 is one quarter hour, 10:15 the next.
    let one = pay(&acme.provider_id, "EUR", &["0.10", "0.20"], quarter(1)).await;
    pay(
        &acme.provider_id,
        "EUR",
        &["100"],
        quarter(14) + Duration::seconds(59),
    )
    .await;
    pay(&acme.provider_id, "EUR", &["1.05"], quarter(15)).await;
    pay(&acme.provider_id, "JPY", &["500"], quarter(16)).await;
    pay(&acme.provider_id, "EUR", &["7.00"], quarter(-60)).await;
    pay(&globex.provider_id, "EUR", &["999.99"], quarter(2)).await;
    // A refund of 0.10 requested at 10:31 and settled at 11:00 counts at 10:30; a declined one
    // not at all.
    let refund = async |order: u32, total: &str, minutes: i64, settlement: Settlement| {
        let c = cancellation(
            &acme.provider_id,
            &one,
            true,
            vec![line(order, total, total)],
            quarter(minutes),
            "instance-a",
            quarter(minutes + 1),
        );
        let refund_id = c.refund_id.clone();
        reserve_pending(opened, c).await;
        settle(opened, &refund_id, settlement, quarter(60)).await;
    };
    refund(1, "0.10", 31, succeeded("R-1")).await;
    let no = Settlement::Declined {
        reason: "no".to_owned(),
    };
    refund(2, "0.20", 33, no).await;

    let rows = opened
        .dashboard
        .overview(acme.provider_id.clone(), quarter(-10), quarter(0))
        .await
        .unwrap();
    let sums: Vec<(String, DateTime<Utc>, String, String)> = rows
        .sums
        .iter()
        .map(|s| {
            (
                s.currency.clone(),
                s.bucket,
                s.paid.to_string(),
                s.refunded.to_string(),
            )
        })
        .collect();
    let row = |currency: &str, minutes, paid: &str, refunded: &str| {
        (
            currency.to_owned(),
            quarter(minutes),
            paid.to_owned(),
            refunded.to_owned(),
        )
    };
    // The payment at 09:00 lies before the quarter hour holding 09:50.
    assert_eq!(
        sums,
        vec![
            row("EUR", 0, "100.30", "0"),
            row("EUR", 15, "1.05", "0"),
            row("JPY", 15, "500", "0"),
            row("EUR", 30, "0", "0.10"),
        ]
    );
    assert_eq!(rows.pending_refunds, 0);
}

/// PostgreSQL: migration 22 fills the overview's sums from the payments and successful refunds
/// already recorded, in `numeric`, to the rows the stores keep as they record them: the sums
/// kept are read, the table dropped and the migration run again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs PostgreSQL: set CHECKOUT_TEST_PG_URL, run with -- --include-ignored"]
async fn postgres_overview_sums_are_filled_from_what_was_recorded() {
    let env = Env::postgres("overview sums filled").await;
    let Db::Postgres(url) = &env.db else {
        unreachable!("a PostgreSQL environment")
    };
    let opened = &env.opened;
    let (acme, globex) = (provider(&env.db, "acme"), provider(&env.db, "globex"));
    for (n, (owner, currency, total, minutes)) in [
        (&acme, "EUR", "0.10", 1),
        (&acme, "EUR", "0.20", 14),
        (&acme, "EUR", "1.00", 15),
        (&acme, "KWD", "1.500", 16),
        (&globex, "EUR", "5.00", 2),
    ]
    .into_iter()
    .enumerate()
    {
        let new = transaction(&owner.provider_id, currency, &[total, "2.00"]);
        let id = new.id.clone();
        opened.store.create_transaction(new, None).await.unwrap();
        let paid_at = t0() + Duration::minutes(minutes);
        opened
            .store
            .record_payment(
                id.clone(),
                owner.provider_id.clone(),
                payment_details(),
                paid_at,
                paid_at,
            )
            .await
            .unwrap();
        if n % 2 == 0 {
            let mut c = paid_cancellation(&owner.provider_id, &id, vec![line(1, total, total)]);
            c.currency = currency.to_owned();
            c.refund = dec(total);
            c.requested_at = paid_at + Duration::minutes(20);
            let refund_id = c.refund_id.clone();
            reserve_pending(opened, c).await;
            settle(opened, &refund_id, succeeded("R"), paid_at).await;
        }
    }
    let (client, driver) = host_http::store::postgres::connect(url)
        .await
        .expect("connect");
    let sums = async || -> Vec<String> {
        client
            .query(
                "SELECT concat_ws(' ', provider_id, bucket, currency, paid, refunded) \
                 FROM overview_sums ORDER BY 1",
                &[],
            )
            .await
            .unwrap()
            .iter()
            .map(|row| row.get(0))
            .collect()
    };
    let kept = sums().await;
    assert_eq!(kept.len(), 6, "{kept:?}");
    client
        .batch_execute(
            // Back to the schema of version 21, the overview's indexes included (migration 23
            // only sets an option of the search index: run again, it sets it again).
            "DROP TABLE overview_sums; DELETE FROM schema_migrations WHERE version >= 22; \
             CREATE INDEX transactions_paid ON transactions(provider_id, paid_at) \
             INCLUDE (currency, paid_amount) WHERE paid_at IS NOT NULL; \
             CREATE INDEX cancellations_succeeded ON cancellations(provider_id, created_at) \
             INCLUDE (refund, currency, transaction_id) WHERE outcome = 'SUCCESS';",
        )
        .await
        .unwrap();
    host_http::store::postgres::migrations::migrate_url(url)
        .await
        .expect("migrated again");
    assert_eq!(sums().await, kept);
    drop(client);
    let _ = driver.await;
    env.finish().await;
}

/// Writes an event row as the stores do, on a session of the test's own.
async fn insert_event(
    client: &impl tokio_postgres::GenericClient,
    id: &str,
    provider_id: &str,
    transaction_id: &str,
) {
    client
        .execute(
            "INSERT INTO events (id, provider_id, transaction_id, type, payload, created_at) \
             VALUES ($1, $2, $3, 'transaction.updated', '{}', now())",
            &[&id, &provider_id, &transaction_id],
        )
        .await
        .expect("event written");
}

/// Creates an unpaid EUR transaction; returns its id.
async fn create(opened: &Stores, provider_id: &str, totals: &[&str]) -> String {
    let new = transaction(provider_id, "EUR", totals);
    let id = new.id.clone();
    opened
        .store
        .create_transaction(new, None)
        .await
        .expect("transaction created");
    id
}

fn payment_details() -> PaymentDetails {
    PaymentDetails {
        payment: Some(PaymentInfo {
            reference: Some("PAY-1".to_owned()),
            provider: Some("sandbox".to_owned()),
        }),
        ..PaymentDetails::default()
    }
}

/// Creates and pays an EUR transaction; returns its id.
async fn paid(opened: &Stores, provider_id: &str, totals: &[&str]) -> String {
    let id = create(opened, provider_id, totals).await;
    let outcome = opened
        .store
        .record_payment(
            id.clone(),
            provider_id.to_owned(),
            payment_details(),
            at(1),
            at(1),
        )
        .await
        .expect("payment recorded");
    assert!(
        matches!(outcome, OwnerChecked::Done(PayOutcome::Paid(_))),
        "{outcome:?}"
    );
    id
}

/// One cancelled line: the item's total, no penalty, `refund` refunded.
fn line(order: u32, total: &str, refund: &str) -> CancelledItem {
    CancelledItem {
        order,
        total: dec(total),
        penalty: dec(total) - dec(refund),
        refund: dec(refund),
        applied_penalty: None,
    }
}

/// A cancellation of `lines` on `transaction_id`, requested at `requested_at`, leased by
/// `owner` until `lease_until`.
fn cancellation(
    provider_id: &str,
    transaction_id: &str,
    paid: bool,
    lines: Vec<CancelledItem>,
    requested_at: DateTime<Utc>,
    owner: &str,
    lease_until: DateTime<Utc>,
) -> NewCancellation {
    let refund = lines.iter().map(|l| l.refund).sum::<Decimal>();
    NewCancellation {
        refund_id: new_id(),
        transaction_id: transaction_id.to_owned(),
        provider_id: provider_id.to_owned(),
        paid,
        items: lines,
        refund: checkout_engine::money::round_to_scale(refund, 2),
        currency: "EUR".to_owned(),
        payment_reference: paid.then(|| "PAY-1".to_owned()),
        invoice_title: None,
        invoice_number: None,
        invoice_file: None,
        idempotency: None,
        requested_at,
        lease: Lease {
            owner: owner.to_owned(),
            until: lease_until,
        },
    }
}

/// A paid cancellation requested at `at(0)`, leased by `instance-a` for 30 s.
fn paid_cancellation(
    provider_id: &str,
    transaction_id: &str,
    lines: Vec<CancelledItem>,
) -> NewCancellation {
    cancellation(
        provider_id,
        transaction_id,
        true,
        lines,
        at(0),
        "instance-a",
        at(30),
    )
}

async fn reserve(opened: &Stores, c: NewCancellation) -> Reserved {
    match opened.cancellations.reserve(c).await.expect("reserve") {
        OwnerChecked::Done(reserved) => reserved,
        other => panic!("expected the owner's transaction, got {other:?}"),
    }
}

/// Reserves and expects a pending refund.
async fn reserve_pending(opened: &Stores, c: NewCancellation) -> CancellationView {
    match reserve(opened, c).await {
        Reserved::Pending(view) => view,
        other => panic!("expected a pending refund, got {other:?}"),
    }
}

async fn settle(
    opened: &Stores,
    refund_id: &str,
    settlement: Settlement,
    now: DateTime<Utc>,
) -> CancellationView {
    opened
        .cancellations
        .settle(refund_id.to_owned(), settlement, now)
        .await
        .expect("settle")
        .expect("the refund exists")
}

fn succeeded(reference: &str) -> Settlement {
    Settlement::Succeeded {
        gateway_reference: Some(reference.to_owned()),
    }
}

async fn record(opened: &Stores, id: &str) -> store::TransactionRecord {
    opened
        .store
        .transaction(id.to_owned())
        .await
        .expect("read transaction")
        .expect("transaction exists")
}

fn key(provider_id: &str, key: &str, route: &str, body: &str) -> IdempotencyKey {
    IdempotencyKey {
        provider_id: provider_id.to_owned(),
        key: key.to_owned(),
        route: route.to_owned(),
        body_hash: hash_secret(body),
        // Unfenced: matches whichever running claim holds the key.
        claimed_at: None,
    }
}

/// A key whose claim is made at `claimed_at`, its identity (R-9.1).
fn fenced(k: &IdempotencyKey, claimed_at: DateTime<Utc>) -> IdempotencyKey {
    IdempotencyKey {
        claimed_at: Some(claimed_at),
        ..k.clone()
    }
}

/// The stale-claim cut-off of a claim made at `now` with the default 2 minutes.
fn stale_before(now: DateTime<Utc>) -> DateTime<Utc> {
    now - Duration::minutes(2)
}

/// A day before `now`: the expiry cut-off of idempotency keys (R-9.1: kept at least 24 h).
fn day_before(now: DateTime<Utc>) -> DateTime<Utc> {
    now - Duration::hours(24)
}

async fn claim(opened: &Stores, k: &IdempotencyKey, now: DateTime<Utc>) -> Claim {
    opened
        .store
        .claim_idempotency(k.clone(), now, day_before(now), stale_before(now))
        .await
        .expect("claim")
}

async fn key_state(opened: &Stores, k: &IdempotencyKey) -> Option<IdempotencyState> {
    opened
        .store
        .idempotency(k.provider_id.clone(), k.key.clone(), at(-3600))
        .await
        .expect("read key")
        .map(|record| record.state)
}

fn ids(views: &[CancellationView]) -> Vec<String> {
    views.iter().map(|v| v.refund_id.clone()).collect()
}

// ---------------------------------------------------------------------------------------------
// Providers and credentials.
// ---------------------------------------------------------------------------------------------

/// R-7.1: an active credential is found with the hash of its secret and its scopes; a revoked
/// one and an unknown one are not.
async fn credential_active_revoked_unknown_r_7_1(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let row = opened
        .store
        .credential(acme.widget_id.clone())
        .await
        .expect("credential read")
        .expect("an active credential is found");
    assert_eq!(row.widget_id, acme.widget_id);
    assert_eq!(row.provider_id, acme.provider_id);
    assert_eq!(row.secret_hash, hash_secret(&acme.secret));
    assert_eq!(Scopes::parse(&row.scopes), Ok(Scopes::all()));

    let second: Creds = providers::add_credential(db, &acme.provider_id, Scopes::all(), Utc::now())
        .expect("second credential")
        .into();
    providers::revoke_credential(db, &acme.widget_id, Utc::now()).expect("revoked");
    assert_eq!(
        opened
            .store
            .credential(acme.widget_id.clone())
            .await
            .expect("credential read"),
        None,
        "a revoked credential is refused from its next request on"
    );
    let other = opened
        .store
        .credential(second.widget_id.clone())
        .await
        .expect("credential read")
        .expect("the provider's other credential stays active");
    assert_eq!(other.provider_id, acme.provider_id);
    assert_eq!(
        opened
            .store
            .credential("no-such-widget".to_owned())
            .await
            .expect("credential read"),
        None
    );
}

/// The access epoch (what cached credentials and provider settings are trusted under, R-7.1,
/// R-5.1) moves in the same commit as every change of a credential or of a provider's
/// settings, made by the `provider` commands on the database — and not with anything else
/// (creates, payments, settled cancellations bumping the receipt counter).
async fn access_epoch_moves_with_credentials_and_settings_only_r_7_1_r_5_1(
    opened: &Stores,
    db: &Db,
) {
    let epoch = || async { opened.store.access_epoch().await.expect("epoch read") };
    let start = epoch().await;
    let acme = provider(db, "acme");
    let after_create = epoch().await;
    assert_ne!(
        after_create, start,
        "a new provider and credential move the epoch"
    );

    let second: Creds = providers::add_credential(db, &acme.provider_id, Scopes::all(), Utc::now())
        .expect("second credential")
        .into();
    let after_add = epoch().await;
    assert_ne!(
        after_add, after_create,
        "an added credential moves the epoch"
    );

    // Business writes leave it alone: a payment and a settled cancellation (receipt counter).
    let id = paid(opened, &acme.provider_id, &["10.00"]).await;
    let view = reserve_pending(
        opened,
        paid_cancellation(&acme.provider_id, &id, vec![line(1, "10.00", "10.00")]),
    )
    .await;
    settle(opened, &view.refund_id, succeeded("ref-1"), at(60)).await;
    assert!(
        record(opened, &id).await.cancellations[0]
            .receipt_number
            .is_some()
    );
    assert_eq!(
        epoch().await,
        after_add,
        "business writes do not move the epoch"
    );

    providers::revoke_credential(db, &second.widget_id, Utc::now()).expect("revoked");
    let after_revoke = epoch().await;
    assert_ne!(after_revoke, after_add, "a revocation moves the epoch");

    providers::set_policy(
        db,
        &acme.provider_id,
        &providers::PolicyChange {
            time_zone: Some("Europe/Berlin".to_owned()),
            ..Default::default()
        },
    )
    .expect("policy change");
    assert_ne!(
        epoch().await,
        after_revoke,
        "a change of the provider's settings moves the epoch"
    );
}

/// R-10: the version a rendered status record is kept under moves in the commit of every
/// change the record shows — an update, the payment, a reservation, a settlement with its
/// receipt — and is read in the same snapshot as the record; renewing a refund's lease shows
/// nothing and leaves it.
async fn transaction_version_moves_with_what_the_status_record_shows_r_10(
    opened: &Stores,
    db: &Db,
) {
    let acme = provider(db, "acme");
    let version = |id: String| async move {
        let (owner, version) = opened
            .store
            .transaction_version(id.clone())
            .await
            .expect("version read")
            .expect("the transaction exists");
        assert_eq!(version, record(opened, &id).await.version, "one snapshot");
        let (epoch, together) = opened
            .store
            .access_epoch_and_version(id.clone())
            .await
            .expect("epoch and version read");
        assert_eq!(
            together,
            Some((owner.clone(), version)),
            "read together as apart"
        );
        assert_eq!(
            epoch,
            opened.store.access_epoch().await.expect("epoch read"),
            "the same epoch as read alone"
        );
        (owner, version)
    };
    assert_eq!(
        opened
            .store
            .transaction_version(new_id())
            .await
            .expect("version read"),
        None
    );
    assert_eq!(
        opened
            .store
            .access_epoch_and_version(new_id())
            .await
            .expect("epoch and version read")
            .1,
        None,
        "an unknown transaction has no owner and version"
    );
    let id = create(opened, &acme.provider_id, &["10.00"]).await;
    let (owner, created) = version(id.clone()).await;
    assert_eq!(owner, acme.provider_id);

    let change = UpdateTransaction {
        external_ids: None,
        title: Some("renamed".to_owned()),
        note: None,
        attachments: None,
    };
    opened
        .store
        .update_transaction(id.clone(), acme.provider_id.clone(), change, at(1))
        .await
        .expect("updated");
    let (_, updated) = version(id.clone()).await;
    assert!(updated > created, "an update moves it");

    let id = paid(opened, &acme.provider_id, &["10.00"]).await;
    let (_, paid_at) = version(id.clone()).await;
    let view = reserve_pending(
        opened,
        cancellation(
            &acme.provider_id,
            &id,
            true,
            vec![line(1, "10.00", "10.00")],
            at(2),
            "instance-a",
            at(10),
        ),
    )
    .await;
    let (_, reserved) = version(id.clone()).await;
    assert!(
        reserved > paid_at,
        "a reservation (item CANCELLING) moves it"
    );
    assert!(
        opened
            .cancellations
            .renew_lease(view.refund_id.clone(), lease("instance-a", at(50)))
            .await
            .expect("renew")
    );
    assert_eq!(
        version(id.clone()).await.1,
        reserved,
        "a lease renewal shows nothing"
    );
    settle(opened, &view.refund_id, succeeded("gw"), at(20)).await;
    let (_, settled) = version(id.clone()).await;
    assert!(settled > reserved, "a settlement moves it");
}

/// R-5.1, R-6.1: a provider is read with its zone and (absent) policies; an unknown one is not.
async fn provider_reads_its_configuration_r_5_1_r_6_1(opened: &Stores, db: &Db) {
    let acme = provider_in(db, "acme", "Europe/Berlin");
    let row = opened
        .store
        .provider(acme.provider_id.clone())
        .await
        .expect("provider read")
        .expect("provider exists");
    assert_eq!(row.id, acme.provider_id);
    assert_eq!(row.name, "acme");
    assert_eq!(row.time_zone, "Europe/Berlin");
    assert_eq!(row.default_policy, None);
    assert!(row.category_policies.is_empty());
    assert!(
        DateTime::parse_from_rfc3339(&row.created_at).is_ok(),
        "{}",
        row.created_at
    );
    assert_eq!(
        opened
            .store
            .provider(new_id())
            .await
            .expect("provider read"),
        None
    );
}

// ---------------------------------------------------------------------------------------------
// Transactions.
// ---------------------------------------------------------------------------------------------

fn is_reference(text: &str) -> bool {
    text.strip_prefix("CHK-").is_some_and(|rest| {
        rest.len() == 8
            && rest
                .bytes()
                .all(|b| b"0123456789ABCDEFGHJKMNPQRSTVWXYZ".contains(&b))
    })
}

/// R-3.2, R-1.4, R-3.5: a new transaction is stored as given, with a fresh unique reference, its
/// items numbered from 1, amounts with the scale they were written with ("100.50", "0.00").
async fn create_transaction_keeps_items_and_amount_scales_r_1_4_r_3_2(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let mut new = transaction(&acme.provider_id, "EUR", &["100.50", "0.00"]);
    assert_eq!(new.total.to_string(), "100.50");
    let policy: CancellationPolicy = serde_json::from_str(
        r#"{"description":"late fee","reference":"START_PERIOD","penalties":[
            {"type":"DATE_PENALTY","value":{"amount":10.50,"unit":"FIXED_AMOUNT"},
             "until":"2030-02-01"}]}"#,
    )
    .expect("a policy");
    let period: Period = serde_json::from_str(
        r#"{"start":"2030-03-01T09:00:00","end":"2030-03-02T18:00:00",
            "startTimeZone":"Europe/Paris","endTimeZone":"America/New_York"}"#,
    )
    .expect("a period");
    new.items[0].policy = Some(policy.clone());
    new.items[0].period = Some(period.clone());
    new.attachments = vec![Attachment {
        url: "https://files.example.com/terms.pdf".to_owned(),
        attachment_type: Some(AttachmentType::TermsConditions),
    }];
    new.email = Some(CheckoutEmail {
        recipients: Some(vec!["a@example.com".to_owned(), "b@example.com".to_owned()]),
        subject: Some("Your booking".to_owned()),
        content: Some("Hello".to_owned()),
    });
    let reference = opened
        .store
        .create_transaction(new.clone(), None)
        .await
        .expect("created");
    assert!(is_reference(&reference), "{reference}");

    let stored = record(opened, &new.id).await;
    assert_eq!(stored.id, new.id);
    assert_eq!(stored.provider_id, acme.provider_id);
    assert_eq!(stored.reference, reference);
    assert_eq!(stored.status, TransactionStatus::Pending);
    assert_eq!(stored.title, "conformance");
    assert_eq!(stored.currency, "EUR");
    assert_eq!(stored.ref_ids, new.ref_ids);
    assert_eq!(stored.note.as_deref(), Some("first note"));
    assert_eq!(stored.attachments, new.attachments);
    assert_eq!(stored.email, new.email);
    assert_eq!(stored.payload, new.payload, "the body exactly as received");
    assert_eq!(stored.time_zone.as_deref(), Some("Europe/Paris"));
    assert_eq!(stored.total.to_string(), "100.50");
    assert_eq!(stored.paid_amount, None);
    assert_eq!(stored.paid_at, None);
    assert_eq!(stored.payment, None);
    assert!(stored.refunded_amount.is_zero());
    assert!(stored.cancellations.is_empty());
    assert_eq!(stored.created_at, format_instant(t0()));
    assert_eq!(stored.updated_at, format_instant(t0()));

    assert_eq!(stored.items.len(), 2);
    let (first, second) = (&stored.items[0], &stored.items[1]);
    assert_eq!(first.order_no, 1);
    assert_eq!(second.order_no, 2);
    assert_eq!(first.name.as_deref(), Some("item 1"));
    assert_eq!(first.category, Some(Category::Event));
    assert_eq!(first.total.to_string(), "100.50");
    assert_eq!(second.total.to_string(), "0.00", "a zero keeps its scale");
    assert_eq!(first.status, ItemStatus::Active);
    assert_eq!(second.status, ItemStatus::Active);
    assert!(first.refunded.is_zero() && second.refunded.is_zero());
    assert_eq!(
        first.policy.as_ref(),
        Some(&policy),
        "resolved at creation (R-3.5)"
    );
    assert_eq!(
        first
            .policy
            .as_ref()
            .map(|p| p.penalties[0].value.amount.to_string())
            .as_deref(),
        Some("10.50"),
        "a policy amount keeps its scale"
    );
    assert_eq!(first.period.as_ref(), Some(&period));
    assert_eq!(second.policy, None);
    assert_eq!(second.period, None);

    // A second transaction gets another reference.
    let other = transaction(&acme.provider_id, "EUR", &["1.00"]);
    let other_reference = opened
        .store
        .create_transaction(other, None)
        .await
        .expect("created");
    assert!(is_reference(&other_reference));
    assert_ne!(other_reference, reference);
}

/// R-9.1: the response of a creation's key is stored in the commit that creates the
/// transaction, so a repeat replays it.
async fn create_transaction_finishes_its_key_in_the_same_commit_r_9_1(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let k = key(&acme.provider_id, "create-1", "/transactions", "{body}");
    assert_eq!(claim(opened, &k, t0()).await, Claim::Claimed);
    assert_eq!(key_state(opened, &k).await, Some(IdempotencyState::Running));

    let new = transaction(&acme.provider_id, "EUR", &["10.00"]);
    let id = new.id.clone();
    let body = format!("{{\"transactionId\":\"{id}\"}}");
    opened
        .store
        .create_transaction(
            new,
            Some(IdempotentResponse {
                key: k.clone(),
                status_code: 201,
                body: body.clone(),
            }),
        )
        .await
        .expect("created");
    let stored = opened
        .store
        .idempotency(acme.provider_id.clone(), k.key.clone(), day_before(t0()))
        .await
        .expect("key read")
        .expect("key kept");
    assert_eq!(stored.route, "/transactions");
    assert_eq!(stored.body_hash, k.body_hash);
    assert_eq!(
        stored.state,
        IdempotencyState::Done {
            status_code: 201,
            body: body.clone()
        }
    );
    assert_eq!(record(opened, &id).await.provider_id, acme.provider_id);

    // A repeat finds the finished record; releasing a finished key keeps it.
    match claim(opened, &k, at(5)).await {
        Claim::Existing(existing) => assert_eq!(existing, stored),
        Claim::Claimed => panic!("a finished key must not be claimed again"),
    }
    opened
        .store
        .release_idempotency(k.clone())
        .await
        .expect("release");
    assert_eq!(
        key_state(opened, &k).await,
        Some(IdempotencyState::Done {
            status_code: 201,
            body
        }),
        "only a running claim is released"
    );
}

/// R-7.4: the owner of a transaction, and nothing for an unknown one.
async fn transaction_owner_and_missing_transactions_r_7_4(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let globex = provider(db, "globex");
    let mine = create(opened, &acme.provider_id, &["5.00"]).await;
    let theirs = create(opened, &globex.provider_id, &["6.00"]).await;
    let owner = |id: String| opened.store.transaction_owner(id);
    assert_eq!(
        owner(mine.clone()).await.expect("owner"),
        Some(acme.provider_id.clone())
    );
    assert_eq!(
        owner(theirs).await.expect("owner"),
        Some(globex.provider_id.clone())
    );
    assert_eq!(owner(new_id()).await.expect("owner"), None);
    assert_eq!(
        opened
            .store
            .transaction(new_id())
            .await
            .expect("transaction read"),
        None
    );
}

/// R-7.4, R-8.6: an update names its transaction on behalf of a provider: unknown → NotFound,
/// another's → OtherProvider and nothing changes; the owner's replaces the given fields only.
async fn update_transaction_checks_ownership_and_keeps_absent_fields_r_7_4_r_8_6(
    opened: &Stores,
    db: &Db,
) {
    let acme = provider(db, "acme");
    let globex = provider(db, "globex");
    let id = create(opened, &acme.provider_id, &["5.00"]).await;
    let change = UpdateTransaction {
        external_ids: Some(BTreeMap::from([("order".to_owned(), "B-2".to_owned())])),
        title: Some("renamed".to_owned()),
        note: None,
        attachments: Some(vec![Attachment {
            url: "https://files.example.com/invoice.pdf".to_owned(),
            attachment_type: Some(AttachmentType::Invoice),
        }]),
    };
    let update = |tx: String, provider: &str| {
        opened
            .store
            .update_transaction(tx, provider.to_owned(), change.clone(), at(60))
    };
    assert_eq!(
        update(new_id(), &acme.provider_id).await.expect("update"),
        OwnerChecked::NotFound
    );
    assert_eq!(
        update(id.clone(), &globex.provider_id)
            .await
            .expect("update"),
        OwnerChecked::OtherProvider
    );
    let untouched = record(opened, &id).await;
    assert_eq!(untouched.title, "conformance");
    assert_eq!(untouched.updated_at, format_instant(t0()));

    assert_eq!(
        update(id.clone(), &acme.provider_id).await.expect("update"),
        OwnerChecked::Done(())
    );
    let updated = record(opened, &id).await;
    assert_eq!(updated.title, "renamed");
    assert_eq!(
        updated.ref_ids.get("order").map(String::as_str),
        Some("B-2")
    );
    assert_eq!(
        updated.attachments,
        change.attachments.clone().expect("given")
    );
    assert_eq!(updated.note.as_deref(), Some("first note"), "absent stays");
    assert_eq!(updated.updated_at, format_instant(at(60)));
    assert_eq!(updated.created_at, format_instant(t0()));
}

/// R-3.3, R-3.6, R-1.4: a payment moves PENDING → PAID with the sum of the active items at the
/// currency's scale, once; ownership first (R-7.4).
async fn record_payment_pays_active_items_at_currency_scale_once_r_3_3_r_3_6(
    opened: &Stores,
    db: &Db,
) {
    let acme = provider(db, "acme");
    let globex = provider(db, "globex");
    let id = create(opened, &acme.provider_id, &["100.5", "20"]).await;
    let pay = |tx: String, provider: &str| {
        opened
            .store
            .record_payment(tx, provider.to_owned(), payment_details(), at(-600), at(10))
    };
    assert_eq!(
        pay(new_id(), &acme.provider_id).await.expect("pay"),
        OwnerChecked::NotFound
    );
    assert_eq!(
        pay(id.clone(), &globex.provider_id).await.expect("pay"),
        OwnerChecked::OtherProvider
    );
    assert_eq!(record(opened, &id).await.status, TransactionStatus::Pending);

    let outcome = pay(id.clone(), &acme.provider_id).await.expect("pay");
    let OwnerChecked::Done(PayOutcome::Paid(amount)) = outcome else {
        panic!("expected Paid, got {outcome:?}");
    };
    assert_eq!(amount.to_string(), "120.50", "at the currency's scale");
    let stored = record(opened, &id).await;
    assert_eq!(stored.status, TransactionStatus::Paid);
    assert_eq!(
        stored.paid_amount.map(|p| p.to_string()).as_deref(),
        Some("120.50")
    );
    assert_eq!(
        stored.paid_at.as_deref(),
        Some(format_instant(at(-600)).as_str())
    );
    assert_eq!(stored.payment, Some(payment_details()));
    assert_eq!(stored.updated_at, format_instant(at(10)));

    assert_eq!(
        pay(id.clone(), &acme.provider_id).await.expect("pay"),
        OwnerChecked::Done(PayOutcome::NotPayable(
            "contract status PAID does not allow payment".to_owned()
        ))
    );
    assert_eq!(
        record(opened, &id)
            .await
            .paid_amount
            .map(|p| p.to_string())
            .as_deref(),
        Some("120.50"),
        "a second payment changes nothing"
    );

    // Another currency's scale: KWD has three decimals.
    let kwd = transaction(&acme.provider_id, "KWD", &["1.5", "2"]);
    let kwd_id = kwd.id.clone();
    opened
        .store
        .create_transaction(kwd, None)
        .await
        .expect("created");
    let outcome = pay(kwd_id, &acme.provider_id).await.expect("pay");
    let OwnerChecked::Done(PayOutcome::Paid(amount)) = outcome else {
        panic!("expected Paid, got {outcome:?}");
    };
    assert_eq!(amount.to_string(), "3.500");
}

// ---------------------------------------------------------------------------------------------
// Idempotency keys.
// ---------------------------------------------------------------------------------------------

/// R-9.1: a key is claimed once per provider while running; released, it may be claimed again;
/// expired, it is replaced; pruning deletes keys made before the cut-off.
async fn idempotency_claim_release_expiry_and_prune_r_9_1(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let globex = provider(db, "globex");
    let k = key(
        &acme.provider_id,
        "k-1",
        CANCEL_ROUTE,
        "{\"itemsOrder\":[1]}",
    );

    assert_eq!(key_state(opened, &k).await, None);
    assert_eq!(claim(opened, &k, t0()).await, Claim::Claimed);
    let Claim::Existing(existing) = claim(opened, &k, at(1)).await else {
        panic!("a running key is held");
    };
    assert_eq!(existing.route, CANCEL_ROUTE);
    assert_eq!(existing.body_hash, k.body_hash);
    assert_eq!(existing.state, IdempotencyState::Running);
    // Another body under the same key still finds the first request's record (→ 422 above).
    let other_body = key(&acme.provider_id, "k-1", "/transactions", "{}");
    match claim(opened, &other_body, at(1)).await {
        Claim::Existing(found) => {
            assert_eq!(found.route, CANCEL_ROUTE);
            assert_eq!(found.body_hash, k.body_hash);
        }
        Claim::Claimed => panic!("a held key must not be claimed with another body"),
    }
    // Keys are scoped per provider.
    let theirs = key(&globex.provider_id, "k-1", CANCEL_ROUTE, "{}");
    assert_eq!(claim(opened, &theirs, at(1)).await, Claim::Claimed);

    // Released (a request refused by validation is not kept), it may be claimed again.
    opened
        .store
        .release_idempotency(k.clone())
        .await
        .expect("release");
    assert_eq!(key_state(opened, &k).await, None);
    assert_eq!(
        key_state(opened, &theirs).await,
        Some(IdempotencyState::Running),
        "releasing one provider's key leaves another's"
    );
    assert_eq!(claim(opened, &k, at(2)).await, Claim::Claimed);

    // Not visible once older than `not_before`; an expired record is replaced by a claim.
    assert_eq!(
        opened
            .store
            .idempotency(acme.provider_id.clone(), k.key.clone(), at(3))
            .await
            .expect("key read"),
        None
    );
    let later = at(2) + Duration::hours(25);
    let renewed = key(&acme.provider_id, "k-1", "/transactions", "{\"new\":1}");
    assert_eq!(
        opened
            .store
            .claim_idempotency(
                renewed.clone(),
                later,
                day_before(later),
                stale_before(later)
            )
            .await
            .expect("claim"),
        Claim::Claimed
    );
    let record = opened
        .store
        .idempotency(acme.provider_id.clone(), k.key.clone(), day_before(later))
        .await
        .expect("key read")
        .expect("the new claim is visible");
    assert_eq!(record.route, "/transactions");
    assert_eq!(record.body_hash, renewed.body_hash);

    // Prune: `theirs` (made at 1 s) goes, the renewed one (made 25 h later) stays.
    let k2 = key(&acme.provider_id, "k-2", CANCEL_ROUTE, "{}");
    assert_eq!(claim(opened, &k2, at(100)).await, Claim::Claimed);
    assert_eq!(
        opened.store.prune_idempotency(at(50)).await.expect("prune"),
        1
    );
    assert_eq!(key_state(opened, &theirs).await, None);
    assert_eq!(
        key_state(opened, &k2).await,
        Some(IdempotencyState::Running)
    );
    assert_eq!(
        opened.store.prune_idempotency(at(50)).await.expect("prune"),
        0
    );
    assert_eq!(
        opened
            .store
            .prune_idempotency(later + Duration::seconds(1))
            .await
            .expect("prune"),
        2
    );
    assert_eq!(key_state(opened, &k2).await, None);
}

// ---------------------------------------------------------------------------------------------
// Cancellations.
// ---------------------------------------------------------------------------------------------

/// R-4.8, R-10.2, R-3.3, R-9.1: a reservation marks the items CANCELLING under a PENDING
/// refund; a success cancels them, moves the status, numbers the receipt per provider and
/// finishes the request's key with the 200 body, in one step; settling again changes nothing.
async fn reserve_then_settle_succeeded_makes_receipts_and_moves_status_r_4_8_r_10_2(
    opened: &Stores,
    db: &Db,
) {
    let acme = provider(db, "acme");
    let id = paid(opened, &acme.provider_id, &["100.50", "50.00"]).await;
    let reference = record(opened, &id).await.reference;

    let k = key(
        &acme.provider_id,
        "cancel-1",
        CANCEL_ROUTE,
        "{\"itemsOrder\":[1]}",
    );
    assert_eq!(claim(opened, &k, t0()).await, Claim::Claimed);
    let invoice = NewFile {
        id: new_id(),
        provider_id: acme.provider_id.clone(),
        name: Some("invoice.pdf".to_owned()),
        content_type: "application/pdf".to_owned(),
        content: b"%PDF-1.7 invoice".to_vec(),
        sha256_hex: "ab".repeat(32),
        share_token: None,
        share_expires_at: None,
        created_at: t0(),
    };
    let mut new = paid_cancellation(&acme.provider_id, &id, vec![line(1, "100.50", "100.50")]);
    new.invoice_title = Some("Credit note".to_owned());
    new.invoice_number = Some("INV-7".to_owned());
    new.invoice_file = Some(invoice.clone());
    new.idempotency = Some(k.clone());
    let refund_id = new.refund_id.clone();

    let pending = reserve_pending(opened, new).await;
    assert_eq!(pending.refund_id, refund_id);
    assert_eq!(pending.transaction_id, id);
    assert_eq!(pending.provider_id, acme.provider_id);
    assert_eq!(pending.transaction_reference, reference);
    assert_eq!(pending.outcome, outcome::PENDING);
    assert_eq!(pending.receipt_number, None);
    assert_eq!(pending.error_message, None);
    assert_eq!(pending.refund.to_string(), "100.50");
    assert_eq!(pending.currency, "EUR");
    assert_eq!(pending.items, vec![line(1, "100.50", "100.50")]);
    assert_eq!(pending.items[0].penalty.to_string(), "0.00");
    assert_eq!(pending.payment_reference.as_deref(), Some("PAY-1"));
    assert_eq!(pending.invoice_title.as_deref(), Some("Credit note"));
    assert_eq!(pending.invoice_number.as_deref(), Some("INV-7"));
    let file = pending.invoice_file.clone().expect("invoice file stored");
    assert_eq!(file.id, invoice.id);
    assert_eq!(file.size_bytes, 16);
    assert!(file.content.is_empty(), "metadata only in a view");
    assert_eq!(pending.transaction_status, TransactionStatus::Paid);
    assert_eq!(pending.gateway_reference, None);
    assert_eq!(pending.requested_at, format_instant(t0()));
    assert_eq!(pending.completed_at, None);
    assert_eq!(
        opened
            .cancellations
            .cancellation(refund_id.clone())
            .await
            .expect("read"),
        Some(pending.clone())
    );
    let during = record(opened, &id).await;
    assert_eq!(during.items[0].status, ItemStatus::Cancelling);
    assert_eq!(during.items[1].status, ItemStatus::Active);
    assert_eq!(during.status, TransactionStatus::Paid);
    assert_eq!(during.cancellations.len(), 1);
    assert_eq!(during.cancellations[0].outcome, outcome::PENDING);
    assert_eq!(during.cancellations[0].receipt_number, None);
    assert_eq!(
        key_state(opened, &k).await,
        Some(IdempotencyState::Running),
        "finished only when the refund ends"
    );
    assert_eq!(
        opened
            .cancellations
            .file(invoice.id.clone())
            .await
            .expect("file read")
            .expect("invoice stored with the reservation")
            .content,
        invoice.content
    );

    let settled = settle(opened, &refund_id, succeeded("gw-1"), at(5)).await;
    assert_eq!(settled.outcome, outcome::SUCCESS);
    assert_eq!(settled.receipt_number.as_deref(), Some("CR-000001"));
    assert_eq!(
        settled.transaction_status,
        TransactionStatus::PartiallyCancelled
    );
    assert_eq!(settled.gateway_reference.as_deref(), Some("gw-1"));
    assert_eq!(
        settled.completed_at.as_deref(),
        Some(format_instant(at(5)).as_str())
    );
    assert_eq!(settled.refund.to_string(), "100.50");
    assert_eq!(settled.requested_at, pending.requested_at);

    let after = record(opened, &id).await;
    assert_eq!(after.status, TransactionStatus::PartiallyCancelled);
    assert_eq!(after.items[0].status, ItemStatus::Cancelled);
    assert_eq!(after.items[0].refunded.to_string(), "100.50");
    assert_eq!(after.items[1].status, ItemStatus::Active);
    assert_eq!(after.refunded_amount.to_string(), "100.50");
    assert_eq!(after.cancellations.len(), 1);
    let listed = &after.cancellations[0];
    assert_eq!(listed.receipt_number.as_deref(), Some("CR-000001"));
    assert_eq!(listed.outcome, outcome::SUCCESS);
    assert_eq!(listed.items, vec![1]);
    assert_eq!(listed.refund.to_string(), "100.50");
    assert_eq!(listed.created_at, format_instant(t0()));

    // R-9.1: the request's key holds the 200 answer of the settled cancellation.
    assert_eq!(
        key_state(opened, &k).await,
        Some(IdempotencyState::Done {
            status_code: 200,
            body: serde_json::to_string(&result_of(&settled)).expect("serialises"),
        })
    );

    // Settled twice (the request and the recovery task): returned unchanged, nothing applied.
    let again = settle(opened, &refund_id, succeeded("gw-other"), at(9)).await;
    assert_eq!(again, settled);
    let declined_late = settle(
        opened,
        &refund_id,
        Settlement::Declined {
            reason: "late".to_owned(),
        },
        at(9),
    )
    .await;
    assert_eq!(declined_late, settled);
    assert_eq!(
        record(opened, &id).await.refunded_amount.to_string(),
        "100.50"
    );
    assert_eq!(
        opened
            .cancellations
            .cancellation(new_id())
            .await
            .expect("read"),
        None
    );
    assert_eq!(
        opened
            .cancellations
            .settle(new_id(), succeeded("gw"), at(9))
            .await
            .expect("settle"),
        None,
        "an unknown refund settles nothing"
    );
    assert_eq!(
        opened
            .cancellations
            .receipt(acme.provider_id.clone(), "CR-000001".to_owned())
            .await
            .expect("receipt read"),
        Some(settled.clone())
    );

    // The last item: CR-000002, CANCELLED, refunds add up.
    let second = reserve_pending(
        opened,
        paid_cancellation(&acme.provider_id, &id, vec![line(2, "50.00", "50.00")]),
    )
    .await;
    let last = settle(opened, &second.refund_id, succeeded("gw-2"), at(20)).await;
    assert_eq!(last.receipt_number.as_deref(), Some("CR-000002"));
    assert_eq!(last.transaction_status, TransactionStatus::Cancelled);
    let done = record(opened, &id).await;
    assert_eq!(done.status, TransactionStatus::Cancelled);
    assert_eq!(done.refunded_amount.to_string(), "150.50");
    assert!(done.items.iter().all(|i| i.status == ItemStatus::Cancelled));
    assert_eq!(
        opened
            .cancellations
            .pending_refunds()
            .await
            .expect("pending"),
        Vec::new()
    );
}

/// R-4.8: a decline ends FAILED with its reason; the items are ACTIVE again, status and amounts
/// stay, no receipt number is used; the items may be cancelled again.
async fn settle_declined_fails_and_releases_items_r_4_8(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let id = paid(opened, &acme.provider_id, &["70.00", "30.00"]).await;
    let k = key(&acme.provider_id, "cancel-d", CANCEL_ROUTE, "{}");
    assert_eq!(claim(opened, &k, t0()).await, Claim::Claimed);
    let mut new = paid_cancellation(
        &acme.provider_id,
        &id,
        vec![line(1, "70.00", "70.00"), line(2, "30.00", "30.00")],
    );
    new.idempotency = Some(k.clone());
    let pending = reserve_pending(opened, new).await;
    assert!(
        record(opened, &id)
            .await
            .items
            .iter()
            .all(|i| i.status == ItemStatus::Cancelling)
    );

    let failed = settle(
        opened,
        &pending.refund_id,
        Settlement::Declined {
            reason: "card closed".to_owned(),
        },
        at(5),
    )
    .await;
    assert_eq!(failed.outcome, outcome::FAILED);
    assert_eq!(failed.error_message.as_deref(), Some("card closed"));
    assert_eq!(failed.receipt_number, None);
    assert_eq!(failed.transaction_status, TransactionStatus::Paid);
    assert_eq!(
        failed.completed_at.as_deref(),
        Some(format_instant(at(5)).as_str())
    );
    let after = record(opened, &id).await;
    assert_eq!(after.status, TransactionStatus::Paid);
    assert!(after.items.iter().all(|i| i.status == ItemStatus::Active));
    assert!(after.items.iter().all(|i| i.refunded.is_zero()));
    assert!(after.refunded_amount.is_zero());
    assert_eq!(after.cancellations.len(), 1);
    assert_eq!(after.cancellations[0].outcome, outcome::FAILED);
    assert_eq!(
        key_state(opened, &k).await,
        Some(IdempotencyState::Done {
            status_code: 200,
            body: serde_json::to_string(&result_of(&failed)).expect("serialises"),
        }),
        "the FAILED answer is the key's response"
    );
    assert!(
        opened
            .cancellations
            .pending_refunds()
            .await
            .expect("pending")
            .is_empty()
    );

    // Settled again: unchanged.
    let again = settle(opened, &pending.refund_id, succeeded("gw"), at(9)).await;
    assert_eq!(again, failed);
    assert!(
        record(opened, &id)
            .await
            .items
            .iter()
            .all(|i| i.status == ItemStatus::Active)
    );

    // A FAILED refund reserves nothing: the full amount may be refunded, and the first receipt
    // number is still free.
    let retry = reserve_pending(
        opened,
        paid_cancellation(
            &acme.provider_id,
            &id,
            vec![line(1, "70.00", "70.00"), line(2, "30.00", "30.00")],
        ),
    )
    .await;
    let ok = settle(opened, &retry.refund_id, succeeded("gw"), at(10)).await;
    assert_eq!(ok.receipt_number.as_deref(), Some("CR-000001"));
    assert_eq!(ok.transaction_status, TransactionStatus::Cancelled);
    assert_eq!(
        record(opened, &id).await.refunded_amount.to_string(),
        "100.00"
    );
}

/// R-4.4, R-3.3, R-3.6: on an unpaid transaction the items are voided at once (refund 0, no
/// pending refund); PENDING stays PENDING until the last item, then CANCELLED; a payment after a
/// void pays the remaining items only.
async fn reserve_voids_unpaid_items_without_refund_r_4_4_r_3_3(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let id = create(opened, &acme.provider_id, &["30.00", "12.5", "7.25"]).await;

    let void = |order: u32, total: &str| {
        cancellation(
            &acme.provider_id,
            &id,
            false,
            vec![CancelledItem {
                order,
                total: dec(total),
                penalty: dec("0.00"),
                refund: dec("0.00"),
                applied_penalty: None,
            }],
            at(2),
            "instance-a",
            at(30),
        )
    };
    let first = void(1, "30.00");
    let first_id = first.refund_id.clone();
    let view = match reserve(opened, first).await {
        Reserved::Voided(view) => view,
        other => panic!("expected a void, got {other:?}"),
    };
    assert_eq!(view.refund_id, first_id);
    assert_eq!(view.outcome, outcome::SUCCESS);
    assert_eq!(view.refund.to_string(), "0.00");
    assert_eq!(view.transaction_status, TransactionStatus::Pending);
    assert_eq!(view.receipt_number.as_deref(), Some("CR-000001"));
    assert_eq!(view.gateway_reference, None);
    assert_eq!(
        view.completed_at.as_deref(),
        Some(format_instant(at(2)).as_str())
    );
    assert!(
        opened
            .cancellations
            .pending_refunds()
            .await
            .expect("pending")
            .is_empty(),
        "a void never waits for the gateway"
    );
    let after = record(opened, &id).await;
    assert_eq!(after.status, TransactionStatus::Pending);
    assert_eq!(after.items[0].status, ItemStatus::Cancelled);
    assert_eq!(after.items[1].status, ItemStatus::Active);

    // The second item voided; then paying takes only the last one's total.
    match reserve(opened, void(2, "12.5")).await {
        Reserved::Voided(view) => {
            assert_eq!(view.transaction_status, TransactionStatus::Pending);
            assert_eq!(view.receipt_number.as_deref(), Some("CR-000002"));
        }
        other => panic!("expected a void, got {other:?}"),
    }
    let outcome = opened
        .store
        .record_payment(
            id.clone(),
            acme.provider_id.clone(),
            payment_details(),
            at(3),
            at(3),
        )
        .await
        .expect("pay");
    assert_eq!(
        outcome,
        OwnerChecked::Done(PayOutcome::Paid(dec("7.25"))),
        "the amount paid is the sum of the active items"
    );

    // A void on a transaction whose last item goes: CANCELLED, and it can no longer be paid.
    let other = create(opened, &acme.provider_id, &["9.99"]).await;
    let last = cancellation(
        &acme.provider_id,
        &other,
        false,
        vec![line(1, "9.99", "0.00")],
        at(4),
        "instance-a",
        at(30),
    );
    match reserve(opened, last).await {
        Reserved::Voided(view) => {
            assert_eq!(view.transaction_status, TransactionStatus::Cancelled);
        }
        other => panic!("expected a void, got {other:?}"),
    }
    assert_eq!(
        record(opened, &other).await.status,
        TransactionStatus::Cancelled
    );
    assert_eq!(
        opened
            .store
            .record_payment(
                other,
                acme.provider_id.clone(),
                payment_details(),
                at(5),
                at(5),
            )
            .await
            .expect("pay"),
        OwnerChecked::Done(PayOutcome::NotPayable(
            "contract status CANCELLED does not allow payment".to_owned()
        ))
    );
}

/// R-4.1, R-4.5, R-3.4, R-7.4: a reservation re-checks inside its transaction and refuses with
/// the 400 messages: an item already in a live refund, an item that does not exist, more than
/// is left of the amount paid, a payment in between, a CANCELLED transaction; and answers
/// NotFound / OtherProvider for a transaction that is not the provider's. A refused request's
/// running key is dropped (R-9.1).
async fn reserve_refuses_what_changed_underneath_r_3_4_r_4_1_r_4_5_r_7_4(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let globex = provider(db, "globex");
    let id = paid(opened, &acme.provider_id, &["60.00", "40.00"]).await;

    let unknown = paid_cancellation(&acme.provider_id, &new_id(), vec![line(1, "1.00", "1.00")]);
    assert_eq!(
        opened
            .cancellations
            .reserve(unknown)
            .await
            .expect("reserve"),
        OwnerChecked::NotFound
    );
    let foreign = paid_cancellation(&globex.provider_id, &id, vec![line(1, "60.00", "60.00")]);
    assert_eq!(
        opened
            .cancellations
            .reserve(foreign)
            .await
            .expect("reserve"),
        OwnerChecked::OtherProvider
    );

    let first = reserve_pending(
        opened,
        paid_cancellation(&acme.provider_id, &id, vec![line(1, "60.00", "60.00")]),
    )
    .await;

    // R-4.1: the item is in a pending refund.
    let k = key(&acme.provider_id, "refused", CANCEL_ROUTE, "{}");
    assert_eq!(claim(opened, &k, t0()).await, Claim::Claimed);
    let mut twice = paid_cancellation(&acme.provider_id, &id, vec![line(1, "60.00", "60.00")]);
    twice.idempotency = Some(k.clone());
    assert_eq!(
        reserve(opened, twice).await,
        Reserved::Refused(vec!["itemsOrder.0 item 1 is already cancelled".to_owned()])
    );
    assert_eq!(
        key_state(opened, &k).await,
        None,
        "a refused request's key is not kept (R-9.1)"
    );

    // R-4.1: an item that does not exist.
    assert_eq!(
        reserve(
            opened,
            paid_cancellation(
                &acme.provider_id,
                &id,
                vec![line(2, "40.00", "40.00"), line(3, "1.00", "0.00")]
            )
        )
        .await,
        Reserved::Refused(vec!["itemsOrder.1 item 3 does not exist".to_owned()])
    );

    // R-4.5: Σ pending and succeeded refunds + this ≤ paid.
    assert_eq!(
        reserve(
            opened,
            paid_cancellation(&acme.provider_id, &id, vec![line(2, "40.01", "40.01")])
        )
        .await,
        Reserved::Refused(vec![
            "amount must not exceed the refundable amount 40.00".to_owned()
        ])
    );
    // The refused requests changed nothing.
    let state = record(opened, &id).await;
    assert_eq!(state.items[0].status, ItemStatus::Cancelling);
    assert_eq!(state.items[1].status, ItemStatus::Active);
    assert_eq!(state.cancellations.len(), 1);

    // Still refused once the first refund succeeded (it counts as refunded).
    settle(opened, &first.refund_id, succeeded("gw"), at(3)).await;
    assert_eq!(
        reserve(
            opened,
            paid_cancellation(&acme.provider_id, &id, vec![line(2, "40.01", "40.01")])
        )
        .await,
        Reserved::Refused(vec![
            "amount must not exceed the refundable amount 40.00".to_owned()
        ])
    );

    // Computed as unpaid, but paid in between: refused, to be retried.
    let unpaid = create(opened, &acme.provider_id, &["5.00"]).await;
    let stale = cancellation(
        &acme.provider_id,
        &unpaid,
        false,
        vec![line(1, "5.00", "0.00")],
        at(4),
        "instance-a",
        at(30),
    );
    opened
        .store
        .record_payment(
            unpaid.clone(),
            acme.provider_id.clone(),
            payment_details(),
            at(4),
            at(4),
        )
        .await
        .expect("pay");
    assert_eq!(
        reserve(opened, stale).await,
        Reserved::Refused(vec![
            "contract status changed to PAID during the cancellation; retry the request".to_owned()
        ])
    );

    // R-3.4: a CANCELLED transaction allows no cancellation.
    let last = reserve_pending(
        opened,
        paid_cancellation(&acme.provider_id, &id, vec![line(2, "40.00", "40.00")]),
    )
    .await;
    settle(opened, &last.refund_id, succeeded("gw"), at(6)).await;
    assert_eq!(
        record(opened, &id).await.status,
        TransactionStatus::Cancelled
    );
    assert_eq!(
        reserve(
            opened,
            paid_cancellation(&acme.provider_id, &id, vec![line(1, "60.00", "0.00")])
        )
        .await,
        Reserved::Refused(vec![
            "contract status CANCELLED does not allow cancellation".to_owned()
        ])
    );
}

/// R-4.8: every refund still PENDING is listed, oldest first; settled ones are not.
async fn pending_refunds_are_listed_oldest_first_r_4_8(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let mut expected = Vec::new();
    // Recorded out of order: listed by request instant.
    for seconds in [30, 10, 20] {
        let id = paid(opened, &acme.provider_id, &["10.00"]).await;
        let view = reserve_pending(
            opened,
            cancellation(
                &acme.provider_id,
                &id,
                true,
                vec![line(1, "10.00", "10.00")],
                at(seconds),
                "instance-a",
                at(seconds + 30),
            ),
        )
        .await;
        expected.push((seconds, view));
    }
    expected.sort_by_key(|(seconds, _)| *seconds);
    let listed = opened
        .cancellations
        .pending_refunds()
        .await
        .expect("pending");
    assert_eq!(
        listed,
        expected
            .iter()
            .map(|(_, view)| view.clone())
            .collect::<Vec<_>>()
    );

    settle(opened, &expected[1].1.refund_id, succeeded("gw"), at(40)).await;
    let listed = opened
        .cancellations
        .pending_refunds()
        .await
        .expect("pending");
    assert_eq!(
        ids(&listed),
        vec![
            expected[0].1.refund_id.clone(),
            expected[2].1.refund_id.clone()
        ]
    );
}

/// Three pending refunds of one provider, requested at 0 s, 2 s and 4 s, leased by
/// `instance-a` until 10 s, 120 s and 5 s.
async fn three_leased_refunds(opened: &Stores, provider_id: &str) -> [CancellationView; 3] {
    let mut views = Vec::new();
    for (requested, until) in [(0, 10), (2, 120), (4, 5)] {
        let id = paid(opened, provider_id, &["10.00"]).await;
        views.push(
            reserve_pending(
                opened,
                cancellation(
                    provider_id,
                    &id,
                    true,
                    vec![line(1, "10.00", "10.00")],
                    at(requested),
                    "instance-a",
                    at(until),
                ),
            )
            .await,
        );
    }
    views.try_into().expect("three views")
}

fn lease(owner: &str, until: DateTime<Utc>) -> Lease {
    Lease {
        owner: owner.to_owned(),
        until,
    }
}

/// R-4.8: claim_pending takes, oldest first and up to the limit, the pending refunds whose lease
/// has run out, and sets the new lease; another instance before that lease's end gets nothing.
async fn claim_pending_takes_only_expired_leases_r_4_8(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let [a, b, c] = three_leased_refunds(opened, &acme.provider_id).await;
    let claim_at = |owner: &str, until: i64, now: i64, limit: u32| {
        opened
            .cancellations
            .claim_pending(lease(owner, at(until)), at(now), limit)
    };

    // At 3 s every lease still runs.
    assert!(
        claim_at("instance-b", 90, 3, 10)
            .await
            .expect("claim")
            .is_empty()
    );
    // At 60 s the leases of a (10 s) and c (5 s) ran out; limit 1 takes the oldest only.
    let first = claim_at("instance-b", 90, 60, 1).await.expect("claim");
    assert_eq!(ids(&first), vec![a.refund_id.clone()]);
    assert_eq!(first[0], a, "the view of the refund as it is");
    let rest = claim_at("instance-b", 90, 60, 10).await.expect("claim");
    assert_eq!(ids(&rest), vec![c.refund_id.clone()]);

    // Another instance before 90 s: nothing (b's own lease runs until 120 s).
    assert!(
        claim_at("instance-c", 100, 61, 10)
            .await
            .expect("claim")
            .is_empty()
    );
    // The new leases are real: the holder renews, the other instance cannot.
    for view in [&a, &c] {
        assert!(
            opened
                .cancellations
                .renew_lease(view.refund_id.clone(), lease("instance-b", at(95)))
                .await
                .expect("renew")
        );
        assert!(
            !opened
                .cancellations
                .renew_lease(view.refund_id.clone(), lease("instance-c", at(95)))
                .await
                .expect("renew")
        );
    }

    // Once they ran out (95 s), another instance takes a and c over; b at 125 s.
    let taken = claim_at("instance-c", 200, 100, 10).await.expect("claim");
    assert_eq!(ids(&taken), vec![a.refund_id.clone(), c.refund_id.clone()]);
    let taken = claim_at("instance-c", 300, 125, 10).await.expect("claim");
    assert_eq!(ids(&taken), vec![b.refund_id.clone()]);

    // A settled refund is never claimed.
    settle(opened, &a.refund_id, succeeded("gw"), at(130)).await;
    let taken = claim_at("instance-d", 1_000, 900, 10).await.expect("claim");
    assert_eq!(
        ids(&taken),
        vec![b.refund_id.clone(), c.refund_id.clone()],
        "oldest request first"
    );
    assert!(taken.iter().all(|v| v.outcome == outcome::PENDING));
}

/// R-4.8: renew_lease extends a PENDING refund's lease for its holder only; once settled, no
/// one holds it.
async fn renew_lease_only_for_the_holder_of_a_pending_refund_r_4_8(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let [a, b, _] = three_leased_refunds(opened, &acme.provider_id).await;
    let renew = |refund: &CancellationView, owner: &str, until: i64| {
        opened
            .cancellations
            .renew_lease(refund.refund_id.clone(), lease(owner, at(until)))
    };
    assert!(renew(&a, "instance-a", 50).await.expect("renew"));
    assert!(!renew(&a, "instance-b", 500).await.expect("renew"));
    // Renewed until 50 s: not claimable at 40 s, claimable at 51 s.
    let none = opened
        .cancellations
        .claim_pending(lease("instance-b", at(200)), at(40), 10)
        .await
        .expect("claim");
    assert!(!ids(&none).contains(&a.refund_id), "{none:?}");
    let taken = opened
        .cancellations
        .claim_pending(lease("instance-b", at(200)), at(51), 10)
        .await
        .expect("claim");
    assert!(ids(&taken).contains(&a.refund_id), "{taken:?}");
    assert!(!renew(&a, "instance-a", 300).await.expect("renew"));
    assert!(renew(&a, "instance-b", 300).await.expect("renew"));

    settle(opened, &a.refund_id, succeeded("gw"), at(60)).await;
    assert!(!renew(&a, "instance-b", 400).await.expect("renew"));
    let declined = settle(
        opened,
        &b.refund_id,
        Settlement::Declined {
            reason: "no".to_owned(),
        },
        at(60),
    )
    .await;
    assert_eq!(declined.outcome, outcome::FAILED);
    assert!(!renew(&b, "instance-a", 400).await.expect("renew"));
    assert!(
        !opened
            .cancellations
            .renew_lease(new_id(), lease("instance-a", at(400)))
            .await
            .expect("renew")
    );
}

/// R-9.1: release_orphan_claims drops the running claims of the listed routes made before the
/// cut-off that no pending refund carries, and nothing else.
/// Which claims are orphans at start-up is `app::idempotency`'s decision (R-9.1): on a database
/// of its own every running claim of a create or cancel route, on a shared one those older than
/// the stale-claim time. Opening the database (as a `provider` command does beside a live
/// server) releases nothing.
async fn orphan_claims_at_start_up_are_all_running_alone_and_old_ones_shared_r_9_1(
    opened: &Stores,
    db: &Db,
) {
    let acme = provider(db, "acme");
    let old_create = key(&acme.provider_id, "old-create", "/transactions", "{}");
    let old_cancel = key(&acme.provider_id, "old-cancel", CANCEL_ROUTE, "{}");
    let young_create = key(&acme.provider_id, "young-create", "/initialize", "{}");
    for k in [&old_create, &old_cancel] {
        assert_eq!(claim(opened, k, t0()).await, Claim::Claimed);
    }
    assert_eq!(claim(opened, &young_create, at(150)).await, Claim::Claimed);

    let reopened = store::open(db, &PoolSettings::default())
        .await
        .expect("reopen");
    for k in [&old_create, &old_cancel, &young_create] {
        assert_eq!(
            key_state(&reopened, k).await,
            Some(IdempotencyState::Running),
            "opening the database releases nothing"
        );
    }

    let stale = Duration::minutes(2);
    let released = release_orphan_claims(
        opened.cancellations.as_ref(),
        &IDEMPOTENT_ROUTES,
        true,
        at(200),
        stale,
    )
    .await
    .expect("release on a shared database");
    assert_eq!(released, 2, "the two claims older than 2 minutes");
    assert_eq!(key_state(opened, &old_create).await, None);
    assert_eq!(key_state(opened, &old_cancel).await, None);
    assert_eq!(
        key_state(opened, &young_create).await,
        Some(IdempotencyState::Running),
        "may belong to a request another instance serves"
    );
    let released = release_orphan_claims(
        opened.cancellations.as_ref(),
        &IDEMPOTENT_ROUTES,
        false,
        at(200),
        stale,
    )
    .await
    .expect("release on a database of its own");
    assert_eq!(
        released, 1,
        "this process is the only one: every running claim"
    );
    assert_eq!(key_state(opened, &young_create).await, None);
}

/// R-9.1: the first *completed* answer is kept for at least 24 hours. A cancellation whose
/// refund stays pending for longer than a day keeps its key running (a repeat is a 409, never a
/// second refund), and once settled its answer is replayed for a day from then, not from the
/// claim.
async fn a_pending_refunds_key_outlives_a_day_and_its_answer_is_kept_a_day_r_9_1(
    opened: &Stores,
    db: &Db,
) {
    let acme = provider(db, "acme");
    let id = paid(opened, &acme.provider_id, &["10.00", "20.00"]).await;
    let k = key(
        &acme.provider_id,
        "slow",
        CANCEL_ROUTE,
        "{\"itemsOrder\":[1]}",
    );
    assert_eq!(claim(opened, &k, t0()).await, Claim::Claimed);
    let mut carried = paid_cancellation(&acme.provider_id, &id, vec![line(1, "10.00", "10.00")]);
    carried.idempotency = Some(k.clone());
    let pending = reserve_pending(opened, carried).await;

    let read = |now: DateTime<Utc>| {
        let k = k.clone();
        async move {
            opened
                .store
                .idempotency(k.provider_id.clone(), k.key.clone(), day_before(now))
                .await
                .expect("key read")
                .map(|record| record.state)
        }
    };
    let prune = |before: DateTime<Utc>| async move {
        opened.store.prune_idempotency(before).await.expect("prune")
    };

    // A day and more after the claim, the refund still pending: the key is still running.
    let later = t0() + Duration::hours(30);
    assert_eq!(read(later).await, Some(IdempotencyState::Running));
    match claim(opened, &k, later).await {
        Claim::Existing(existing) => assert_eq!(existing.state, IdempotencyState::Running),
        Claim::Claimed => panic!("a pending refund's key was taken over"),
    }
    assert_eq!(
        prune(later - Duration::hours(1)).await,
        0,
        "pruned while pending"
    );
    assert_eq!(read(later).await, Some(IdempotencyState::Running));

    // Settled 30 hours after the claim: its answer is replayed 23 hours later, and pruned only
    // once older than the cut-off counted from the settlement.
    let settled = settle(opened, &pending.refund_id, succeeded("gw"), later).await;
    assert_eq!(settled.outcome, outcome::SUCCESS);
    let next_day = later + Duration::hours(23);
    assert!(
        matches!(
            read(next_day).await,
            Some(IdempotencyState::Done {
                status_code: 200,
                ..
            })
        ),
        "the answer is kept a day from when it was stored"
    );
    assert_eq!(prune(later - Duration::seconds(1)).await, 0);
    assert_eq!(
        read(later + Duration::hours(24) + Duration::seconds(1)).await,
        None
    );
    assert_eq!(prune(later + Duration::seconds(1)).await, 1);
}

/// One failure per payment attempt (DECISIONS-payment-page: an attempt left in flight is
/// abandoned after its lease "and counts as a failure"): an abandoned attempt whose charge is
/// declined afterwards is not counted a second time, though the decline is still an event.
async fn an_abandoned_attempt_that_ends_later_is_one_failure_r_3_6(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let id = create(opened, &acme.provider_id, &["10.00"]).await;
    let begin = |attempt: &str, at: DateTime<Utc>| {
        opened
            .store
            .begin_payment_attempt(store::NewPaymentAttempt {
                id: attempt.to_owned(),
                transaction_id: id.clone(),
                started_at: at,
                lease_until: at + Duration::minutes(2),
                failures_since: t0() - Duration::hours(1),
                max_failures: 10,
            })
    };
    let failures = || {
        opened
            .store
            .payment_failures(id.clone(), t0() - Duration::hours(1))
    };
    let events = || async {
        opened
            .outbox
            .events_after(acme.provider_id.clone(), None, 100)
            .await
            .expect("events")
            .expect("a page")
            .into_iter()
            .filter(|event| event.payload.contains("transaction.payment_failed"))
            .count()
    };

    assert_eq!(
        begin("a1", t0()).await.expect("begin"),
        store::AttemptStart::Started
    );
    // The first attempt's lease ran out: the next one abandons it, a failure.
    assert_eq!(
        begin("a2", at(200)).await.expect("begin"),
        store::AttemptStart::Started
    );
    assert_eq!(failures().await.expect("count"), 1);
    // Its charge comes back declined after all: no second failure, but the decline's event.
    let declined = store::AttemptEnd::Declined {
        message: "insufficient funds".to_owned(),
    };
    opened
        .store
        .finish_payment_attempt(id.clone(), "a1".to_owned(), at(210), declined.clone())
        .await
        .expect("finish");
    assert_eq!(
        failures().await.expect("count"),
        1,
        "one failure per attempt"
    );
    assert_eq!(events().await, 1);
    // The attempt in flight that is declined counts as its own failure.
    opened
        .store
        .finish_payment_attempt(id.clone(), "a2".to_owned(), at(220), declined)
        .await
        .expect("finish");
    assert_eq!(failures().await.expect("count"), 2);
    assert_eq!(events().await, 2);
}

async fn release_orphan_claims_keeps_carried_recent_and_other_routes_r_9_1(
    opened: &Stores,
    db: &Db,
) {
    let acme = provider(db, "acme");
    let id = paid(opened, &acme.provider_id, &["10.00", "20.00"]).await;

    let orphan = key(&acme.provider_id, "orphan", CANCEL_ROUTE, "{}");
    let carried = key(&acme.provider_id, "carried", CANCEL_ROUTE, "{}");
    let recent = key(&acme.provider_id, "recent", CANCEL_ROUTE, "{}");
    let other_route = key(&acme.provider_id, "create", "/transactions", "{}");
    let finished = key(&acme.provider_id, "finished", CANCEL_ROUTE, "{}");
    for k in [&orphan, &carried, &other_route, &finished] {
        assert_eq!(claim(opened, k, t0()).await, Claim::Claimed);
    }
    assert_eq!(claim(opened, &recent, at(20)).await, Claim::Claimed);

    let mut with_key = paid_cancellation(&acme.provider_id, &id, vec![line(1, "10.00", "10.00")]);
    with_key.idempotency = Some(carried.clone());
    reserve_pending(opened, with_key).await;
    let mut done = paid_cancellation(&acme.provider_id, &id, vec![line(2, "20.00", "20.00")]);
    done.idempotency = Some(finished.clone());
    let done = reserve_pending(opened, done).await;
    settle(opened, &done.refund_id, succeeded("gw"), at(2)).await;

    let released = opened
        .cancellations
        .release_orphan_claims(
            vec![
                CANCEL_ROUTE.to_owned(),
                "/cancel/{transactionId}/invoice".to_owned(),
                "/cancel".to_owned(),
            ],
            at(10),
        )
        .await
        .expect("release");
    assert_eq!(released, 1);
    assert_eq!(key_state(opened, &orphan).await, None);
    assert_eq!(
        key_state(opened, &carried).await,
        Some(IdempotencyState::Running),
        "a pending refund carries it"
    );
    assert_eq!(
        key_state(opened, &recent).await,
        Some(IdempotencyState::Running),
        "made after the cut-off"
    );
    assert_eq!(
        key_state(opened, &other_route).await,
        Some(IdempotencyState::Running),
        "not a listed route"
    );
    assert!(
        matches!(
            key_state(opened, &finished).await,
            Some(IdempotencyState::Done {
                status_code: 200,
                ..
            })
        ),
        "a finished key is never released"
    );
    // Nothing left to release at the same cut-off.
    assert_eq!(
        opened
            .cancellations
            .release_orphan_claims(vec![CANCEL_ROUTE.to_owned()], at(10))
            .await
            .expect("release"),
        0
    );
}

// ---------------------------------------------------------------------------------------------
// Files, receipts, ledger.
// ---------------------------------------------------------------------------------------------

/// R-4.6: a stored file is read back whole by id, and by its share token when it has one.
async fn files_store_read_and_share_r_4_6(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let content: Vec<u8> = (0..=255u8).cycle().take(3000).collect();
    let shared = NewFile {
        id: new_id(),
        provider_id: acme.provider_id.clone(),
        name: Some("terms.pdf".to_owned()),
        content_type: "application/pdf".to_owned(),
        content: content.clone(),
        sha256_hex: "cd".repeat(32),
        share_token: Some(format!("tok-{}", new_id())),
        share_expires_at: Some(at(7 + 3600)),
        created_at: at(7),
    };
    let private = NewFile {
        id: new_id(),
        name: None,
        content: Vec::new(),
        share_token: None,
        share_expires_at: None,
        content_type: "text/plain".to_owned(),
        ..shared.clone()
    };
    opened
        .cancellations
        .store_file(shared.clone())
        .await
        .expect("stored");
    opened
        .cancellations
        .store_file(private.clone())
        .await
        .expect("stored");

    let read = opened
        .cancellations
        .file(shared.id.clone())
        .await
        .expect("file read")
        .expect("file exists");
    assert_eq!(read.id, shared.id);
    assert_eq!(read.provider_id, acme.provider_id);
    assert_eq!(read.name.as_deref(), Some("terms.pdf"));
    assert_eq!(read.content_type, "application/pdf");
    assert_eq!(read.size_bytes, 3000);
    assert_eq!(read.sha256_hex, shared.sha256_hex);
    assert_eq!(read.share_token, shared.share_token);
    assert_eq!(read.share_expires_at, Some(at(7 + 3600)));
    assert_eq!(read.content, content);
    assert_eq!(read.created_at, format_instant(at(7)));
    let by_token = opened
        .cancellations
        .shared_file(shared.share_token.clone().expect("token"))
        .await
        .expect("file read")
        .expect("shared file exists");
    assert_eq!(by_token, read);

    let empty = opened
        .cancellations
        .file(private.id.clone())
        .await
        .expect("file read")
        .expect("file exists");
    assert_eq!(empty.size_bytes, 0);
    assert!(empty.content.is_empty());
    assert_eq!(empty.name, None);
    assert_eq!(empty.share_token, None);

    assert_eq!(
        opened
            .cancellations
            .file(new_id())
            .await
            .expect("file read"),
        None
    );
    assert_eq!(
        opened
            .cancellations
            .shared_file("tok-unknown".to_owned())
            .await
            .expect("file read"),
        None
    );
    // A second file may not reuse a token.
    let clash = NewFile {
        id: new_id(),
        ..shared.clone()
    };
    assert!(opened.cancellations.store_file(clash).await.is_err());
}

/// A shared file's link gets a new expiry and the file can be deleted, content and link; a
/// file without a link (an invoice) is neither renewed nor deleted.
async fn shared_file_links_renew_and_delete_but_invoices_stay(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let shared = NewFile {
        id: new_id(),
        provider_id: acme.provider_id.clone(),
        name: Some("Prüfbericht.pdf".to_owned()),
        content_type: "application/pdf".to_owned(),
        content: b"%PDF".to_vec(),
        sha256_hex: "ab".repeat(32),
        share_token: Some(format!("tok-{}", new_id())),
        share_expires_at: Some(at(100)),
        created_at: at(1),
    };
    let invoice = NewFile {
        id: new_id(),
        share_token: None,
        share_expires_at: None,
        ..shared.clone()
    };
    let files = &opened.cancellations;
    files.store_file(shared.clone()).await.expect("stored");
    files.store_file(invoice.clone()).await.expect("stored");

    let metadata = files
        .file_metadata(shared.id.clone())
        .await
        .expect("read")
        .expect("exists");
    assert!(metadata.content.is_empty());
    assert_eq!(metadata.size_bytes, 4);
    assert_eq!(metadata.name.as_deref(), Some("Prüfbericht.pdf"));
    assert_eq!(metadata.share_expires_at, Some(at(100)));

    assert!(
        files
            .renew_file_link(shared.id.clone(), at(5000))
            .await
            .expect("renew")
    );
    let token = shared.share_token.clone().expect("token");
    let renewed = files
        .shared_file(token.clone())
        .await
        .expect("read")
        .expect("still shared");
    assert_eq!(renewed.share_expires_at, Some(at(5000)));
    assert_eq!(renewed.content, b"%PDF".to_vec());
    assert!(
        !files
            .renew_file_link(invoice.id.clone(), at(5000))
            .await
            .expect("renew")
    );
    assert!(
        !files
            .renew_file_link(new_id(), at(5000))
            .await
            .expect("renew")
    );

    assert!(
        !files
            .delete_shared_file(invoice.id.clone())
            .await
            .expect("delete")
    );
    assert!(
        files
            .delete_shared_file(shared.id.clone())
            .await
            .expect("delete")
    );
    assert!(
        !files
            .delete_shared_file(shared.id.clone())
            .await
            .expect("delete")
    );
    assert_eq!(files.shared_file(token).await.expect("read"), None);
    assert_eq!(files.file(shared.id.clone()).await.expect("read"), None);
    assert!(
        files
            .file(invoice.id.clone())
            .await
            .expect("read")
            .is_some()
    );
}

/// R-10.2, R-7.4: receipt numbers are counted per provider, and a receipt is found only among
/// its own provider's.
async fn receipt_is_scoped_to_its_provider_r_7_4_r_10_2(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let globex = provider(db, "globex");
    let mut settled = Vec::new();
    for creds in [&acme, &globex, &acme] {
        let id = paid(opened, &creds.provider_id, &["10.00"]).await;
        let view = reserve_pending(
            opened,
            paid_cancellation(&creds.provider_id, &id, vec![line(1, "10.00", "10.00")]),
        )
        .await;
        settled.push(settle(opened, &view.refund_id, succeeded("gw"), at(3)).await);
    }
    let numbers: Vec<_> = settled
        .iter()
        .map(|v| v.receipt_number.clone().expect("numbered"))
        .collect();
    assert_eq!(numbers, ["CR-000001", "CR-000001", "CR-000002"]);

    let receipt = |provider: &str, number: &str| {
        opened
            .cancellations
            .receipt(provider.to_owned(), number.to_owned())
    };
    assert_eq!(
        receipt(&acme.provider_id, "CR-000001").await.expect("read"),
        Some(settled[0].clone())
    );
    assert_eq!(
        receipt(&globex.provider_id, "CR-000001")
            .await
            .expect("read"),
        Some(settled[1].clone())
    );
    assert_eq!(
        receipt(&acme.provider_id, "CR-000002").await.expect("read"),
        Some(settled[2].clone())
    );
    assert_eq!(
        receipt(&globex.provider_id, "CR-000002")
            .await
            .expect("read"),
        None,
        "another provider's receipt is not found"
    );
    assert_eq!(
        receipt(&acme.provider_id, "CR-000003").await.expect("read"),
        None
    );
}

/// R-4.8: the ledger gateway is idempotent on the refund id: the same refund twice succeeds
/// twice (recorded once); the same id with another amount is declined.
async fn ledger_gateway_is_idempotent_per_refund_id_r_4_8(opened: &Stores, _db: &Db) {
    assert_eq!(opened.ledger.name(), "ledger");
    let refund = RefundRequest {
        refund_id: new_id(),
        transaction_id: new_id(),
        payment_reference: Some("PAY-1".to_owned()),
        amount: dec("100.50"),
        currency: "EUR".to_owned(),
    };
    let expected = GatewayOutcome::Succeeded {
        gateway_reference: Some(format!("ledger:{}", refund.refund_id)),
    };
    assert_eq!(opened.ledger.send(&refund).await, expected);
    assert_eq!(opened.ledger.send(&refund).await, expected);

    let changed = RefundRequest {
        amount: dec("100.51"),
        ..refund.clone()
    };
    assert!(
        matches!(
            opened.ledger.send(&changed).await,
            GatewayOutcome::Declined { ref reason } if reason.contains(&refund.refund_id)
        ),
        "the same id for another refund is refused"
    );
    // The amount's scale is part of the refund: 100.5 is not 100.50 as sent.
    let rescaled = RefundRequest {
        amount: dec("100.5"),
        ..refund.clone()
    };
    assert!(matches!(
        opened.ledger.send(&rescaled).await,
        GatewayOutcome::Declined { .. }
    ));
    // The first refund is still the one recorded.
    assert_eq!(opened.ledger.send(&refund).await, expected);
    let other = RefundRequest {
        refund_id: new_id(),
        ..refund.clone()
    };
    assert_eq!(
        opened.ledger.send(&other).await,
        GatewayOutcome::Succeeded {
            gateway_reference: Some(format!("ledger:{}", other.refund_id)),
        }
    );
}

// ---------------------------------------------------------------------------------------------
// Races.
// ---------------------------------------------------------------------------------------------

/// Starts every future at once (each on its own task) behind a barrier, and collects the
/// results in order.
async fn all_at_once<T, F, Fut>(count: usize, make: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn(usize) -> Fut,
    Fut: Future<Output = T> + Send + 'static,
{
    let barrier = Arc::new(tokio::sync::Barrier::new(count));
    let tasks: Vec<_> = (0..count)
        .map(|index| {
            let barrier = Arc::clone(&barrier);
            let work = make(index);
            tokio::spawn(async move {
                barrier.wait().await;
                work.await
            })
        })
        .collect();
    let mut results = Vec::with_capacity(count);
    for task in tasks {
        results.push(task.await.expect("task finished"));
    }
    results
}

/// R-4.5, R-4.1: 32 concurrent reservations of the same item of one paid transaction: exactly
/// one pending refund, 31 refusals naming the item, no error; Σ refunds ≤ paid.
async fn race_32_reserves_of_one_item_leave_exactly_one_pending_r_4_5_r_4_1(
    opened: &Stores,
    db: &Db,
) {
    let acme = provider(db, "acme");
    let id = paid(opened, &acme.provider_id, &["80.00", "20.00"]).await;
    let results = all_at_once(32, |_| {
        let cancellations = Arc::clone(&opened.cancellations);
        let new = paid_cancellation(&acme.provider_id, &id, vec![line(1, "80.00", "80.00")]);
        async move { cancellations.reserve(new).await }
    })
    .await;

    let mut pending = Vec::new();
    let mut refused = 0;
    for result in results {
        match result {
            Ok(OwnerChecked::Done(Reserved::Pending(view))) => pending.push(view),
            Ok(OwnerChecked::Done(Reserved::Refused(messages))) => {
                assert_eq!(
                    messages,
                    vec!["itemsOrder.0 item 1 is already cancelled".to_owned()]
                );
                refused += 1;
            }
            other => panic!("unexpected outcome of a concurrent reservation: {other:?}"),
        }
    }
    assert_eq!(pending.len(), 1, "exactly one reservation wins");
    assert_eq!(refused, 31);

    let state = record(opened, &id).await;
    assert_eq!(state.cancellations.len(), 1);
    assert_eq!(state.items[0].status, ItemStatus::Cancelling);
    assert_eq!(state.items[1].status, ItemStatus::Active);
    let live: Decimal = state.cancellations.iter().map(|c| c.refund).sum();
    assert!(live <= state.paid_amount.expect("paid"));
    assert_eq!(
        ids(&opened
            .cancellations
            .pending_refunds()
            .await
            .expect("pending")),
        ids(&pending)
    );
}

/// R-4.5: reservations of different items, each fitting on its own, made at once: the sum of
/// the live refunds never exceeds what was paid. Ten items of 10.00 (paid 100.00), ten
/// concurrent refunds of 25.00 (as an `amount` spread over items could ask): exactly four fit.
async fn race_reserves_of_different_items_never_exceed_paid_r_4_5(opened: &Stores, db: &Db) {
    const ITEMS: usize = 10;
    let acme = provider(db, "acme");
    let id = paid(opened, &acme.provider_id, &["10.00"; ITEMS]).await;
    let results = all_at_once(ITEMS, |index| {
        let cancellations = Arc::clone(&opened.cancellations);
        let order = u32::try_from(index + 1).expect("small");
        let mut over = line(order, "10.00", "10.00");
        over.refund = dec("25.00");
        over.penalty = dec("0.00");
        let new = paid_cancellation(&acme.provider_id, &id, vec![over]);
        async move { cancellations.reserve(new).await }
    })
    .await;
    let mut pending = 0;
    for result in results {
        match result {
            Ok(OwnerChecked::Done(Reserved::Pending(view))) => {
                assert_eq!(view.refund.to_string(), "25.00");
                pending += 1;
            }
            Ok(OwnerChecked::Done(Reserved::Refused(messages))) => assert_eq!(
                messages,
                vec!["amount must not exceed the refundable amount 0.00".to_owned()]
            ),
            other => panic!("unexpected outcome of a concurrent reservation: {other:?}"),
        }
    }
    assert_eq!(pending, 4, "4 × 25.00 = 100.00 paid");
    let state = record(opened, &id).await;
    let live: Decimal = state.cancellations.iter().map(|c| c.refund).sum();
    assert_eq!(live, dec("100.00"));
    assert_eq!(
        state
            .items
            .iter()
            .filter(|i| i.status == ItemStatus::Cancelling)
            .count(),
        4
    );
}

/// R-9.1: a claim is fenced by its identity (the instant it was made). Once a newer request
/// has taken the key over (here: the first claim expired, which both stores replace; on
/// PostgreSQL a stale running claim is taken over the same way), the first request can neither
/// create under it, nor reserve a cancellation under it, nor release it; the newer one can.
async fn a_claim_taken_over_fences_out_its_first_request_r_9_1(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let body = "{\"itemsOrder\":[1]}";
    let first = fenced(
        &key(&acme.provider_id, "fenced", "/transactions", body),
        t0(),
    );
    assert_eq!(claim(opened, &first, t0()).await, Claim::Claimed);
    let later = t0() + Duration::hours(25);
    let newer = fenced(&first, later);
    assert_eq!(claim(opened, &newer, later).await, Claim::Claimed);

    // The first request's creation writes nothing.
    let new = transaction(&acme.provider_id, "EUR", &["10.00"]);
    let lost_id = new.id.clone();
    let response = |k: &IdempotencyKey, id: &str| IdempotentResponse {
        key: k.clone(),
        status_code: 201,
        body: format!("{{\"transactionId\":\"{id}\"}}"),
    };
    let refused = opened
        .store
        .create_transaction(new, Some(response(&first, &lost_id)))
        .await;
    assert!(matches!(refused, Err(StoreError::ClaimLost)), "{refused:?}");
    assert!(
        opened
            .store
            .transaction(lost_id)
            .await
            .expect("read")
            .is_none(),
        "nothing of the fenced-out creation is stored"
    );
    // Its release leaves the newer claim.
    opened
        .store
        .release_idempotency(first.clone())
        .await
        .expect("release");
    assert_eq!(
        key_state(opened, &newer).await,
        Some(IdempotencyState::Running)
    );
    // Nor may it reserve a cancellation under the key.
    let paid = create(opened, &acme.provider_id, &["10.00"]).await;
    let mut lost = cancellation(
        &acme.provider_id,
        &paid,
        false,
        vec![line(1, "10.00", "0.00")],
        later,
        "instance-a",
        later + Duration::seconds(30),
    );
    lost.idempotency = Some(first.clone());
    let refused = opened.cancellations.reserve(lost).await;
    assert!(matches!(refused, Err(StoreError::ClaimLost)), "{refused:?}");
    assert!(
        record(opened, &paid).await.cancellations.is_empty(),
        "nothing of the fenced-out cancellation is stored"
    );

    // The newer request creates under its claim, which finishes the key.
    let new = transaction(&acme.provider_id, "EUR", &["10.00"]);
    let id = new.id.clone();
    opened
        .store
        .create_transaction(new, Some(response(&newer, &id)))
        .await
        .expect("created under the newer claim");
    assert_eq!(
        key_state(opened, &newer).await,
        Some(IdempotencyState::Done {
            status_code: 201,
            body: format!("{{\"transactionId\":\"{id}\"}}"),
        })
    );
}

/// R-9.1: 16 concurrent claims of one key: exactly one claims it, the others find it running.
/// The dashboard's sign-in throttle (DECISIONS-dashboard: 5 failures per account in 15
/// minutes refuse the next attempts, unchecked) holds for attempts sent together: the count
/// and the record are one step, so that 16 at once are checked 5 times, not 16. One that
/// turns out right is forgiven, which leaves room for one more.
async fn race_16_sign_ins_at_once_are_checked_at_most_the_limit(opened: &Stores, _db: &Db) {
    use host_http::store::dashboard::SignInHold;
    let keys = || {
        vec![
            ("account:ada@example.com".to_owned(), 5),
            ("address:127.0.0.1".to_owned(), 20),
        ]
    };
    let results = all_at_once(16, |n| {
        let dashboard = Arc::clone(&opened.dashboard);
        let keys = keys();
        async move {
            dashboard
                .hold_sign_in_attempt(keys, at(-900), at(i64::try_from(n).expect("small")))
                .await
        }
    })
    .await;
    let held = results
        .into_iter()
        .filter(|result| *result.as_ref().expect("no store error") == SignInHold::Held)
        .count();
    assert_eq!(held, 5, "as many checked as the account allows");
    match opened
        .dashboard
        .hold_sign_in_attempt(keys(), at(-900), at(20))
        .await
        .expect("hold")
    {
        SignInHold::Throttled { failures, limit } => assert_eq!((failures.len(), limit), (5, 5)),
        SignInHold::Held => panic!("a sixth attempt was held"),
    }
    // The first attempt held was right after all: forgiven, the next one may be checked.
    let first = opened
        .dashboard
        .sign_in_failures("account:ada@example.com".to_owned(), at(-900))
        .await
        .expect("failures")[0];
    opened
        .dashboard
        .forgive_sign_in_attempt(
            vec![
                "account:ada@example.com".to_owned(),
                "address:127.0.0.1".to_owned(),
            ],
            first,
        )
        .await
        .expect("forgive");
    assert_eq!(
        opened
            .dashboard
            .hold_sign_in_attempt(keys(), at(-900), at(21))
            .await
            .expect("hold"),
        SignInHold::Held
    );
    assert_eq!(
        opened
            .dashboard
            .sign_in_failures("address:127.0.0.1".to_owned(), at(-900))
            .await
            .expect("failures")
            .len(),
        5,
        "the address keeps the five held, less the one forgiven, plus the last"
    );
}

async fn race_16_claims_of_one_key_claim_it_once_r_9_1(opened: &Stores, db: &Db) {
    let acme = provider(db, "acme");
    let k = key(
        &acme.provider_id,
        "raced",
        CANCEL_ROUTE,
        "{\"itemsOrder\":[1]}",
    );
    let results = all_at_once(16, |_| {
        let store = Arc::clone(&opened.store);
        let k = k.clone();
        async move {
            store
                .claim_idempotency(k, t0(), day_before(t0()), stale_before(t0()))
                .await
        }
    })
    .await;
    let mut claimed = 0;
    for result in results {
        match result.expect("no store error") {
            Claim::Claimed => claimed += 1,
            Claim::Existing(record) => {
                assert_eq!(record.state, IdempotencyState::Running);
                assert_eq!(record.body_hash, k.body_hash);
                assert_eq!(record.route, CANCEL_ROUTE);
            }
        }
    }
    assert_eq!(claimed, 1, "exactly one request holds the key");
    assert_eq!(key_state(opened, &k).await, Some(IdempotencyState::Running));
}

/// R-3.1: 32 creates at once, one of them reusing a stored transaction's id, which the store
/// refuses: the stores gather creates that arrive together into one commit (SQLite's writer,
/// PostgreSQL's batches), and the refused one fails alone — every other create is stored, with
/// its own reference (R-3.2), and reads back.
async fn race_creates_together_one_refused_stores_the_others_r_3_1(opened: &Stores, db: &Db) {
    const CREATES: usize = 32;
    const REFUSED: usize = 13;
    let acme = provider(db, "acme");
    let taken = create(opened, &acme.provider_id, &["10.00"]).await;
    let transactions: Vec<NewTransaction> = (0..CREATES)
        .map(|index| {
            let mut new = transaction(&acme.provider_id, "EUR", &["1.00", "2.50"]);
            if index == REFUSED {
                new.id = taken.clone();
            }
            new
        })
        .collect();
    let results = all_at_once(CREATES, |index| {
        let store = Arc::clone(&opened.store);
        let new = transactions[index].clone();
        async move { (new.id.clone(), store.create_transaction(new, None).await) }
    })
    .await;
    let mut references = BTreeSet::new();
    for (index, (id, result)) in results.into_iter().enumerate() {
        if index == REFUSED {
            assert!(
                result.is_err(),
                "a second transaction under one id: {result:?}"
            );
            continue;
        }
        let reference = result.unwrap_or_else(|e| panic!("create {index} failed: {e}"));
        let record = opened
            .store
            .transaction(id.clone())
            .await
            .expect("read")
            .unwrap_or_else(|| panic!("create {index} ({id}) is not stored"));
        assert_eq!(record.reference, reference);
        assert_eq!(record.total, dec("3.50"));
        assert_eq!(record.items.len(), 2);
        references.insert(reference);
    }
    assert_eq!(references.len(), CREATES - 1, "every reference is its own");
    let first = opened
        .store
        .transaction(taken)
        .await
        .expect("read")
        .expect("the first stays");
    assert_eq!(
        first.total,
        dec("10.00"),
        "the first transaction is unchanged"
    );
}

/// R-10.2: receipts of one provider are numbered CR-000001..CR-00000N without gaps or repeats
/// when its refunds are reserved and settled concurrently from many tasks; a refund settled by
/// two tasks at once (the request and the recovery task) gets one number.
async fn race_concurrent_settles_number_receipts_without_gaps_r_10_2(opened: &Stores, db: &Db) {
    const TRANSACTIONS: usize = 8;
    const ITEMS: usize = 2;
    let acme = provider(db, "acme");
    let mut transactions = Vec::new();
    for _ in 0..TRANSACTIONS {
        transactions.push(paid(opened, &acme.provider_id, &["10.00", "15.50"]).await);
    }
    let results = all_at_once(TRANSACTIONS * ITEMS, |index| {
        let cancellations = Arc::clone(&opened.cancellations);
        let transaction = transactions[index / ITEMS].clone();
        let order = u32::try_from(index % ITEMS + 1).expect("small");
        let total = if order == 1 { "10.00" } else { "15.50" };
        let new = paid_cancellation(
            &acme.provider_id,
            &transaction,
            vec![line(order, total, total)],
        );
        async move {
            let refund_id = new.refund_id.clone();
            let reserved = cancellations.reserve(new).await;
            assert!(
                matches!(reserved, Ok(OwnerChecked::Done(Reserved::Pending(_)))),
                "{reserved:?}"
            );
            // The request and the recovery task settle the same refund at once.
            let (first, second) = tokio::join!(
                cancellations.settle(refund_id.clone(), succeeded("gw"), at(5)),
                cancellations.settle(refund_id.clone(), succeeded("gw"), at(6)),
            );
            let first = first.expect("settle").expect("exists");
            let second = second.expect("settle").expect("exists");
            assert_eq!(first, second, "both settlers report the same answer");
            first
        }
    })
    .await;

    let numbers: Vec<String> = results
        .iter()
        .map(|v| {
            assert_eq!(v.outcome, outcome::SUCCESS);
            v.receipt_number.clone().expect("numbered")
        })
        .collect();
    let unique: BTreeSet<&String> = numbers.iter().collect();
    assert_eq!(
        unique.len(),
        numbers.len(),
        "receipt numbers repeat: {numbers:?}"
    );
    let expected: BTreeSet<String> = (1..=TRANSACTIONS * ITEMS)
        .map(|n| format!("CR-{n:06}"))
        .collect();
    assert_eq!(
        unique.into_iter().cloned().collect::<BTreeSet<_>>(),
        expected
    );

    for id in &transactions {
        let state = record(opened, id).await;
        assert_eq!(state.status, TransactionStatus::Cancelled);
        assert_eq!(state.refunded_amount.to_string(), "25.50");
        assert_eq!(state.cancellations.len(), ITEMS);
        assert!(
            state
                .items
                .iter()
                .all(|i| i.status == ItemStatus::Cancelled)
        );
    }
    // The next receipt follows on.
    let id = paid(opened, &acme.provider_id, &["1.00"]).await;
    let view = reserve_pending(
        opened,
        paid_cancellation(&acme.provider_id, &id, vec![line(1, "1.00", "1.00")]),
    )
    .await;
    let next = settle(opened, &view.refund_id, succeeded("gw"), at(9)).await;
    assert_eq!(
        next.receipt_number,
        Some(format!("CR-{:06}", TRANSACTIONS * ITEMS + 1))
    );
}

/// R-4.8: two instances scanning at once over 20 pending refunds with run-out leases split them:
/// the sets they take are disjoint and together are all 20. Repeated over several rounds (each
/// after the previous leases ran out) so that the scans overlap in more than one way.
async fn race_two_instances_claiming_pending_refunds_split_them_r_4_8(opened: &Stores, db: &Db) {
    const REFUNDS: usize = 20;
    let acme = provider(db, "acme");
    let totals = vec!["5.00"; REFUNDS];
    let id = paid(opened, &acme.provider_id, &totals).await;
    let mut all = BTreeSet::new();
    for order in 1..=REFUNDS {
        let order = u32::try_from(order).expect("small");
        let view = reserve_pending(
            opened,
            paid_cancellation(&acme.provider_id, &id, vec![line(order, "5.00", "5.00")]),
        )
        .await;
        all.insert(view.refund_id);
    }
    assert_eq!(all.len(), REFUNDS);

    for round in 1..=5i64 {
        // Every lease given so far ends before this round's instant.
        let now = at(round * 1_000);
        let until = now + Duration::seconds(500);
        let results = all_at_once(2, |index| {
            let cancellations = Arc::clone(&opened.cancellations);
            let owner = format!("instance-{index}");
            async move {
                cancellations
                    .claim_pending(lease(&owner, until), now, 100)
                    .await
            }
        })
        .await;
        let sets: Vec<BTreeSet<String>> = results
            .into_iter()
            .map(|r| ids(&r.expect("no store error")).into_iter().collect())
            .collect();
        assert!(
            sets[0].is_disjoint(&sets[1]),
            "round {round}: a refund claimed by both instances: {:?}",
            sets[0].intersection(&sets[1]).collect::<Vec<_>>()
        );
        let union: BTreeSet<String> = sets[0].union(&sets[1]).cloned().collect();
        assert_eq!(union, all, "round {round}: every expired refund is taken");
        // Each holds what it took: renewing works for the taker only.
        for (index, set) in sets.iter().enumerate() {
            if let Some(refund_id) = set.iter().next() {
                let mine = opened
                    .cancellations
                    .renew_lease(
                        refund_id.clone(),
                        lease(&format!("instance-{index}"), until),
                    )
                    .await
                    .expect("renew");
                let theirs = opened
                    .cancellations
                    .renew_lease(
                        refund_id.clone(),
                        lease(&format!("instance-{}", 1 - index), until),
                    )
                    .await
                    .expect("renew");
                assert!(mine && !theirs, "round {round}: lease of {refund_id}");
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Payment processors (issue 23).
// ---------------------------------------------------------------------------------------------

async fn processors_are_per_provider_sealed_and_rotated_all_at_once(opened: &Stores, db: &Db) {
    use host_http::app::processors::{self as procs, ProcessorChoice, Processors};
    use host_http::secrets::{Secret, SecretsKey};

    let acme = provider(db, "Acme");
    let other = provider(db, "Other");
    let key = SecretsKey::from_bytes([7; 32]);
    let stripe = ProcessorChoice::Stripe {
        secret_key: Secret::new("sk_test_51SecretKeyAAAA1111"),
        publishable_key: "pk_test_51PublishableBBBB2222".to_owned(),
        webhook_secret: Secret::new("whsec_SigningSecretCCCC3333"),
    };
    // Without the secrets key nothing is stored.
    assert!(matches!(
        procs::set_processor(db, &acme.provider_id, &stripe, None, t0()),
        Err(procs::ProcessorAdminError::NoSecretsKey)
    ));
    assert!(matches!(
        procs::set_processor(db, "no-such-provider", &stripe, Some(&key), t0()),
        Err(procs::ProcessorAdminError::UnknownProvider(_))
    ));
    let summary = procs::set_processor(db, &acme.provider_id, &stripe, Some(&key), t0()).unwrap();
    assert_eq!(
        serde_json::to_value(&summary).unwrap(),
        serde_json::json!({"processor": "stripe", "publishableKeyLast4": "2222",
                           "secretKeyLast4": "1111", "webhookSecretLast4": "3333"})
    );

    // The listing shows the processor and last four characters only; the store holds no key
    // in clear.
    let listed = serde_json::to_string(&providers::list_providers(db.clone()).unwrap()).unwrap();
    assert!(listed.contains("\"secretKeyLast4\":\"1111\""), "{listed}");
    assert!(listed.contains("\"processor\":\"sandbox\""), "{listed}");
    assert!(!listed.contains("SecretKeyAAAA"), "{listed}");
    let rows = opened.processors.stripe_rows().await.unwrap();
    assert_eq!(rows.len(), 1);
    let row_text = format!(
        "{} {}",
        rows[0].secret_key_sealed, rows[0].webhook_secret_sealed
    );
    assert!(!row_text.contains("SecretKeyAAAA") && !row_text.contains("SigningSecret"));
    assert!(
        opened
            .processors
            .stripe_of(other.provider_id.clone())
            .await
            .unwrap()
            .is_none()
    );

    // The server opens them with the key, and refuses to start without it or with another.
    let server = |secrets: Option<SecretsKey>| Processors {
        store: Arc::clone(&opened.processors),
        secrets,
        stripe: Default::default(),
    };
    assert_eq!(server(Some(key.clone())).check().await, Ok(1));
    let refused = server(None).check().await.unwrap_err();
    assert!(refused.contains("--secrets-key-file"), "{refused}");
    assert!(
        server(Some(SecretsKey::from_bytes([8; 32])))
            .check()
            .await
            .is_err()
    );
    let account = server(Some(key.clone()))
        .stripe_account(&acme.provider_id)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(account.secret_key.expose(), "sk_test_51SecretKeyAAAA1111");
    assert_eq!(
        account.webhook_secret.expose(),
        "whsec_SigningSecretCCCC3333"
    );

    // A dashboard user's second factor being set up is sealed with the same key.
    let user = host_http::app::dashboard::invite_user(
        opened.dashboard.as_ref(),
        "http://127.0.0.1:8080",
        &acme.provider_id,
        "ada@example.com",
        host_http::app::dashboard::Role::Admin,
        "operator",
        at(59),
    )
    .await
    .unwrap();
    let context = format!("dashboard_user:{}:totp", user.user_id);
    opened
        .dashboard
        .set_totp_pending(
            user.user_id.clone(),
            key.seal(&Secret::new("c2Vjb25kIGZhY3Rvcg=="), &context),
        )
        .await
        .unwrap();

    // Webhook endpoints' signing secrets: one stored sealed under the key, one kept as
    // issued (set without a key).
    let sealed_hook = providers::set_webhook(
        db,
        &acme.provider_id,
        "https://127.0.0.1:9/sealed",
        &[],
        true,
        Some(&key),
        at(59),
    )
    .unwrap();
    // A command without the key is refused once secrets are sealed, rather than store one as
    // issued beside them; one with another key is warned that servers with it refuse them.
    let refused = providers::set_webhook(
        db,
        &acme.provider_id,
        "https://127.0.0.1:9/plain",
        &[],
        true,
        None,
        at(59),
    )
    .unwrap_err()
    .to_string();
    assert!(refused.contains("--secrets-key-file"), "{refused}");
    assert!(sealed_hook.warning.is_none());
    let other_key = SecretsKey::from_bytes([6; 32]);
    let warned =
        providers::rotate_webhook_secret(db, &sealed_hook.endpoint_id, Some(&other_key), at(59))
            .unwrap();
    assert!(
        warned
            .warning
            .as_deref()
            .is_some_and(|w| w.contains("does not open")),
        "{warned:?}"
    );
    let sealed_hook =
        providers::rotate_webhook_secret(db, &sealed_hook.endpoint_id, Some(&key), at(59)).unwrap();
    assert!(sealed_hook.warning.is_none(), "{sealed_hook:?}");
    // One kept as issued, as a server without a key stored it before.
    let plain_hook = providers::IssuedWebhook {
        endpoint_id: "ep_kept_as_issued".to_owned(),
        secret: host_http::app::webhook_endpoints::new_secret(),
        warning: None,
    };
    assert!(
        host_http::store::admin(db)
            .unwrap()
            .add_webhook(&host_http::store::admin::NewWebhook {
                endpoint_id: plain_hook.endpoint_id.clone(),
                provider_id: acme.provider_id.clone(),
                url: "https://127.0.0.1:9/plain".to_owned(),
                events: None,
                secret: plain_hook.secret.clone(),
                created_at: at(59),
            })
            .unwrap()
    );

    // Rotation reseals every configuration, second factor and webhook secret (sealing the one
    // kept as issued); the old key no longer opens them.
    let new_key = SecretsKey::from_bytes([9; 32]);
    let rotation = procs::rotate_secrets_key(db, &key, &new_key, at(60)).unwrap();
    assert_eq!(rotation.resealed, 1);
    assert_eq!(rotation.second_factors, 1);
    assert_eq!(rotation.webhook_endpoints, 2);
    let hooks = host_http::store::processor_admin(db)
        .unwrap()
        .webhook_secrets()
        .unwrap();
    for issued in [&sealed_hook, &plain_hook] {
        let stored = hooks
            .iter()
            .find(|h| h.endpoint_id == issued.endpoint_id)
            .expect("stored");
        let open = |k: &SecretsKey| {
            host_http::app::webhook_endpoints::open_secret(
                Some(k),
                &stored.endpoint_id,
                &stored.secret,
            )
        };
        assert_eq!(open(&new_key), Ok(issued.secret.clone()));
        assert!(open(&key).is_err());
    }
    // The sealed endpoint's previous secret was sealed under another key: dropped, not kept
    // unopenable (and the rotation was not refused for it).
    let rotated_hook = hooks
        .iter()
        .find(|h| h.endpoint_id == sealed_hook.endpoint_id)
        .expect("stored");
    assert_eq!(rotated_hook.previous_secret, None);
    let sealed = host_http::store::processor_admin(db)
        .unwrap()
        .sealed_totp()
        .unwrap();
    let pending = sealed[0].pending.as_deref().expect("still being set up");
    assert_eq!(
        new_key.open(pending, &context).unwrap().expose(),
        "c2Vjb25kIGZhY3Rvcg=="
    );
    assert!(key.open(pending, &context).is_err());
    assert_eq!(server(Some(new_key.clone())).check().await, Ok(1));
    assert!(server(Some(key.clone())).check().await.is_err());
    // A rotation from a wrong key changes nothing.
    assert!(procs::rotate_secrets_key(db, &key, &new_key, at(61)).is_err());
    assert_eq!(server(Some(new_key.clone())).check().await, Ok(1));

    // Back to the sandbox.
    procs::set_processor(
        db,
        &acme.provider_id,
        &ProcessorChoice::Sandbox,
        None,
        at(62),
    )
    .unwrap();
    assert_eq!(server(None).check().await, Ok(0));

    // Stripe events are handled once per provider and id.
    let handled = |provider: &str, id: &str| {
        opened.processors.stripe_event_handled(
            provider.to_owned(),
            id.to_owned(),
            "payment_intent.succeeded".to_owned(),
            t0(),
        )
    };
    assert!(handled(&acme.provider_id, "evt_1").await.unwrap());
    assert!(!handled(&acme.provider_id, "evt_1").await.unwrap());
    assert!(handled(&other.provider_id, "evt_1").await.unwrap());
}
