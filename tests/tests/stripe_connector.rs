//! The Stripe connector against localstripe (a stateful Stripe fake on a loopback port): the
//! refund gateway sends exactly the computed amount in Stripe's minor units, and a refund sent
//! again (a retry after a timeout, a take-over after a crash) is found by the service's refund
//! id in its metadata and never made twice — the fake ignores `Idempotency-Key`, so this holds
//! by the service's own look-up alone (issue 23, R-4.8).

use std::str::FromStr;

use host_http::processors::stripe::refunds::refund;
use host_http::processors::{GatewayOutcome, RefundRequest};
use rust_decimal::Decimal;
use tests::localstripe::LocalStripe;

fn request(refund_id: &str, intent: &str, amount: &str, currency: &str) -> RefundRequest {
    RefundRequest {
        refund_id: refund_id.to_owned(),
        transaction_id: "tx-1".to_owned(),
        payment_reference: Some(intent.to_owned()),
        amount: Decimal::from_str(amount).unwrap(),
        currency: currency.to_owned(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs localstripe: `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn a_refund_is_sent_once_in_minor_units_and_found_again() {
    let fake = LocalStripe::start("a_refund_is_sent_once_in_minor_units_and_found_again").await;
    let key = LocalStripe::key();
    let intent = fake.paid_intent(12_050, "eur", "4242424242424242").await;

    let first = refund(
        fake.client(),
        &key,
        &request("rf-1", &intent, "45.50", "EUR"),
    )
    .await;
    let GatewayOutcome::Succeeded {
        gateway_reference: Some(reference),
    } = first.clone()
    else {
        panic!("{first:?}")
    };
    assert!(reference.starts_with("re_"), "{reference}");
    // Sent again with the same refund id: the same refund, none added.
    let again = refund(
        fake.client(),
        &key,
        &request("rf-1", &intent, "45.50", "EUR"),
    )
    .await;
    assert_eq!(again, first);
    // A second refund of the same payment is its own.
    let second = refund(fake.client(), &key, &request("rf-2", &intent, "10", "EUR")).await;
    assert!(
        matches!(second, GatewayOutcome::Succeeded { gateway_reference: Some(r) } if r != reference)
    );

    let refunds = fake.refunds_of(&intent).await;
    let mut amounts: Vec<(i64, String)> = refunds
        .iter()
        .map(|r| {
            (
                r["amount"].as_i64().unwrap(),
                r["metadata"]["checkout_refund_id"]
                    .as_str()
                    .unwrap()
                    .to_owned(),
            )
        })
        .collect();
    amounts.sort();
    assert_eq!(amounts, vec![(1000, "rf-2".into()), (4550, "rf-1".into())]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs localstripe: `bash scripts/localstripe.sh`; run with -- --include-ignored"]
async fn what_stripe_cannot_take_is_declined_and_a_zero_refund_sends_nothing() {
    let fake =
        LocalStripe::start("what_stripe_cannot_take_is_declined_and_a_zero_refund_sends_nothing")
            .await;
    let key = LocalStripe::key();
    let intent = fake.paid_intent(5_000, "kwd", "4242424242424242").await;
    // KWD: thousandths with a last digit of 0 (Stripe's three-decimal rule).
    let declined = refund(
        fake.client(),
        &key,
        &request("rf-k", &intent, "1.234", "KWD"),
    )
    .await;
    assert!(
        matches!(&declined, GatewayOutcome::Declined { reason } if reason.contains("steps of 0.01 KWD")),
        "{declined:?}"
    );
    assert_eq!(
        refund(
            fake.client(),
            &key,
            &request("rf-0", &intent, "0.000", "KWD")
        )
        .await,
        GatewayOutcome::Succeeded {
            gateway_reference: None
        }
    );
    assert!(fake.refunds_of(&intent).await.is_empty());
    let made = refund(
        fake.client(),
        &key,
        &request("rf-k2", &intent, "1.230", "KWD"),
    )
    .await;
    assert!(matches!(made, GatewayOutcome::Succeeded { .. }), "{made:?}");
    assert_eq!(fake.refunds_of(&intent).await[0]["amount"], 1230);
    // A payment without a PaymentIntent reference cannot be refunded through Stripe.
    let mut no_intent = request("rf-x", &intent, "1", "KWD");
    no_intent.payment_reference = Some("SBX-1".to_owned());
    assert!(matches!(
        refund(fake.client(), &key, &no_intent).await,
        GatewayOutcome::Declined { .. }
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_stripe_leaves_the_outcome_unknown() {
    // A loopback port nothing listens on.
    let port = {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        listener.local_addr().unwrap().port()
    };
    let client = host_http::processors::stripe::StripeClient::new(
        &host_http::processors::stripe::StripeSettings {
            api_base: format!("http://127.0.0.1:{port}"),
            js_url: format!("http://127.0.0.1:{port}/js.stripe.com/v3/"),
        },
    );
    let outcome = refund(
        &client,
        &LocalStripe::key(),
        &request("rf-1", "pi_123", "1.00", "EUR"),
    )
    .await;
    assert!(
        matches!(outcome, GatewayOutcome::Unknown { .. }),
        "{outcome:?}"
    );
}
