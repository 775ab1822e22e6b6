//! The OpenAPI 3.1 document of every HTTP route, served at `GET /openapi.json` and committed as
//! `schemas/openapi.json`: operations, parameters, responses and the links between them, each
//! route under its template of [`super::routes::paths`]. The bodies are the engine's contract:
//! their schemas come from [`checkout_engine::schema::component_schemas`], and this module adds
//! the host's own (`FileUploaded`, the multipart forms).

use checkout_engine::api::MAX_EVENT_CURSOR_CHARS;
use checkout_engine::schema::{COMPONENTS, component_schemas};
use checkout_engine::text::TEXT_PATTERN;
use serde_json::{Map, Value, json};

use super::multipart::MAX_TEXT_CHARS;
use super::routes::paths;

/// Every document of `schemas/`, by file name, in a fixed order: the engine's body schemas, then
/// this document. `checkout-server schemas` writes each as [`schema_text`]; a test compares them
/// with the committed files.
pub fn schema_documents() -> Vec<(&'static str, Value)> {
    let mut documents = checkout_engine::schema::body_schemas();
    documents.push(("openapi.json", document()));
    documents
}

/// The exact text of a file of `schemas/`: pretty JSON and a line feed, so that the files are
/// byte-for-byte deterministic.
pub fn schema_text(document: &Value) -> Result<String, serde_json::Error> {
    let mut text = serde_json::to_string_pretty(document)?;
    text.push('\n');
    Ok(text)
}

fn schema_ref(name: &str) -> Value {
    json!({ "$ref": format!("{COMPONENTS}{name}") })
}

fn json_content(schema: Value) -> Value {
    json!({ "application/json": { "schema": schema } })
}

fn error_response(name: &str) -> Value {
    json!({ "$ref": format!("#/components/responses/{name}") })
}

/// The error responses of one operation, from their status codes.
fn errors(statuses: &[u16]) -> Map<String, Value> {
    statuses
        .iter()
        .map(|status| {
            let name = match status {
                400 => "BadRequest",
                401 => "Unauthorized",
                403 => "Forbidden",
                404 => "NotFound",
                409 => "Conflict",
                410 => "Gone",
                413 => "PayloadTooLarge",
                415 => "UnsupportedMediaType",
                422 => "UnprocessableEntity",
                _ => "InternalServerError",
            };
            (status.to_string(), error_response(name))
        })
        .collect()
}

fn ok_response(status: u16, description: &str, body: Value, replayable: bool) -> (String, Value) {
    let mut response = json!({ "description": description, "content": json_content(body) });
    if replayable {
        response["headers"] = json!({
            "Idempotent-Replayed": { "$ref": "#/components/headers/Idempotent-Replayed" }
        });
    }
    (status.to_string(), response)
}

struct Operation<'a> {
    id: &'a str,
    summary: &'a str,
    parameters: Vec<Value>,
    body: Option<Value>,
    ok: (String, Value),
    errors: &'a [u16],
}

impl Operation<'_> {
    fn to_value(&self) -> Value {
        let mut responses = Map::new();
        responses.insert(self.ok.0.clone(), self.ok.1.clone());
        responses.extend(errors(self.errors));
        // Every operation refuses a query parameter it does not document (R-8.1, R-8.2).
        responses.extend(errors(&[400]));
        let mut op = json!({
            "operationId": self.id,
            "summary": self.summary,
            "responses": responses,
        });
        if !self.parameters.is_empty() {
            op["parameters"] = Value::Array(self.parameters.clone());
        }
        if let Some(body) = &self.body {
            op["requestBody"] = body.clone();
        }
        op
    }
}

fn param(name: &str) -> Value {
    json!({ "$ref": format!("#/components/parameters/{name}") })
}

fn json_body(schema: &str) -> Value {
    json!({ "required": true, "content": json_content(schema_ref(schema)) })
}

/// One `itemsOrder` entry of a one-field form: an order number 1–500 (R-4.1, R-8.10).
const FORM_ORDER: &str = r"(?:[1-9][0-9]?|[1-4][0-9]{2}|500)";

/// A JSON number as the multipart forms read it (R-1.1): `amount`, not negative (R-4.3); a
/// negative zero is zero.
const FORM_NUMBER: &str =
    r"(?:-?0(?:\.0+)?(?:[eE][+-]?[0-9]+)?|(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?)";

