//! Black-box tests of authentication and access (R-7): 401 vs 403 vs scopes, another
//! provider's contracts, and credential rotation on a running server.

use host_http::app::providers;
use host_http::auth::Scopes;
use hyper::Method;
use tests::http::{Creds, TestServer, basic, checkout_body};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_malformed_unknown_or_wrong_credentials_are_401_r_7_2() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let cases = [
        None,
        Some("Bearer token".to_owned()),
        Some("Basic %%%".to_owned()),
        Some(basic("wid_unknown", &acme.secret)),
        Some(basic(&acme.widget_id, "wrong-secret")),
    ];
    for auth in cases {
        let reply = server
            .send(Method::GET, "/status", auth.as_deref(), &[], None)
            .await;
        reply.expect_error(401);
        assert_eq!(
            reply.header("www-authenticate"),
            Some(r#"Basic realm="checkout""#),
            "{auth:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn missing_scope_is_403_r_7_3() {
    let server = TestServer::start().await;
    let full = server.provider("acme");
    let id = server.create(&full, &checkout_body("T")).await;
    let read_only = Creds::from(
        providers::add_credential(
            &server.db,
            &full.provider_id,
            Scopes::parse("transactions:read").unwrap(),
            chrono::Utc::now(),
        )
        .unwrap(),
    );
    let write_only = Creds::from(
        providers::add_credential(
            &server.db,
            &full.provider_id,
            Scopes::parse("transactions:write").unwrap(),
            chrono::Utc::now(),
        )
        .unwrap(),
    );
    // GET /status needs a valid credential only.
    assert_eq!(server.get("/status", &read_only).await.status, 200);
    assert_eq!(server.get("/status", &write_only).await.status, 200);
    assert_eq!(
        server
            .get(&format!("/status/{id}"), &read_only)
            .await
            .status,
        200
    );
    server
        .get(&format!("/status/{id}"), &write_only)
        .await
        .expect_error(403);
    server
        .json(Method::POST, "/initialize", &read_only, &checkout_body("T"))
        .await
        .expect_error(403);
    server
        .json(Method::PUT, &format!("/{id}"), &read_only, "{}")
        .await
        .expect_error(403);
    assert_eq!(
        server
            .json(
                Method::POST,
                "/initialize",
                &write_only,
                &checkout_body("T")
            )
            .await
            .status,
        201
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_providers_contract_is_401_on_every_route_r_7_4() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let other = server.provider("other");
    let id = server.create(&acme, &checkout_body("T")).await;
    let replies = [
        server.get(&format!("/status/{id}"), &other).await,
        server
            .json(Method::PUT, &format!("/{id}"), &other, "{}")
            .await,
        server
            .json(
                Method::POST,
                &format!("/sandbox/transactions/{id}/pay"),
                &other,
                "{}",
            )
            .await,
    ];
    for reply in replies {
        let body = reply.expect_error(401);
        assert_eq!(body["message"], "unauthorized access to the contract");
    }
    // The owner still sees it unchanged.
    let record = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(record["status"], "PENDING");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rotation_two_secrets_valid_then_revoked_one_refused_r_7_1() {
    let server = TestServer::start().await;
    let first = server.provider("acme");
    assert_eq!(server.get("/status", &first).await.status, 200);

    // Added on the same file while the server runs: valid on its next request.
    let second = Creds::from(
        providers::add_credential(
            &server.db,
            &first.provider_id,
            Scopes::all(),
            chrono::Utc::now(),
        )
        .unwrap(),
    );
    assert_ne!(first.secret, second.secret);
    assert_eq!(server.get("/status", &first).await.status, 200);
    let reply = server.get("/status", &second).await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.json()["provider"], first.provider_id);

    // Revoked while the server runs: refused on its next request, the other one still works.
    providers::revoke_credential(&server.db, &first.widget_id, chrono::Utc::now()).unwrap();
    server.get("/status", &first).await.expect_error(401);
    assert_eq!(server.get("/status", &second).await.status, 200);

    // A provider created while the server runs works at once.
    let late = server.provider("late");
    assert_eq!(server.get("/status", &late).await.status, 200);
}

#[test]
fn secrets_are_stored_only_as_hashes_r_7_1() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("c.db");
    let issued = providers::create_provider(
        &db,
        &providers::NewProvider {
            name: "acme".to_owned(),
            time_zone: "Europe/Berlin".to_owned(),
            default_policy: None,
            category_policies: Default::default(),
            scopes: Scopes::all(),
        },
        chrono::Utc::now(),
    )
    .unwrap();
    let conn = rusqlite::Connection::open(&db).unwrap();
    let dump: Vec<u8> = conn
        .query_row(
            "SELECT secret_hash FROM credentials WHERE widget_id = ?1",
            [&issued.widget_id],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(dump.len(), 32);
    let file = std::fs::read(&db).unwrap();
    let secret = issued.backend_secret.as_bytes();
    assert!(!file.windows(secret.len()).any(|w| w == secret));
    let listed = serde_json::to_string(&providers::list_providers(&db).unwrap()).unwrap();
    assert!(listed.contains(&issued.widget_id));
    assert!(!listed.contains(&issued.backend_secret));
    assert!(providers::check_time_zone("Mars/Olympus").is_err());
}
