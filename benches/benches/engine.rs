//! Criterion benchmarks of the rules engine: quotes, penalty evaluation, schedules, refund
//! previews, validation of a creation payload (the fast path beside the full path and a bare
//! typed parse of the same bytes) and one line of each offline command, written as the binary
//! writes it and as a JSON value (figures in `docs/PERFORMANCE.md`).

use std::hint::black_box;

use benches::{at, cancel_all, checkout, context, paid_at, typical_payload};
use checkout_engine::api::CorporateCheckout;
use checkout_engine::money::Currency;
use checkout_engine::penalty::{Anchors, ItemSchedule};
use checkout_engine::policy::Policy;
use checkout_engine::preview::preview_refund;
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

fn quote(c: &mut Criterion) {
    let mut group = c.benchmark_group("quote");
    for items in [1_usize, 10, 100, 1_000] {
        let checkout = checkout(items);
        group.throughput(Throughput::Elements(items as u64));
        group.bench_with_input(
            BenchmarkId::from_parameter(items),
            &checkout,
            |b, checkout| b.iter(|| checkout_engine::quote::quote(black_box(checkout))),
        );
    }
    group.finish();
}

fn penalty(c: &mut Criterion) {
    let prepared = context(1).prepare().unwrap_or_else(|e| panic!("{e}"));
    let schedule = prepared.items()[0].schedule().clone();
    let at = at();
    c.bench_function("penalty/evaluate_one_item", |b| {
        b.iter(|| black_box(&schedule).at(black_box(at)))
    });
    let item = &prepared.items()[0];
    c.bench_function("penalty/preview_line_one_item", |b| {
        b.iter(|| black_box(item).line(black_box(at)))
    });

    let ctx = context(1);
    let currency = Currency::parse("EUR").unwrap_or_else(|e| panic!("{e}"));
    let state = &ctx.items[0];
    let policy = state
        .policy
        .as_ref()
        .map(|p| Policy::parse(p, currency))
        .transpose()
        .unwrap_or_else(|e| panic!("{e}"));
    let start = checkout_engine::time::parse_date_time(
        &state
            .period
            .as_ref()
            .map(|p| p.start.clone())
            .unwrap_or_default(),
        chrono_tz::Europe::Berlin,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    let anchors = Anchors {
        item_zone: chrono_tz::Europe::Berlin,
        provider_zone: chrono_tz::Europe::Berlin,
        start: Some(start),
        paid_at: Some(paid_at()),
    };
    let total = currency.round(state.total);
    c.bench_function("penalty/schedule_one_item", |b| {
        b.iter(|| {
            ItemSchedule::build(black_box(total), policy.as_ref(), black_box(&anchors))
                .map(|schedule| schedule.changes())
        })
    });
}

fn preview(c: &mut Criterion) {
    let ctx = context(10);
    let prepared = ctx.prepare().unwrap_or_else(|e| panic!("{e}"));
    let req = cancel_all(10);
    let at = at();
    c.bench_function("preview/10_items_prepared", |b| {
        b.iter(|| prepared.preview(black_box(&req), black_box(at)))
    });
    c.bench_function("preview/10_items_from_stored_rows", |b| {
        b.iter(|| preview_refund(black_box(&ctx), black_box(&req), black_box(at)))
    });
}

fn validation(c: &mut Criterion) {
    let payload = typical_payload();
    let zone = "Europe/Berlin";
    assert!(
        checkout_engine::validate::checkout_fast(&payload, zone).is_some(),
        "the bench payload must take the fast path"
    );
    let mut group = c.benchmark_group("validate");
    group.throughput(Throughput::Bytes(payload.len() as u64));
    group.bench_function("checkout_fast_path", |b| {
        b.iter(|| checkout_engine::validate::checkout(black_box(&payload), zone))
    });
    group.bench_function("checkout_full_path", |b| {
        b.iter(|| checkout_engine::validate::checkout_full(black_box(&payload), zone))
    });
    group.bench_function("serde_typed_same_bytes", |b| {
        b.iter(|| serde_json::from_slice::<CorporateCheckout>(black_box(&payload)))
    });
    group.bench_function("serde_json_value_same_bytes", |b| {
        b.iter(|| serde_json::from_slice::<serde_json::Value>(black_box(&payload)))
    });
    group.finish();
}

fn lines(c: &mut Criterion) {
    let quote = benches::quote_line();
    let preview = benches::preview_line();
    for (line, answer, write) in [
        (
            &quote,
            checkout_engine::jsonl::quote_line(&quote),
            checkout_engine::jsonl::write_quote_line as fn(&[u8], &mut Vec<u8>),
        ),
        (
            &preview,
            checkout_engine::jsonl::preview_line(&preview),
            checkout_engine::jsonl::write_preview_line,
        ),
    ] {
        assert!(
            answer.get("error").is_none(),
            "bench line refused: {answer} for {}",
            String::from_utf8_lossy(line)
        );
        let mut written = Vec::new();
        write(line, &mut written);
        assert_eq!(
            written,
            serde_json::to_vec(&answer).unwrap_or_default(),
            "the written answer is the value's text"
        );
    }
    let mut group = c.benchmark_group("lines");
    // What `checkout-server quote|preview` does per line: the answer written straight into a
    // buffer that is reused.
    let mut written = Vec::new();
    group.bench_function("quote_line_written", |b| {
        b.iter(|| {
            written.clear();
            checkout_engine::jsonl::write_quote_line(black_box(&quote), &mut written);
        })
    });
    group.bench_function("preview_line_written", |b| {
        b.iter(|| {
            written.clear();
            checkout_engine::jsonl::write_preview_line(black_box(&preview), &mut written);
        })
    });
    // The answer as a JSON value (tests and fixtures use it), by the fast path and the full path.
    group.bench_function("quote_line", |b| {
        b.iter(|| checkout_engine::jsonl::quote_line(black_box(&quote)))
    });
    group.bench_function("quote_line_full_path", |b| {
        b.iter(|| checkout_engine::jsonl::quote_line_full(black_box(&quote)))
    });
    group.bench_function("preview_line", |b| {
        b.iter(|| checkout_engine::jsonl::preview_line(black_box(&preview)))
    });
    group.bench_function("preview_line_full_path", |b| {
        b.iter(|| checkout_engine::jsonl::preview_line_full(black_box(&preview)))
    });
    group.finish();
}

criterion_group!(engine_benches, quote, penalty, preview, validation, lines);
criterion_main!(engine_benches);
