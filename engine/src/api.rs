//! Wire types of the API: every request and response body of the contract (`docs/SPEC.md`),
//! with the spec's exact field names.
//!
//! These types are what the JSON Schemas in `schemas/` are generated from, so a schema attribute
//! here is a rule a client can check without the service. Rules JSON Schema cannot express live
//! in [`crate::validate`]. Amounts are `Decimal`s read exactly as written (R-1.1, see
//! [`crate::decimal`]).

use std::collections::BTreeMap;
use std::collections::btree_map::Entry;
use std::fmt;

use rust_decimal::Decimal;
use schemars::JsonSchema;
use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize};

/// Longest ordinary string of a request (R-8.10).
pub const MAX_STRING_CHARS: usize = 2_000;
/// Longest `note` and `email.content` (R-8.10).
pub const MAX_LONG_STRING_CHARS: usize = 20_000;
/// Most items per checkout (R-8.10).
pub const MAX_ITEMS: usize = 500;
/// Most penalties per policy (R-8.10).
pub const MAX_PENALTIES: usize = 50;
/// Most taxes per item (R-8.10).
pub const MAX_TAXES: usize = 50;
/// Most attachments per checkout (R-8.10).
pub const MAX_ATTACHMENTS: usize = 50;
/// Most e-mail recipients (R-8.10).
pub const MAX_RECIPIENTS: usize = 100;
/// Most `refIDs` / `externalIds` entries (R-8.10).
pub const MAX_REF_IDS: usize = 100;
/// Longest `after` cursor of `GET /events`, counted in characters as R-8.9's "shorter than or
/// equal to N characters" and JSON Schema's `maxLength` count them (an event id has 36).
pub const MAX_EVENT_CURSOR_CHARS: usize = 100;
/// Largest `price`, and `value` of an AMOUNT tax: 10^12. With [`MAX_QUANTITY`] and 50 tax
/// lines an item totals at most 5.1 × 10^17, a checkout of 500 items 2.55 × 10^20, which at
/// the largest minor unit (3 decimals) has 24 significant digits: every derived amount (line ×
/// quantity, taxes, sums, rescaling, penalties, refunds) stays within R-1.1's 28 digits.
pub const MAX_PRICE: u64 = 1_000_000_000_000;
/// Largest `quantity.amount`: 10^4.
pub const MAX_QUANTITY: u64 = 10_000;
/// Largest provided `totalTax` or `total` of an item, and FIXED_AMOUNT penalty: 10^18, above
/// any computed item total.
pub const MAX_ITEM_TOTAL: u64 = 1_000_000_000_000_000_000;
/// Largest penalty offset per unit: ten years, so that with period dates and payment instants
/// in the years 1000–8999 every threshold stays within the years 0001–9999.
pub const MAX_OFFSET_HOURS: u32 = 87_840;
/// Largest DAYS offset (ten years).
pub const MAX_OFFSET_DAYS: u32 = 3_660;
/// Largest MONTHS offset (ten years).
pub const MAX_OFFSET_MONTHS: u32 = 120;

/// A map of external identifiers (`refIDs`, `externalIds`, `billing.externalIds`).
pub type RefIds = BTreeMap<String, String>;

/// Reads optional [`RefIds`] as serde reads them, but refuses a key given twice instead of
/// keeping the last value: the fast path of validation reads `refIDs` straight into the wire type
/// and relies on this (the full path refuses a repeated key of any object before reading it).
fn ref_ids_once<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Option<RefIds>, D::Error> {
    struct Once;

    impl<'de> Visitor<'de> for Once {
        type Value = Option<RefIds>;

        fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
            formatter.write_str("a map")
        }

        fn visit_none<E: de::Error>(self) -> Result<Option<RefIds>, E> {
            Ok(None)
        }

        fn visit_unit<E: de::Error>(self) -> Result<Option<RefIds>, E> {
            Ok(None)
        }

        fn visit_some<D: Deserializer<'de>>(
            self,
            deserializer: D,
        ) -> Result<Option<RefIds>, D::Error> {
            deserializer.deserialize_map(self)
        }

        fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Option<RefIds>, A::Error> {
            let mut ids = RefIds::new();
            while let Some((key, value)) = map.next_entry::<String, String>()? {
                match ids.entry(key) {
                    Entry::Vacant(entry) => {
                        entry.insert(value);
                    }
                    Entry::Occupied(entry) => {
                        return Err(de::Error::custom(format_args!(
                            "refIDs names {} more than once",
                            entry.key()
                        )));
                    }
                }
            }
            Ok(Some(ids))
        }
    }

    deserializer.deserialize_option(Once)
}

