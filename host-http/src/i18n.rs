//! The two languages of what customers read — the payment page and the e-mails — English and
//! German: the reader's choice (`?lang=`, then `Accept-Language`), every text, and amounts,
//! percentages and instants written the way a reader of that language expects.

use checkout_engine::api::{AttachmentType, Category, QuantityUnit};
use checkout_engine::terms::Terms;
use chrono::{DateTime, Datelike, Timelike, Utc, Weekday};
use chrono_tz::Tz;
use rust_decimal::Decimal;

use crate::app::payments::{Field, FieldProblem};

/// A language of the page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lang {
    /// English (the default).
    En,
    /// German.
    De,
}

impl Lang {
    /// The BCP 47 tag, for `lang` attributes and `Content-Language`.
    pub fn tag(self) -> &'static str {
        match self {
            Lang::En => "en",
            Lang::De => "de",
        }
    }

    /// `?lang=` wins when it names a language of the page; else the first language of
    /// `Accept-Language` by weight that the page speaks; else English.
    pub fn choose(query: Option<&str>, accept_language: Option<&str>) -> Lang {
        if let Some(lang) = query.and_then(Lang::parse) {
            return lang;
        }
        let Some(header) = accept_language else {
            return Lang::En;
        };
        let mut best: Option<(u32, Lang)> = None;
        for entry in header.split(',') {
            let mut parts = entry.split(';');
            let tag = parts.next().unwrap_or_default().trim();
            let weight = parts
                .find_map(|p| p.trim().strip_prefix("q="))
                .map_or(1000, parse_weight);
            let Some(lang) = Lang::parse(tag) else {
                continue;
            };
            // Ties keep the earlier entry (the header's order).
            if weight > 0 && best.is_none_or(|(w, _)| weight > w) {
                best = Some((weight, lang));
            }
        }
        best.map_or(Lang::En, |(_, lang)| lang)
    }

    fn parse(tag: &str) -> Option<Lang> {
        let primary = tag.split(['-', '_']).next().unwrap_or_default();
        if primary.eq_ignore_ascii_case("de") {
            Some(Lang::De)
        } else if primary.eq_ignore_ascii_case("en") {
            Some(Lang::En)
        } else {
            None
        }
    }

    /// The page's texts in this language.
    pub fn texts(self) -> &'static Texts {
        match self {
            Lang::En => &EN,
            Lang::De => &DE,
        }
    }

    /// An amount at the currency's minor unit, with digit grouping:
    /// `EUR 1,234.50` (English), `1.234,50 EUR` (German).
    pub fn money(self, amount: Decimal, currency: &str) -> String {
        let scale = checkout_engine::money::minor_units(currency).unwrap_or(2);
        let number = self.number(checkout_engine::money::round_to_scale(amount, scale), true);
        match self {
            Lang::En => format!("{currency} {number}"),
            Lang::De => format!("{number} {currency}"),
        }
    }

    /// A percentage as written in the policy: `50 %`, `12.5 %` / `12,5 %`.
    pub fn percent(self, value: Decimal) -> String {
        format!("{} %", self.number(value.normalize(), false))
    }

    /// A plain number (quantities).
    pub fn quantity(self, value: Decimal) -> String {
        self.number(value.normalize(), false)
    }

    fn number(self, value: Decimal, group: bool) -> String {
        let (thousands, decimal) = match self {
            Lang::En => (',', '.'),
            Lang::De => ('.', ','),
        };
        let text = value.abs().to_string();
        let (whole, fraction) = text.split_once('.').unwrap_or((&text, ""));
        let mut grouped = String::with_capacity(whole.len() + whole.len() / 3);
        for (i, digit) in whole.chars().enumerate() {
            if group && i > 0 && (whole.len() - i) % 3 == 0 {
                grouped.push(thousands);
            }
            grouped.push(digit);
        }
        let sign = if value.is_sign_negative() && !value.is_zero() {
            "-"
        } else {
            ""
        };
        if fraction.is_empty() {
            format!("{sign}{grouped}")
        } else {
            format!("{sign}{grouped}{decimal}{fraction}")
        }
    }

    /// An instant on the wall clock of `zone`, with the zone named:
    /// `Tue 1 Dec 2026, 15:00 (Europe/Berlin)` / `Di. 1. Dez. 2026, 15:00 (Europe/Berlin)`.
    pub fn instant(self, at: DateTime<Utc>, zone: Tz) -> String {
        let local = at.with_timezone(&zone);
        let texts = self.texts();
        let weekday = texts.weekdays[weekday_index(local.weekday())];
        let month = texts.months[local.month0() as usize];
        let (day, year, hour, minute) = (local.day(), local.year(), local.hour(), local.minute());
        match self {
            Lang::En => format!("{weekday} {day} {month} {year}, {hour:02}:{minute:02} ({zone})"),
            Lang::De => format!("{weekday} {day}. {month} {year}, {hour:02}:{minute:02} ({zone})"),
        }
    }

    /// An item's cancellation terms in plain words, one line each, instants on the wall clock
    /// of `zone`: "Free cancellation until …", "from …: 50 % charged (EUR 40.00)".
    pub fn terms(self, terms: &Terms, zone: Tz, currency: &str) -> Vec<String> {
        let t = self.texts();
        match terms {
            Terms::FreeAtAnyTime => vec![t.free_any_time.to_owned()],
            Terms::NonRefundable => vec![t.non_refundable.to_owned()],
            Terms::Schedule { free_until, steps } => {
                let mut lines = Vec::with_capacity(steps.len() + 1);
                if let Some(until) = free_until {
                    lines.push(t.free_until.replace("{at}", &self.instant(*until, zone)));
                }
                for (i, step) in steps.iter().enumerate() {
                    let amount = self.money(step.penalty, currency);
                    let charge = match step.percent {
                        Some(percent) => t
                            .charged_percent
                            .replace("{percent}", &self.percent(percent))
                            .replace("{amount}", &amount),
                        None => t.charged_amount.replace("{amount}", &amount),
                    };
                    let template = if i == 0 && free_until.is_none() {
                        t.step_now
                    } else {
                        t.step_from
                    };
                    lines.push(
                        template
                            .replace("{at}", &self.instant(step.from, zone))
                            .replace("{charge}", &charge),
                    );
                }
                lines
            }
        }
    }

    /// The name of an item category.
    pub fn category(self, category: Category) -> &'static str {
        let texts = self.texts();
        match category {
            Category::Flight => texts.categories[0],
            Category::Accommodation => texts.categories[1],
            Category::Rail => texts.categories[2],
            Category::Bus => texts.categories[3],
            Category::Ferry => texts.categories[4],
            Category::CarRental => texts.categories[5],
            Category::Transfer => texts.categories[6],
            Category::Event => texts.categories[7],
            Category::MeetingRoom => texts.categories[8],
            Category::Fee => texts.categories[9],
            Category::Other => texts.categories[10],
        }
    }

    /// A quantity unit, after the number (`2 per night`).
    pub fn unit(self, unit: QuantityUnit) -> &'static str {
        let texts = self.texts();
        match unit {
            QuantityUnit::FlatFee => texts.units[0],
            QuantityUnit::PerHour => texts.units[1],
            QuantityUnit::PerDay => texts.units[2],
            QuantityUnit::PerNight => texts.units[3],
            QuantityUnit::PerWeek => texts.units[4],
            QuantityUnit::PerMonth => texts.units[5],
            QuantityUnit::PerYear => texts.units[6],
            QuantityUnit::PerPerson => texts.units[7],
        }
    }

    /// What an attachment is, as the link's text.
    pub fn attachment(self, kind: Option<AttachmentType>) -> &'static str {
        let texts = self.texts();
        match kind {
            Some(AttachmentType::Invoice) => texts.attachments[0],
            Some(AttachmentType::Proposal) => texts.attachments[1],
            Some(AttachmentType::TermsConditions) => texts.attachments[2],
            Some(AttachmentType::Pictures) => texts.attachments[3],
            Some(AttachmentType::HeaderImage) => texts.attachments[4],
            Some(AttachmentType::Other) | None => texts.attachments[5],
        }
    }

    /// A form field's label.
    pub fn label(self, field: Field) -> &'static str {
        self.texts().labels[field_index(field)]
    }

    /// The message of a refused field, naming the field.
    pub fn problem(self, field: Field, problem: FieldProblem) -> String {
        let texts = self.texts();
        let label = self.label(field);
        match problem {
            FieldProblem::Required => texts.required.replace("{field}", label),
            FieldProblem::TooLong => texts.too_long.replace("{field}", label),
            FieldProblem::ControlCharacters => texts.control_characters.replace("{field}", label),
            FieldProblem::CardNumber => texts.card_number_invalid.to_owned(),
            FieldProblem::ExpiryFormat => texts.expiry_format.to_owned(),
            FieldProblem::Expired => texts.expiry_past.to_owned(),
            FieldProblem::Cvc => texts.cvc_invalid.to_owned(),
            FieldProblem::Email => texts.email_invalid.to_owned(),
        }
    }
}

