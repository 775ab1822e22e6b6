//! The OpenAPI document as a generic client reads it: its links lead from a creation to the
//! routes of the transaction, from a cancellation to its receipt and from an upload to its
//! file, each naming an operation and parameters that exist and a response property that is
//! there; the multipart parts say exactly which forms the service reads.

use serde_json::{Value, json};

fn document() -> Value {
    engine::schema::openapi()
}

/// Every operation by its id: (path, method, operation).
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let mut found = Vec::new();
    for (path, methods) in doc["paths"].as_object().expect("paths") {
        for (method, operation) in methods.as_object().expect("methods") {
            found.push((path.clone(), method.clone(), operation.clone()));
        }
    }
    found
}

fn resolve<'a>(doc: &'a Value, value: &'a Value) -> &'a Value {
    match value["$ref"].as_str() {
        Some(reference) => doc
            .pointer(reference.trim_start_matches('#'))
            .unwrap_or_else(|| panic!("unresolved {reference}")),
        None => value,
    }
}

#[test]
fn links_walk_the_lifecycle_through_operations_that_exist() {
    let doc = document();
    let operations = operations(&doc);
    let by_id = |id: &str| {
        operations
            .iter()
            .find(|(_, _, op)| op["operationId"] == id)
            .unwrap_or_else(|| panic!("no operation {id}"))
    };
    let mut walked = Vec::new();
    for (path, method, operation) in &operations {
        for (status, response) in operation["responses"].as_object().expect("responses") {
            let Some(links) = response.get("links").and_then(Value::as_object) else {
                continue;
            };
            let schema = resolve(
                &doc,
                &resolve(&doc, response)["content"]["application/json"]["schema"],
            );
            for (name, link) in links {
                let target = link["operationId"].as_str().expect("operationId");
                let (_, _, target_op) = by_id(target);
                let target_params: Vec<String> = target_op["parameters"]
                    .as_array()
                    .into_iter()
                    .flatten()
                    .map(|p| resolve(&doc, p)["name"].as_str().unwrap_or("").to_owned())
                    .collect();
                for (param, expression) in link["parameters"].as_object().expect("parameters") {
                    assert!(
                        target_params.contains(param),
                        "{method} {path} {status} link {name}: {target} has no parameter {param}"
                    );
                    let property = expression
                        .as_str()
                        .and_then(|e| e.strip_prefix("$response.body#/"))
                        .expect("a $response.body pointer");
                    assert!(
                        schema["properties"].get(property).is_some(),
                        "{method} {path} {status} link {name}: the response has no {property}"
                    );
                }
                walked.push(format!("{method} {path} -> {target}"));
            }
        }
    }
    for expected in [
        "post /initialize -> getTransactionStatus",
        "post /initialize -> updateTransaction",
        "post /initialize -> sandboxPay",
        "post /initialize -> previewRefund",
        "post /initialize -> cancelItems",
        "post /initialize -> cancelItemsWithInvoice",
        "post /transactions -> getTransactionStatus",
        "patch /cancel/{transactionId} -> getReceipt",
        "patch /cancel/{transactionId}/invoice -> getReceipt",
        "patch /cancel -> getReceipt",
        "post /files -> getFile",
        "post /files -> renewFileLink",
        "post /files -> deleteFile",
    ] {
        assert!(
            walked.iter().any(|w| w == expected),
            "missing link {expected}"
        );
    }
}

#[test]
fn the_multipart_items_order_schema_accepts_the_three_forms_of_r_4_7_and_nothing_else() {
    let doc = document();
    let schema = doc["paths"]["/cancel"]["patch"]["requestBody"]["content"]["multipart/form-data"]
        ["schema"]["properties"]["itemsOrder"]
        .clone();
    let validator = jsonschema::validator_for(&schema).expect("a valid schema");
    for accepted in [
        json!([1, 3]),
        json!([2]),
        json!("1,3"),
        json!(" 4, 5 "),
        json!("[1,3]"),
        json!("[ 3 ]"),
        json!("7"),
        json!("500"),
        json!("[99,100,499]"),
    ] {
        assert!(validator.is_valid(&accepted), "{accepted} refused");
    }
    for refused in [
        json!([]),
        json!([0]),
        json!([1, 1]),
        json!(""),
        json!("[]"),
        json!("a"),
        json!("1,,3"),
        json!("-1"),
        json!("01"),
        json!("0"),
        json!("1.5"),
        json!("501"),
        json!("[1,501]"),
        json!("[1,3"),
    ] {
        assert!(!validator.is_valid(&refused), "{refused} accepted");
    }
    let form = &doc["paths"]["/cancel"]["patch"]["requestBody"]["content"]["multipart/form-data"]["schema"];
    assert_eq!(
        form["required"],
        json!(["transactionId", "itemsOrder", "file"])
    );
    assert_eq!(form["properties"]["transactionId"]["format"], "uuid");
    assert_eq!(form["additionalProperties"], false);
}