/// Body of `POST /initialize` and `POST /transactions` (R-8.5).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(title = "CorporateCheckout")]
#[schemars(transform = crate::schema::rules::corporate_checkout)]
pub struct CorporateCheckout {
    /// External identifiers of the checkout.
    // A key given twice is refused by the typed parse itself (a map would keep one of the two
    // values silently), as validation refuses it.
    #[serde(
        rename = "refIDs",
        default,
        deserialize_with = "ref_ids_once",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(length(max = 2000), extend("maxProperties" = 100))]
    pub ref_ids: Option<RefIds>,
    /// Title; required (R-2.4).
    #[schemars(length(min = 1, max = 2000))]
    pub title: String,
    /// ISO 4217 alphabetic code, upper case (R-1.2).
    #[schemars(length(min = 1, max = 2000))]
    pub currency: String,
    /// Items of the checkout; at least one (R-2.4), at most 500 (R-8.10).
    #[schemars(length(min = 1, max = 500))]
    pub items: Vec<Item>,
    /// Attachments (R-8.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    pub attachments: Option<Vec<Attachment>>,
    /// Internal note, not visible to the customer.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20000))]
    pub note: Option<String>,
    /// Content and recipients of the contract e-mail.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub email: Option<CheckoutEmail>,
    /// Top-level recipients, merged into `email.recipients` (R-8.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(email))]
    pub recipients: Option<Vec<String>>,
    /// Payment methods and card brands the provider has deactivated: a comma-separated list
    /// of `card`, `invoice`, `amex`, `visa`, … (`crate::methods`), any case.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub restricted_methods: Option<String>,
}

/// Item category (spec: FLIGHT; the rest R-2.5).
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum Category {
    Flight,
    Accommodation,
    Rail,
    Bus,
    Ferry,
    CarRental,
    Transfer,
    Event,
    MeetingRoom,
    Fee,
    Other,
}

impl Category {
    /// Every category, in the order of R-2.5.
    pub const ALL: [Category; 11] = [
        Category::Flight,
        Category::Accommodation,
        Category::Rail,
        Category::Bus,
        Category::Ferry,
        Category::CarRental,
        Category::Transfer,
        Category::Event,
        Category::MeetingRoom,
        Category::Fee,
        Category::Other,
    ];

    /// The wire name (`CAR_RENTAL`).
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Flight => "FLIGHT",
            Category::Accommodation => "ACCOMMODATION",
            Category::Rail => "RAIL",
            Category::Bus => "BUS",
            Category::Ferry => "FERRY",
            Category::CarRental => "CAR_RENTAL",
            Category::Transfer => "TRANSFER",
            Category::Event => "EVENT",
            Category::MeetingRoom => "MEETING_ROOM",
            Category::Fee => "FEE",
            Category::Other => "OTHER",
        }
    }

    /// Parses a wire name.
    pub fn parse(name: &str) -> Option<Category> {
        Category::ALL.into_iter().find(|c| c.as_str() == name)
    }
}

/// Service class of flight items (R-2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum ServiceClass {
    EconomyClass,
    PremiumEconomyClass,
    BusinessClass,
    FirstClass,
}

/// Accommodation type (R-2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum AccommodationType {
    Hotel,
    Apartment,
    Hostel,
    GuestHouse,
    Resort,
    Other,
}

/// Room type (R-2.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum RoomType {
    Single,
    Double,
    Twin,
    Triple,
    Suite,
    Studio,
    Other,
}

