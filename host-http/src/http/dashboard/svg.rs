//! The dashboard's drawings, as inline SVG: the QR code of a second factor's set-up, an
//! item's cancellation terms over time, and the overview's bars. Only numbers, dates and words
//! the service made go into them; whole pixels and exact decimals (no floating point).

use chrono::{DateTime, Utc};

use super::texts::DashTexts;

/// `text` (an `otpauth://` URL) as a QR code in SVG, `label` its accessible name: only the
/// code's geometry and our own words go into it.
pub(super) fn qr_svg(text: &str, label: &str) -> Option<String> {
    use std::fmt::Write as _;
    let qr = qrcodegen::QrCode::encode_text(text, qrcodegen::QrCodeEcc::Medium).ok()?;
    let border = 4;
    let dim = qr.size() + 2 * border;
    let mut path = String::new();
    for y in 0..qr.size() {
        for x in 0..qr.size() {
            if qr.get_module(x, y) {
                let _ = write!(path, "M{},{}h1v1h-1z", x + border, y + border);
            }
        }
    }
    Some(format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"qr\" viewBox=\"0 0 {dim} {dim}\" \
         width=\"200\" height=\"200\" role=\"img\" aria-label=\"{label}\" \
         shape-rendering=\"crispEdges\"><rect width=\"{dim}\" height=\"{dim}\" fill=\"#fff\"/>\
         <path d=\"{path}\" fill=\"#000\"/></svg>"
    ))
}

/// An item's terms drawn from `start` (the payment) on: a bar per period (free, then each
/// penalty step, darker as the penalty grows), the date under each change, and a marker at
/// `now`. Decorative (`aria-hidden`): the same terms are beside it in words. Only numbers and
/// dates the service made go into it.
pub(super) fn timeline(
    terms: &checkout_engine::terms::ItemTerms,
    start: DateTime<Utc>,
    now: DateTime<Utc>,
    t: &DashTexts,
) -> String {
    use checkout_engine::terms::Terms;
    use rust_decimal::Decimal;
    // Whole pixels: no floating point in this code base.
    const WIDTH: i64 = 560;
    const LEFT: i64 = 10;
    // (from, penalty share of the total 0..=1)
    let mut periods: Vec<(DateTime<Utc>, Decimal)> = Vec::new();
    let share = |penalty: Decimal| {
        if terms.total.is_zero() {
            Decimal::ZERO
        } else {
            penalty / terms.total
        }
    };
    match &terms.terms {
        Terms::FreeAtAnyTime => periods.push((start, Decimal::ZERO)),
        Terms::NonRefundable => periods.push((start, Decimal::ONE)),
        Terms::Schedule { free_until, steps } => {
            if free_until.is_some() {
                periods.push((start, Decimal::ZERO));
            }
            for step in steps {
                periods.push((step.from.max(start), share(step.penalty)));
            }
        }
    }
    // One equal segment per period (a free week and a penalty of the last day read alike
    // whatever the years between them); the last one is open-ended.
    let count = i64::try_from(periods.len().max(1)).unwrap_or(1);
    let segment = WIDTH / count;
    let x = |at: DateTime<Utc>| {
        let i = periods
            .iter()
            .rposition(|(from, _)| *from <= at)
            .unwrap_or(0);
        let within = match periods.get(i + 1) {
            Some((next, _)) => {
                let length = (*next - periods[i].0).num_seconds().max(1);
                let elapsed = (at - periods[i].0).num_seconds().clamp(0, length);
                segment.saturating_mul(elapsed) / length
            }
            None => segment / 4,
        };
        LEFT + segment * i64::try_from(i).unwrap_or(0) + within
    };
    let mut svg = String::from(
        "<svg class=\"timeline\" viewBox=\"0 0 580 64\" width=\"580\" height=\"64\" \
         aria-hidden=\"true\" focusable=\"false\" xmlns=\"http://www.w3.org/2000/svg\">",
    );
    for (i, (from, share)) in periods.iter().enumerate() {
        let index = i64::try_from(i).unwrap_or(0);
        let (x0, x1) = (LEFT + segment * index, LEFT + segment * (index + 1));
        // Green when free; from amber to dark red as the penalty nears the total.
        let half = Decimal::new(5, 1);
        let fill = match *share {
            s if s <= Decimal::ZERO => "#00703c",
            s if s < half => "#b35c00",
            s if s < Decimal::ONE => "#b10e1e",
            _ => "#5a0710",
        };
        svg.push_str(&format!(
            "<rect x=\"{x0}\" y=\"8\" width=\"{}\" height=\"18\" fill=\"{fill}\"/>",
            x1 - x0
        ));
        let label = if share.is_zero() {
            t.free.to_owned()
        } else {
            format!("{} %", (share * Decimal::ONE_HUNDRED).round_dp(0))
        };
        svg.push_str(&format!(
            "<text x=\"{}\" y=\"21\" font-size=\"11\" fill=\"#fff\">{label}</text>\
             <line x1=\"{x0}\" y1=\"26\" x2=\"{x0}\" y2=\"34\" stroke=\"#1d2330\"/>\
             <text x=\"{x0}\" y=\"46\" font-size=\"10\" fill=\"#1d2330\">{}</text>",
            x0 + 4,
            from.with_timezone(&terms.zone).format("%Y-%m-%d %H:%M")
        ));
    }
    let nx = x(now);
    svg.push_str(&format!(
        "<line x1=\"{nx}\" y1=\"2\" x2=\"{nx}\" y2=\"32\" stroke=\"#1a4fb8\" stroke-width=\"3\"/>\
         <text x=\"{nx}\" y=\"60\" font-size=\"11\" font-weight=\"700\" fill=\"#1a4fb8\">{}</text></svg>",
        t.now
    ));
    svg
}