fn parse_weight(text: &str) -> u32 {
    // q-values have at most three decimals (RFC 9110 §12.4.2): read as thousandths.
    let text = text.trim();
    let (whole, fraction) = text.split_once('.').unwrap_or((text, ""));
    let whole: u32 = whole.parse().unwrap_or(0).min(1);
    let mut thousandths = 0;
    for (i, digit) in fraction.chars().take(3).enumerate() {
        let Some(d) = digit.to_digit(10) else {
            return 0;
        };
        thousandths += d * [100, 10, 1][i];
    }
    (whole * 1000 + thousandths).min(1000)
}

fn weekday_index(day: Weekday) -> usize {
    day.num_days_from_monday() as usize
}

fn field_index(field: Field) -> usize {
    match field {
        Field::NameOnCard => 0,
        Field::CardNumber => 1,
        Field::Expiry => 2,
        Field::Cvc => 3,
        Field::FirstName => 4,
        Field::LastName => 5,
        Field::Email => 6,
        Field::BillingName => 7,
    }
}

/// Every text of the page in one language.
#[derive(Debug)]
pub struct Texts {
    /// Abbreviated weekdays, Monday first.
    pub weekdays: [&'static str; 7],
    /// Abbreviated months, January first.
    pub months: [&'static str; 12],
    /// Categories in the order of.
    pub categories: [&'static str; 11],
    /// Quantity units in the spec's order.
    pub units: [&'static str; 8],
    /// Attachment kinds in the spec's order, then a generic "document".
    pub attachments: [&'static str; 6],
    /// Field labels in [`Field`] order.
    pub labels: [&'static str; 8],
    /// `{field}` is required.
    pub required: &'static str,
    /// `{field}` is too long.
    pub too_long: &'static str,
    /// `{field}` holds a control character.
    pub control_characters: &'static str,
    /// Not a card number.
    pub card_number_invalid: &'static str,
    /// Not MM/YY.
    pub expiry_format: &'static str,
    /// Expired card.
    pub expiry_past: &'static str,
    /// Not 3–4 digits.
    pub cvc_invalid: &'static str,
    /// Not an e-mail address.
    pub email_invalid: &'static str,
    /// Hint under the card number in sandbox mode.
    pub card_number_hint: &'static str,
    /// Hint under the expiry.
    pub expiry_hint: &'static str,
    /// Hint under the CVC.
    pub cvc_hint: &'static str,
    /// Hint under the billing name.
    pub billing_name_hint: &'static str,
    /// The link that skips to the main content.
    pub skip_link: &'static str,
    /// The sandbox banner's strong word.
    pub sandbox: &'static str,
    /// The sandbox banner's sentence.
    pub sandbox_banner: &'static str,
    /// Heading of the sandbox test cards.
    pub sandbox_cards_heading: &'static str,
    /// The sandbox test cards, one sentence each.
    pub sandbox_cards: [&'static str; 3],
    /// "Checkout reference".
    pub reference: &'static str,
    /// "Checkout from {provider}".
    pub from_provider: &'static str,
    /// Heading of the items.
    pub items_heading: &'static str,
    /// "Quantity".
    pub quantity: &'static str,
    /// "Net price".
    pub net: &'static str,
    /// A tax line: "VAT".
    pub tax: &'static str,
    /// "Item total".
    pub item_total: &'static str,
    /// "Total".
    pub total: &'static str,
    /// "Period".
    pub period: &'static str,
    /// Heading of an item's terms.
    pub terms_heading: &'static str,
    /// No penalty ever.
    pub free_any_time: &'static str,
    /// Nothing refundable.
    pub non_refundable: &'static str,
    /// Free until `{at}`.
    pub free_until: &'static str,
    /// From `{at}`: `{charge}`.
    pub step_from: &'static str,
    /// A percentage penalty: `{percent}` charged (`{amount}`).
    pub charged_percent: &'static str,
    /// A fixed penalty: `{amount}` charged.
    pub charged_amount: &'static str,
    /// Already in effect: `{charge}`.
    pub step_now: &'static str,
    /// Heading of the attachments.
    pub attachments_heading: &'static str,
    /// Heading of the form.
    pub pay_heading: &'static str,
    /// Legend of the card fields.
    pub card_legend: &'static str,
    /// Legend of the customer fields.
    pub customer_legend: &'static str,
    /// "Pay {amount}".
    pub pay_button: &'static str,
    /// Heading of the error summary.
    pub problem_heading: &'static str,
    /// Prefix of a field's error, for screen readers.
    pub error_prefix: &'static str,
    /// The card was declined: try again.
    pub declined_hint: &'static str,
    /// The form was stale or forged.
    pub form_expired: &'static str,
    /// The form was posted from another site (its `Origin` or `Sec-Fetch-Site`).
    pub form_elsewhere: &'static str,
    /// Too many failed attempts.
    pub too_many_attempts: &'static str,
    /// Another payment of the same page is being processed (another tab, a double click).
    pub attempt_in_progress: &'static str,
    /// Items were voided while the card was being charged: the charge was given back.
    pub amount_changed: &'static str,
    /// Cards are not taken on this server.
    pub cards_not_accepted: &'static str,
    /// "The link works until {at}".
    pub link_expires: &'static str,
    /// Confirmation heading.
    pub paid_heading: &'static str,
    /// Confirmation sentence.
    pub paid_text: &'static str,
    /// "Amount paid".
    pub amount_paid: &'static str,
    /// "Payment reference".
    pub payment_reference: &'static str,
    /// Link to the terms from the confirmation.
    pub terms_link: &'static str,
    /// Expired link heading.
    pub expired_heading: &'static str,
    /// Expired link text.
    pub expired_text: &'static str,
    /// Cancelled heading.
    pub cancelled_heading: &'static str,
    /// Cancelled text.
    pub cancelled_text: &'static str,
    /// Unknown link heading.
    pub not_found_heading: &'static str,
    /// Unknown link text.
    pub not_found_text: &'static str,
    /// Failure heading.
    pub failure_heading: &'static str,
    /// Failure text.
    pub failure_text: &'static str,
    /// Name of the language link to the other language.
    pub other_language: &'static str,
    /// Footer text.
    pub footer: &'static str,
}

static EN: Texts = Texts {
    weekdays: ["Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun"],
    months: [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ],
    categories: [
        "Flight",
        "Accommodation",
        "Rail",
        "Bus",
        "Ferry",
        "Car rental",
        "Transfer",
        "Event",
        "Meeting room",
        "Fee",
        "Other",
    ],
    units: [
        "flat fee",
        "per hour",
        "per day",
        "per night",
        "per week",
        "per month",
        "per year",
        "per person",
    ],
    attachments: [
        "Invoice",
        "Proposal",
        "Terms and conditions",
        "Pictures",
        "Header image",
        "Document",
    ],
    labels: [
        "Name on card",
        "Card number",
        "Expiry (MM/YY)",
        "CVC",
        "First name",
        "Last name",
        "E-mail",
        "Billing name",
    ],
    required: "Enter the {field}",
    too_long: "{field} must be 2,000 characters or fewer",
    control_characters: "{field} must not contain control characters",
    card_number_invalid: "Enter a valid card number",
    expiry_format: "Enter the expiry date as MM/YY, for example 04/29",
    expiry_past: "The card has expired: check the expiry date",
    cvc_invalid: "Enter the 3 or 4 digit security code (CVC)",
    email_invalid: "Enter an e-mail address like name@example.com",
    card_number_hint: "The long number on the front of the card",
    expiry_hint: "For example, 04/29",
    cvc_hint: "The last 3 digits on the back of the card, or 4 on the front",
    billing_name_hint: "Optional: the name on the invoice, if not your own",
    skip_link: "Skip to main content",
    sandbox: "Sandbox",
    sandbox_banner: "Test mode: no real payment is made and no card is charged.",
    sandbox_cards_heading: "Test cards",
    sandbox_cards: [
        "4242 4242 4242 4242 succeeds.",
        "4000 0000 0000 0002 is declined.",
        "Use any future expiry date and any 3-digit CVC.",
    ],
    reference: "Checkout reference",
    from_provider: "Checkout from",
    items_heading: "What you are buying",
    quantity: "Quantity",
    net: "Net price",
    tax: "VAT",
    item_total: "Item total",
    total: "Total to pay",
    period: "When",
    terms_heading: "Cancellation terms",
    free_any_time: "Free cancellation at any time",
    non_refundable: "Non-refundable",
    free_until: "Free cancellation until {at}",
    step_from: "from {at}: {charge}",
    charged_percent: "{percent} charged ({amount})",
    charged_amount: "{amount} charged",
    step_now: "now: {charge}",
    attachments_heading: "Documents",
    pay_heading: "Pay by card",
    card_legend: "Card details",
    customer_legend: "Your details",
    pay_button: "Pay {amount}",
    problem_heading: "There is a problem",
    error_prefix: "Error:",
    declined_hint: "Your card was declined. No money was taken. Try again or use another card.",
    form_expired: "This form has expired. Check your details and submit it again.",
    form_elsewhere: "This form was not sent from this payment page, so nothing was charged. Fill it in here to pay.",
    too_many_attempts: "Too many failed payment attempts. For your security, try again in an hour.",
    attempt_in_progress: "A payment for this checkout is already being processed. Wait a moment, then reload this page.",
    amount_changed: "The amount due changed while your card was being charged, so the charge was given back. Check the new total, then pay again.",
    cards_not_accepted: "Card payments are not taken on this page. Contact the provider to pay.",
    link_expires: "This payment link works until {at}.",
    paid_heading: "Payment received",
    paid_text: "Thank you. Your payment has been received and your booking is confirmed.",
    amount_paid: "Amount paid",
    payment_reference: "Payment reference",
    terms_link: "Read the cancellation terms of your booking",
    expired_heading: "This payment link has expired",
    expired_text: "Nothing was charged. Ask the provider who sent you the link for a new one.",
    cancelled_heading: "This checkout was cancelled",
    cancelled_text: "It can no longer be paid. Contact the provider if you think this is wrong.",
    not_found_heading: "Payment page not found",
    not_found_text: "Check that the link is complete, or ask the provider for a new one.",
    failure_heading: "Sorry, something went wrong",
    failure_text: "Nothing was charged. Please try again in a few minutes.",
    other_language: "Deutsch",
    footer: "Payments are processed securely. Your card number is never stored.",
};

static DE: Texts = Texts {
    weekdays: ["Mo.", "Di.", "Mi.", "Do.", "Fr.", "Sa.", "So."],
    months: [
        "Jan.", "Feb.", "März", "Apr.", "Mai", "Juni", "Juli", "Aug.", "Sept.", "Okt.", "Nov.",
        "Dez.",
    ],
    categories: [
        "Flug",
        "Unterkunft",
        "Bahn",
        "Bus",
        "Fähre",
        "Mietwagen",
        "Transfer",
        "Veranstaltung",
        "Tagungsraum",
        "Gebühr",
        "Sonstiges",
    ],
    units: [
        "pauschal",
        "pro Stunde",
        "pro Tag",
        "pro Nacht",
        "pro Woche",
        "pro Monat",
        "pro Jahr",
        "pro Person",
    ],
    attachments: [
        "Rechnung",
        "Angebot",
        "Allgemeine Geschäftsbedingungen",
        "Bilder",
        "Titelbild",
        "Dokument",
    ],
    labels: [
        "Name auf der Karte",
        "Kartennummer",
        "Gültig bis (MM/JJ)",
        "Prüfnummer (CVC)",
        "Vorname",
        "Nachname",
        "E-Mail",
        "Name für die Rechnung",
    ],
    required: "Geben Sie {field} an",
    too_long: "{field} darf höchstens 2.000 Zeichen lang sein",
    control_characters: "{field} darf keine Steuerzeichen enthalten",
    card_number_invalid: "Geben Sie eine gültige Kartennummer ein",
    expiry_format: "Geben Sie das Ablaufdatum als MM/JJ ein, zum Beispiel 04/29",
    expiry_past: "Die Karte ist abgelaufen: Prüfen Sie das Ablaufdatum",
    cvc_invalid: "Geben Sie die 3- oder 4-stellige Prüfnummer (CVC) ein",
    email_invalid: "Geben Sie eine E-Mail-Adresse wie name@example.com ein",
    card_number_hint: "Die lange Nummer auf der Vorderseite der Karte",
    expiry_hint: "Zum Beispiel 04/29",
    cvc_hint: "Die letzten 3 Ziffern auf der Rückseite, oder 4 auf der Vorderseite",
    billing_name_hint: "Optional: der Name auf der Rechnung, falls nicht Ihr eigener",
    skip_link: "Zum Inhalt springen",
    sandbox: "Sandbox",
    sandbox_banner: "Testmodus: Es findet keine echte Zahlung statt, keine Karte wird belastet.",
    sandbox_cards_heading: "Testkarten",
    sandbox_cards: [
        "4242 4242 4242 4242 wird angenommen.",
        "4000 0000 0000 0002 wird abgelehnt.",
        "Beliebiges künftiges Ablaufdatum und beliebige dreistellige Prüfnummer.",
    ],
    reference: "Buchungsreferenz",
    from_provider: "Buchung bei",
    items_heading: "Ihre Buchung",
    quantity: "Menge",
    net: "Nettopreis",
    tax: "MwSt.",
    item_total: "Summe der Position",
    total: "Zu zahlen",
    period: "Zeitraum",
    terms_heading: "Stornierungsbedingungen",
    free_any_time: "Jederzeit kostenlos stornierbar",
    non_refundable: "Nicht erstattbar",
    free_until: "Kostenlose Stornierung bis {at}",
    step_from: "ab {at}: {charge}",
    charged_percent: "{percent} Stornogebühr ({amount})",
    charged_amount: "{amount} Stornogebühr",
    step_now: "derzeit: {charge}",
    attachments_heading: "Dokumente",
    pay_heading: "Mit Karte bezahlen",
    card_legend: "Kartendaten",
    customer_legend: "Ihre Angaben",
    pay_button: "Jetzt bezahlen: {amount}",
    problem_heading: "Bitte prüfen Sie Ihre Angaben",
    error_prefix: "Fehler:",
    declined_hint: "Ihre Karte wurde abgelehnt. Es wurde nichts abgebucht. Versuchen Sie es erneut oder nutzen Sie eine andere Karte.",
    form_expired: "Dieses Formular ist abgelaufen. Prüfen Sie Ihre Angaben und senden Sie es erneut.",
    form_elsewhere: "Dieses Formular wurde nicht von dieser Zahlungsseite gesendet, daher wurde nichts abgebucht. Füllen Sie es hier aus, um zu bezahlen.",
    too_many_attempts: "Zu viele fehlgeschlagene Zahlungsversuche. Zu Ihrer Sicherheit versuchen Sie es in einer Stunde erneut.",
    attempt_in_progress: "Eine Zahlung für diesen Checkout wird bereits verarbeitet. Warten Sie einen Moment und laden Sie die Seite dann neu.",
    amount_changed: "Der fällige Betrag hat sich geändert, während Ihre Karte belastet wurde, daher wurde die Belastung zurückgegeben. Prüfen Sie den neuen Gesamtbetrag und zahlen Sie dann erneut.",
    cards_not_accepted: "Auf dieser Seite werden keine Kartenzahlungen angenommen. Wenden Sie sich zum Bezahlen an den Anbieter.",
    link_expires: "Dieser Zahlungslink gilt bis {at}.",
    paid_heading: "Zahlung erhalten",
    paid_text: "Vielen Dank. Ihre Zahlung ist eingegangen und Ihre Buchung ist bestätigt.",
    amount_paid: "Gezahlter Betrag",
    payment_reference: "Zahlungsreferenz",
    terms_link: "Stornierungsbedingungen Ihrer Buchung lesen",
    expired_heading: "Dieser Zahlungslink ist abgelaufen",
    expired_text: "Es wurde nichts abgebucht. Bitten Sie den Anbieter, der Ihnen den Link geschickt hat, um einen neuen.",
    cancelled_heading: "Diese Buchung wurde storniert",
    cancelled_text: "Sie kann nicht mehr bezahlt werden. Wenden Sie sich an den Anbieter, falls das nicht stimmt.",
    not_found_heading: "Zahlungsseite nicht gefunden",
    not_found_text: "Prüfen Sie, ob der Link vollständig ist, oder bitten Sie den Anbieter um einen neuen.",
    failure_heading: "Leider ist ein Fehler aufgetreten",
    failure_text: "Es wurde nichts abgebucht. Bitte versuchen Sie es in einigen Minuten erneut.",
    other_language: "English",
    footer: "Zahlungen werden sicher verarbeitet. Ihre Kartennummer wird nie gespeichert.",
};

/// Whether `c` is an explicit bidirectional formatting character (Unicode Bidirectional
/// Algorithm, UAX #9): the embeddings and overrides U+202A–U+202E and the isolates
/// U+2066–U+2069. Each can reorder text beyond the word it stands in.
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}')
}

/// A provider's or customer's text with its explicit bidirectional formatting characters
/// removed, so that it cannot reorder what stands around it (a name that reverses the amount
/// after it). The marks U+200E, U+200F and U+061C stay: each acts as one invisible letter of
/// its direction and opens no scope, and inside an isolate ([`isolate`], `<bdi>`), where every
/// provider text is shown, that letter reaches no further than the text — as a Hebrew or
/// Arabic letter of the name itself would.
pub fn without_bidi_controls(text: &str) -> std::borrow::Cow<'_, str> {
    if text.chars().any(is_bidi_control) {
        text.chars()
            .filter(|c| !is_bidi_control(*c))
            .collect::<String>()
            .into()
    } else {
        text.into()
    }
}

/// A provider's text for plain text (e-mails, a page's `<title>`), where no `<bdi>` exists:
/// its explicit bidirectional formatting characters removed, and the rest between U+2068 FIRST
/// STRONG ISOLATE and U+2069 POP DIRECTIONAL ISOLATE, so that its direction (a Hebrew or
/// Arabic name) applies to it alone and never to the amount or text around it.
pub fn isolate(text: &str) -> String {
    format!("\u{2068}{}\u{2069}", without_bidi_controls(text))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;
    use rust_decimal_macros::dec;

    #[test]
    fn the_query_wins_then_the_heaviest_known_language() {
        assert_eq!(Lang::choose(Some("de"), Some("en")), Lang::De);
        assert_eq!(Lang::choose(Some("fr"), Some("de-DE,de;q=0.9")), Lang::De);
        assert_eq!(
            Lang::choose(None, Some("fr-FR, en;q=0.5, de;q=0.8")),
            Lang::De
        );
        assert_eq!(Lang::choose(None, Some("de;q=0, en;q=0.1")), Lang::En);
        assert_eq!(Lang::choose(None, Some("fr")), Lang::En);
        assert_eq!(Lang::choose(None, None), Lang::En);
    }

    #[test]
    fn amounts_use_the_minor_unit_and_the_language_r_1_3() {
        assert_eq!(Lang::En.money(dec!(1234.5), "EUR"), "EUR 1,234.50");
        assert_eq!(Lang::De.money(dec!(1234.5), "EUR"), "1.234,50 EUR");
        assert_eq!(Lang::En.money(dec!(5000), "JPY"), "JPY 5,000");
        assert_eq!(Lang::En.money(dec!(1.2345), "KWD"), "KWD 1.235");
        assert_eq!(Lang::En.money(dec!(40), "EUR"), "EUR 40.00");
        assert_eq!(Lang::De.percent(dec!(12.50)), "12,5 %");
        assert_eq!(Lang::En.percent(dec!(50)), "50 %");
    }

    #[test]
    fn instants_are_shown_on_the_zone_wall_clock() {
        let at = Utc.with_ymd_and_hms(2026, 12, 1, 14, 0, 0).unwrap();
        assert_eq!(
            Lang::En.instant(at, chrono_tz::Europe::Berlin),
            "Tue 1 Dec 2026, 15:00 (Europe/Berlin)"
        );
        assert_eq!(
            Lang::De.instant(at, chrono_tz::Europe::Berlin),
            "Di. 1. Dez. 2026, 15:00 (Europe/Berlin)"
        );
    }
}