/// One item of a checkout: basic properties plus every additional property (R-2.5: every
/// optional property may appear on every item).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Item {
    /// External stock identifier issued by the provider.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub stock_id: Option<String>,
    /// Name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub name: Option<String>,
    /// Category (R-2.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub category: Option<Category>,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub description: Option<String>,
    /// Unit price, required, ≥ 0 (R-1.5), at most [`MAX_PRICE`].
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema", range(min = 0, max = MAX_PRICE))]
    pub price: Decimal,
    /// Quantity; amount defaults to 1 (R-2.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quantity: Option<ItemQuantity>,
    /// Total tax; computed when omitted, kept as given otherwise (R-2.3).
    #[serde(
        default,
        with = "crate::decimal::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(
        schema_with = "crate::decimal::option_schema",
        range(min = 0, max = MAX_ITEM_TOTAL)
    )]
    pub total_tax: Option<Decimal>,
    /// Total including taxes; computed when omitted, kept as given otherwise (R-2.3).
    #[serde(
        default,
        with = "crate::decimal::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(
        schema_with = "crate::decimal::option_schema",
        range(min = 0, max = MAX_ITEM_TOTAL)
    )]
    pub total: Option<Decimal>,
    /// Tax lines (R-2.2), at most 50 (R-8.10).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    pub taxes: Option<Vec<ItemTax>>,
    /// Carbon dioxide emission, ≥ 0 (R-1.5).
    #[serde(
        default,
        with = "crate::decimal::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "crate::decimal::option_schema", range(min = 0))]
    pub co2: Option<Decimal>,
    /// The item's own cancellation policy (R-5.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancellation_policy: Option<CancellationPolicy>,
    /// Time span for which the item is valid (R-6.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<Period>,
    /// Location address (R-8.7).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub location: Option<Location>,
    /// Location (property) name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub location_name: Option<String>,
    /// Accommodation type (R-2.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accommodation_type: Option<AccommodationType>,
    /// Room type (R-2.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub room_type: Option<RoomType>,
    /// Departure place code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub departure: Option<String>,
    /// Destination place code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub destination: Option<String>,
    /// Airline code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub airline: Option<String>,
    /// Service class (R-2.5).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_class: Option<ServiceClass>,
    /// Flight number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub flight_number: Option<String>,
    /// Fare class.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub fare_class: Option<String>,
}

/// Location address: street and house, or lat and lng (R-8.7).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
#[schemars(transform = crate::schema::rules::location)]
pub struct Location {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub street: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub house: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub post_code: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub city: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub country: Option<String>,
    /// Latitude as a decimal string in [-90, 90].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub lat: Option<String>,
    /// Longitude as a decimal string in [-180, 180].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub lng: Option<String>,
}

/// Time span of an item (R-6.1): RFC 3339 with offset, or a local date-time read in the named
/// zone (else the provider's zone).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::schema::rules::period)]
pub struct Period {
    /// Start, local to the zone at origin.
    #[schemars(length(max = 2000))]
    pub start: String,
    /// End, local to the zone at destination; not before `start` (R-6.3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub end: Option<String>,
    /// IANA zone of `start` (extension, R-6.1); also the item's zone (R-6.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub start_time_zone: Option<String>,
    /// IANA zone of `end` (extension, R-6.1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub end_time_zone: Option<String>,
}

/// Quantity unit; descriptive only (R-2.1).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum QuantityUnit {
    #[default]
    FlatFee,
    PerHour,
    PerDay,
    PerNight,
    PerWeek,
    PerMonth,
    PerYear,
    PerPerson,
}

/// Quantity of an item.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ItemQuantity {
    /// Amount, ≥ 1, decimals allowed (R-1.5); default 1.
    #[serde(
        default,
        with = "crate::decimal::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(
        schema_with = "crate::decimal::option_schema",
        range(min = 1, max = MAX_QUANTITY)
    )]
    pub amount: Option<Decimal>,
    /// Unit, default FLAT_FEE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<QuantityUnit>,
}

/// Tax type (R-2.2: VAT only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum TaxType {
    #[default]
    Vat,
}

/// Unit of a tax value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum TaxUnit {
    Amount,
    #[default]
    Percent,
}

/// Basis of a tax value.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum TaxBasis {
    FlatFee,
    #[default]
    PerQuantity,
}

/// What a tax applies to (R-2.2: NET_PRICE only).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum TaxApplyTo {
    #[default]
    NetPrice,
}

/// One tax line of an item (R-2.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::schema::rules::item_tax)]
pub struct ItemTax {
    /// Tax type, default VAT.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub tax_type: Option<TaxType>,
    /// Tax value in `unit`; ≥ 0, PERCENT ≤ 100 (R-1.5), AMOUNT ≤ [`MAX_PRICE`].
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema", range(min = 0, max = MAX_PRICE))]
    pub value: Decimal,
    /// Unit, default PERCENT.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<TaxUnit>,
    /// Basis, default PER_QUANTITY.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basis: Option<TaxBasis>,
    /// What the tax applies to, NET_PRICE.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub apply_to: Option<TaxApplyTo>,
}

