//! Black-box tests of the JSON cancellation route and the refund process (R-3.3, R-3.4, R-4,
//! R-7.3, R-7.4, R-9.1, R-10.2), against the real server and a real HTTP refund gateway.

use host_http::auth::{Scope, Scopes};
use host_http::processors::testing::FakeBehavior;
use hyper::Method;
use serde_json::{Value, json};
use tests::cancel_support::{CancelServer, checkout};

fn refund_ids(server: &CancelServer) -> Vec<String> {
    server
        .gateway
        .requests()
        .into_iter()
        .filter_map(|r| r.idempotency_key)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn partial_then_full_cancellation_refunds_and_moves_the_status_r_3_3_r_10_2() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let id = server.paid_transaction(&acme, &["119", "50.5"]).await;

    let reply = server.cancel(&acme, &id, &json!({"itemsOrder": [1]})).await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let body = reply.json();
    assert_eq!(body["status"], "SUCCESS");
    assert_eq!(body["errorMessage"], Value::Null);
    assert_eq!(body["refund"].to_string(), "119.00");
    assert_eq!(body["currency"], "EUR");
    assert_eq!(body["receiptNumber"], "CR-000001");
    assert_eq!(body["transactionStatus"], "PARTIALLY_CANCELLED");
    assert_eq!(body["items"][0]["order"], 1);
    assert_eq!(body["items"][0]["penalty"].to_string(), "0.00");
    assert_eq!(body["items"][0]["refund"].to_string(), "119.00");

    let record = server.status(&acme, &id).await;
    assert_eq!(record["status"], "PARTIALLY_CANCELLED");
    assert_eq!(record["items"][0]["status"], "CANCELLED");
    assert_eq!(record["items"][0]["refunded"].to_string(), "119.00");
    assert_eq!(record["items"][1]["status"], "ACTIVE");
    assert_eq!(record["amounts"]["refunded"].to_string(), "119.00");
    assert_eq!(record["cancellations"][0]["receiptNumber"], "CR-000001");
    assert_eq!(record["cancellations"][0]["outcome"], "SUCCESS");
    assert_eq!(record["cancellations"][0]["items"], json!([1]));

    let reply = server.cancel(&acme, &id, &json!({"itemsOrder": [2]})).await;
    let body = reply.json();
    assert_eq!(body["status"], "SUCCESS");
    assert_eq!(body["receiptNumber"], "CR-000002");
    assert_eq!(body["transactionStatus"], "CANCELLED");
    let record = server.status(&acme, &id).await;
    assert_eq!(record["status"], "CANCELLED");
    assert_eq!(record["amounts"]["refunded"].to_string(), "169.50");

    // The gateway saw each refund once, keyed by its refund id.
    let keys = refund_ids(&server);
    assert_eq!(keys.len(), 2);
    for key in &keys {
        assert_eq!(server.gateway.new_refunds_for(key), 1);
    }

    // R-3.4.
    let reply = server.cancel(&acme, &id, &json!({"itemsOrder": [1]})).await;
    let error = reply.expect_error(400);
    assert_eq!(
        error["message"],
        json!(["contract status CANCELLED does not allow cancellation"])
    );

    // Receipts: owner only; numbered per provider (R-10.2).
    let receipt = server.get("/receipts/CR-000001", &acme).await;
    assert_eq!(receipt.status, 200);
    let receipt = receipt.json();
    assert_eq!(receipt["transactionId"], id);
    assert_eq!(receipt["items"][0]["total"].to_string(), "119.00");
    assert_eq!(receipt["transactionStatus"], "PARTIALLY_CANCELLED");
    let other = server.provider("other");
    server
        .get("/receipts/CR-000001", &other)
        .await
        .expect_error(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partial_amount_is_allocated_in_items_order_r_4_3() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let id = server.paid_transaction(&acme, &["100", "50"]).await;
    let reply = server
        .cancel(&acme, &id, &json!({"itemsOrder": [2, 1], "amount": 70}))
        .await;
    let body = reply.json();
    assert_eq!(body["status"], "SUCCESS", "{body}");
    assert_eq!(body["refund"].to_string(), "70.00");
    assert_eq!(body["items"][0]["order"], 2);
    assert_eq!(body["items"][0]["refund"].to_string(), "50.00");
    assert_eq!(body["items"][1]["refund"].to_string(), "20.00");
    let record = server.status(&acme, &id).await;
    assert_eq!(record["amounts"]["refunded"].to_string(), "70.00");
    assert_eq!(record["status"], "CANCELLED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn invalid_requests_are_400_naming_the_entry_r_4_1_r_4_3() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let id = server.paid_transaction(&acme, &["100", "50"]).await;
    let cases = [
        (
            json!({"itemsOrder": [1, 1]}),
            "itemsOrder.1 item 1 is listed more than once",
        ),
        (
            json!({"itemsOrder": [3]}),
            "itemsOrder.0 item 3 does not exist",
        ),
        (
            json!({"itemsOrder": [1], "amount": 100.01}),
            "amount must not exceed the refundable amount 100.00",
        ),
        (
            json!({"itemsOrder": [1], "amount": 1.234}),
            "amount must not have more than 2 decimal places",
        ),
    ];
    for (body, message) in cases {
        let reply = server.cancel(&acme, &id, &body).await;
        let error = reply.expect_error(400);
        assert!(
            error["message"]
                .as_array()
                .unwrap()
                .iter()
                .any(|m| m == message),
            "{body}: {error}"
        );
    }
    let negative = server
        .cancel(&acme, &id, &json!({"itemsOrder": [1], "amount": -1}))
        .await;
    negative.expect_error(400);
    let empty = server.cancel(&acme, &id, &json!({"itemsOrder": []})).await;
    empty.expect_error(400);

    server.cancel(&acme, &id, &json!({"itemsOrder": [1]})).await;
    let again = server
        .cancel(&acme, &id, &json!({"itemsOrder": [2, 1]}))
        .await;
    let error = again.expect_error(400);
    assert_eq!(
        error["message"],
        json!(["itemsOrder.1 item 1 is already cancelled"])
    );
    // Nothing of the refused requests reached the gateway.
    assert_eq!(server.gateway.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn credentials_scope_and_ownership_r_7_3_r_7_4() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let id = server.paid_transaction(&acme, &["100"]).await;
    let body = json!({"itemsOrder": [1]}).to_string().into_bytes();
    let path = format!("/cancel/{id}");
    let json_type = [("content-type", "application/json")];

    let anonymous = server
        .send(Method::PATCH, &path, None, &json_type, body.clone())
        .await;
    anonymous.expect_error(401);
    let reader = server.provider_with_scopes(
        "reader",
        Scopes::parse("transactions:read,transactions:write").unwrap(),
    );
    let forbidden = server
        .send(
            Method::PATCH,
            &path,
            Some(&reader),
            &json_type,
            body.clone(),
        )
        .await;
    forbidden.expect_error(403);
    let other = server.provider("other");
    let foreign = server
        .send(Method::PATCH, &path, Some(&other), &json_type, body.clone())
        .await;
    assert_eq!(
        foreign.expect_error(401)["message"],
        "unauthorized access to the contract"
    );
    let unknown = server
        .cancel(
            &acme,
            "0190b6b0-7c3a-7d2e-9f00-000000000000",
            &json!({"itemsOrder": [1]}),
        )
        .await;
    assert_eq!(unknown.expect_error(404)["message"], "contract not found");
    let bad_id = server
        .cancel(&acme, "nope", &json!({"itemsOrder": [1]}))
        .await;
    assert_eq!(
        bad_id.expect_error(400)["message"],
        json!(["transactionId must be a UUID"])
    );
    assert!(Scopes::all().contains(Scope::RefundsWrite));
    assert!(server.gateway.requests().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decline_is_failed_and_changes_nothing_r_4_8() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let id = server.paid_transaction(&acme, &["100", "50"]).await;
    server.gateway.set_behavior(FakeBehavior::Decline {
        status: 422,
        body: r#"{"reason":"card account closed"}"#.to_owned(),
    });
    let reply = server.cancel(&acme, &id, &json!({"itemsOrder": [1]})).await;
    assert_eq!(reply.status, 200);
    let body = reply.json();
    assert_eq!(body["status"], "FAILED");
    assert_eq!(body["errorMessage"], "card account closed");
    assert_eq!(body["receiptNumber"], Value::Null);
    assert_eq!(body["transactionStatus"], "PAID");
    // Nothing was refunded: the total and each item's line say so alike.
    assert_eq!(body["refund"].to_string(), "0.00");
    assert_eq!(body["items"][0]["order"], 1);
    assert_eq!(body["items"][0]["total"].to_string(), "100.00");
    assert_eq!(body["items"][0]["refund"].to_string(), "0.00");
    let record = server.status(&acme, &id).await;
    assert_eq!(record["status"], "PAID");
    assert_eq!(record["items"][0]["status"], "ACTIVE");
    assert_eq!(record["amounts"]["refunded"].to_string(), "0.00");
    assert_eq!(record["cancellations"][0]["outcome"], "FAILED");
    assert_eq!(record["cancellations"][0]["refund"].to_string(), "0.00");

    // Items released: the next attempt may succeed.
    server.gateway.set_behavior(FakeBehavior::Accept);
    let reply = server.cancel(&acme, &id, &json!({"itemsOrder": [1]})).await;
    assert_eq!(reply.json()["status"], "SUCCESS");
    assert_eq!(reply.json()["receiptNumber"], "CR-000001");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unanswered_refund_stays_pending_and_recovery_completes_it_r_4_8() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let id = server.paid_transaction(&acme, &["100", "50"]).await;
    // The gateway refunds but its answers are lost, then it answers.
    server.gateway.script([
        FakeBehavior::AcceptThenHang,
        FakeBehavior::Fail { status: 503 },
        FakeBehavior::Hang,
    ]);
    let reply = server.cancel(&acme, &id, &json!({"itemsOrder": [1]})).await;
    let error = reply.expect_error(500);
    let message = error["message"].as_str().unwrap();
    assert!(
        message.contains("is pending at the gateway and will be completed"),
        "{message}"
    );
    let refund_id = error["refundId"].as_str().unwrap().to_owned();

    let record = server
        .wait_for(&acme, &id, |r| r["items"][0]["status"] == "CANCELLED")
        .await;
    assert_eq!(record["status"], "PARTIALLY_CANCELLED");
    assert_eq!(record["amounts"]["refunded"].to_string(), "100.00");
    assert_eq!(record["cancellations"][0]["outcome"], "SUCCESS");
    // Every call carried the same refund id; the gateway refunded it once.
    assert!(refund_ids(&server).iter().all(|k| *k == refund_id));
    assert_eq!(server.gateway.new_refunds_for(&refund_id), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn while_pending_the_items_are_cancelling_and_reserved_r_10_2() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let id = server.paid_transaction(&acme, &["100", "50"]).await;
    server
        .gateway
        .set_behavior(FakeBehavior::Fail { status: 503 });
    server
        .cancel(&acme, &id, &json!({"itemsOrder": [1]}))
        .await
        .expect_error(500);
    let record = server.status(&acme, &id).await;
    assert_eq!(record["items"][0]["status"], "CANCELLING");
    assert_eq!(record["cancellations"][0]["outcome"], "PENDING");
    let again = server.cancel(&acme, &id, &json!({"itemsOrder": [1]})).await;
    again.expect_error(400);

    // A restart finds the pending refund and completes it.
    server.gateway.set_behavior(FakeBehavior::Accept);
    let server = server.restart().await;
    server.gateway.set_behavior(FakeBehavior::Accept);
    let record = server
        .wait_for(&acme, &id, |r| r["items"][0]["status"] == "CANCELLED")
        .await;
    assert_eq!(record["amounts"]["refunded"].to_string(), "100.00");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_cancellation_replays_and_never_refunds_twice_r_9_1() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let id = server.paid_transaction(&acme, &["100", "50"]).await;
    let path = format!("/cancel/{id}");
    let send = |body: Value| {
        let server = &server;
        let acme = &acme;
        let path = path.clone();
        async move {
            server
                .send(
                    Method::PATCH,
                    &path,
                    Some(acme),
                    &[
                        ("content-type", "application/json"),
                        ("idempotency-key", "k-1"),
                    ],
                    body.to_string().into_bytes(),
                )
                .await
        }
    };
    let first = send(json!({"itemsOrder": [1]})).await;
    assert_eq!(first.status, 200);
    assert!(first.header("idempotent-replayed").is_none());
    let second = send(json!({"itemsOrder": [1]})).await;
    assert_eq!(second.status, 200);
    assert_eq!(second.header("idempotent-replayed"), Some("true"));
    assert_eq!(second.json(), first.json());
    assert_eq!(server.gateway.requests().len(), 1);
    let other_body = send(json!({"itemsOrder": [2]})).await;
    other_body.expect_error(422);
    let record = server.status(&acme, &id).await;
    assert_eq!(record["amounts"]["refunded"].to_string(), "100.00");
}

/// R-9.1, R-4.8: a retry while the first request's refund is pending at the gateway is 409:
/// the key of a retry that finds it running is claimed before the refund is computed, so the
/// items that refund holds CANCELLING do not turn the retry into a 400, and a stale claim is
/// never taken over while a pending refund carries it. Once the recovery task has settled the
/// refund, the retry replays its answer; the gateway refunded once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_while_its_refund_is_pending_is_409_then_the_replay_r_9_1() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let id = server.paid_transaction(&acme, &["100", "50"]).await;
    let path = format!("/cancel/{id}");
    let send = || {
        server.send(
            Method::PATCH,
            &path,
            Some(&acme),
            &[
                ("content-type", "application/json"),
                ("idempotency-key", "k-pending"),
            ],
            json!({"itemsOrder": [1]}).to_string().into_bytes(),
        )
    };
    server
        .gateway
        .set_behavior(FakeBehavior::Fail { status: 503 });
    let first = send().await.expect_error(500);
    let refund_id = first["refundId"].as_str().unwrap().to_owned();
    send().await.expect_error(409);
    server.gateway.set_behavior(FakeBehavior::Accept);
    server
        .wait_for(&acme, &id, |r| r["items"][0]["status"] == "CANCELLED")
        .await;
    let replay = send().await;
    assert_eq!(replay.status, 200);
    assert_eq!(replay.header("idempotent-replayed"), Some("true"));
    assert_eq!(replay.json()["status"], "SUCCESS");
    assert!(refund_ids(&server).iter().all(|k| *k == refund_id));
    assert_eq!(server.gateway.new_refunds_for(&refund_id), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_parallel_cancellations_of_one_item_refund_once_r_4_5() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let id = server.paid_transaction(&acme, &["100", "50"]).await;
    let body = json!({"itemsOrder": [1]});
    let requests = (0..32).map(|_| server.cancel(&acme, &id, &body));
    let replies = futures_util::future::join_all(requests).await;
    let mut successes = 0;
    for reply in &replies {
        match reply.status.as_u16() {
            200 => {
                assert_eq!(reply.json()["status"], "SUCCESS");
                successes += 1;
            }
            400 => {
                let error = reply.expect_error(400);
                assert_eq!(
                    error["message"],
                    json!(["itemsOrder.0 item 1 is already cancelled"])
                );
            }
            other => panic!(
                "unexpected {other}: {}",
                String::from_utf8_lossy(&reply.body)
            ),
        }
    }
    assert_eq!(successes, 1);
    // One refund id reached the gateway and made one new refund. A retry of that id after a
    // slow answer (the suite's read timeout is 300 ms, which a loaded machine can exceed) is a
    // replay under the same idempotency key, not a second refund (R-4.5, R-4.8).
    let requests = server.gateway.requests();
    let keys: std::collections::BTreeSet<_> =
        requests.iter().map(|r| r.idempotency_key.clone()).collect();
    assert_eq!(keys.len(), 1, "{requests:?}");
    assert_eq!(
        requests.iter().filter(|r| r.new_refund).count(),
        1,
        "{requests:?}"
    );
    let record = server.status(&acme, &id).await;
    assert_eq!(record["amounts"]["refunded"].to_string(), "100.00");
    assert_eq!(record["status"], "PARTIALLY_CANCELLED");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parallel_cancellations_of_different_items_add_up_r_4_5() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let prices = [
        "10.01", "20.02", "30.03", "40.04", "50.05", "60.06", "70.07", "80.08",
    ];
    let id = server.paid_transaction(&acme, &prices).await;
    let bodies: Vec<Value> = (1..=prices.len())
        .map(|order| json!({"itemsOrder": [order]}))
        .collect();
    let requests = bodies.iter().map(|body| server.cancel(&acme, &id, body));
    let replies = futures_util::future::join_all(requests).await;
    let mut receipts = Vec::new();
    for reply in &replies {
        assert_eq!(
            reply.status,
            200,
            "{}",
            String::from_utf8_lossy(&reply.body)
        );
        assert_eq!(reply.json()["status"], "SUCCESS");
        receipts.push(reply.json()["receiptNumber"].as_str().unwrap().to_owned());
    }
    receipts.sort();
    receipts.dedup();
    assert_eq!(receipts.len(), prices.len(), "receipt numbers are unique");
    let record = server.status(&acme, &id).await;
    assert_eq!(record["status"], "CANCELLED");
    assert_eq!(record["amounts"]["refunded"].to_string(), "360.36");
    assert_eq!(record["amounts"]["paid"].to_string(), "360.36");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unpaid_items_are_voided_without_the_gateway_r_4_4() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let id = server.create(&acme, &checkout(&["100", "50"])).await;
    let positive = server
        .cancel(&acme, &id, &json!({"itemsOrder": [1], "amount": 5}))
        .await;
    positive.expect_error(400);
    let reply = server
        .cancel(&acme, &id, &json!({"itemsOrder": [1], "amount": 0}))
        .await;
    let body = reply.json();
    assert_eq!(body["status"], "SUCCESS", "{body}");
    assert_eq!(body["refund"].to_string(), "0.00");
    assert_eq!(body["transactionStatus"], "PENDING");
    assert_eq!(body["receiptNumber"], "CR-000001");
    let record = server.status(&acme, &id).await;
    assert_eq!(record["status"], "PENDING");
    assert_eq!(record["items"][0]["status"], "CANCELLED");

    // Paying now charges the remaining item only (R-3.6).
    server.pay(&acme, &id).await;
    let record = server.status(&acme, &id).await;
    assert_eq!(record["amounts"]["paid"].to_string(), "50.00");
    let reply = server.cancel(&acme, &id, &json!({"itemsOrder": [2]})).await;
    assert_eq!(reply.json()["transactionStatus"], "CANCELLED");
    assert_eq!(server.gateway.requests().len(), 1);

    // Voiding the last item of an unpaid transaction cancels it.
    let unpaid = server.create(&acme, &checkout(&["10"])).await;
    let reply = server
        .cancel(&acme, &unpaid, &json!({"itemsOrder": [1]}))
        .await;
    assert_eq!(reply.json()["transactionStatus"], "CANCELLED");
    assert_eq!(server.gateway.requests().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quote_previews_without_changing_anything_r_11() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let body = json!({
        "title": "Trip", "currency": "EUR",
        "items": [{"name": "Flight", "price": 100, "cancellationPolicy": {
            "reference": "PAYMENT_DATE",
            "penalties": [{"type": "OFFSET_PENALTY", "value": {"amount": 50, "unit": "PERCENTAGE"},
                           "offset": {"amount": 1, "unit": "DAYS"}}]}}]
    });
    let id = server.create(&acme, &body).await;
    server.pay_at(&acme, &id, "2026-01-01T00:00:00Z").await;
    let preview = server
        .quote_at(
            &acme,
            &id,
            "2026-01-03T00:00:00Z",
            &json!({"itemsOrder": [1]}),
        )
        .await;
    assert_eq!(preview["refund"].to_string(), "50.00");
    assert_eq!(preview["items"][0]["penalty"].to_string(), "50.00");
    let early = server
        .json(
            Method::POST,
            &format!("/cancel/{id}/quote?at=2026-01-01T12:00:00%2B01:00"),
            &acme,
            &json!({"itemsOrder": [1]}),
        )
        .await;
    assert_eq!(early.json()["refund"].to_string(), "100.00");
    let bad = server
        .json(
            Method::POST,
            &format!("/cancel/{id}/quote?at=yesterday"),
            &acme,
            &json!({"itemsOrder": [1]}),
        )
        .await;
    assert_eq!(
        bad.expect_error(400)["message"],
        json!(["at must be a valid ISO 8601 date string"])
    );
    let invalid = server
        .json(
            Method::POST,
            &format!("/cancel/{id}/quote"),
            &acme,
            &json!({"itemsOrder": [2]}),
        )
        .await;
    invalid.expect_error(400);
    let record = server.status(&acme, &id).await;
    assert_eq!(record["items"][0]["status"], "ACTIVE");
    assert!(record["cancellations"].as_array().unwrap().is_empty());
    assert!(server.gateway.requests().is_empty());
}

/// R-3.5: a later change of the provider's time zone never changes an existing contract; the
/// DatePenalty midnight (R-5.4) of an item without a period stays in the zone the provider had
/// at creation (R-6.4).
#[tokio::test]
async fn a_later_provider_zone_change_does_not_move_existing_thresholds_r_3_5() {
    let server = CancelServer::start().await;
    let acme = server.provider("acme");
    let body = json!({
        "title": "Trip", "currency": "EUR",
        "items": [{"name": "Fee", "price": 100, "cancellationPolicy": {
            "reference": "PAYMENT_DATE",
            "penalties": [{"type": "DATE_PENALTY", "value": {"amount": 50, "unit": "PERCENTAGE"},
                           "until": "2026-01-10"}]}}]
    });
    let id = server.create(&acme, &body).await;
    server.pay_at(&acme, &id, "2026-01-01T00:00:00Z").await;
    // In Pacific/Kiritimati (UTC+14) the penalty would apply from 2026-01-10T10:00Z; in the
    // zone at creation (UTC) only from 2026-01-11T00:00Z.
    host_http::app::providers::set_policy(
        &server.db,
        &acme.provider_id,
        &host_http::app::providers::PolicyChange {
            time_zone: Some("Pacific/Kiritimati".to_owned()),
            ..Default::default()
        },
    )
    .expect("zone changed");
    let preview = server
        .quote_at(
            &acme,
            &id,
            "2026-01-10T12:00:00Z",
            &json!({"itemsOrder": [1]}),
        )
        .await;
    assert_eq!(preview["refund"].to_string(), "100.00");
    assert_eq!(preview["items"][0]["nextChangeAt"], "2026-01-11T00:00:00Z");
}

/// R-1.5, R-5.7: a provider default policy's FIXED_AMOUNT is checked against the currency of
/// each checkout it is resolved onto: 10.5 fits EUR but not JPY, where the creation is refused
/// (instead of every later cancellation failing).
#[tokio::test]
async fn a_provider_fixed_amount_must_fit_the_checkout_currency_r_1_5() {
    let server = CancelServer::start().await;
    let policy: checkout_engine::api::CancellationPolicy = serde_json::from_value(json!({
        "reference": "PAYMENT_DATE",
        "penalties": [{"type": "OFFSET_PENALTY", "value": {"amount": 10.5, "unit": "FIXED_AMOUNT"},
                       "offset": {"amount": 1, "unit": "HOURS"}}]
    }))
    .expect("policy");
    let acme: tests::http::Creds = host_http::app::providers::create_provider(
        &server.db,
        &host_http::app::providers::NewProvider {
            name: "acme".to_owned(),
            time_zone: "UTC".to_owned(),
            default_policy: Some(policy),
            category_policies: Default::default(),
            scopes: Scopes::all(),
        },
        chrono::Utc::now(),
    )
    .expect("provider")
    .into();
    let eur = json!({"title": "T", "currency": "EUR", "items": [{"price": 100}]});
    server.create(&acme, &eur).await;
    let jpy = json!({"title": "T", "currency": "JPY", "items": [{"price": 100}]});
    let reply = server.json(Method::POST, "/initialize", &acme, &jpy).await;
    assert_eq!(
        reply.expect_error(400)["message"][0],
        "items.0.cancellationPolicy.penalties.0.value.amount must not have more than 0 decimal \
         places (the provider's default policy)"
    );
}
