//! E-mail: the contract e-mail of the spec (`email.subject`, `email.content`) followed by the
//! items, the total, the cancellation terms and the payment link, and the receipt of each
//! successful cancellation; rendered as plain text with an HTML alternative (the provider's
//! content escaped), sent over SMTP with lettre.
//!
//! Every short text of a provider shown among the e-mail's own words (title, provider name,
//! item names, invoice title and number) is isolated, so that its direction cannot reorder
//! the amounts and words around it: its explicit bidi controls removed, then between FSI and
//! PDI in the plain text (`isolate`) and in `<bdi>` in the HTML (`bdi`). The subject has its
//! controls removed only (see `docs/DECISIONS-payment-page.md`).

use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::message::{Mailbox, MultiPart, SinglePart};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::i18n::{Lang, isolate, without_bidi_controls};
use crate::store::TransactionRecord;
use crate::store::cancellation::CancellationView;

/// How long one send may take in all by default (`--smtp-timeout-ms`).
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(30);

/// Where mail goes: `--smtp-url` (`smtp://host:port`, `smtp://host:port?tls=required` for
/// STARTTLS, `smtps://host:port`), `--mail-from` and `--smtp-timeout-ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailSettings {
    /// The SMTP server, with credentials if any (`smtps://user:pass@host`).
    pub url: String,
    /// The sender (`Checkout <checkout@example.com>`).
    pub from: String,
    /// How long one send may take in all (connection, TLS, every SMTP command), also the bound
    /// of each command. The outbox lease must be longer (`App::build` checks), so that no other
    /// instance takes over a send still under way.
    pub timeout: Duration,
}

impl MailSettings {
    /// These server and sender, with the default timeout.
    pub fn new(url: impl Into<String>, from: impl Into<String>) -> MailSettings {
        MailSettings {
            url: url.into(),
            from: from.into(),
            timeout: DEFAULT_SEND_TIMEOUT,
        }
    }
}

/// One message, ready to send.
pub use crate::mail::RenderedMail;

/// An SMTP sender.
#[derive(Clone)]
pub struct Mailer {
    transport: AsyncSmtpTransport<Tokio1Executor>,
    from: Mailbox,
    timeout: Duration,
}

impl std::fmt::Debug for Mailer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The URL may hold credentials: never shown.
        f.debug_struct("Mailer")
            .field("from", &self.from.to_string())
            .finish_non_exhaustive()
    }
}

impl Mailer {
    /// A sender for these settings; the URL and sender are checked here, at start-up.
    pub fn new(settings: &MailSettings) -> Result<Mailer, String> {
        let transport = AsyncSmtpTransport::<Tokio1Executor>::from_url(&settings.url)
            .map_err(|e| format!("--smtp-url: {e}"))?
            .timeout(Some(settings.timeout))
            .build();
        let from = settings
            .from
            .parse::<Mailbox>()
            .map_err(|e| format!("--mail-from {:?}: {e}", settings.from))?;
        Ok(Mailer {
            transport,
            from,
            timeout: settings.timeout,
        })
    }

    /// Sends one message to all its recipients.
    pub async fn send(&self, mail: &RenderedMail) -> Result<(), String> {
        let mut builder = Message::builder()
            .from(self.from.clone())
            .subject(mail.subject.clone())
            .message_id(Some(mail.message_id.clone()));
        for address in &mail.to {
            let mailbox = address
                .parse::<Mailbox>()
                .map_err(|e| format!("recipient {address:?}: {e}"))?;
            builder = builder.to(mailbox);
        }
        let message = builder
            .multipart(
                MultiPart::alternative()
                    .singlepart(
                        SinglePart::builder()
                            .header(ContentType::TEXT_PLAIN)
                            .body(mail.text.clone()),
                    )
                    .singlepart(
                        SinglePart::builder()
                            .header(ContentType::TEXT_HTML)
                            .body(mail.html.clone()),
                    ),
            )
            .map_err(|e| format!("message: {e}"))?;
        // lettre bounds each command; this bounds the whole send (a server that answers each
        // command just in time cannot hold it longer than the lease).
        match tokio::time::timeout(self.timeout, self.transport.send(message)).await {
            Ok(sent) => sent.map(|_| ()).map_err(|e| format!("SMTP: {e}")),
            Err(_) => Err(format!(
                "SMTP: not sent within {} ms",
                self.timeout.as_millis()
            )),
        }
    }
}