/// Type of an attachment (R-8.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum AttachmentType {
    Invoice,
    Proposal,
    TermsConditions,
    Pictures,
    HeaderImage,
    Other,
}

/// A file attached to a checkout (R-8.8).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::schema::rules::attachment)]
pub struct Attachment {
    /// Absolute http(s) URL.
    #[schemars(length(max = 2000), url)]
    pub url: String,
    /// Kind of file.
    #[serde(rename = "type", default, skip_serializing_if = "Option::is_none")]
    pub attachment_type: Option<AttachmentType>,
}

/// Content and recipients of the contract e-mail.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::schema::rules::checkout_email)]
pub struct CheckoutEmail {
    /// Recipients (e-mail addresses, R-8.4).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 100), inner(email))]
    pub recipients: Option<Vec<String>>,
    /// Subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub subject: Option<String>,
    /// Body.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20000))]
    pub content: Option<String>,
}

/// Reference instant of a policy (R-5.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PolicyReference {
    /// The instant the transaction was paid.
    PaymentDate,
    /// `item.period.start`.
    StartPeriod,
}

/// Cancellation policy of an item or a provider (R-5).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::schema::rules::cancellation_policy)]
pub struct CancellationPolicy {
    /// Description of the penalty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub description: Option<String>,
    /// Reference instant.
    pub reference: PolicyReference,
    /// Penalties, 1 to 50, all of one type (R-5.3, R-8.10).
    #[schemars(length(min = 1, max = 50))]
    pub penalties: Vec<Penalty>,
}

/// Kind of a penalty.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PenaltyType {
    /// Applies from the day after `until` (R-5.4).
    DatePenalty,
    /// Applies strictly after the reference shifted by `offset` (R-5.5).
    OffsetPenalty,
}

/// One penalty of a policy, DatePenalty or OffsetPenalty by `type`.
///
/// The wire form is one flat object so that a client sees ordinary field errors; the typed,
/// unmixable form is built by the engine.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::schema::rules::penalty)]
pub struct Penalty {
    /// DATE_PENALTY or OFFSET_PENALTY.
    #[serde(rename = "type")]
    pub penalty_type: PenaltyType,
    /// The penalty.
    pub value: PenaltyValue,
    /// DatePenalty: the date (YYYY-MM-DD) after which the penalty applies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub until: Option<String>,
    /// OffsetPenalty: the offset from the reference instant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset: Option<PenaltyOffset>,
    /// OffsetPenalty: AFTER_PAYMENT only; stored and echoed (R-5.8).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub condition: Option<PenaltyCondition>,
}

/// Condition of an offset penalty (R-5.8).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum PenaltyCondition {
    AfterPayment,
}

/// Unit of a penalty value (R-5.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum PenaltyUnit {
    /// An amount in the checkout currency, capped at the item total.
    FixedAmount,
    /// A percentage of the item total, in [0, 100].
    Percentage,
}

/// CancellationPenaltyValue.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::schema::rules::penalty_value)]
pub struct PenaltyValue {
    /// Amount, ≥ 0; ≤ 100 for PERCENTAGE (R-5.7), ≤ [`MAX_ITEM_TOTAL`] for FIXED_AMOUNT.
    #[serde(with = "crate::decimal")]
    #[schemars(
        schema_with = "crate::decimal::schema",
        range(min = 0, max = MAX_ITEM_TOTAL)
    )]
    pub amount: Decimal,
    /// FIXED_AMOUNT or PERCENTAGE.
    pub unit: PenaltyUnit,
}

/// Unit of a penalty offset (R-5.5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum OffsetUnit {
    /// Calendar days on local wall-clock time.
    Days,
    /// Exact elapsed hours.
    Hours,
    /// Calendar months on local wall-clock time, clamped to the month's end.
    Months,
}

/// CancellationPenaltyOffset.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::schema::rules::penalty_offset)]
pub struct PenaltyOffset {
    /// Number of units, a whole number ≥ 0, at most ten years: [`MAX_OFFSET_HOURS`],
    /// [`MAX_OFFSET_DAYS`] or [`MAX_OFFSET_MONTHS`].
    #[schemars(range(min = 0, max = MAX_OFFSET_HOURS))]
    pub amount: u32,
    /// DAYS, HOURS or MONTHS.
    pub unit: OffsetUnit,
}

