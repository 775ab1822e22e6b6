//! The dashboard's pages: what each template shows, filled in by the handlers (`super`).

use askama::Template;
use hyper::StatusCode;

use super::field;
use super::texts::DashTexts;

/// What every page shows around its content.
pub(super) struct Frame {
    pub(super) lang: &'static str,
    pub(super) t: &'static DashTexts,
    /// `{base}/dashboard`.
    pub(super) home: String,
    pub(super) other_lang_href: String,
    pub(super) other_lang_tag: &'static str,
    /// The signed-in user: e-mail, is admin, anti-forgery token.
    pub(super) user: Option<(String, bool, String)>,
}

#[derive(Template)]
#[template(path = "dashboard/sign_in.html")]
pub(super) struct SignInPage {
    pub(super) frame: Frame,
    pub(super) email: String,
    pub(super) notice: Option<String>,
    pub(super) error: Option<String>,
}

#[derive(Template)]
#[template(path = "dashboard/invitation.html")]
pub(super) struct InvitationPage {
    pub(super) frame: Frame,
    pub(super) action: String,
    pub(super) email: String,
    pub(super) errors: Vec<(&'static str, &'static str)>,
}

#[derive(Template)]
#[template(path = "dashboard/message.html")]
pub(super) struct MessagePage {
    pub(super) frame: Frame,
    pub(super) heading: &'static str,
    pub(super) text: String,
}

pub(super) struct Row {
    pub(super) href: String,
    pub(super) created: String,
    pub(super) reference: String,
    pub(super) title: String,
    pub(super) customer: String,
    pub(super) status: &'static str,
    pub(super) total: String,
    pub(super) refunded: String,
}

#[derive(Template)]
#[template(path = "dashboard/transactions.html")]
pub(super) struct ListPage {
    pub(super) frame: Frame,
    pub(super) statuses: Vec<(&'static str, &'static str, bool)>,
    pub(super) currency: String,
    pub(super) from: String,
    pub(super) until: String,
    pub(super) search: String,
    pub(super) rows: Vec<Row>,
    pub(super) filtered: bool,
    pub(super) older_href: Option<String>,
    pub(super) newest_href: Option<String>,
}

pub(super) struct ItemRow {
    /// The cancellation terms from now on, in words (active items).
    pub(super) terms: Vec<String>,
    /// The terms drawn as an SVG timeline (active items); only numbers of ours in it.
    pub(super) timeline: String,
    pub(super) order: u32,
    pub(super) name: String,
    pub(super) category: String,
    pub(super) status: &'static str,
    pub(super) total: String,
    pub(super) refunded: String,
}

pub(super) struct CancellationRow {
    pub(super) receipt: String,
    pub(super) created: String,
    pub(super) items: String,
    pub(super) refund: String,
    pub(super) outcome: String,
    /// The refund id (the gateway's idempotency key).
    pub(super) refund_id: String,
    /// The gateway's reference, or its reason for a failure.
    pub(super) gateway: String,
}

