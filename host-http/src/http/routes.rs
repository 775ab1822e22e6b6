//! The route table: which method and path pattern is which operation, with the 404 and 405
//! answers of. New routes (the cancellation routes) are one more match arm here and one
//! more arm in `http::dispatch`.
//!
//! The path template of every route is written once, in [`paths`]: the route table answers it
//! for logs, metrics and idempotency keys, the OpenAPI document ([`super::openapi`])
//! describes the routes under it, and the links the service hands out are built from it. A test
//! holds the matcher to the templates, route by route.

use hyper::Method;

use super::error::ApiError;

/// The path template of each route, in the OpenAPI document's notation (`{transactionId}`
/// stands for one path segment). Named after the [`Route`] they belong to.
pub mod paths {
    /// [`super::Route::Health`].
    pub const HEALTH: &str = "/status";
    /// [`super::Route::Status`].
    pub const STATUS: &str = "/status/{transactionId}";
    /// [`super::Route::Initialize`].
    pub const INITIALIZE: &str = "/initialize";
    /// [`super::Route::Transactions`].
    pub const TRANSACTIONS: &str = "/transactions";
    /// [`super::Route::Update`].
    pub const UPDATE: &str = "/{transactionId}";
    /// [`super::Route::Quote`].
    pub const QUOTE: &str = "/quote";
    /// [`super::Route::OpenApi`].
    pub const OPEN_API: &str = "/openapi.json";
    /// [`super::Route::SandboxPay`].
    pub const SANDBOX_PAY: &str = "/sandbox/transactions/{transactionId}/pay";
    /// [`super::Route::Liveness`].
    pub const LIVENESS: &str = "/healthz";
    /// [`super::Route::Cancel`].
    pub const CANCEL: &str = "/cancel/{transactionId}";
    /// [`super::Route::CancelInvoice`].
    pub const CANCEL_INVOICE: &str = "/cancel/{transactionId}/invoice";
    /// [`super::Route::CancelForm`].
    pub const CANCEL_FORM: &str = "/cancel";
    /// [`super::Route::CancelQuote`].
    pub const CANCEL_QUOTE: &str = "/cancel/{transactionId}/quote";
    /// [`super::Route::FileUpload`].
    pub const FILE_UPLOAD: &str = "/files";
    /// [`super::Route::File`] and [`super::Route::FileDelete`].
    pub const FILE: &str = "/files/{fileId}";
    /// [`super::Route::FileRenew`].
    pub const FILE_RENEW: &str = "/files/{fileId}/renew";
    /// [`super::Route::SharedFile`].
    pub const SHARED_FILE: &str = "/files/shared/{token}";
    /// [`super::Route::Receipt`].
    pub const RECEIPT: &str = "/receipts/{receiptNumber}";
    /// [`super::Route::PaymentPage`] and [`super::Route::PaymentSubmit`].
    pub const PAYMENT_PAGE: &str = "/pay/{token}";
    /// [`super::Route::Stylesheet`].
    pub const STYLESHEET: &str = "/assets/checkout.css";
    /// [`super::Route::Events`].
    pub const EVENTS: &str = "/events";
    /// [`super::Route::StripePay`].
    pub const STRIPE_PAY: &str = "/pay/{token}/stripe";
    /// [`super::Route::StripeConfirm`].
    pub const STRIPE_CONFIRM: &str = "/pay/{token}/stripe/confirm";
    /// [`super::Route::StripeScript`].
    pub const STRIPE_SCRIPT: &str = "/assets/stripe-checkout.js";
    /// [`super::Route::StripeWebhook`].
    pub const STRIPE_WEBHOOK: &str = "/stripe/webhook/{providerId}";
    /// [`super::Route::Dashboard`]: the dashboard's pages, under one prefix.
    pub const DASHBOARD: &str = "/dashboard";
    /// The dashboard's cancellation form, an idempotent route of its own.
    pub const DASHBOARD_CANCEL: &str = "/dashboard/transactions/{transactionId}/cancel";

    /// A template with its one parameter filled in: `with_parameter(STATUS, id)` is the path
    /// of the status record of `id`. `value` is put in as it is, so it must be a valid path
    /// segment (ids and tokens are).
    pub fn with_parameter(template: &str, value: &str) -> String {
        match (template.find('{'), template.find('}')) {
            (Some(open), Some(close)) if open < close => {
                format!("{}{value}{}", &template[..open], &template[close + 1..])
            }
            _ => template.to_owned(),
        }
    }
}

