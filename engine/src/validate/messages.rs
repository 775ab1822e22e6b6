//! The message list of a refused body: field paths, the violations both passes
//! collect, their stable order (by the field's position in the schema), and the wording of each
//! error the JSON Schema pass reports.

use std::borrow::Cow;
use std::collections::HashSet;

use jsonschema::error::{TypeKind, ValidationErrorKind};
use jsonschema::paths::LocationSegment;
use jsonschema::{JsonType, ValidationError, Validator};
use rust_decimal::Decimal;
use serde_json::Value;

use super::{MAX_MESSAGES, ValidationErrors};
use crate::decimal::parse_json_number;
use crate::money::ACCEPTED_CURRENCIES;
use crate::schema;

/// One step of a field path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Step {
    /// Static in the code pass, so that building a path there costs one small allocation.
    Key(Cow<'static, str>),
    Index(usize),
}

/// A field path, written `items.0.price` (R-8.1, counted from 0).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub(super) struct Path(pub(super) Vec<Step>);

impl Path {
    pub(super) fn root() -> Path {
        Path(Vec::new())
    }

    pub(super) fn with(&self, step: Step) -> Path {
        let mut steps = Vec::with_capacity(self.0.len() + 1);
        steps.extend(self.0.iter().cloned());
        steps.push(step);
        Path(steps)
    }

    pub(super) fn key(&self, key: &'static str) -> Path {
        self.with(Step::Key(Cow::Borrowed(key)))
    }

    /// A key that comes from the request (a property name in a schema error).
    pub(super) fn owned_key(&self, key: &str) -> Path {
        self.with(Step::Key(Cow::Owned(key.to_owned())))
    }

    pub(super) fn index(&self, index: usize) -> Path {
        self.with(Step::Index(index))
    }

    pub(super) fn parent(&self) -> Path {
        let mut steps = self.0.clone();
        steps.pop();
        Path(steps)
    }

    /// `items.0.price`; the whole body is `body`.
    pub(super) fn text(&self) -> String {
        if self.0.is_empty() {
            return "body".to_owned();
        }
        let mut text = String::new();
        for (i, step) in self.0.iter().enumerate() {
            if i > 0 {
                text.push('.');
            }
            match step {
                Step::Key(key) => text.push_str(key),
                Step::Index(index) => text.push_str(&index.to_string()),
            }
        }
        text
    }

    pub(super) fn from_location(location: &jsonschema::paths::Location) -> Path {
        Path(
            location
                .iter()
                .map(|segment| match segment {
                    LocationSegment::Property(key) => Step::Key(Cow::Owned(key.into_owned())),
                    LocationSegment::Index(index) => Step::Index(index),
                })
                .collect(),
        )
    }
}

/// What makes a message: the text after the path, or a whole sentence about the path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Text {
    /// `<path> <rule>`.
    Rule(String),
    /// `property <path> should not exist`.
    Unknown,
    /// A complete message that names its paths itself.
    Whole(String),
}

/// "should not be empty": it hides every other violation of the same field.
const EMPTY: &str = "should not be empty";

#[derive(Debug, Clone)]
struct Violation {
    path: Path,
    text: Text,
}

impl Violation {
    fn message(&self) -> String {
        match &self.text {
            Text::Rule(rule) => format!("{} {rule}", self.path.text()),
            Text::Unknown => format!("property {} should not exist", self.path.text()),
            Text::Whole(message) => message.clone(),
        }
    }

    fn is_empty_rule(&self) -> bool {
        matches!(&self.text, Text::Rule(rule) if rule == EMPTY)
    }
}

/// Violations collected by both passes.
#[derive(Debug, Default)]
pub(super) struct Report {
    violations: Vec<Violation>,
    /// Paths the schema pass refused; the code pass leaves them (and what lies under them) alone.
    schema_paths: HashSet<String>,
}

impl Report {
    /// The violations of the structural pass: every error of the body's schema, worded.
    pub(super) fn of_schema(validator: &Validator, value: &Value) -> Report {
        let mut report = Report::default();
        if !validator.is_valid(value) {
            for error in validator.iter_errors(value) {
                schema_violations(&error, &mut report);
            }
            report.schema_paths = report.violations.iter().map(|v| v.path.text()).collect();
        }
        report
    }

    /// Whether neither pass found a violation.
    pub(super) fn is_empty(&self) -> bool {
        self.violations.is_empty()
    }

