#!/usr/bin/env python3
"""A webhook receiver that verifies Standard Webhooks signatures (Python standard library only).

    python3 examples/webhook_receiver.py --secret whsec_... [--port 9000]
        serves POST requests, verifies each signature and prints the event;
        answers 204 when the signature holds, 400 otherwise.
    python3 examples/webhook_receiver.py --check
        verifies the example of the Standard Webhooks specification and exits.
"""

import argparse
import base64
import hashlib
import hmac
import json
import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

TOLERANCE_SECONDS = 5 * 60


def verify(secret, msg_id, timestamp, body, signatures, now=None):
    """True when one of the space-separated `v1,` signatures signs `id.timestamp.body`."""
    now = time.time() if now is None else now
    if abs(now - int(timestamp)) > TOLERANCE_SECONDS:
        return False  # too old or too new: a replay
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{msg_id}.{timestamp}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    return any(
        hmac.compare_digest(sig.removeprefix("v1,"), expected)
        for sig in signatures.split(" ")
        if sig.startswith("v1,")
    )


def serve(secret, port):
    class Receiver(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("content-length", 0)))
            ok = verify(secret, self.headers["webhook-id"], self.headers["webhook-timestamp"],
                        body, self.headers["webhook-signature"])
            self.send_response(204 if ok else 400)
            self.end_headers()
            if ok:
                event = json.loads(body)
                print(self.headers["webhook-id"], event["type"],
                      event["data"]["transactionId"], event["data"]["status"], flush=True)

        def log_message(self, *args):
            pass

    print(f"listening on 127.0.0.1:{port}", flush=True)
    HTTPServer(("127.0.0.1", port), Receiver).serve_forever()


def check():
    # The example of the Standard Webhooks specification.
    ok = verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
                "1614265330", b'{"test": 2432232314}',
                "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", now=1614265330)
    forged = verify("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_p5jXN8AQM9LWM0D4loKWxJek",
                    "1614265330", b'{"test": 2432232315}',
                    "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE=", now=1614265330)
    print("signature ok" if ok and not forged else "signature check FAILED")
    return 0 if ok and not forged else 1


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--secret")
    parser.add_argument("--port", type=int, default=9000)
    parser.add_argument("--check", action="store_true")
    args = parser.parse_args()
    if args.check:
        sys.exit(check())
    if not args.secret:
        parser.error("--secret is required")
    serve(args.secret, args.port)