/// The white space the forms trim around a value and around each comma-separated entry: what
/// Rust's `str::trim` removes (Unicode `White_Space`), spelled out, because `\s` means other
/// sets in other regex dialects.
const FORM_SPACE: &str =
    r"[\t\n\x0B\x0C\r \x85\xA0\u1680\u2000-\u200A\u2028\u2029\u202F\u205F\u3000]";

/// The white space of JSON (RFC 8259), allowed inside the one-field array form `[1,3]`.
const JSON_SPACE: &str = r"[ \t\n\r]";

/// The multipart form of a cancellation (R-4.6, R-4.7): the CancellationReq fields as form
/// fields, each part's schema exact. `itemsOrder` is repeated fields (an array, one part per
/// entry), one field holding a JSON array (`[1,3]`) or one comma-separated field (`1,3`).
fn multipart_cancel(with_transaction_id: bool, file_required: bool) -> Value {
    let mut properties = Map::new();
    let mut required = vec![json!("itemsOrder")];
    if with_transaction_id {
        properties.insert(
            "transactionId".to_owned(),
            json!({
                "type": "string",
                "format": "uuid",
                "pattern": "^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$",
                "description": "The contract to cancel, a lower-case hyphenated UUID (R-4.7, R-3.1)."
            }),
        );
        required.insert(0, json!("transactionId"));
    }
    // At most 500 entries (R-8.10): the first and 499 more.
    let one_field = format!(
        r"^{w}*(?:\[{j}*{n}(?:{j}*,{j}*{n}){{0,499}}{j}*\]|{n}(?:{w}*,{w}*{n}){{0,499}}){w}*$",
        n = FORM_ORDER,
        w = FORM_SPACE,
        j = JSON_SPACE
    );
    properties.insert(
        "itemsOrder".to_owned(),
        json!({
            "description": "Order numbers from 1 (R-4.1), distinct, at most 500: repeated fields (one part per entry, `itemsOrder[]` also accepted), one field holding a JSON array (`[1,3]`) or one comma-separated field (`1,3`) (R-4.7).",
            "oneOf": [
                {
                    "type": "array",
                    "items": { "type": "integer", "minimum": 1, "maximum": 500 },
                    "minItems": 1,
                    "maxItems": 500,
                    "uniqueItems": true
                },
                { "type": "string", "minLength": 1, "pattern": one_field }
            ]
        }),
    );
    properties.insert(
        "amount".to_owned(),
        json!({
            "type": "string",
            "pattern": format!(r"^{FORM_SPACE}*(?:{FORM_NUMBER})?{FORM_SPACE}*$"),
            "description": "Refund amount as a JSON number written exactly, at most the currency's decimals; empty or absent → the refundable amount (R-4.3, R-1.1)."
        }),
    );
    for (name, description) in [
        ("invoiceTitle", "Title of the cancellation invoice (R-4.6)."),
        (
            "invoiceNumber",
            "Number of the cancellation invoice (R-4.6).",
        ),
    ] {
        properties.insert(
            name.to_owned(),
            json!({
                "type": "string",
                "maxLength": MAX_TEXT_CHARS,
                "pattern": TEXT_PATTERN,
                "description": description
            }),
        );
    }
    properties.insert(
        "file".to_owned(),
        json!({
            "type": "string",
            "format": "binary",
            "contentMediaType": "application/octet-stream",
            "description": "Invoice file, any bytes, at most 10 MiB (R-4.6); its part's file name (UTF-8, RFC 7578) is kept without directories."
        }),
    );
    if file_required {
        required.push(json!("file"));
    }
    json!({
        "required": true,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "properties": properties,
                    "required": required,
                    "additionalProperties": false
                },
                "encoding": {
                    "itemsOrder": { "contentType": "text/plain" },
                    "file": { "contentType": "application/octet-stream" }
                }
            }
        }
    })
}