    pub(super) fn push(&mut self, path: &Path, rule: &str) {
        self.violations.push(Violation {
            path: path.clone(),
            text: Text::Rule(rule.to_owned()),
        });
    }

    pub(super) fn push_whole(&mut self, path: &Path, message: String) {
        self.violations.push(Violation {
            path: path.clone(),
            text: Text::Whole(message),
        });
    }

    /// Whether the schema pass refused nothing at or under `path`.
    pub(super) fn clean(&self, path: &Path) -> bool {
        if self.schema_paths.is_empty() {
            return true;
        }
        let text = path.text();
        let prefix = format!("{text}.");
        !self
            .schema_paths
            .iter()
            .any(|p| *p == text || p.starts_with(&prefix))
    }

    /// Sorted by schema position, depth first; a field that is empty reports only that;
    /// identical messages once.
    pub(super) fn into_errors(self, schema: &Value) -> ValidationErrors {
        let empty: HashSet<String> = self
            .violations
            .iter()
            .filter(|v| v.is_empty_rule())
            .map(|v| v.path.text())
            .collect();
        let mut keyed: Vec<(Vec<usize>, String)> = self
            .violations
            .iter()
            .filter(|v| v.is_empty_rule() || !empty.contains(&v.path.text()))
            .map(|v| (order_key(schema, &v.path), v.message()))
            .collect();
        keyed.sort_by(|a, b| a.0.cmp(&b.0));
        let mut seen = HashSet::new();
        let mut messages: Vec<String> = keyed
            .into_iter()
            .filter_map(|(_, message)| seen.insert(message.clone()).then_some(message))
            .collect();
        if messages.len() > MAX_MESSAGES {
            let more = messages.len() - MAX_MESSAGES;
            messages.truncate(MAX_MESSAGES);
            messages.push(format!("… and {more} more"));
        }
        ValidationErrors { messages }
    }
}

/// Follows `$ref`s into `$defs` and steps past the `null` alternative of an optional field.
fn resolve<'a>(root: &'a Value, mut node: &'a Value) -> &'a Value {
    for _ in 0..16 {
        if let Some(target) = node.get("$ref").and_then(Value::as_str) {
            match target
                .strip_prefix('#')
                .and_then(|pointer| root.pointer(pointer))
            {
                Some(next) => node = next,
                None => return node,
            }
        } else if let Some(branch) = node.get("anyOf").and_then(Value::as_array).and_then(|b| {
            b.iter()
                .find(|s| s.get("type").and_then(Value::as_str) != Some("null"))
        }) {
            if node.get("properties").is_some() {
                return node;
            }
            node = branch;
        } else {
            return node;
        }
    }
    node
}

/// The position of a field in the schema, depth first: property order within objects, index
/// within arrays; properties the schema does not define come after the defined ones.
fn order_key(root: &Value, path: &Path) -> Vec<usize> {
    let mut key = Vec::with_capacity(path.0.len());
    let mut node = root;
    for step in &path.0 {
        node = resolve(root, node);
        match step {
            Step::Key(name) => match node.get("properties").and_then(Value::as_object) {
                Some(properties) => match properties.keys().position(|k| k == name) {
                    Some(position) => {
                        key.push(position);
                        node = &properties[name.as_ref()];
                    }
                    None => {
                        key.push(properties.len());
                        node = &Value::Null;
                    }
                },
                None => {
                    key.push(0);
                    node = node.get("additionalProperties").unwrap_or(&Value::Null);
                }
            },
            Step::Index(index) => {
                key.push(*index);
                node = node.get("items").unwrap_or(&Value::Null);
            }
        }
    }
    key
}

fn type_name(kind: &TypeKind) -> &'static str {
    let types: Vec<JsonType> = match kind {
        TypeKind::Single(t) => vec![*t],
        TypeKind::Multiple(set) => set.iter().collect(),
    };
    match types.into_iter().find(|t| *t != JsonType::Null) {
        Some(JsonType::Integer) => "must be an integer",
        Some(JsonType::Number) => "must be a number",
        Some(JsonType::String) => "must be a string",
        Some(JsonType::Array) => "must be an array",
        Some(JsonType::Object) => "must be an object",
        Some(JsonType::Boolean) => "must be a boolean",
        Some(JsonType::Null) | None => "",
    }
}

