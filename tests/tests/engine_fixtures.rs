//! Data-driven engine cases: `fixtures/quotes/*.json` and `fixtures/penalties/*.json`
//! each an input line of `checkout-server quote|preview` and the expected
//! answer, worked out by hand from the rulings.

use tests::{check_dir, fixtures_dir, through_line};

#[test]
fn quote_fixtures_r_2() {
    let checked = check_dir(&fixtures_dir().join("quotes"), |input| {
        through_line(checkout_engine::jsonl::quote_line, input)
    });
    assert!(checked >= 8, "only {checked} quote fixtures");
}

#[test]
fn penalty_fixtures_r_5() {
    let checked = check_dir(&fixtures_dir().join("penalties"), |input| {
        through_line(checkout_engine::jsonl::preview_line, input)
    });
    assert!(checked >= 40, "only {checked} penalty fixtures");
}