/// OpenAPI links that let a generic client walk the lifecycle: from a creation or a payment to
/// the routes of its transaction, from a cancellation to its receipt, from an upload to its
/// file and its shared link. A link to a cancellation or a refund preview also names item 1 in
/// `itemsOrder` (every transaction has it: R-2.4, R-4.1), merged into the body the client
/// makes, so that the walk reaches a real cancellation and its receipt rather than
/// `item 217 does not exist`.
fn add_links(path_items: &mut Map<String, Value>) {
    let by_transaction = |operation: &str| {
        json!({
            "operationId": operation,
            "parameters": { "transactionId": "$response.body#/transactionId" }
        })
    };
    // `requestBody` is the body to send, as OpenAPI defines it; Schemathesis would otherwise
    // merge it into a body it made, after the fact, also into one made to violate the schema,
    // and then hold the service to that violation.
    let whole_body = json!({ "merge_body": false });
    let first_item = |operation: &str| {
        let mut link = by_transaction(operation);
        link["requestBody"] = json!({ "itemsOrder": [1] });
        link["x-schemathesis"] = whole_body.clone();
        link
    };
    // The cancellation of item 1 of a transaction, sent again, is the same request: its
    // Idempotency-Key is the transaction's id, so a repeat replays the first answer (R-9.1)
    // instead of meeting `item 1 is already cancelled`.
    let key = "$response.body#/transactionId";
    let cancel_first_item = |operation: &str| {
        let mut link = first_item(operation);
        link["parameters"]["header.Idempotency-Key"] = json!(key);
        link
    };
    let to_transaction = json!({
        "GetTransactionStatus": by_transaction("getTransactionStatus"),
        "UpdateTransaction": by_transaction("updateTransaction"),
        "SandboxPay": by_transaction("sandboxPay"),
        "PreviewRefund": first_item("previewRefund"),
        "CancelItems": cancel_first_item("cancelItems"),
        "CancelItemsWithInvoice": cancel_first_item("cancelItemsWithInvoice"),
        "CancelItemsByForm": {
            "operationId": "cancelItemsByForm",
            "parameters": { "header.Idempotency-Key": key },
            "requestBody": {
                "transactionId": "$response.body#/transactionId",
                "itemsOrder": [1],
                "file": "invoice"
            },
            "x-schemathesis": whole_body
        }
    });
    let from_creation = &to_transaction;
    let mut from_payment = to_transaction.clone();
    if let Some(links) = from_payment.as_object_mut() {
        links.remove("SandboxPay");
    }
    let to_receipt = json!({
        "GetReceipt": {
            "operationId": "getReceipt",
            "parameters": { "receiptNumber": "$response.body#/receiptNumber" }
        }
    });
    let by_file = |operation: &str| {
        json!({
            "operationId": operation,
            "parameters": { "fileId": "$response.body#/fileId" }
        })
    };
    let from_upload = json!({
        "GetFile": by_file("getFile"),
        "RenewFileLink": by_file("renewFileLink"),
        "DeleteFile": by_file("deleteFile"),
        "GetSharedFile": {
            "operationId": "getSharedFile",
            "parameters": { "token": "$response.body#/token" }
        }
    });
    let targets = [
        (paths::INITIALIZE, "post", "201", from_creation),
        (paths::TRANSACTIONS, "post", "201", from_creation),
        (paths::SANDBOX_PAY, "post", "200", &from_payment),
        (paths::CANCEL, "patch", "200", &to_receipt),
        (paths::CANCEL_INVOICE, "patch", "200", &to_receipt),
        (paths::CANCEL_FORM, "patch", "200", &to_receipt),
        (paths::FILE_UPLOAD, "post", "201", &from_upload),
        (paths::FILE_RENEW, "post", "200", &from_upload),
    ];
    for (path, method, status, links) in targets {
        if let Some(response) = path_items
            .get_mut(path)
            .and_then(|p| p.get_mut(method))
            .and_then(|o| o.get_mut("responses"))
            .and_then(|r| r.get_mut(status))
        {
            response["links"] = links.clone();
        }
    }
}

