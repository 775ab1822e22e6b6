#!/usr/bin/env python3
"""Prints the creation body of the load runs (scripts/load.sh, scripts/cpu-by-thread.sh): two
items, a four-step policy each, refIDs, a note and attachments, about 2.8 KB (the size the
performance targets name)."""
import json
item = lambda name, category, price, extra: {
    "name": name, "category": category, "price": price,
    "taxes": [{"value": 19, "unit": "PERCENT"}],
    "period": {"start": "2027-03-01T10:00:00", "end": "2027-03-04T09:00:00", "startTimeZone": "Europe/Berlin"},
    "cancellationPolicy": {"reference": "START_PERIOD", "penalties": [
        {"type": "OFFSET_PENALTY", "value": {"amount": 0, "unit": "PERCENTAGE"}, "offset": {"amount": 30, "unit": "DAYS"}},
        {"type": "OFFSET_PENALTY", "value": {"amount": 50, "unit": "PERCENTAGE"}, "offset": {"amount": 7, "unit": "DAYS"}},
        {"type": "OFFSET_PENALTY", "value": {"amount": 100, "unit": "PERCENTAGE"}, "offset": {"amount": 0, "unit": "DAYS"}}]},
    **extra}
body = {
    "title": "Load trip to Berlin: flight and three nights",
    "currency": "EUR",
    "refIDs": {"bookingId": "BK-2027-000123", "costCenter": "CC-4711", "traveller": "T-0042"},
    "note": "Internal note for the travel desk; never shown to the customer. " * 3,
    "attachments": [{"type": "TERMS_CONDITIONS", "url": "https://provider.example/terms.pdf"},
                    {"type": "PICTURES", "url": "https://provider.example/hotel.jpg"}],
    "items": [
        item("Flight FRA-BER LH 172, economy, one checked bag", "FLIGHT", 180.50, {}),
        item("Hotel Unter den Linden, double room, breakfast included", "ACCOMMODATION", 120,
             {"quantity": {"amount": 3, "unit": "PER_NIGHT"}}),
    ],
}
text = json.dumps(body, separators=(",", ":"))
# Pad the note so the body is close to 2.8 KB whatever the fields above add up to.
body["note"] += "." * max(0, 2800 - len(text))
print(json.dumps(body, separators=(",", ":")))