/// The routes that take an `Idempotency-Key`: the two creation routes and the three
/// cancellation routes, and the dashboard's cancellation form (whose key is a hidden field).
/// Their templates are what the keys record, and the claims that the start-up releases.
pub const IDEMPOTENT_ROUTES: [&str; 6] = [
    paths::INITIALIZE,
    paths::TRANSACTIONS,
    paths::CANCEL,
    paths::CANCEL_INVOICE,
    paths::CANCEL_FORM,
    paths::DASHBOARD_CANCEL,
];

/// A matched route, with its path parameter (not yet checked to be a UUID).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// `GET /status` (spec endpoint 1).
    Health,
    /// `GET /status/{transactionId}`.
    Status(String),
    /// `POST /initialize` (spec endpoint 3).
    Initialize,
    /// `POST /transactions`, the same operation.
    Transactions,
    /// `PUT /{transactionId}`.
    Update(String),
    /// `POST /quote`: the engine's quote of a body, nothing stored.
    Quote,
    /// `GET /openapi.json`: the committed OpenAPI document.
    OpenApi,
    /// `POST /sandbox/transactions/{transactionId}/pay`, sandbox mode only.
    SandboxPay(String),
    /// `GET /healthz`: liveness probe without authentication or storage.
    Liveness,
    /// `PATCH /cancel/{transactionId}` (JSON, spec endpoint 4).
    Cancel(String),
    /// `PATCH /cancel/{transactionId}/invoice` (multipart, spec endpoint 5).
    CancelInvoice(String),
    /// `PATCH /cancel` (multipart with a `transactionId` field, spec endpoint 6, R-4.7).
    CancelForm,
    /// `POST /cancel/{transactionId}/quote`: the refund preview.
    CancelQuote(String),
    /// `POST /files`: upload an attachment.
    FileUpload,
    /// `GET /files/{fileId}`: a file, for its owner.
    File(String),
    /// `DELETE /files/{fileId}`: the owner deletes a shared file and its link.
    FileDelete(String),
    /// `POST /files/{fileId}/renew`: the owner renews a shared file's link.
    FileRenew(String),
    /// `GET /files/shared/{token}`: a shared file by its capability link, no credentials.
    SharedFile(String),
    /// `GET /receipts/{receiptNumber}`: a cancellation receipt.
    Receipt(String),
    /// `GET /pay/{token}`: the customer's payment page, by its capability token.
    PaymentPage(String),
    /// `POST /pay/{token}`: the payment form.
    PaymentSubmit(String),
    /// `GET /assets/checkout.css`: the payment page's stylesheet.
    Stylesheet,
    /// `GET /events`: the provider's events after a cursor.
    Events,
    /// `POST /pay/{token}/stripe`: a payment through Stripe, from the page's script.
    StripePay(String),
    /// `POST /pay/{token}/stripe/confirm`: after the customer's 3-D Secure.
    StripeConfirm(String),
    /// `GET /assets/stripe-checkout.js`: the Stripe page's script.
    StripeScript,
    /// `POST /stripe/webhook/{providerId}`: Stripe's events of one provider's account.
    StripeWebhook(String),
    /// Anything under `/dashboard`: the provider's dashboard, which routes its own pages
    /// ([`super::dashboard`]).
    Dashboard,
}