/// Provider configuration the engine needs (R-5.1, R-6.1): its zone and default policies.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ProviderSettings {
    /// IANA time zone, default `UTC`.
    #[serde(default = "default_time_zone")]
    pub time_zone: String,
    /// General default policy.
    #[serde(default)]
    pub default_policy: Option<CancellationPolicy>,
    /// Default policy per item category.
    #[serde(default)]
    pub category_policies: BTreeMap<Category, CancellationPolicy>,
}

fn default_time_zone() -> String {
    "UTC".to_owned()
}

/// Body of `PATCH /cancel/{id}` and of `POST /cancel/{id}/quote` (R-4).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::schema::rules::cancellation_req)]
pub struct CancellationReq {
    /// Order numbers of the items to cancel, counted from 1 (R-4.1).
    #[schemars(length(min = 1, max = 500), inner(range(min = 1)))]
    pub items_order: Vec<u32>,
    /// Refund amount; absent or 0 → the refundable amount (R-4.3).
    #[serde(
        default,
        with = "crate::decimal::option",
        skip_serializing_if = "Option::is_none"
    )]
    #[schemars(schema_with = "crate::decimal::option_schema", range(min = 0))]
    pub amount: Option<Decimal>,
    /// Title of the cancellation invoice (R-4.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub invoice_title: Option<String>,
    /// Number of the cancellation invoice (R-4.6).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 2000))]
    pub invoice_number: Option<String>,
}

/// Body of `PUT /{transactionId}` (R-8.6): each given field replaces the stored one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[schemars(transform = crate::schema::rules::update_transaction)]
pub struct UpdateTransaction {
    /// Replaces `refIDs`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("maxProperties" = 100))]
    pub external_ids: Option<RefIds>,
    /// Replaces the title.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 2000))]
    pub title: Option<String>,
    /// Replaces the note.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 20000))]
    pub note: Option<String>,
    /// Replaces the attachments.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 50))]
    pub attachments: Option<Vec<Attachment>>,
}

/// 200 body of `PUT /{transactionId}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct UpdateResult {
    /// `transaction <id> updated`.
    pub message: String,
}

/// `message` of an error body: a list for 400, one string otherwise (R-8.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(untagged)]
pub enum ErrorMessage {
    /// One entry per violated rule (400).
    List(Vec<String>),
    /// One text (every other status).
    One(String),
}

/// Every error body (R-8.1).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ErrorBody {
    /// What went wrong.
    pub message: ErrorMessage,
    /// Status text (`Bad Request`).
    pub error: String,
    /// HTTP status code.
    pub status_code: u16,
}

impl ErrorBody {
    /// A 400 body listing every violation.
    pub fn bad_request(messages: Vec<String>) -> ErrorBody {
        ErrorBody {
            message: ErrorMessage::List(messages),
            error: "Bad Request".to_owned(),
            status_code: 400,
        }
    }
}

/// 200 body of `GET /status`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct HealthStatus {
    /// `ready` when operational.
    pub status: String,
    /// Identifier of the provider the credentials belong to.
    pub provider: String,
}

/// 201 body of `POST /initialize`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Created {
    /// Identifier of the new transaction (R-3.1).
    pub transaction_id: String,
    /// The customer's payment page: a capability URL that works without credentials, for this
    /// transaction only, until it expires. Absent in answers stored before payment pages
    /// existed (an idempotent replay returns the first answer as it was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(extend("format" = "uri"))]
    pub payment_url: Option<String>,
}

/// Status of a transaction (R-3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum TransactionStatus {
    Pending,
    Paid,
    PartiallyCancelled,
    Cancelled,
}

impl TransactionStatus {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            TransactionStatus::Pending => "PENDING",
            TransactionStatus::Paid => "PAID",
            TransactionStatus::PartiallyCancelled => "PARTIALLY_CANCELLED",
            TransactionStatus::Cancelled => "CANCELLED",
        }
    }
}

/// Status of one item (R-10.2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum ItemStatus {
    /// Not cancelled.
    Active,
    /// A refund for it is pending at the gateway.
    Cancelling,
    /// Cancelled (or voided before payment).
    Cancelled,
}

/// `checkout.payment`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct PaymentInfo {
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub reference: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub provider: Option<String>,
}