/// Bars of `values` (one a day, oldest first) scaled to the highest, as SVG; whole pixels,
/// exact decimal ratios.
pub(super) fn bar_chart(values: &[rust_decimal::Decimal]) -> String {
    use rust_decimal::Decimal;
    use rust_decimal::prelude::ToPrimitive as _;
    const HEIGHT: i64 = 80;
    const BAR: usize = 14;
    let highest = values.iter().copied().max().unwrap_or_default();
    let mut svg = format!(
        "<svg class=\"chart\" viewBox=\"0 0 {w} {h}\" width=\"{w}\" height=\"{h}\" \
         aria-hidden=\"true\" focusable=\"false\" xmlns=\"http://www.w3.org/2000/svg\">\
         <line x1=\"0\" y1=\"{HEIGHT}\" x2=\"{w}\" y2=\"{HEIGHT}\" stroke=\"#4a5263\"/>",
        w = values.len() * (BAR + 2),
        h = HEIGHT + 1
    );
    for (i, value) in values.iter().enumerate() {
        let height = if highest > Decimal::ZERO {
            (*value * Decimal::from(HEIGHT) / highest)
                .round()
                .to_i64()
                .unwrap_or(0)
                .max(i64::from(!value.is_zero()))
        } else {
            0
        };
        svg.push_str(&format!(
            "<rect x=\"{}\" y=\"{}\" width=\"{BAR}\" height=\"{height}\" fill=\"#1a4fb8\"/>",
            i * (BAR + 2),
            HEIGHT - height
        ));
    }
    svg.push_str("</svg>");
    svg
}

#[cfg(test)]
mod tests {
    use super::*;
    use rust_decimal::Decimal;

    /// Bars scale to the highest value in whole pixels; a value above zero, however small,
    /// shows at least one pixel, and zero none.
    #[test]
    fn bars_scale_to_the_highest_in_whole_pixels() {
        let values = [
            Decimal::ZERO,
            Decimal::new(5, 0),
            Decimal::new(10, 0),
            Decimal::new(1, 2),
        ];
        let svg = bar_chart(&values);
        let heights: Vec<&str> = svg
            .split("height=\"")
            .skip(2)
            .map(|rest| &rest[..rest.find('"').unwrap()])
            .collect();
        assert_eq!(heights, ["0", "40", "80", "1"], "{svg}");
        assert_eq!(
            bar_chart(&[Decimal::ZERO; 3])
                .matches("height=\"0\"")
                .count(),
            3
        );
    }

    /// The QR code names itself for assistive technology and holds only its geometry.
    #[test]
    fn the_qr_code_is_labelled() {
        let svg = qr_svg(
            "otpauth://totp/Checkout:ada?secret=JBSWY3DPEHPK3PXP",
            "Scan me",
        )
        .expect("encodes");
        assert!(svg.contains("role=\"img\" aria-label=\"Scan me\""), "{svg}");
        assert!(!svg.contains("JBSWY3DPEHPK3PXP"));
    }
}