impl Route {
    /// The path template, as logged and as idempotency keys record it.
    pub fn template(&self) -> &'static str {
        match self {
            Route::Health => paths::HEALTH,
            Route::Status(_) => paths::STATUS,
            Route::Initialize => paths::INITIALIZE,
            Route::Transactions => paths::TRANSACTIONS,
            Route::Update(_) => paths::UPDATE,
            Route::Quote => paths::QUOTE,
            Route::OpenApi => paths::OPEN_API,
            Route::SandboxPay(_) => paths::SANDBOX_PAY,
            Route::Liveness => paths::LIVENESS,
            Route::Cancel(_) => paths::CANCEL,
            Route::CancelInvoice(_) => paths::CANCEL_INVOICE,
            Route::CancelForm => paths::CANCEL_FORM,
            Route::CancelQuote(_) => paths::CANCEL_QUOTE,
            Route::FileUpload => paths::FILE_UPLOAD,
            Route::File(_) | Route::FileDelete(_) => paths::FILE,
            Route::FileRenew(_) => paths::FILE_RENEW,
            Route::SharedFile(_) => paths::SHARED_FILE,
            Route::Receipt(_) => paths::RECEIPT,
            Route::PaymentPage(_) | Route::PaymentSubmit(_) => paths::PAYMENT_PAGE,
            Route::Stylesheet => paths::STYLESHEET,
            Route::Events => paths::EVENTS,
            Route::StripePay(_) => paths::STRIPE_PAY,
            Route::StripeConfirm(_) => paths::STRIPE_CONFIRM,
            Route::StripeScript => paths::STRIPE_SCRIPT,
            Route::StripeWebhook(_) => paths::STRIPE_WEBHOOK,
            Route::Dashboard => paths::DASHBOARD,
        }
    }
}

impl Route {
    /// The query parameters the route takes, as the OpenAPI document names them; any other is
    /// refused ([`super::request::check_query`]), as an unknown property of a body is.
    /// `None`: the route ignores what it does not read — the customer's HTML pages and their
    /// stylesheet, whose links a browser, a mail client or a tracker may decorate (`utm_*`).
    pub fn query_parameters(&self) -> Option<&'static [&'static str]> {
        match self {
            Route::PaymentPage(_)
            | Route::PaymentSubmit(_)
            | Route::Stylesheet
            | Route::StripePay(_)
            | Route::StripeConfirm(_)
            | Route::StripeScript
            | Route::Dashboard => None,
            Route::CancelQuote(_) => Some(&["at"]),
            Route::Events => Some(&["after", "limit"]),
            _ => Some(&[]),
        }
    }
}