/// `checkout.customer`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct CustomerInfo {
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub first_name: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub last_name: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub email: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub phone: Option<String>,
    /// Shape not shown by the spec: any JSON object or null.
    #[serde(default)]
    pub address: Option<serde_json::Map<String, serde_json::Value>>,
}

/// `checkout.beneficiary`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
pub struct BeneficiaryInfo {
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub first_name: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub last_name: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub email: Option<String>,
}

/// `checkout.billing`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
#[schemars(transform = crate::schema::rules::billing_info)]
pub struct BillingInfo {
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub name: Option<String>,
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub email: Option<String>,
    /// Shape not shown by the spec: any JSON object or null.
    #[serde(default)]
    pub address: Option<serde_json::Map<String, serde_json::Value>>,
    #[serde(default)]
    #[schemars(extend("maxProperties" = 100))]
    pub external_ids: Option<RefIds>,
}

/// A free-form map (`card`, `reporting`).
pub type FreeForm = serde_json::Map<String, serde_json::Value>;

/// Body of the sandbox route `POST /sandbox/transactions/{id}/pay` (R-3.6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
#[allow(missing_docs)]
#[schemars(transform = crate::schema::rules::payment_req)]
pub struct PaymentReq {
    #[serde(default)]
    pub payment: Option<PaymentInfo>,
    #[serde(default)]
    pub customer: Option<CustomerInfo>,
    #[serde(default)]
    pub beneficiary: Option<BeneficiaryInfo>,
    #[serde(default)]
    pub billing: Option<BillingInfo>,
    #[serde(default)]
    pub card: Option<FreeForm>,
    #[serde(default)]
    pub reporting: Option<FreeForm>,
    /// RFC 3339 payment instant; default now; never in the future (R-3.6).
    #[serde(default)]
    #[schemars(length(max = 2000))]
    pub paid_at: Option<String>,
}

/// The `checkout` object of a status record (R-10.1): null parts until paid.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[allow(missing_docs)]
pub struct CheckoutInfo {
    /// Human-readable reference (R-3.2), always present.
    pub reference: String,
    pub payment: Option<PaymentInfo>,
    pub customer: Option<CustomerInfo>,
    pub beneficiary: Option<BeneficiaryInfo>,
    pub billing: Option<BillingInfo>,
    pub card: Option<FreeForm>,
    pub reporting: Option<FreeForm>,
}

/// `amounts` of a status record (R-10.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct Amounts {
    /// Sum of all item totals as created.
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub total: Decimal,
    /// Amount paid (0 until paid).
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub paid: Decimal,
    /// Sum of succeeded refunds.
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub refunded: Decimal,
}

/// One item of a status record (R-10.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusItem {
    /// Order number, from 1.
    pub order: u32,
    /// Name.
    pub name: Option<String>,
    /// Category.
    pub category: Option<Category>,
    /// Item total.
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub total: Decimal,
    /// Effective cancellation policy, resolved at creation (R-3.5).
    pub cancellation_policy: Option<CancellationPolicy>,
    /// ACTIVE, CANCELLING or CANCELLED.
    pub status: ItemStatus,
    /// Amount refunded for this item.
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub refunded: Decimal,
}

/// Outcome of a cancellation (spec: SUCCESS or FAILED).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
#[allow(missing_docs)]
pub enum CancellationOutcome {
    Success,
    Failed,
}

/// One item of a cancellation result or receipt.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancelledItem {
    /// Order number, from 1.
    pub order: u32,
    /// Item total.
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub total: Decimal,
    /// Penalty kept.
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub penalty: Decimal,
    /// Amount refunded for the item.
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub refund: Decimal,
    /// The penalty rule applied, or null.
    pub applied_penalty: Option<Penalty>,
}

/// A cancellation as listed in a status record (R-10.2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancellationRecord {
    /// Receipt number, unique per provider (`CR-000042`); null while pending or failed.
    pub receipt_number: Option<String>,
    /// Order numbers of the items.
    pub items: Vec<u32>,
    /// Refund amount.
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub refund: Decimal,
    /// SUCCESS, FAILED or PENDING (refund at the gateway).
    pub outcome: String,
    /// When the cancellation was requested (RFC 3339).
    pub created_at: String,
}