/// Escapes text for HTML (the provider's content is never markup).
fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            other => out.push(other),
        }
    }
    out
}

/// A provider's text in the HTML part: escaped, explicit bidi controls removed, in `<bdi>`.
fn bdi(text: &str) -> String {
    format!("<bdi>{}</bdi>", escape(&without_bidi_controls(text)))
}

fn paragraphs(text: &str) -> String {
    text.split("\n\n")
        .map(|p| format!("<p>{}</p>", escape(p).replace('\n', "<br>\n")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// One item line of a contract e-mail: name, category, total, and its terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MailItem {
    /// Order number.
    pub order: u32,
    /// Name (or `#order`).
    pub name: String,
    /// Category in words, if any.
    pub category: Option<String>,
    /// Item total, formatted.
    pub total: String,
    /// The cancellation terms, one line each.
    pub terms: Vec<String>,
}

/// The contract e-mail.
pub fn contract(
    record: &TransactionRecord,
    provider_name: &str,
    items: &[MailItem],
    payment_url: Option<&str>,
    message_id: &str,
    to: Vec<String>,
) -> RenderedMail {
    let lang = Lang::En;
    let email = record
        .email
        .clone()
        .unwrap_or(checkout_engine::api::CheckoutEmail {
            recipients: None,
            subject: None,
            content: None,
        });
    let subject =
        without_bidi_controls(email.subject.as_deref().unwrap_or(&record.title)).into_owned();
    let content = email.content.unwrap_or_default();
    let total = lang.money(record.total, &record.currency);

    let mut text = String::new();
    if !content.is_empty() {
        text.push_str(&content);
        text.push_str("\n\n");
    }
    text.push_str(&format!(
        "{} — {}, reference {}\n\n",
        isolate(&record.title),
        isolate(provider_name),
        record.reference
    ));
    for item in items {
        let category = item
            .category
            .as_ref()
            .map(|c| format!(" ({c})"))
            .unwrap_or_default();
        text.push_str(&format!(
            "{}. {}{category}: {}\n   Cancellation terms: {}\n",
            item.order,
            isolate(&item.name),
            item.total,
            item.terms.join("; ")
        ));
    }
    text.push_str(&format!("\nTotal: {total}\n"));
    if let Some(url) = payment_url {
        text.push_str(&format!("\nPay here: {url}\n"));
    }

    let mut html = String::from("<!doctype html><html lang=\"en\"><body>\n");
    if !content.is_empty() {
        html.push_str(&paragraphs(&content));
        html.push('\n');
    }
    html.push_str(&format!(
        "<h2>{} — {}</h2>\n<p>Reference {}</p>\n<ol>\n",
        bdi(&record.title),
        bdi(provider_name),
        escape(&record.reference)
    ));
    for item in items {
        let category = item
            .category
            .as_ref()
            .map(|c| format!(" ({})", escape(c)))
            .unwrap_or_default();
        let terms: Vec<String> = item.terms.iter().map(|t| escape(t)).collect();
        html.push_str(&format!(
            "<li><strong>{}</strong>{category}: {}<br>Cancellation terms: {}</li>\n",
            bdi(&item.name),
            escape(&item.total),
            terms.join("; ")
        ));
    }
    html.push_str(&format!(
        "</ol>\n<p><strong>Total: {}</strong></p>\n",
        escape(&total)
    ));
    if let Some(url) = payment_url {
        html.push_str(&format!(
            "<p><a href=\"{}\">Pay here</a>: {}</p>\n",
            escape(url),
            escape(url)
        ));
    }
    html.push_str("</body></html>\n");
    RenderedMail {
        message_id: message_id.to_owned(),
        to,
        subject,
        text,
        html,
    }
}

/// The receipt of a successful cancellation.
pub fn receipt(
    record: &TransactionRecord,
    provider_name: &str,
    view: &CancellationView,
    message_id: &str,
    to: Vec<String>,
) -> RenderedMail {
    let lang = Lang::En;
    let money = |amount| lang.money(amount, &view.currency);
    let number = view.receipt_number.clone().unwrap_or_default();
    let subject = format!(
        "Cancellation receipt {number}: {}",
        without_bidi_controls(&record.title)
    );
    let name_of = |order: u32| {
        record
            .items
            .iter()
            .find(|item| item.order_no == order)
            .and_then(|item| item.name.clone())
            .unwrap_or_else(|| format!("#{order}"))
    };
    let mut text = format!(
        "Cancellation receipt {number}\n{} — {}, reference {}\n\n",
        isolate(&record.title),
        isolate(provider_name),
        record.reference
    );
    // The invoice the provider named, in both parts (each text isolated as every provider
    // text is: DECISIONS-payment-page).
    let mut invoice_html = String::new();
    if let Some(title) = &view.invoice_title {
        text.push_str(&format!("Invoice: {}\n", isolate(title)));
        invoice_html.push_str(&format!("<p>Invoice: {}</p>\n", bdi(title)));
    }
    if let Some(invoice) = &view.invoice_number {
        text.push_str(&format!("Invoice number: {}\n", isolate(invoice)));
        invoice_html.push_str(&format!("<p>Invoice number: {}</p>\n", bdi(invoice)));
    }
    let mut rows = String::new();
    for line in &view.items {
        text.push_str(&format!(
            "{}. {}: total {}, penalty {}, refunded {}\n",
            line.order,
            isolate(&name_of(line.order)),
            money(line.total),
            money(line.penalty),
            money(line.refund)
        ));
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            line.order,
            bdi(&name_of(line.order)),
            escape(&money(line.total)),
            escape(&money(line.penalty)),
            escape(&money(line.refund))
        ));
    }
    text.push_str(&format!(
        "\nRefund: {}\nStatus of the booking: {}\n",
        money(view.refund),
        view.transaction_status.as_str()
    ));
    let html = format!(
        "<!doctype html><html lang=\"en\"><body>\n<h2>Cancellation receipt {}</h2>\n\
         <p>{} — {}, reference {}</p>\n{invoice_html}<table>\n<tr><th>#</th><th>Item</th><th>Total</th>\
         <th>Penalty</th><th>Refunded</th></tr>\n{rows}</table>\n\
         <p><strong>Refund: {}</strong></p>\n<p>Status of the booking: {}</p>\n</body></html>\n",
        escape(&number),
        bdi(&record.title),
        bdi(provider_name),
        escape(&record.reference),
        escape(&money(view.refund)),
        view.transaction_status.as_str()
    );
    RenderedMail {
        message_id: message_id.to_owned(),
        to,
        subject,
        text,
        html,
    }
}