/// The OpenAPI 3.1 document of every route of the spec and of the rulings.
pub fn document() -> Value {
    let cancel_errors: &[u16] = &[400, 401, 403, 404, 409, 413, 415, 422, 500];
    let cancel_ok = || {
        ok_response(
            200,
            "The cancellation outcome: SUCCESS, or FAILED with errorMessage when the gateway declines (R-4.8).",
            schema_ref("CancellationResult"),
            true,
        )
    };
    let create = |id: &'static str, summary: &'static str| Operation {
        id,
        summary,
        parameters: vec![param("Idempotency-Key")],
        body: Some(json_body("CorporateCheckout")),
        ok: ok_response(201, "Transaction created.", schema_ref("Created"), true),
        errors: &[400, 401, 403, 409, 413, 415, 422, 500],
    };
    let operations: Vec<(&str, &str, Operation<'_>)> = vec![
        (
            paths::HEALTH,
            "get",
            Operation {
                id: "healthCheck",
                summary: "Confirms the connection and returns the provider of the credentials.",
                parameters: vec![],
                body: None,
                ok: ok_response(
                    200,
                    "Connection established.",
                    schema_ref("HealthStatus"),
                    false,
                ),
                errors: &[401, 403, 500],
            },
        ),
        (
            paths::STATUS,
            "get",
            Operation {
                id: "getTransactionStatus",
                summary: "Status record of a transaction (R-10).",
                parameters: vec![param("transactionId")],
                body: None,
                ok: ok_response(200, "The status record.", schema_ref("StatusRecord"), false),
                errors: &[400, 401, 403, 404, 500],
            },
        ),
        (
            paths::INITIALIZE,
            "post",
            create("initializeTransaction", "Creates a transaction."),
        ),
        (
            paths::TRANSACTIONS,
            "post",
            create(
                "createTransaction",
                "Creates a transaction; the same operation as POST /initialize (R-8.5).",
            ),
        ),
        (
            paths::UPDATE,
            "put",
            Operation {
                id: "updateTransaction",
                summary: "Replaces the given descriptive fields of a transaction (R-8.6).",
                parameters: vec![param("transactionId")],
                body: Some(json_body("UpdateTransaction")),
                ok: ok_response(
                    200,
                    "Transaction updated.",
                    schema_ref("UpdateResult"),
                    false,
                ),
                errors: &[400, 401, 403, 404, 413, 415, 500],
            },
        ),
        (
            paths::CANCEL,
            "patch",
            Operation {
                id: "cancelItems",
                summary: "Cancels items and refunds them by their cancellation policy (R-4).",
                parameters: vec![param("transactionId"), param("Idempotency-Key")],
                body: Some(json_body("CancellationReq")),
                ok: cancel_ok(),
                errors: cancel_errors,
            },
        ),
        (
            paths::CANCEL_INVOICE,
            "patch",
            Operation {
                id: "cancelItemsWithInvoice",
                summary: "Cancels items with an optional invoice file (R-4.6).",
                parameters: vec![param("transactionId"), param("Idempotency-Key")],
                body: Some(multipart_cancel(false, false)),
                ok: cancel_ok(),
                errors: cancel_errors,
            },
        ),
        (
            paths::CANCEL_FORM,
            "patch",
            Operation {
                id: "cancelItemsByForm",
                summary: "Cancels items of the contract named by the form field transactionId, with an invoice file (R-4.7).",
                parameters: vec![param("Idempotency-Key")],
                body: Some(multipart_cancel(true, true)),
                ok: cancel_ok(),
                errors: cancel_errors,
            },
        ),
        (
            paths::CANCEL_QUOTE,
            "post",
            Operation {
                id: "previewRefund",
                summary: "What a cancellation at `at` would refund, without changing anything (R-11).",
                parameters: vec![param("transactionId"), param("at")],
                body: Some(json_body("CancellationReq")),
                ok: ok_response(
                    200,
                    "The refund preview.",
                    schema_ref("RefundPreview"),
                    false,
                ),
                errors: &[400, 401, 403, 404, 413, 415, 500],
            },
        ),
        (
            paths::QUOTE,
            "post",
            Operation {
                id: "quoteCheckout",
                summary: "Item totals and taxes of a checkout, without creating it (R-2).",
                parameters: vec![],
                body: Some(json_body("CorporateCheckout")),
                ok: ok_response(200, "The quote.", schema_ref("QuoteResult"), false),
                errors: &[400, 401, 403, 413, 415, 500],
            },
        ),
        (
            paths::OPEN_API,
            "get",
            Operation {
                id: "getOpenApi",
                summary: "This document.",
                parameters: vec![],
                body: None,
                ok: ok_response(
                    200,
                    "The OpenAPI 3.1 document.",
                    json!({ "type": "object" }),
                    false,
                ),
                errors: &[401, 500],
            },
        ),
        (
            paths::SANDBOX_PAY,
            "post",
            Operation {
                id: "sandboxPay",
                summary: "Sandbox only: records the payment of a PENDING transaction (R-3.6).",
                parameters: vec![param("transactionId")],
                body: Some(json_body("PaymentReq")),
                ok: ok_response(
                    200,
                    "The status record after payment.",
                    schema_ref("StatusRecord"),
                    false,
                ),
                errors: &[400, 401, 403, 404, 413, 415, 500],
            },
        ),
        (
            paths::FILE_UPLOAD,
            "post",
            Operation {
                id: "uploadFile",
                summary: "Uploads a file (at most 10 MiB) to use as an attachment URL.",
                parameters: vec![],
                body: Some(json!({
                    "required": true,
                    "content": {
                        "multipart/form-data": {
                            "schema": {
                                "type": "object",
                                "description": "Exactly one part, named `file`. Part names are UTF-8 (RFC 7578 §5.1) and compared exactly: any other part, ASCII-named or not, is a 400 naming it (`property <name> should not exist`).",
                                "properties": {
                                    "file": {
                                        "type": "string",
                                        "format": "binary",
                                        "contentMediaType": "application/octet-stream",
                                        "description": "The file, any bytes, at most 10 MiB; a part with neither bytes nor a file name counts as absent (what a browser sends for an empty file input); its part's `Content-Type` is kept (default `application/octet-stream`) and its file name (UTF-8, RFC 7578) without directories."
                                    }
                                },
                                "required": ["file"],
                                "additionalProperties": false
                            },
                            "encoding": { "file": { "contentType": "application/octet-stream" } }
                        }
                    }
                })),
                ok: ok_response(201, "File stored.", schema_ref("FileUploaded"), false),
                errors: &[400, 401, 403, 413, 415, 500],
            },
        ),
        (
            paths::FILE,
            "get",
            Operation {
                id: "getFile",
                summary: "Downloads an uploaded file.",
                parameters: vec![param("fileId")],
                body: None,
                ok: (
                    "200".to_owned(),
                    json!({
                        "description": "The file's bytes, as a sandboxed download: `Content-Disposition: attachment` with the client's file name (`filename*=UTF-8''…` when it is not ASCII, RFC 6266), `Content-Security-Policy: sandbox`, `X-Content-Type-Options: nosniff`.",
                        "headers": {
                            "Content-Disposition": { "schema": { "type": "string" } },
                            "Content-Security-Policy": { "schema": { "type": "string", "const": "sandbox" } }
                        },
                        "content": {
                            "application/octet-stream": {
                                "schema": { "type": "string", "contentMediaType": "application/octet-stream" }
                            }
                        }
                    }),
                ),
                errors: &[401, 403, 404, 500],
            },
        ),
        (
            paths::EVENTS,
            "get",
            Operation {
                id: "listEvents",
                summary: "The provider's events after a cursor, oldest first: the same payloads webhooks deliver, to poll or replay.",
                parameters: vec![param("after"), param("limit")],
                body: None,
                ok: ok_response(200, "A page of events.", schema_ref("EventPage"), false),
                errors: &[400, 401, 403, 500],
            },
        ),
        (
            paths::FILE,
            "delete",
            Operation {
                id: "deleteFile",
                summary: "Deletes a file uploaded with POST /files, its content and its shared link (which then answers 404). An invoice file of a cancellation is kept with its receipt (409).",
                parameters: vec![param("fileId")],
                body: None,
                ok: ("204".to_owned(), json!({ "description": "Deleted." })),
                errors: &[401, 403, 404, 409, 500],
            },
        ),
        (
            paths::FILE_RENEW,
            "post",
            Operation {
                id: "renewFileLink",
                summary: "The shared link of a file uploaded with POST /files works for another lifetime (`--file-link-ttl-secs`, default 30 days) from now, under the same URL; an expired link may be renewed. An invoice file has no link (409).",
                parameters: vec![param("fileId")],
                body: None,
                ok: ok_response(
                    200,
                    "The link and its new expiry.",
                    schema_ref("FileUploaded"),
                    false,
                ),
                errors: &[401, 403, 404, 409, 500],
            },
        ),
        (
            paths::RECEIPT,
            "get",
            Operation {
                id: "getReceipt",
                summary: "The receipt of a cancellation (R-4.8 step 5).",
                parameters: vec![param("receiptNumber")],
                body: None,
                ok: ok_response(
                    200,
                    "The cancellation receipt.",
                    json!({ "type": "object" }),
                    false,
                ),
                errors: &[401, 403, 404, 500],
            },
        ),
    ];

    let mut path_items = Map::new();
    for (path, method, operation) in operations {
        let entry = path_items
            .entry(path.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(methods) = entry {
            methods.insert(method.to_owned(), operation.to_value());
        }
    }

    add_links(&mut path_items);

    // Liveness: no credentials, no storage touched (for load balancers and orchestrators).
    path_items.insert(
        paths::LIVENESS.to_owned(),
        json!({
            "get": {
                "operationId": "getLiveness",
                "summary": "Liveness probe: answers as long as the process serves requests; touches no storage and needs no credentials (readiness with credentials is GET /status).",
                "security": [],
                "responses": {
                    "200": {
                        "description": "The process serves requests.",
                        "content": {
                            "application/json": {
                                "schema": {
                                    "type": "object",
                                    "required": ["status"],
                                    "properties": { "status": { "type": "string", "const": "ok" } },
                                    "additionalProperties": false
                                }
                            }
                        }
                    }
                }
            }
        }),
    );

    // The capability link of a shared file: no credentials, the token is the permission.
    path_items.insert(
        paths::SHARED_FILE.to_owned(),
        json!({
            "get": {
                "operationId": "getSharedFile",
                "summary": "A file uploaded with POST /files, by its capability link (`FileUploaded.url`), without credentials, until the link expires.",
                "security": [],
                "parameters": [{
                    "name": "token",
                    "in": "path",
                    "required": true,
                    "description": "256 random bits, hex.",
                    "schema": { "type": "string", "pattern": "^[0-9a-f]{64}$" }
                }],
                "responses": {
                    "200": {
                        "description": "The file's bytes, as a sandboxed download (see getFile).",
                        "headers": {
                            "Content-Disposition": { "schema": { "type": "string" } },
                            "Content-Security-Policy": { "schema": { "type": "string", "const": "sandbox" } }
                        },
                        "content": {
                            "application/octet-stream": {
                                "schema": { "type": "string", "contentMediaType": "application/octet-stream" }
                            }
                        }
                    },
                    "400": error_response("BadRequest"),
                    "404": error_response("NotFound"),
                    "410": error_response("Gone"),
                    "500": error_response("InternalServerError")
                }
            }
        }),
    );

    let error_body = |description: &str| json!({ "description": description, "content": json_content(schema_ref("ErrorBody")) });
    let mut unauthorized = error_body(
        "Missing, malformed or wrong credentials, or a transaction of another provider (R-7.2, R-7.4).",
    );
    unauthorized["headers"] = json!({
        "WWW-Authenticate": {
            "description": "Always `Basic realm=\"checkout\"` (R-7.2).",
            "schema": { "type": "string", "const": "Basic realm=\"checkout\"" }
        }
    });

    json!({
        "openapi": "3.1.0",
        "jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
        "info": {
            "title": "Corporate checkout transaction service",
            "version": env!("CARGO_PKG_VERSION"),
            "description": "Creates corporate checkout transactions, reports their status, updates them and cancels items with refunds by their cancellation policies. Every error body has message, error and statusCode (R-8.1); for 400, message lists every violation. An operation takes only the query parameters it documents, each at most once: any other is a 400 that names it (`query parameter foo should not exist`), as an unknown body property is (R-8.2)."
        },
        "servers": [{ "url": "/" }],
        "security": [{ "basicAuth": [] }],
        "paths": path_items,
        "components": {
            "securitySchemes": {
                "basicAuth": {
                    "type": "http",
                    "scheme": "basic",
                    "description": "Username: widget ID; password: backend secret (spec Authentication, R-7.1)."
                }
            },
            "parameters": {
                "transactionId": {
                    "name": "transactionId",
                    "in": "path",
                    "required": true,
                    "description": "Lower-case hyphenated UUID (R-3.1).",
                    "schema": { "type": "string", "format": "uuid" }
                },
                "fileId": {
                    "name": "fileId",
                    "in": "path",
                    "required": true,
                    "description": "Lower-case hyphenated UUID, the `fileId` of `POST /files` or of a receipt's invoice file.",
                    "schema": { "type": "string", "format": "uuid" }
                },
                "receiptNumber": {
                    "name": "receiptNumber",
                    "in": "path",
                    "required": true,
                    "description": "Receipt number, e.g. `CR-000042`.",
                    "schema": { "type": "string" }
                },
                "at": {
                    "name": "at",
                    "in": "query",
                    "required": false,
                    "description": "RFC 3339 instant of the preview; default now (R-11.1).",
                    "schema": { "type": "string", "format": "date-time" }
                },
                "after": {
                    "name": "after",
                    "in": "query",
                    "required": false,
                    "description": "Id of the last event already seen (`evt_` and 32 hex digits); the page starts after it. Absent or empty: from the first event. An id that is not one of the caller's events is a 400, as is a cursor over 100 characters (counted in characters, not bytes).",
                    "schema": { "type": "string", "maxLength": MAX_EVENT_CURSOR_CHARS, "pattern": "^(?:evt_[0-9a-f]{32})?$" }
                },
                "limit": {
                    "name": "limit",
                    "in": "query",
                    "required": false,
                    "description": "Most events on the page, 1 to 100 (default 100).",
                    "schema": { "type": "integer", "minimum": 1, "maximum": 100 }
                },
                "Idempotency-Key": {
                    "name": "Idempotency-Key",
                    "in": "header",
                    "required": false,
                    "description": "1–255 printable ASCII characters; a repeat with the same route and body replays the first response (R-9.1).",
                    "schema": { "type": "string", "minLength": 1, "maxLength": 255, "pattern": "^[\\x20-\\x7E]+$" }
                }
            },
            "headers": {
                "Idempotent-Replayed": {
                    "description": "`true` when the response is the stored response of an earlier request with the same Idempotency-Key (R-9.1).",
                    "schema": { "type": "string", "const": "true" }
                }
            },
            "responses": {
                "BadRequest": error_body("Invalid request data, or a query parameter the operation does not document: message lists every violation (R-8.1, R-8.2, R-8.9)."),
                "Unauthorized": unauthorized,
                "Forbidden": error_body("The credential lacks the scope of the route (R-7.3)."),
                "NotFound": error_body("Contract (or route, file, receipt) not found (R-7.4, R-8.3)."),
                "MethodNotAllowed": error_body("The route exists but not with this method (R-8.3)."),
                "Conflict": error_body("A request with the same Idempotency-Key is still running (R-9.1), or (file routes) the file is a cancellation's invoice, kept with its receipt."),
                "Gone": error_body("The link has expired; its owner may renew it."),
                "PayloadTooLarge": error_body("JSON body over 1 MiB or file over 10 MiB (R-4.6, R-8.3)."),
                "UnsupportedMediaType": error_body("Wrong Content-Type (R-8.3)."),
                "UnprocessableEntity": error_body("The Idempotency-Key was used with another route or body (R-9.1)."),
                "InternalServerError": error_body("Internal or store failure (R-4.8).")
            },
            "schemas": schemas()
        }
    })
}

/// `components/schemas`: the engine's bodies and the host's own, by name.
fn schemas() -> Map<String, Value> {
    let mut schemas = component_schemas();
    schemas.insert("FileUploaded".to_owned(), file_uploaded());
    schemas.sort_keys();
    schemas
}

/// The body of [`super::files::Uploaded`].
fn file_uploaded() -> Value {
    json!({
        "type": "object",
        "description": "201 body of `POST /files` and 200 body of `POST /files/{fileId}/renew`: the stored file, the URL to use as `Attachment.url` (a capability link that needs no credentials) and when that link stops working unless its owner renews it.",
        "properties": {
            "fileId": { "type": "string", "format": "uuid" },
            "url": { "type": "string", "format": "uri" },
            "token": {
                "type": "string",
                "pattern": "^[0-9a-f]{64}$",
                "description": "The capability token that ends `url`: the `token` of `GET /files/shared/{token}`."
            },
            "expiresAt": { "type": "string", "format": "date-time" }
        },
        "required": ["fileId", "url", "token", "expiresAt"]
    })
}
