"""Schemathesis hooks of `scripts/schemathesis.sh`, loaded through `schemathesis.toml`.

One check, `refusals_name_their_rule`. `schemathesis.toml` lets `positive_data_acceptance`
accept a 400 (or a 422) for a schema-valid request on the operations where the service refuses
it by a rule no JSON Schema can state: it depends on stored state or the clock, or on the digits
of a JSON number. This check keeps that allowance exact: every message of such a 400 or 422
must be one of the messages of those rules (docs/SPEC.md numbers beside them), so a schema-valid
request refused for any other reason — a rule the document could state but does not — still
fails the run.
"""

import re

import schemathesis

# Shapes of the field paths in messages (`items.0.period.end`, `itemsOrder.3`).
PATH = r"[A-Za-z][A-Za-z0-9]*(?:\.[A-Za-z0-9]+)*"

# more than 28 significant digits, or out of the decimal range.
DIGITS = rf"{PATH} must not have more than 28 significant digits"
# more decimals than the currency's minor unit.
DECIMALS = rf"{PATH} must not have more than [0-9]+ decimal places"
# a 400 lists at most 100 messages and then counts the rest.
MORE = r"… and [0-9]+ more"

CHECKOUT = [
    DIGITS,
    DECIMALS,
    MORE,
    # the end of a period before its start, as instants.
    rf"{PATH}\.period\.end must not be before {PATH}\.period\.start",
    # two penalties with the same `until` or the same offset.
    rf"{PATH}\.(?:until|offset) must not repeat {PATH}\.(?:until|offset)",
    # more than 100 recipients once both lists are merged.
    r"email\.recipients must contain no more than 100 elements",
    # issue 23: restrictedMethods names a method or brand the service does not know
    # (a case-insensitive list with blanks around names, checked in code so that the message
    # names the list).
    r"restrictedMethods must be a comma-separated list of payment methods and card brands: [a-z_, ]+",
]

CANCELLATION = [
    DIGITS,
    DECIMALS,
    MORE,
    # an item number that the transaction lacks, already cancelled, or listed twice
    # (a one-field multipart form cannot say "distinct" in a pattern).
    r"itemsOrder\.[0-9]+ item [0-9]+ does not exist",
    r"itemsOrder\.[0-9]+ item [0-9]+ is already cancelled",
    r"itemsOrder\.[0-9]+ item [0-9]+ is listed more than once",
    #
    r"contract status CANCELLED does not allow cancellation",
    #
    r"amount must not exceed the refundable amount [0-9.]+",
    r"amount must be 0 on an unpaid transaction",
]

PAYMENT = [
    # the clock.
    r"paidAt must not be in the future",
    # only a PENDING transaction with an active item is paid.
    r"contract status [A-Z_]+ does not allow payment",
    r"contract has no active items to pay",
]

EVENTS = [
    # The cursor is one of the caller's own events (docs/DECISIONS-events.md).
    r"after must be the id of one of your events",
]

# the same Idempotency-Key with another route or body.
IDEMPOTENCY = r"Idempotency-Key was already used with a different request"

# Per operation: the 400 messages allowed, and whether the 422 is.
ALLOWED = {
    "initializeTransaction": (CHECKOUT, True),
    "createTransaction": (CHECKOUT, True),
    "quoteCheckout": (CHECKOUT, False),
    "cancelItems": (CANCELLATION, True),
    "cancelItemsWithInvoice": (CANCELLATION, True),
    "cancelItemsByForm": (CANCELLATION, True),
    "previewRefund": (CANCELLATION, False),
    "sandboxPay": (PAYMENT, False),
    "listEvents": (EVENTS, False),
}

COMPILED = {
    operation: ([re.compile(pattern) for pattern in patterns], idempotent)
    for operation, (patterns, idempotent) in ALLOWED.items()
}


def _is_positive(case) -> bool:
    meta = case.meta
    if meta is None:
        return False
    # Request-shape probes of the coverage phase (another content type, a missing body) are
    # not schema-valid requests; positive_data_acceptance skips them too.
    try:
        from schemathesis.specs.openapi.checks import is_unexpected_http_status_case
    except ImportError:  # pragma: no cover - a Schemathesis without the helper
        is_unexpected_http_status_case = None
    if is_unexpected_http_status_case is not None and is_unexpected_http_status_case(case):
        return False
    return meta.generation.mode.is_positive


def _messages(response) -> list:
    try:
        body = response.json()
    except Exception:  # noqa: BLE001 - any unreadable body is reported as such
        return ["<a body that is not JSON>"]
    message = body.get("message") if isinstance(body, dict) else None
    if isinstance(message, list):
        return [str(m) for m in message]
    return [str(message)]


@schemathesis.check
def refusals_name_their_rule(ctx, response, case):
    """A 400 or 422 to a schema-valid request names only rules no schema can state."""
    if response.status_code not in (400, 422) or not _is_positive(case):
        return None
    operation_id = case.operation.definition.raw.get("operationId")
    allowed = COMPILED.get(operation_id)
    if allowed is None:
        # Not allowed at all for this operation: positive_data_acceptance reports it.
        return None
    patterns, idempotent = allowed
    messages = _messages(response)
    if response.status_code == 422:
        unexpected = [] if idempotent and messages == [IDEMPOTENCY] else messages
    else:
        unexpected = [m for m in messages if not any(p.fullmatch(m) for p in patterns)]
    if unexpected:
        raise AssertionError(
            f"{operation_id}: a schema-valid request was refused with {response.status_code} "
            "for a rule that is not one of those listed in schemathesis.toml: "
            + "; ".join(unexpected)
        )
    return None