/// Matches a request line to a route: unknown path → 404, known path with another method →
/// 405 naming the allowed methods.
pub fn route(method: &Method, path: &str, sandbox: bool) -> Result<Route, ApiError> {
    let segments: Vec<&str> = path.strip_prefix('/').unwrap_or(path).split('/').collect();
    // RFC 9110 §9.1: HEAD is served wherever GET is (hyper sends the head without the body);
    // R-8.3's 405 is for methods a route does not serve.
    let get = method == Method::GET || method == Method::HEAD;
    let (allow, matched) = match segments.as_slice() {
        ["status"] => ("GET", get.then_some(Route::Health)),
        ["status", id] => ("GET", get.then(|| Route::Status((*id).to_owned()))),
        ["initialize"] => (
            "POST",
            (method == Method::POST).then_some(Route::Initialize),
        ),
        ["transactions"] => (
            "POST",
            (method == Method::POST).then_some(Route::Transactions),
        ),
        ["quote"] => ("POST", (method == Method::POST).then_some(Route::Quote)),
        ["openapi.json"] => ("GET", get.then_some(Route::OpenApi)),
        ["healthz"] => ("GET", get.then_some(Route::Liveness)),
        ["sandbox", "transactions", id, "pay"] if sandbox => (
            "POST",
            (method == Method::POST).then(|| Route::SandboxPay((*id).to_owned())),
        ),
        ["cancel"] => (
            "PATCH",
            (method == Method::PATCH).then_some(Route::CancelForm),
        ),
        ["cancel", id] => (
            "PATCH",
            (method == Method::PATCH).then(|| Route::Cancel((*id).to_owned())),
        ),
        ["cancel", id, "invoice"] => (
            "PATCH",
            (method == Method::PATCH).then(|| Route::CancelInvoice((*id).to_owned())),
        ),
        ["cancel", id, "quote"] => (
            "POST",
            (method == Method::POST).then(|| Route::CancelQuote((*id).to_owned())),
        ),
        ["files"] => (
            "POST",
            (method == Method::POST).then_some(Route::FileUpload),
        ),
        ["files", "shared", token] => ("GET", get.then(|| Route::SharedFile((*token).to_owned()))),
        ["files", id] => (
            "GET, DELETE",
            if get {
                Some(Route::File((*id).to_owned()))
            } else {
                (method == Method::DELETE).then(|| Route::FileDelete((*id).to_owned()))
            },
        ),
        ["files", id, "renew"] => (
            "POST",
            (method == Method::POST).then(|| Route::FileRenew((*id).to_owned())),
        ),
        ["receipts", number] => ("GET", get.then(|| Route::Receipt((*number).to_owned()))),
        ["pay", token] => (
            "GET, POST",
            if get {
                Some(Route::PaymentPage((*token).to_owned()))
            } else {
                (method == Method::POST).then(|| Route::PaymentSubmit((*token).to_owned()))
            },
        ),
        ["assets", "checkout.css"] => ("GET", get.then_some(Route::Stylesheet)),
        ["pay", token, "stripe"] => (
            "POST",
            (method == Method::POST).then(|| Route::StripePay((*token).to_owned())),
        ),
        ["pay", token, "stripe", "confirm"] => (
            "POST",
            (method == Method::POST).then(|| Route::StripeConfirm((*token).to_owned())),
        ),
        ["assets", "stripe-checkout.js"] => ("GET", get.then_some(Route::StripeScript)),
        ["stripe", "webhook", provider] => (
            "POST",
            (method == Method::POST).then(|| Route::StripeWebhook((*provider).to_owned())),
        ),
        ["events"] => ("GET", get.then_some(Route::Events)),
        ["dashboard", ..] => ("GET, POST", Some(Route::Dashboard)),
        // `PUT /{transactionId}` catches every one-segment path: another method on a segment that
        // is not even a UUID is an unknown route (404), not a wrong method on this one (405).
        [id] if !id.is_empty() && (method == Method::PUT || uuid::Uuid::try_parse(id).is_ok()) => (
            "PUT",
            (method == Method::PUT).then(|| Route::Update((*id).to_owned())),
        ),
        _ => {
            return Err(ApiError::RouteNotFound {
                method: method.to_string(),
                path: path.to_owned(),
            });
        }
    };
    matched.ok_or(ApiError::MethodNotAllowed { allow })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_routes_match() {
        let id = "0190b6b0-7c3a-7d2e-9f00-000000000000";
        assert_eq!(
            route(&Method::GET, "/status", false).unwrap(),
            Route::Health
        );
        assert_eq!(
            route(&Method::GET, &format!("/status/{id}"), false).unwrap(),
            Route::Status(id.to_owned())
        );
        assert_eq!(
            route(&Method::POST, "/transactions", false).unwrap(),
            Route::Transactions
        );
        assert_eq!(
            route(&Method::PUT, &format!("/{id}"), false).unwrap(),
            Route::Update(id.to_owned())
        );
        assert_eq!(
            route(
                &Method::POST,
                &format!("/sandbox/transactions/{id}/pay"),
                true
            )
            .unwrap(),
            Route::SandboxPay(id.to_owned())
        );
    }

    /// Every route, with the method that reaches it; a route with a parameter holds `P`.
    fn every_route() -> Vec<(Method, Route)> {
        let p = || "0190b6b0-7c3a-7d2e-9f00-000000000000".to_owned();
        vec![
            (Method::GET, Route::Health),
            (Method::GET, Route::Status(p())),
            (Method::POST, Route::Initialize),
            (Method::POST, Route::Transactions),
            (Method::PUT, Route::Update(p())),
            (Method::POST, Route::Quote),
            (Method::GET, Route::OpenApi),
            (Method::POST, Route::SandboxPay(p())),
            (Method::GET, Route::Liveness),
            (Method::PATCH, Route::Cancel(p())),
            (Method::PATCH, Route::CancelInvoice(p())),
            (Method::PATCH, Route::CancelForm),
            (Method::POST, Route::CancelQuote(p())),
            (Method::POST, Route::FileUpload),
            (Method::GET, Route::File(p())),
            (Method::DELETE, Route::FileDelete(p())),
            (Method::POST, Route::FileRenew(p())),
            (Method::GET, Route::SharedFile(p())),
            (Method::GET, Route::Receipt(p())),
            (Method::GET, Route::PaymentPage(p())),
            (Method::POST, Route::PaymentSubmit(p())),
            (Method::GET, Route::Stylesheet),
            (Method::GET, Route::Events),
        ]
    }

    #[test]
    fn each_route_is_matched_at_its_template() {
        let id = "0190b6b0-7c3a-7d2e-9f00-000000000000";
        for (method, expected) in every_route() {
            let path = paths::with_parameter(expected.template(), id);
            assert_eq!(
                route(&method, &path, true).ok(),
                Some(expected),
                "{method} {path}"
            );
        }
    }

    #[test]
    fn idempotent_routes_are_the_creation_and_cancellation_routes_r_9_1() {
        assert_eq!(
            IDEMPOTENT_ROUTES,
            [
                Route::Initialize.template(),
                Route::Transactions.template(),
                Route::Cancel(String::new()).template(),
                Route::CancelInvoice(String::new()).template(),
                Route::CancelForm.template(),
                paths::DASHBOARD_CANCEL,
            ]
        );
    }

    #[test]
    fn the_links_of_the_application_layer_follow_the_templates() {
        // `app` builds payment links and file paths without importing `http`.
        let token = "t0k3n";
        assert_eq!(
            paths::with_parameter(paths::PAYMENT_PAGE, token),
            format!("{}{token}", crate::app::PAYMENT_PAGE_PREFIX)
        );
        let file = crate::app::files::FileRecord {
            id: "0190b6b0-7c3a-7d2e-9f00-000000000000".to_owned(),
            provider_id: String::new(),
            name: None,
            content_type: String::new(),
            size_bytes: 0,
            sha256_hex: String::new(),
            share_token: None,
            share_expires_at: None,
            content: Vec::new(),
            created_at: String::new(),
        };
        assert_eq!(
            crate::app::files::file_info(&file).url,
            paths::with_parameter(paths::FILE, &file.id)
        );
    }

    #[test]
    fn html_pages_alone_ignore_unknown_query_parameters() {
        let token = "abc";
        for (method, path) in [
            (Method::GET, format!("/pay/{token}")),
            (Method::POST, format!("/pay/{token}")),
            (Method::GET, "/assets/checkout.css".to_owned()),
        ] {
            let route = route(&method, &path, true).unwrap();
            assert_eq!(route.query_parameters(), None, "{path}");
        }
        let id = "0190b6b0-7c3a-7d2e-9f00-000000000000";
        for (method, path, known) in [
            (Method::GET, "/events".to_owned(), &["after", "limit"][..]),
            (Method::POST, format!("/cancel/{id}/quote"), &["at"][..]),
            (Method::GET, format!("/status/{id}"), &[][..]),
            (Method::GET, "/files/shared/x".to_owned(), &[][..]),
            (Method::GET, "/healthz".to_owned(), &[][..]),
        ] {
            let route = route(&method, &path, true).unwrap();
            assert_eq!(route.query_parameters(), Some(known), "{path}");
        }
    }

    #[test]
    fn head_matches_the_get_routes() {
        assert_eq!(
            route(&Method::HEAD, "/status", false).unwrap(),
            Route::Health
        );
        assert!(matches!(
            route(&Method::HEAD, "/initialize", false),
            Err(ApiError::MethodNotAllowed { allow: "POST" })
        ));
    }

    #[test]
    fn unknown_paths_are_404_and_wrong_methods_405_r_8_3() {
        assert!(matches!(
            route(&Method::GET, "/nope/deeper", false),
            Err(ApiError::RouteNotFound { .. })
        ));
        assert!(matches!(
            route(&Method::GET, "/", false),
            Err(ApiError::RouteNotFound { .. })
        ));
        assert!(matches!(
            route(&Method::POST, "/sandbox/transactions/x/pay", false),
            Err(ApiError::RouteNotFound { .. })
        ));
        assert!(matches!(
            route(&Method::DELETE, "/initialize", false),
            Err(ApiError::MethodNotAllowed { allow: "POST" })
        ));
        assert!(matches!(
            route(&Method::POST, "/status", false),
            Err(ApiError::MethodNotAllowed { allow: "GET" })
        ));
        // One segment: a UUID names `PUT /{transactionId}` (405 for other methods); anything
        // else is an unknown route for every method but PUT.
        assert!(matches!(
            route(&Method::GET, "/anything", false),
            Err(ApiError::RouteNotFound { .. })
        ));
        assert!(matches!(
            route(&Method::GET, "/0190b6b0-7c3a-7d2e-9f00-000000000000", false),
            Err(ApiError::MethodNotAllowed { allow: "PUT" })
        ));
        assert_eq!(
            route(&Method::PUT, "/anything", false).unwrap(),
            Route::Update("anything".to_owned())
        );
    }
}
