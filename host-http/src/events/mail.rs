//! E-mail: the contract e-mail of the spec (`email.subject`, `email.content`) followed by the
//! items, the total, the cancellation terms and the payment link, and the receipt of each
//! successful cancellation; rendered as plain text with an HTML alternative (the provider's
//! content escaped), sent over SMTP with lettre.

use std::time::Duration;

use lettre::message::header::ContentType;
use lettre::message::{Mailbox, MultiPart, SinglePart};
use lettre::{AsyncSmtpTransport, AsyncTransport, Message, Tokio1Executor};

use crate::i18n::Lang;
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderedMail {
    /// The stable `Message-ID` of the event's e-mail.
    pub message_id: String,
    /// Recipients.
    pub to: Vec<String>,
    /// Subject.
    pub subject: String,
    /// Plain text.
    pub text: String,
    /// HTML alternative.
    pub html: String,
}

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
    let email = record.email.clone().unwrap_or(engine::api::CheckoutEmail {
        recipients: None,
        subject: None,
        content: None,
    });
    let subject = email.subject.unwrap_or_else(|| record.title.clone());
    let content = email.content.unwrap_or_default();
    let total = lang.money(record.total, &record.currency);

    let mut text = String::new();
    if !content.is_empty() {
        text.push_str(&content);
        text.push_str("\n\n");
    }
    text.push_str(&format!(
        "{} — {provider_name}, reference {}\n\n",
        record.title, record.reference
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
            item.name,
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
        escape(&record.title),
        escape(provider_name),
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
            escape(&item.name),
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
    let subject = format!("Cancellation receipt {number}: {}", record.title);
    let name_of = |order: u32| {
        record
            .items
            .iter()
            .find(|item| item.order_no == order)
            .and_then(|item| item.name.clone())
            .unwrap_or_else(|| format!("#{order}"))
    };
    let mut text = format!(
        "Cancellation receipt {number}\n{} — {provider_name}, reference {}\n\n",
        record.title, record.reference
    );
    if let Some(title) = &view.invoice_title {
        text.push_str(&format!("Invoice: {title}\n"));
    }
    if let Some(invoice) = &view.invoice_number {
        text.push_str(&format!("Invoice number: {invoice}\n"));
    }
    let mut rows = String::new();
    for line in &view.items {
        text.push_str(&format!(
            "{}. {}: total {}, penalty {}, refunded {}\n",
            line.order,
            name_of(line.order),
            money(line.total),
            money(line.penalty),
            money(line.refund)
        ));
        rows.push_str(&format!(
            "<tr><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>\n",
            line.order,
            escape(&name_of(line.order)),
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
         <p>{} — {}, reference {}</p>\n<table>\n<tr><th>#</th><th>Item</th><th>Total</th>\
         <th>Penalty</th><th>Refunded</th></tr>\n{rows}</table>\n\
         <p><strong>Refund: {}</strong></p>\n<p>Status of the booking: {}</p>\n</body></html>\n",
        escape(&number),
        escape(&record.title),
        escape(provider_name),
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