#[derive(Template)]
#[template(path = "dashboard/transaction.html")]
pub(super) struct TransactionPage {
    pub(super) frame: Frame,
    pub(super) back: String,
    pub(super) title: String,
    pub(super) reference: String,
    pub(super) status: &'static str,
    pub(super) created_summary: Vec<(&'static str, String)>,
    pub(super) items: Vec<ItemRow>,
    pub(super) payment: Vec<(&'static str, String)>,
    pub(super) payment_link: Option<(String, String)>,
    pub(super) cancellations: Vec<CancellationRow>,
    /// (kind, URL) of each attachment.
    pub(super) attachments: Vec<(String, String)>,
    pub(super) notice: Option<String>,
    pub(super) events: Vec<EventLine>,
    /// Whether the transaction has events before those shown.
    pub(super) earlier_events: bool,
    /// Whether the events table links each line's transaction (not on its own page).
    pub(super) linked: bool,
    /// For admins of a cancellable transaction: the cancel form's action and the active
    /// items (order, name).
    pub(super) cancel: Option<(String, Vec<(u32, String)>)>,
}

pub(super) struct EventLine {
    /// On the webhooks page: the transaction's page and its id.
    pub(super) transaction: Option<(String, String)>,
    pub(super) event_type: String,
    pub(super) at: String,
    pub(super) endpoint: String,
    pub(super) status: String,
    pub(super) attempts: String,
    pub(super) last_result: String,
    /// For admins, on a failed delivery: the "send again" form's action.
    pub(super) send_again: Option<String>,
    /// Each attempt in words (on a transaction's page): when, the answer, the duration.
    pub(super) log: Vec<String>,
}

pub(super) struct QuoteRow {
    pub(super) order: u32,
    pub(super) name: String,
    pub(super) total: String,
    pub(super) penalty: String,
    pub(super) refund: String,
}

#[derive(Template)]
#[template(path = "dashboard/cancel.html")]
pub(super) struct CancelPage {
    pub(super) frame: Frame,
    pub(super) back: String,
    pub(super) action: String,
    pub(super) title: String,
    pub(super) reference: String,
    pub(super) rows: Vec<QuoteRow>,
    pub(super) refund: String,
    pub(super) items: Vec<u32>,
    pub(super) key: String,
}

pub(super) struct UserLine {
    pub(super) id: String,
    pub(super) email: String,
    pub(super) is_admin: bool,
    pub(super) state: String,
    pub(super) is_self: bool,
}

#[derive(Template)]
#[template(path = "dashboard/users.html")]
pub(super) struct UsersPage {
    pub(super) frame: Frame,
    pub(super) users: Vec<UserLine>,
    pub(super) notice: Option<String>,
    pub(super) error: Option<String>,
    /// The one-time link of an invitation just made.
    pub(super) invitation: Option<String>,
    pub(super) invite_email: String,
}

pub(super) struct CredentialLine {
    pub(super) widget_id: String,
    pub(super) scopes: String,
    pub(super) created: String,
    pub(super) revoked: Option<String>,
    pub(super) revoke_href: String,
    /// When it was last used, to the minute, or "never".
    pub(super) last_used: String,
}

#[derive(Template)]
#[template(path = "dashboard/api.html")]
pub(super) struct ApiPage {
    pub(super) frame: Frame,
    pub(super) credentials: Vec<CredentialLine>,
    pub(super) notice: Option<String>,
    pub(super) error: Option<String>,
    /// A credential just made: (widget ID, secret), shown once.
    pub(super) issued: Option<(String, String)>,
    pub(super) scopes: [&'static str; 3],
    pub(super) processor: crate::app::dashboard::ProcessorView,
    /// Where the provider registers its Stripe webhook endpoint.
    pub(super) stripe_webhook_url: String,
}

/// A policy as the policies page shows it: in words and drawn for the example item.
pub(super) struct PolicyCard {
    /// "Default policy" or the category's name.
    pub(super) label: String,
    /// `default` or the category (`FLIGHT`).
    pub(super) scope: String,
    pub(super) edit_href: String,
    pub(super) reference: &'static str,
    pub(super) description: Option<String>,
    pub(super) terms: Vec<String>,
    pub(super) timeline: String,
}

#[derive(Template)]
#[template(path = "dashboard/policies.html")]
pub(super) struct PoliciesPage {
    pub(super) frame: Frame,
    pub(super) notice: Option<String>,
    pub(super) zone: String,
    /// The example the terms are shown for, in words.
    pub(super) example: String,
    pub(super) default_card: Option<PolicyCard>,
    pub(super) cards: Vec<PolicyCard>,
    /// Categories without a policy of their own: (API name, name).
    pub(super) other_categories: Vec<(String, &'static str)>,
    pub(super) new_default_href: String,
}

/// One penalty step of the policy form, as typed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct StepFields {
    pub(super) amount: String,
    pub(super) unit: String,
    pub(super) offset: String,
    pub(super) offset_unit: String,
    pub(super) until: String,
    /// A message names this step.
    pub(super) invalid: bool,
}

/// The policy form, as typed (every field a string, checked by the engine on preview or save).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct PolicyFields {
    pub(super) reference: String,
    pub(super) kind: String,
    pub(super) description: String,
    pub(super) steps: Vec<StepFields>,
}

/// Steps the form offers beyond those filled in.
const BLANK_STEPS: usize = 2;
/// The most steps a policy has.
pub(super) const MAX_STEPS: usize = 50;

impl PolicyFields {
    pub(super) fn of(policy: Option<&checkout_engine::api::CancellationPolicy>) -> PolicyFields {
        use checkout_engine::api::{PenaltyType, PolicyReference};
        let Some(policy) = policy else {
            return PolicyFields {
                reference: "PAYMENT_DATE".to_owned(),
                kind: "OFFSET_PENALTY".to_owned(),
                description: String::new(),
                steps: vec![StepFields::default(); BLANK_STEPS + 1],
            };
        };
        let name = |value: serde_json::Result<serde_json::Value>| {
            value
                .ok()
                .and_then(|v| v.as_str().map(str::to_owned))
                .unwrap_or_default()
        };
        let mut steps: Vec<StepFields> = policy
            .penalties
            .iter()
            .map(|penalty| StepFields {
                amount: penalty.value.amount.normalize().to_string(),
                unit: name(serde_json::to_value(penalty.value.unit)),
                offset: penalty
                    .offset
                    .as_ref()
                    .map(|o| o.amount.to_string())
                    .unwrap_or_default(),
                offset_unit: penalty
                    .offset
                    .as_ref()
                    .map(|o| name(serde_json::to_value(o.unit)))
                    .unwrap_or_default(),
                until: penalty.until.clone().unwrap_or_default(),
                invalid: false,
            })
            .collect();
        steps.extend(std::iter::repeat_n(StepFields::default(), BLANK_STEPS));
        PolicyFields {
            reference: match policy.reference {
                PolicyReference::PaymentDate => "PAYMENT_DATE",
                PolicyReference::StartPeriod => "START_PERIOD",
            }
            .to_owned(),
            kind: match policy.penalties.first().map(|p| p.penalty_type) {
                Some(PenaltyType::DatePenalty) => "DATE_PENALTY",
                _ => "OFFSET_PENALTY",
            }
            .to_owned(),
            description: policy.description.clone().unwrap_or_default(),
            steps,
        }
    }

    /// Reads the posted form: `reference`, `kind`, `description`, and per step `amount_N`,
    /// `unit_N`, `offset_N`, `offset_unit_N`, `until_N` (N from 0).
    pub(super) fn read(fields: &[(String, String)]) -> PolicyFields {
        let mut steps = Vec::new();
        for n in 0..MAX_STEPS {
            let get = |name: &str| field(fields, &format!("{name}_{n}"));
            if !fields
                .iter()
                .any(|(name, _)| name == &format!("amount_{n}"))
            {
                break;
            }
            steps.push(StepFields {
                amount: get("amount").trim().to_owned(),
                unit: get("unit"),
                offset: get("offset").trim().to_owned(),
                offset_unit: get("offset_unit"),
                until: get("until").trim().to_owned(),
                invalid: false,
            });
        }
        PolicyFields {
            reference: field(fields, "reference"),
            kind: field(fields, "kind"),
            description: field(fields, "description").trim().to_owned(),
            steps,
        }
    }

    /// The steps filled in (an amount typed).
    pub(super) fn filled(&self) -> impl Iterator<Item = (usize, &StepFields)> {
        self.steps
            .iter()
            .enumerate()
            .filter(|(_, step)| !step.amount.is_empty())
    }

    /// The policy as the API's JSON; a number typed is a JSON number, anything else stays a
    /// string so that the engine names the field.
    pub(super) fn json(&self) -> serde_json::Value {
        let number = |text: &str| match serde_json::from_str::<serde_json::Value>(text) {
            Ok(value @ serde_json::Value::Number(_)) => value,
            _ => serde_json::Value::String(text.to_owned()),
        };
        let date = self.kind == "DATE_PENALTY";
        let penalties: Vec<serde_json::Value> = self
            .filled()
            .map(|(_, step)| {
                let mut penalty = serde_json::json!({
                    "type": self.kind,
                    "value": {"amount": number(&step.amount), "unit": step.unit},
                });
                if date {
                    penalty["until"] = serde_json::Value::String(step.until.clone());
                } else {
                    penalty["offset"] =
                        serde_json::json!({"amount": number(&step.offset), "unit": step.offset_unit});
                }
                penalty
            })
            .collect();
        let mut policy = serde_json::json!({"reference": self.reference, "penalties": penalties});
        if !self.description.is_empty() {
            policy["description"] = serde_json::Value::String(self.description.clone());
        }
        policy
    }

    /// The engine's messages with each step named as the form shows it ("Step 2: …"); marks
    /// the steps they name.
    pub(super) fn explain(&mut self, messages: Vec<String>, step_word: &str) -> Vec<String> {
        let numbers: Vec<usize> = self.filled().map(|(n, _)| n).collect();
        messages
            .into_iter()
            .map(|message| {
                let mut message = message;
                // Penalty i of the JSON is the i-th filled step; the highest index first, so
                // that `penalties.1` does not match inside `penalties.10`.
                for (i, n) in numbers.iter().enumerate().rev() {
                    let path = format!("policy.penalties.{i}");
                    if message.contains(&path) {
                        self.steps[*n].invalid = true;
                        message = message
                            .replace(&format!("{path}."), &format!("{step_word} {}: ", n + 1))
                            .replace(&path, &format!("{step_word} {}", n + 1));
                    }
                }
                message.replace("policy.", "")
            })
            .collect()
    }
}

#[derive(Template)]
#[template(path = "dashboard/code.html")]
pub(super) struct CodePage {
    pub(super) frame: Frame,
    pub(super) csrf_token: String,
    pub(super) error: Option<String>,
}

#[derive(Template)]
#[template(path = "dashboard/security.html")]
pub(super) struct SecurityPage {
    pub(super) frame: Frame,
    pub(super) notice: Option<String>,
    pub(super) error: Option<String>,
    pub(super) view: crate::app::second_factor::SecurityView,
    /// The QR code of the setup under way (an SVG of ours).
    pub(super) qr: String,
    /// Recovery codes just made, shown once.
    pub(super) codes: Vec<String>,
}

/// What the policy form shows besides its frame.
pub(super) struct PolicyDraft {
    pub(super) status: StatusCode,
    pub(super) form: PolicyFields,
    pub(super) errors: Vec<String>,
    pub(super) preview: Option<(Vec<String>, String)>,
    pub(super) exists: bool,
    pub(super) example: String,
}

#[derive(Template)]
#[template(path = "dashboard/policy.html")]
pub(super) struct PolicyPage {
    pub(super) frame: Frame,
    pub(super) heading: String,
    pub(super) action: String,
    pub(super) back: String,
    pub(super) form: PolicyFields,
    pub(super) errors: Vec<String>,
    /// The terms of the policy typed, for the example item, and its timeline.
    pub(super) preview: Option<(Vec<String>, String)>,
    pub(super) example: String,
    /// Whether the scope has a policy now (which may be removed).
    pub(super) exists: bool,
}

/// A question before a change that cannot be undone: revoking a credential, removing an
/// endpoint.
#[derive(Template)]
#[template(path = "dashboard/confirm.html")]
pub(super) struct ConfirmPage {
    pub(super) frame: Frame,
    pub(super) heading: &'static str,
    /// What it is about (a widget ID, an endpoint).
    pub(super) subject: String,
    pub(super) question: &'static str,
    pub(super) button: &'static str,
    pub(super) action: String,
    pub(super) back: String,
}

pub(super) struct EndpointLine {
    pub(super) id: String,
    pub(super) url: String,
    pub(super) events: String,
    pub(super) created: String,
    /// Until when the previous secret still signs, after a rotation.
    pub(super) previous_until: Option<String>,
    pub(super) rotate_action: String,
    pub(super) remove_href: String,
}

#[derive(Template)]
#[template(path = "dashboard/webhooks.html")]
pub(super) struct WebhooksPage {
    pub(super) frame: Frame,
    pub(super) notice: Option<String>,
    pub(super) error: Option<String>,
    /// An endpoint just added or rotated: (endpoint id, secret), shown once.
    pub(super) issued: Option<(String, String)>,
    pub(super) endpoints: Vec<EndpointLine>,
    pub(super) event_types: &'static [&'static str],
    /// The URL typed, kept after a refusal.
    pub(super) url: String,
    pub(super) events: Vec<EventLine>,
    pub(super) linked: bool,
}

pub(super) struct CurrencyCard {
    pub(super) currency: String,
    pub(super) figures: Vec<(&'static str, String)>,
    pub(super) chart: String,
    pub(super) chart_label: String,
}

#[derive(Template)]
#[template(path = "dashboard/overview.html")]
pub(super) struct OverviewPage {
    pub(super) frame: Frame,
    pub(super) zone: String,
    pub(super) cards: Vec<CurrencyCard>,
    pub(super) counts: Vec<(&'static str, u64)>,
}

#[derive(Template)]
#[template(path = "dashboard/audit.html")]
pub(super) struct AuditPage {
    pub(super) frame: Frame,
    pub(super) entries: Vec<(String, String, String)>,
}