impl crate::mail::SendMail for Mailer {
    fn send_mail<'a>(
        &'a self,
        mail: &'a RenderedMail,
    ) -> futures_util::future::BoxFuture<'a, Result<(), String>> {
        Box::pin(self.send(mail))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn html_never_carries_the_providers_markup() {
        assert_eq!(
            paragraphs("Hello <b>you</b>\nline two\n\nnext & last"),
            "<p>Hello &lt;b&gt;you&lt;/b&gt;<br>\nline two</p>\n<p>next &amp; last</p>"
        );
    }

    /// A transaction whose title, provider and item names carry every explicit bidi control.
    fn hostile_record() -> TransactionRecord {
        TransactionRecord {
            id: "0190a0a0-0000-7000-8000-000000000001".to_owned(),
            provider_id: "p".to_owned(),
            reference: "CHK-ABC123".to_owned(),
            status: checkout_engine::api::TransactionStatus::Pending,
            title: "Trip \u{202E}gnp.exe\u{202C} to \u{2067}Tel Aviv".to_owned(),
            currency: "EUR".to_owned(),
            ref_ids: Default::default(),
            note: None,
            attachments: Vec::new(),
            email: None,
            payload: String::new(),
            time_zone: None,
            total: rust_decimal::Decimal::new(11900, 2),
            paid_amount: None,
            refunded_amount: rust_decimal::Decimal::ZERO,
            paid_at: None,
            payment: None,
            items: vec![crate::store::ItemRecord {
                order_no: 1,
                name: Some("\u{202D}Flight\u{2069}\u{202B}\u{202A}\u{2066}\u{2068}".to_owned()),
                category: None,
                total: rust_decimal::Decimal::new(11900, 2),
                policy: None,
                period: None,
                status: checkout_engine::api::ItemStatus::Active,
                refunded: rust_decimal::Decimal::ZERO,
            }],
            cancellations: Vec::new(),
            created_at: String::new(),
            updated_at: String::new(),
            payment_link_expires_at: None,
            mails: Vec::new(),
            version: 0,
        }
    }

    #[test]
    fn provider_texts_are_isolated_and_carry_no_bidi_controls() {
        let item = MailItem {
            order: 1,
            name: hostile_record().items[0].name.clone().unwrap(),
            category: Some("Flight".to_owned()),
            total: "EUR 119.00".to_owned(),
            terms: vec!["Free cancellation at any time".to_owned()],
        };
        let mail = contract(
            &hostile_record(),
            "Acme \u{202E}lavarT",
            &[item],
            Some("https://pay.example.com/base/pay/t"),
            "<m@x>",
            vec!["ada@example.com".to_owned()],
        );
        let controls = |text: &str| {
            text.chars()
                .filter(|c| crate::i18n::is_bidi_control(*c))
                .collect::<String>()
        };
        // The text: no control of the provider's left, each text between FSI and PDI.
        let isolates = mail.text.replace(['\u{2068}', '\u{2069}'], "");
        assert_eq!(controls(&isolates), "", "{:?}", mail.text);
        for isolated in [
            "\u{2068}Trip gnp.exe to Tel Aviv\u{2069} — \u{2068}Acme lavarT\u{2069}, reference CHK-ABC123",
            "1. \u{2068}Flight\u{2069} (Flight): EUR 119.00",
            "Pay here: https://pay.example.com/base/pay/t",
        ] {
            assert!(
                mail.text.contains(isolated),
                "{isolated:?} in {:?}",
                mail.text
            );
        }
        // Every FSI closed by its PDI, nothing else.
        assert_eq!(
            controls(&mail.text),
            "\u{2068}\u{2069}".repeat(3),
            "{:?}",
            mail.text
        );
        // The HTML: in <bdi>, no control at all.
        assert_eq!(controls(&mail.html), "", "{:?}", mail.html);
        for isolated in [
            "<h2><bdi>Trip gnp.exe to Tel Aviv</bdi> — <bdi>Acme lavarT</bdi></h2>",
            "<li><strong><bdi>Flight</bdi></strong> (Flight): EUR 119.00",
        ] {
            assert!(
                mail.html.contains(isolated),
                "{isolated:?} in {:?}",
                mail.html
            );
        }
        // The subject (the title here): controls removed.
        assert_eq!(mail.subject, "Trip gnp.exe to Tel Aviv");
    }

    /// The invoice the provider named is in the receipt's HTML part as in its text, isolated.
    #[test]
    fn a_receipt_names_its_invoice_in_both_parts() {
        let record = hostile_record();
        let view = CancellationView {
            refund_id: "r".to_owned(),
            transaction_id: record.id.clone(),
            provider_id: "p".to_owned(),
            transaction_reference: record.reference.clone(),
            outcome: "SUCCESS".to_owned(),
            error_message: None,
            receipt_number: Some("CR-000001".to_owned()),
            items: Vec::new(),
            refund: rust_decimal::Decimal::new(11900, 2),
            currency: "EUR".to_owned(),
            payment_reference: None,
            invoice_title: Some("Storno \u{202E}<b>".to_owned()),
            invoice_number: Some("INV-17".to_owned()),
            invoice_file: None,
            transaction_status: checkout_engine::api::TransactionStatus::Cancelled,
            gateway_reference: None,
            requested_at: String::new(),
            completed_at: None,
        };
        let mail = receipt(
            &record,
            "Acme",
            &view,
            "<m@x>",
            vec!["a@example.com".to_owned()],
        );
        assert!(
            mail.text.contains("Invoice: \u{2068}Storno <b>\u{2069}"),
            "{}",
            mail.text
        );
        assert!(mail.text.contains("Invoice number: \u{2068}INV-17\u{2069}"));
        assert!(
            mail.html
                .contains("<p>Invoice: <bdi>Storno &lt;b&gt;</bdi></p>"),
            "{}",
            mail.html
        );
        assert!(
            mail.html
                .contains("<p>Invoice number: <bdi>INV-17</bdi></p>")
        );
    }

    // The transport's pool runs on the runtime, as in the server.
    #[tokio::test]
    async fn a_bad_sender_or_url_is_refused_at_start() {
        assert!(
            Mailer::new(&MailSettings::new(
                "smtp://127.0.0.1:2525",
                "Checkout <checkout@example.com>"
            ))
            .is_ok()
        );
        assert!(
            Mailer::new(&MailSettings::new(
                "smtp://127.0.0.1:2525",
                "not an address"
            ))
            .is_err()
        );
        assert!(Mailer::new(&MailSettings::new("gopher://x", "a@example.com")).is_err());
    }
}
