//! Black-box tests of every route and every error status of the HTTP service (R-7, R-8, R-10).

use hyper::Method;
use serde_json::json;
use tests::http::{TestServer, checkout_body};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn health_check_returns_ready_and_the_provider_r_7() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let reply = server.get("/status", &acme).await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        json!({"status": "ready", "provider": acme.provider_id})
    );
    assert!(
        reply
            .header("x-request-id")
            .is_some_and(|id| !id.is_empty())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_then_status_shows_the_record_with_extensions_r_10() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let body = json!({
        "refIDs": {"booking": "B-1"},
        "title": "Trip",
        "currency": "EUR",
        "note": "n",
        "recipients": ["b@example.com"],
        "email": {"recipients": ["a@example.com", "b@example.com"], "subject": "s"},
        "items": [{
            "name": "Flight", "category": "FLIGHT", "price": 100, "taxes": [{"value": 19}],
            "cancellationPolicy": {"reference": "PAYMENT_DATE", "penalties": [
                {"type": "OFFSET_PENALTY", "value": {"amount": 50, "unit": "PERCENTAGE"},
                 "offset": {"amount": 1, "unit": "DAYS"}}]}
        }, {"name": "Fee", "price": 5}]
    })
    .to_string();
    let reply = server.json(Method::POST, "/initialize", &acme, &body).await;
    assert_eq!(reply.status, 201);
    let id = reply.json()["transactionId"].as_str().unwrap().to_owned();
    // R-3.1: lower-case hyphenated UUID (v7).
    let parsed = uuid::Uuid::parse_str(&id).unwrap();
    assert_eq!(parsed.hyphenated().to_string(), id);
    assert_eq!(parsed.get_version_num(), 7);
    assert_eq!(
        reply.header("location"),
        Some(format!("/status/{id}").as_str())
    );

    let status = server.get(&format!("/status/{id}"), &acme).await;
    assert_eq!(status.status, 200);
    let record = status.json();
    assert_eq!(record["status"], "PENDING");
    let reference = record["checkout"]["reference"].as_str().unwrap();
    assert!(
        reference.starts_with("CHK-") && reference.len() == 12,
        "{reference}"
    );
    // R-10.1: payment parts null until paid.
    for part in [
        "payment",
        "customer",
        "beneficiary",
        "billing",
        "card",
        "reporting",
    ] {
        assert!(record["checkout"][part].is_null(), "{part}");
    }
    // R-10.2 extensions at the top level.
    assert_eq!(record["transactionId"], id);
    assert_eq!(record["title"], "Trip");
    assert_eq!(record["refIDs"], json!({"booking": "B-1"}));
    assert_eq!(record["note"], "n");
    assert_eq!(record["currency"], "EUR");
    assert_eq!(record["amounts"]["total"].to_string(), "124.00");
    assert_eq!(record["amounts"]["paid"].to_string(), "0.00");
    assert_eq!(record["items"][0]["order"], 1);
    assert_eq!(record["items"][0]["total"].to_string(), "119.00");
    assert_eq!(record["items"][0]["status"], "ACTIVE");
    assert_eq!(
        record["items"][0]["cancellationPolicy"]["reference"],
        "PAYMENT_DATE"
    );
    assert!(record["items"][1]["cancellationPolicy"].is_null());
    assert_eq!(record["cancellations"], json!([]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn post_transactions_is_the_same_operation_r_8_5() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let reply = server
        .json(Method::POST, "/transactions", &acme, &checkout_body("T"))
        .await;
    assert_eq!(reply.status, 201);
    let id = reply.json()["transactionId"].as_str().unwrap().to_owned();
    assert_eq!(
        server.get(&format!("/status/{id}"), &acme).await.status,
        200
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn update_replaces_given_fields_only_r_8_6() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let id = server.create(&acme, &checkout_body("Old")).await;
    let reply = server
        .json(
            Method::PUT,
            &format!("/{id}"),
            &acme,
            r#"{"externalIds":{"x":"1"},"note":"new note"}"#,
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(
        reply.json(),
        json!({"message": format!("transaction {id} updated")})
    );
    let record = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(record["title"], "Old");
    assert_eq!(record["note"], "new note");
    assert_eq!(record["refIDs"], json!({"x": "1"}));

    let unknown = uuid::Uuid::now_v7().to_string();
    server
        .json(Method::PUT, &format!("/{unknown}"), &acme, "{}")
        .await
        .expect_error(404);
    server
        .json(Method::PUT, &format!("/{id}"), &acme, r#"{"bogus":1}"#)
        .await
        .expect_error(400);
}

/// A long note is kept once, in the creation body, on SQLite (migration 28): it is answered as
/// the body gave it (JSON escapes decoded, the top-level `note`, not a `note` key of
/// `refIDs`), kept by an update that leaves it alone and replaced by one that gives a new one
/// (R-8.6, R-10).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_note_is_answered_as_sent_and_replaced_by_an_update_r_8_6_r_10() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let note = format!(
        "desk \"quoted\" \u{e9} \u{1F600} back\\slash {}",
        "n".repeat(600)
    );
    let mut body: serde_json::Value = serde_json::from_str(&checkout_body("Trip")).unwrap();
    body["note"] = json!(note);
    body["refIDs"] = json!({"note": "not this one"});
    // The body written with escapes where serde_json would write the characters.
    let text = body
        .to_string()
        .replace('\u{e9}', "\\u00e9")
        .replace('\u{1F600}', "\\ud83d\\ude00");
    assert!(text.contains("\\u00e9") && text.contains("\\ud83d\\ude00"));
    let id = server.create(&acme, &text).await;
    let status = |record: serde_json::Value| (record["note"].clone(), record["refIDs"].clone());
    assert_eq!(
        status(server.get(&format!("/status/{id}"), &acme).await.json()),
        (json!(note), json!({"note": "not this one"}))
    );

    let path = format!("/{id}");
    let update = |body: &'static str| server.json(Method::PUT, &path, &acme, body);
    assert_eq!(update(r#"{"title":"Trip 2"}"#).await.status, 200);
    let record = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(
        (&record["title"], &record["note"]),
        (&json!("Trip 2"), &json!(note))
    );
    assert_eq!(update(r#"{"note":"short"}"#).await.status, 200);
    let record = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(record["note"], "short");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn quote_computes_without_storing_r_2() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let reply = server
        .json(Method::POST, "/quote", &acme, &checkout_body("Q"))
        .await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let quote = reply.json();
    assert_eq!(quote["total"].to_string(), "169.50");
    assert_eq!(quote["items"][0]["total"].to_string(), "119.00");
    assert_eq!(
        server
            .scalar("SELECT count(*) FROM transactions")
            .as_deref(),
        Some("0")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openapi_document_and_liveness_are_served() {
    let server = TestServer::start().await;
    let openapi = server
        .send(Method::GET, "/openapi.json", None, &[], None)
        .await;
    assert_eq!(openapi.status, 200);
    assert_eq!(openapi.header("content-type"), Some("application/json"));
    assert!(openapi.json().is_object());
    let live = server.send(Method::GET, "/healthz", None, &[], None).await;
    assert_eq!(live.status, 200);
    // The liveness probe is in the document, open, and answers what it says.
    let liveness = &openapi.json()["paths"]["/healthz"]["get"];
    assert_eq!(liveness["security"], serde_json::json!([]));
    let schema = &liveness["responses"]["200"]["content"]["application/json"]["schema"];
    let validator = jsonschema::validator_for(schema).expect("a schema");
    assert!(validator.is_valid(&live.json()), "{}", live.json());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_payment_records_the_payment_r_3_6() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let id = server.create(&acme, &checkout_body("Pay")).await;
    let pay = format!("/sandbox/transactions/{id}/pay");
    let body = json!({
        "payment": {"reference": "PAY-1", "provider": "card"},
        "customer": {"firstName": "Ada", "lastName": "L", "email": "ada@example.com"},
        "billing": {"name": "ACME", "externalIds": {"erp": "9"}},
        "card": {"brand": "visa"},
        "paidAt": "2025-01-02T03:04:05Z"
    })
    .to_string();
    let reply = server.json(Method::POST, &pay, &acme, &body).await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    let record = reply.json();
    assert_eq!(record["status"], "PAID");
    assert_eq!(record["checkout"]["payment"]["reference"], "PAY-1");
    assert_eq!(record["checkout"]["customer"]["firstName"], "Ada");
    assert_eq!(record["checkout"]["card"]["brand"], "visa");
    assert_eq!(record["amounts"]["paid"].to_string(), "169.50");
    // Stored as RFC 3339 text (SQLite) or timestamptz (PostgreSQL, `2025-01-02 03:04:05+00`).
    let paid_at = server
        .scalar(&format!(
            "SELECT paid_at FROM transactions WHERE id = '{id}'"
        ))
        .expect("paid_at")
        .replacen(' ', "T", 1);
    assert!(paid_at.starts_with("2025-01-02T03:04:05"), "{paid_at}");

    // R-3.3: only PENDING can be paid.
    let again = server
        .json(Method::POST, &pay, &acme, "{}")
        .await
        .expect_error(400);
    assert!(
        again["message"][0].as_str().unwrap().contains("PAID"),
        "{again}"
    );
}

/// A penalty's `condition` AFTER_PAYMENT is kept with the item's policy and shown again in the
/// status record and the refund preview; it changes nothing, since penalties only ever apply
/// to paid items: the same penalty without it costs the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn penalty_condition_after_payment_is_stored_and_echoed_r_5_8() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let policy = |condition: Option<&str>| {
        let mut penalty = json!({
            "type": "OFFSET_PENALTY", "value": {"amount": 25, "unit": "PERCENTAGE"},
            "offset": {"amount": 1, "unit": "HOURS"}
        });
        if let Some(condition) = condition {
            penalty["condition"] = json!(condition);
        }
        json!({"reference": "PAYMENT_DATE", "penalties": [penalty]})
    };
    let body = json!({
        "title": "Condition", "currency": "EUR",
        "items": [
            {"name": "With", "price": 100, "cancellationPolicy": policy(Some("AFTER_PAYMENT"))},
            {"name": "Without", "price": 100, "cancellationPolicy": policy(None)}
        ]
    })
    .to_string();
    let id = server.create(&acme, &body).await;
    let record = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(
        record["items"][0]["cancellationPolicy"],
        policy(Some("AFTER_PAYMENT"))
    );
    assert_eq!(record["items"][1]["cancellationPolicy"], policy(None));

    let pay = format!("/sandbox/transactions/{id}/pay");
    let paid = server
        .json(
            Method::POST,
            &pay,
            &acme,
            r#"{"paidAt":"2025-01-02T03:00:00Z"}"#,
        )
        .await;
    assert_eq!(paid.status, 200, "{}", String::from_utf8_lossy(&paid.body));
    let preview = server
        .json(
            Method::POST,
            &format!("/cancel/{id}/quote?at=2025-01-02T05:00:00Z"),
            &acme,
            r#"{"itemsOrder":[1,2]}"#,
        )
        .await;
    assert_eq!(
        preview.status,
        200,
        "{}",
        String::from_utf8_lossy(&preview.body)
    );
    let lines = preview.json()["items"].clone();
    assert_eq!(lines[0]["appliedPenalty"]["condition"], "AFTER_PAYMENT");
    assert!(lines[1]["appliedPenalty"].get("condition").is_none());
    for line in [&lines[0], &lines[1]] {
        assert_eq!(line["penalty"].to_string(), "25.00", "{line}");
        assert_eq!(line["refundable"].to_string(), "75.00", "{line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_payment_refuses_a_future_instant_and_defaults_to_now_r_3_6() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let id = server.create(&acme, &checkout_body("Pay")).await;
    let pay = format!("/sandbox/transactions/{id}/pay");
    let future = (chrono::Utc::now() + chrono::Duration::days(1)).to_rfc3339();
    server
        .json(
            Method::POST,
            &pay,
            &acme,
            &json!({"paidAt": future}).to_string(),
        )
        .await
        .expect_error(400);
    server
        .json(Method::POST, &pay, &acme, r#"{"paidAt":"yesterday"}"#)
        .await
        .expect_error(400);
    // An empty body without a content type is an empty payment.
    let reply = server
        .send(Method::POST, &pay, Some(&acme.basic()), &[], None)
        .await;
    assert_eq!(
        reply.status,
        200,
        "{}",
        String::from_utf8_lossy(&reply.body)
    );
    assert_eq!(reply.json()["status"], "PAID");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sandbox_route_does_not_exist_without_sandbox_mode() {
    let server = TestServer::start_with(false).await;
    let acme = server.provider("acme");
    let id = server.create(&acme, &checkout_body("T")).await;
    server
        .json(
            Method::POST,
            &format!("/sandbox/transactions/{id}/pay"),
            &acme,
            "{}",
        )
        .await
        .expect_error(404);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn validation_errors_list_every_message_r_8_1() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let body = server
        .json(
            Method::POST,
            "/initialize",
            &acme,
            r#"{"title":"T","currency":"EUR","items":[{}]}"#,
        )
        .await
        .expect_error(400);
    assert!(!body["message"].as_array().unwrap().is_empty());
    assert_eq!(body["error"], "Bad Request");
    // Malformed JSON is a 400 with the same shape (R-8.3).
    server
        .json(Method::POST, "/initialize", &acme, "{not json")
        .await
        .expect_error(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_transaction_id_is_400_r_3_1() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    for bad in ["nope", "0190B6B0-7C3A-7D2E-9F00-00000000ABCD"] {
        let body = server
            .get(&format!("/status/{bad}"), &acme)
            .await
            .expect_error(400);
        assert_eq!(body["message"], json!(["transactionId must be a UUID"]));
    }
    server
        .json(Method::PUT, "/not-a-uuid", &acme, "{}")
        .await
        .expect_error(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_transaction_is_404_contract_not_found_r_7_4() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let unknown = uuid::Uuid::now_v7().to_string();
    let body = server
        .get(&format!("/status/{unknown}"), &acme)
        .await
        .expect_error(404);
    assert_eq!(body["message"], "contract not found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_route_404_and_wrong_method_405_with_allow_r_8_3() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    server.get("/no/such/route", &acme).await.expect_error(404);
    let reply = server
        .send(
            Method::DELETE,
            "/initialize",
            Some(&acme.basic()),
            &[],
            None,
        )
        .await;
    reply.expect_error(405);
    assert_eq!(reply.header("allow"), Some("POST"));
    let reply = server
        .send(Method::POST, "/status", Some(&acme.basic()), &[], None)
        .await;
    reply.expect_error(405);
    assert_eq!(reply.header("allow"), Some("GET"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_content_type_is_415_r_8_3() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    for content_type in [
        Some("text/plain"),
        Some("application/x-www-form-urlencoded"),
        None,
    ] {
        let headers: Vec<(&str, &str)> = content_type
            .map(|c| ("content-type", c))
            .into_iter()
            .collect();
        server
            .send(
                Method::POST,
                "/initialize",
                Some(&acme.basic()),
                &headers,
                Some(&checkout_body("T")),
            )
            .await
            .expect_error(415);
    }
    // Parameters are allowed.
    let reply = server
        .send(
            Method::POST,
            "/initialize",
            Some(&acme.basic()),
            &[("content-type", "application/json; charset=utf-8")],
            Some(&checkout_body("T")),
        )
        .await;
    assert_eq!(reply.status, 201);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn body_over_one_mebibyte_is_413_r_8_10() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let padding = "x".repeat(1024 * 1024);
    let body = format!(r#"{{"title":"{padding}","currency":"EUR","items":[]}}"#);
    server
        .json(Method::POST, "/initialize", &acme, &body)
        .await
        .expect_error(413);
    // Exactly at the limit is read (and then judged by validation).
    let title = "x".repeat(1024 * 1024 - 41);
    let at_limit = format!(r#"{{"title":"{title}","currency":"EUR","items":"x"}}"#);
    assert_eq!(at_limit.len(), 1024 * 1024);
    server
        .json(Method::POST, "/initialize", &acme, &at_limit)
        .await
        .expect_error(400);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn internal_errors_are_a_generic_500_body() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let id = server.create(&acme, &checkout_body("T")).await;
    // Corrupt a stored value behind the server's back: reading it back fails.
    // Valid JSON for both stores' column types, but not the object refIDs must be.
    server.execute_sql(&format!(
        "UPDATE transactions SET ref_ids = '[1]' WHERE id = '{id}'"
    ));
    let reply = server.get(&format!("/status/{id}"), &acme).await;
    let body = reply.expect_error(500);
    assert_eq!(body["message"], "internal server error");
    assert!(!String::from_utf8_lossy(&reply.body).contains("ref_ids"));
}

/// Every JSON route refuses a query parameter it does not take with a 400 R-8.1 body that
/// names it, as a body refuses an unknown property (R-8.2); they all answered 200 before. The
/// documented ones still work, a repeated one is refused, and the customer's HTML page ignores
/// what a browser or a tracker adds (`utm_*`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_query_parameters_are_refused_by_name_r_8_1_r_8_2() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let reply = server
        .json(Method::POST, "/initialize", &acme, &checkout_body("Q"))
        .await;
    assert_eq!(reply.status, 201);
    let created = reply.json();
    let id = created["transactionId"].as_str().unwrap().to_owned();
    let page = created["paymentUrl"]
        .as_str()
        .unwrap()
        .strip_prefix(tests::http::PUBLIC_URL)
        .unwrap()
        .to_owned();
    let cancel = r#"{"itemsOrder":[1]}"#;
    let creation = checkout_body("Q");
    let requests: Vec<(Method, String, Option<&str>)> = vec![
        (Method::GET, "/events?foo=1".to_owned(), None),
        (Method::GET, format!("/status/{id}?foo=1"), None),
        (Method::GET, "/status?foo=1".to_owned(), None),
        (
            Method::POST,
            format!("/cancel/{id}/quote?foo=1"),
            Some(cancel),
        ),
        (
            Method::POST,
            "/initialize?foo=1".to_owned(),
            Some(&*creation),
        ),
        (
            Method::PUT,
            format!("/{id}?foo=1"),
            Some(r#"{"title":"New"}"#),
        ),
        (Method::PATCH, format!("/cancel/{id}?foo=1"), Some(cancel)),
        (Method::GET, "/healthz?foo=1".to_owned(), None),
        (Method::GET, "/openapi.json?foo=1".to_owned(), None),
    ];
    for (method, path, body) in requests {
        let reply = match body {
            Some(body) => server.json(method.clone(), &path, &acme, body).await,
            None => server.get(&path, &acme).await,
        };
        let body = reply.expect_error(400);
        assert_eq!(
            body["message"],
            json!(["query parameter foo should not exist"]),
            "{method} {path}"
        );
    }
    // Nothing was changed by the refused requests.
    let status = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(status["title"], "Q");
    assert_eq!(status["status"], "PENDING");

    // The documented parameters are taken; one given twice, or beside an unknown one, is not.
    assert_eq!(
        server.get("/events?limit=5&after=", &acme).await.status,
        200
    );
    let quote = server
        .json(
            Method::POST,
            &format!("/cancel/{id}/quote?at=2026-01-01T00:00:00Z"),
            &acme,
            cancel,
        )
        .await;
    assert_eq!(quote.status, 200, "{:?}", quote.json());
    let body = server
        .get("/events?limit=5&limit=6&utm_source=x", &acme)
        .await
        .expect_error(400);
    assert_eq!(
        body["message"],
        json!([
            "query parameter limit must not appear more than once",
            "query parameter utm_source should not exist"
        ])
    );
    // The customer's page ignores what it does not read.
    let reply = server
        .send(
            Method::GET,
            &format!(
                "{page}{}utm_source=newsletter&lang=de",
                if page.contains('?') { '&' } else { '?' }
            ),
            None,
            &[],
            None,
        )
        .await;
    assert_eq!(reply.status, 200);
}