/// 200 body of `GET /status/{transactionId}` (R-10).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct StatusRecord {
    /// Transaction status (R-3.3).
    pub status: TransactionStatus,
    /// Checkout information (R-10.1).
    pub checkout: CheckoutInfo,
    /// Extension (R-10.2): the transaction id.
    pub transaction_id: String,
    /// Extension: title.
    pub title: String,
    /// Extension: external identifiers.
    #[serde(rename = "refIDs")]
    pub ref_ids: RefIds,
    /// Extension: internal note.
    pub note: Option<String>,
    /// Extension: attachments.
    pub attachments: Vec<Attachment>,
    /// Extension: currency.
    pub currency: String,
    /// Extension: total, paid, refunded.
    pub amounts: Amounts,
    /// Extension: items with status and effective policy.
    pub items: Vec<StatusItem>,
    /// Extension: cancellations with receipts.
    pub cancellations: Vec<CancellationRecord>,
    /// Extension: the customer's payment page while the transaction is PENDING (null after, and
    /// for transactions created before payment pages existed).
    pub payment_url: Option<String>,
    /// Extension: when the payment page stops working (RFC 3339), while it is shown.
    pub payment_url_expires_at: Option<String>,
    /// Extension: the e-mails of the transaction (the contract e-mail, receipts) and where each
    /// stands.
    pub emails: Vec<EmailStatus>,
}

/// One e-mail of a transaction as its status record shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EmailStatus {
    /// `CONTRACT` (sent at creation) or `RECEIPT` (after a successful cancellation).
    pub kind: String,
    /// The receipt number, for a receipt.
    pub receipt_number: Option<String>,
    /// The recipients (R-8.4).
    pub recipients: Vec<String>,
    /// `QUEUED`, `SENT` or `FAILED`.
    pub status: String,
    /// When it reached that status (RFC 3339).
    pub at: String,
}

/// One event, as `GET /events` lists it: the Standard Webhooks payload (`type`, `timestamp`,
/// `data`) and its id (the `webhook-id` of its deliveries).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Event {
    /// Unique id, the same on every delivery of the event: `evt_` and a UUID v7 as 32 hex
    /// digits (the `after` cursor of `GET /events`).
    #[schemars(extend("pattern" = "^evt_[0-9a-f]{32}$"))]
    pub id: String,
    /// `transaction.created`, `transaction.paid`, `cancellation.succeeded`, …
    #[serde(rename = "type")]
    pub event_type: String,
    /// When it happened (RFC 3339).
    pub timestamp: String,
    /// What happened.
    pub data: EventData,
}

/// An event as the outbox stores it: an [`Event`] without its id, which has a column of its
/// own; a delivery sends the [`Event`], its id first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventPayload {
    /// The event type.
    #[serde(rename = "type")]
    pub event_type: String,
    /// When it happened (RFC 3339).
    pub timestamp: String,
    /// What happened.
    pub data: EventData,
}

/// `data` of an event: the transaction as it stands after the change, and, for cancellation and
/// refund events, the cancellation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventData {
    /// The transaction.
    pub transaction_id: String,
    /// Its `CHK-…` reference (R-3.2).
    pub reference: String,
    /// Its status after the change (R-3.3).
    pub status: TransactionStatus,
    /// Its currency.
    pub currency: String,
    /// Total, paid and refunded after the change.
    pub amounts: Amounts,
    /// The cancellation, for `cancellation.*` and `refund.*` events.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cancellation: Option<EventCancellation>,
    /// Why a payment failed, for `transaction.payment_failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The cancellation an event is about.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventCancellation {
    /// The refund id (the gateway's idempotency key).
    pub refund_id: String,
    /// `PENDING`, `SUCCESS` or `FAILED`.
    pub outcome: String,
    /// Receipt number once SUCCESS.
    pub receipt_number: Option<String>,
    /// The gateway's reason when FAILED.
    pub error_message: Option<String>,
    /// The gateway's reference of the refund (Stripe's `re_…`), when it gave one.
    pub gateway_reference: Option<String>,
    /// Items with their totals, penalties and refunds.
    pub items: Vec<CancelledItem>,
    /// The refund.
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub refund: Decimal,
}

/// 200 body of `GET /events`: the provider's events after the cursor, oldest first.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct EventPage {
    /// At most `limit` events.
    pub events: Vec<Event>,
    /// Whether more events follow the last one listed.
    pub has_more: bool,
}