fn only_null(kind: &TypeKind) -> bool {
    match kind {
        TypeKind::Single(t) => *t == JsonType::Null,
        TypeKind::Multiple(set) => set.iter().all(|t| t == JsonType::Null),
    }
}

fn limit_text(limit: &Value) -> String {
    match limit {
        Value::Number(n) => n.as_str().to_owned(),
        other => other.to_string(),
    }
}

/// The text of a pattern, by the pattern (each one is a constant of [`crate::schema`]).
fn pattern_rule(pattern: &str) -> String {
    match pattern {
        schema::DATE_TIME_PATTERN | schema::INSTANT_PATTERN => {
            "must be a valid ISO 8601 date string".to_owned()
        }
        schema::DATE_PATTERN => "must be a valid ISO 8601 date (YYYY-MM-DD)".to_owned(),
        schema::TEXT_PATTERN => "must not contain control characters".to_owned(),
        schema::LAT_PATTERN => "must be a latitude string between -90 and 90".to_owned(),
        schema::LNG_PATTERN => "must be a longitude string between -180 and 180".to_owned(),
        schema::URL_PATTERN => "must be a URL address".to_owned(),
        schema::EMAIL_PATTERN => "must be an email".to_owned(),
        other => format!("must match the pattern {other}"),
    }
}

fn format_rule(format: &str) -> String {
    match format {
        "email" => "must be an email".to_owned(),
        "uri" => "must be a URL address".to_owned(),
        "date-time" => "must be a valid ISO 8601 date string".to_owned(),
        other => format!("must be a valid {other}"),
    }
}

