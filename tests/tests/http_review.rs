//! Black-box review cases of the HTTP service: odd inputs found by probing the running server
//! from outside, each pinned to the ruling it breaks (R-8.2, R-8.3, …).

use hyper::Method;
use tests::http::{TestServer, checkout_body};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pay_body_unknown_property_is_named_with_its_path_r_8_2() {
    let server = TestServer::start().await;
    let acme = server.provider("acme");
    let id = server.create(&acme, &checkout_body("Trip")).await;
    let reply = server
        .json(
            Method::POST,
            &format!("/sandbox/transactions/{id}/pay"),
            &acme,
            r#"{"fooBar":1,"payment":{"reference":5,"extra":"x"}}"#,
        )
        .await;
    let body = reply.expect_error(400);
    let messages: Vec<&str> = body["message"]
        .as_array()
        .expect("message list")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    // R-8.1 / R-8.9: every violation, class-validator style, with its path.
    assert!(
        messages.contains(&"payment.reference must be a string"),
        "{messages:?}"
    );
    assert!(
        messages.contains(&"property payment.extra should not exist"),
        "{messages:?}"
    );
    assert!(
        messages.contains(&"property fooBar should not exist"),
        "{messages:?}"
    );
    // Nothing was recorded.
    let status = server.get(&format!("/status/{id}"), &acme).await.json();
    assert_eq!(status["status"], "PENDING");
}