/// 200 body of the three cancel routes (spec: status, errorMessage; the rest extensions).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct CancellationResult {
    /// SUCCESS or FAILED.
    pub status: CancellationOutcome,
    /// Error text when FAILED, otherwise null.
    pub error_message: Option<String>,
    /// Amount refunded (0 when FAILED or when the transaction was unpaid).
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub refund: Decimal,
    /// Currency of the amounts.
    pub currency: String,
    /// Per-item breakdown.
    pub items: Vec<CancelledItem>,
    /// Receipt number (`CR-000042`), null when FAILED.
    pub receipt_number: Option<String>,
    /// Transaction status after the request.
    pub transaction_status: TransactionStatus,
}

/// Per-item line of a quote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuoteItem {
    /// Order number, from 1.
    pub order: u32,
    /// `round(price × quantity)` (R-2.1).
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub net: Decimal,
    /// Each rounded tax line, in the order given (R-2.2).
    pub taxes: Vec<QuoteTax>,
    /// Total tax: given, or the sum of the tax lines (R-2.3).
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub total_tax: Decimal,
    /// Total: given, or net + totalTax (R-2.3).
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub total: Decimal,
}

/// One computed tax line of a quote.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
pub struct QuoteTax {
    /// The rounded tax amount (R-2.2).
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub amount: Decimal,
}

/// Result of `POST /quote` and of `checkout-server quote` (R-2).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct QuoteResult {
    /// Currency code.
    pub currency: String,
    /// Per-item lines.
    pub items: Vec<QuoteItem>,
    /// Sum of the item totals (R-2.4).
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub total: Decimal,
}

/// Per-item line of a refund preview (R-11).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PreviewItem {
    /// Order number, from 1.
    pub order: u32,
    /// Item total.
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub total: Decimal,
    /// Penalty at the instant.
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub penalty: Decimal,
    /// `total − penalty` (R-4.2).
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub refundable: Decimal,
    /// The penalty rule applied, or null.
    pub applied_penalty: Option<Penalty>,
    /// Next instant the refundable amount changes (RFC 3339), or null.
    pub next_change_at: Option<String>,
}

/// 200 body of `POST /cancel/{id}/quote` and output of `checkout-server preview` (R-11).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RefundPreview {
    /// Currency code.
    pub currency: String,
    /// Per-item lines, in the order of `itemsOrder`.
    pub items: Vec<PreviewItem>,
    /// Sum of the items' refundable amounts (R-4.2).
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub refundable: Decimal,
    /// The refund the request would make (R-4.3).
    #[serde(with = "crate::decimal")]
    #[schemars(schema_with = "crate::decimal::schema")]
    pub refund: Decimal,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ref_ids(json: &str) -> Result<Option<RefIds>, String> {
        let body = format!(r#"{{"title":"T","currency":"EUR","items":[{{"price":1}}]{json}}}"#);
        serde_json::from_str::<CorporateCheckout>(&body)
            .map(|checkout| checkout.ref_ids)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn ref_ids_are_read_as_a_map_is_but_a_repeated_key_is_refused() {
        assert_eq!(ref_ids(""), Ok(None));
        assert_eq!(ref_ids(r#","refIDs":null"#), Ok(None));
        assert_eq!(ref_ids(r#","refIDs":{}"#), Ok(Some(RefIds::new())));
        assert_eq!(
            ref_ids(r#","refIDs":{"b":"2","a":"1"}"#),
            Ok(Some(RefIds::from([
                ("a".to_owned(), "1".to_owned()),
                ("b".to_owned(), "2".to_owned())
            ])))
        );
        let repeated = ref_ids(r#","refIDs":{"a":"1","b":"2","\u0061":"3"}"#).unwrap_err();
        assert!(
            repeated.contains("refIDs names a more than once"),
            "{repeated}"
        );
        for wrong in [
            r#","refIDs":[]"#,
            r#","refIDs":{"a":1}"#,
            r#","refIDs":"a""#,
        ] {
            assert!(ref_ids(wrong).is_err(), "{wrong}");
        }
        // Through a JSON value, as the full path of validation reads it.
        let value = serde_json::json!({"title": "T", "currency": "EUR", "items": [{"price": 1}],
            "refIDs": {"a": "1"}});
        let checkout: CorporateCheckout = serde_json::from_value(value).unwrap();
        assert_eq!(checkout.ref_ids.map(|ids| ids.len()), Some(1));
    }
}