/// Whether an `anyOf` branch failed only for not being `null`: the other branch of an optional
/// field.
fn is_null_branch(errors: &[ValidationError<'_>], path: &jsonschema::paths::Location) -> bool {
    matches!(errors, [only] if only.instance_path() == path
        && matches!(only.kind(), ValidationErrorKind::Type { kind } if only_null(kind)))
}

/// Turns one jsonschema error into violations.
fn schema_violations(error: &ValidationError<'_>, report: &mut Report) {
    let path = Path::from_location(error.instance_path());
    let instance = error.instance();
    let schema_path = error.schema_path().as_str();
    match error.kind() {
        ValidationErrorKind::Required { property } => {
            let name = property.as_str().unwrap_or_default();
            report.push(&path.owned_key(name), EMPTY);
        }
        ValidationErrorKind::AdditionalProperties { unexpected }
        | ValidationErrorKind::UnevaluatedProperties { unexpected } => {
            for name in unexpected {
                report.violations.push(Violation {
                    path: path.owned_key(name),
                    text: Text::Unknown,
                });
            }
        }
        ValidationErrorKind::FalseSchema => report.violations.push(Violation {
            path,
            text: Text::Unknown,
        }),
        ValidationErrorKind::Type { kind } => {
            if instance.is_null() {
                report.push(&path, EMPTY);
            } else if only_null(kind) {
                // A field of the other penalty type (spec DatePenalty/OffsetPenalty, R-8.2).
                report.violations.push(Violation {
                    path,
                    text: Text::Unknown,
                });
            } else if path.0.is_empty() {
                report.push(&path, "must be a JSON object");
            } else {
                report.push(&path, type_name(kind));
            }
        }
        ValidationErrorKind::Enum { options } => {
            let allowed: Vec<&str> = options
                .as_array()
                .map(|o| o.iter().filter_map(Value::as_str).collect())
                .unwrap_or_default();
            if allowed == ACCEPTED_CURRENCIES {
                // R-1.2's own message rather than 154 codes; a non-string has its type message.
                if instance.is_string() {
                    report.push(&path, "must be a valid ISO 4217 currency code");
                }
                return;
            }
            report.push(
                &path,
                &format!(
                    "must be one of the following values: {}",
                    allowed.join(", ")
                ),
            );
        }
        ValidationErrorKind::Constant { expected_value } => {
            if schema_path.ends_with("/penalties/then/items/properties/type/const") {
                // only a valid type of the other kind is a mix; an unknown type already
                // has its enumeration message.
                if instance.as_str() == Some("OFFSET_PENALTY") {
                    let penalties = path.parent().parent();
                    let message = format!(
                        "{} must not mix DATE_PENALTY and OFFSET_PENALTY",
                        penalties.text()
                    );
                    report.push_whole(&penalties, message);
                }
            } else {
                report.push(&path, &format!("must be equal to {expected_value}"));
            }
        }
        ValidationErrorKind::Minimum { limit }
        | ValidationErrorKind::ExclusiveMinimum { limit } => {
            report.push(
                &path,
                &format!("must not be less than {}", limit_text(limit)),
            );
        }
        ValidationErrorKind::Maximum { limit }
        | ValidationErrorKind::ExclusiveMaximum { limit } => {
            report.push(
                &path,
                &format!("must not be greater than {}", limit_text(limit)),
            );
        }
        ValidationErrorKind::MinLength { limit } => {
            if *limit <= 1 {
                report.push(&path, EMPTY);
            } else {
                report.push(
                    &path,
                    &format!("must be longer than or equal to {limit} characters"),
                );
            }
        }
        ValidationErrorKind::MaxLength { limit } => report.push(
            &path,
            &format!("must be shorter than or equal to {limit} characters"),
        ),
        ValidationErrorKind::MinItems { limit } | ValidationErrorKind::MinProperties { limit } => {
            if *limit <= 1 {
                report.push(&path, EMPTY);
            } else {
                report.push(&path, &format!("must contain at least {limit} elements"));
            }
        }
        ValidationErrorKind::MaxItems { limit } | ValidationErrorKind::MaxProperties { limit } => {
            report.push(
                &path,
                &format!("must contain no more than {limit} elements"),
            );
        }
        ValidationErrorKind::Pattern { pattern } => report.push(&path, &pattern_rule(pattern)),
        ValidationErrorKind::Format { format } => report.push(&path, &format_rule(format)),
        ValidationErrorKind::UniqueItems => duplicate_entries(instance, &path, report),
        ValidationErrorKind::AnyOf { context } | ValidationErrorKind::OneOfNotValid { context } => {
            let branches: Vec<&Vec<ValidationError<'static>>> = context
                .iter()
                .filter(|errors| !is_null_branch(errors, error.instance_path()))
                .collect();
            // An enumeration whose values carry descriptions is generated as `oneOf` consts.
            let constants: Option<Vec<&str>> = branches
                .iter()
                .map(|errors| match errors.as_slice() {
                    [only] => match only.kind() {
                        ValidationErrorKind::Constant { expected_value } => expected_value.as_str(),
                        _ => None,
                    },
                    _ => None,
                })
                .collect();
            match (branches.as_slice(), constants) {
                ([only], _) => only.iter().for_each(|e| schema_violations(e, report)),
                ([_, _, ..], Some(allowed)) => report.push(
                    &path,
                    &format!(
                        "must be one of the following values: {}",
                        allowed.join(", ")
                    ),
                ),
                _ if schema_path.contains("Location") => {
                    report.push(&path, "must have street and house, or lat and lng");
                }
                _ => report.push(&path, "must match one of the allowed shapes"),
            }
        }
        ValidationErrorKind::PropertyNames { error: inner } => match inner.kind() {
            ValidationErrorKind::MinLength { .. } => {
                report.push(&path, "must not have an empty key");
            }
            ValidationErrorKind::MaxLength { limit } => report.push(
                &path,
                &format!("must not have a key longer than {limit} characters"),
            ),
            // The one text rule, for keys as for values.
            ValidationErrorKind::Pattern { pattern } if pattern == schema::TEXT_PATTERN => {
                report.push(&path, "must not have a key with control characters");
            }
            other => report.push(&path, &format!("has an invalid key ({})", other.keyword())),
        },
        other => report.push(&path, &format!("is invalid ({})", other.keyword())),
    }
}

/// every entry that repeats an earlier one, named by its index.
fn duplicate_entries(array: &Value, path: &Path, report: &mut Report) {
    let Some(entries) = array.as_array() else {
        return;
    };
    let mut seen: Vec<Decimal> = Vec::new();
    for (index, entry) in entries.iter().enumerate() {
        let Some(number) = entry
            .as_number()
            .and_then(|n| parse_json_number(n.as_str()).ok())
            .map(|d| d.normalize())
        else {
            continue;
        };
        if seen.contains(&number) {
            let entry_path = path.index(index);
            let message = format!(
                "{} item {number} is listed more than once",
                entry_path.text()
            );
            report.push_whole(&entry_path, message);
        } else {
            seen.push(number);
        }
    }
}
