#!/usr/bin/env python3
"""Kill -9 soak of checkout-server: the client, the model and the checker (`scripts/soak.sh`
builds the binary and prepares the database, then runs this).

Each cycle: a few client threads send creates, sandbox payments and cancellations (creates and
cancellations with an Idempotency-Key, R-9.1) for a random number of seconds, then the server is
killed with SIGKILL at that instant and restarted on the same database. After the restart:

* every request whose outcome was unknown at the kill (no answer, or a 5xx) is retried with the
  same key and the same body until it settles (a 409 "still running" is retried in later cycles:
  on PostgreSQL a claim left by a killed instance is taken over after 2 minutes);
* the transactions touched in the cycle are read back with GET /status/{id} and compared with a
  model that holds every acknowledged answer (operations on one transaction never overlap, so the
  model is exact): every acknowledged create readable, every acknowledged payment PAID or later,
  every SUCCESS cancellation visible once with its items CANCELLED and their refunds, nothing
  that was not acknowledged (or settled) applied, Σ refunded ≤ paid (R-4.5);
* a sample of acknowledged requests is sent again with its key: the same status and body,
  `Idempotent-Replayed: true` (R-9.1);
* the database is checked on its own: SQLite `PRAGMA integrity_check` and `foreign_key_check`,
  or PostgreSQL `amcheck` on every B-tree index; over the whole database one transaction per
  creation key and gap-free receipt numbers (R-10.2); then, over the rows of the transactions
  touched in the cycle (of every transaction after the last cycle): refunded = Σ item refunds =
  Σ SUCCESS refunds = Σ ledger refunds ≤ paid, each CANCELLED item in exactly one SUCCESS
  cancellation, each ledger refund matching a SUCCESS cancellation, statuses that agree with
  the items (R-3.3).

Python 3 standard library only. `--help` lists the options.
"""

import argparse
import base64
import concurrent.futures
import csv
import http.client
import io
import json
import os
import random
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from decimal import ROUND_DOWN, Decimal

CURRENCIES = {"EUR": 2, "JPY": 0, "KWD": 3}
CATEGORIES = ["FLIGHT", "ACCOMMODATION", "RAIL", "FEE", "TRANSFER", "EVENT"]
FINAL_STATUSES_PAID = {"PAID", "PARTIALLY_CANCELLED", "CANCELLED"}
MARKER = "soakKey"


def D(value):
    """An amount of a JSON body or a database row as a Decimal (never through float, R-1.1)."""
    if value is None:
        return Decimal(0)
    if isinstance(value, Decimal):
        return value
    return Decimal(str(value))


def dumps(obj):
    """JSON text in which Decimal amounts are written exactly as they are."""

    def enc(o):
        if isinstance(o, Decimal):
            return "@@D:%s@@" % format(o, "f")
        if isinstance(o, dict):
            return {k: enc(v) for k, v in o.items()}
        if isinstance(o, list):
            return [enc(v) for v in o]
        return o

    text = json.dumps(enc(obj), separators=(",", ":"))
    return re.sub(r'"@@D:([^@]+)@@"', r"\1", text)


def loads(data):
    return json.loads(data, parse_float=Decimal)


# ---------------------------------------------------------------------------------------------
# The server process
# ---------------------------------------------------------------------------------------------


class Server:
    def __init__(self, binary, db, port, work, lease_ms, log_level):
        self.binary, self.db, self.port, self.work = binary, db, port, work
        self.lease_ms, self.log_level = lease_ms, log_level
        self.proc = None
        self.starts = 0
        self.log_path = os.path.join(work, "server.log")

    def start(self, timeout=60.0):
        env = dict(os.environ, RUST_LOG=self.log_level)
        for _attempt in range(20):
            self.starts += 1
            log = open(self.log_path, "ab")
            log.write(b"\n===== start %d =====\n" % self.starts)
            log.flush()
            self.proc = subprocess.Popen(
                [self.binary, "serve", "--sandbox", "--db", self.db,
                 "--listen", "127.0.0.1:%d" % self.port,
                 "--refund-lease-ms", str(self.lease_ms)],
                stdout=log, stderr=log, env=env)
            log.close()
            deadline = time.monotonic() + timeout
            while time.monotonic() < deadline:
                if self.proc.poll() is not None:
                    break
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=2)
                    conn.request("GET", "/healthz")
                    if conn.getresponse().status == 200:
                        conn.close()
                        return
                except OSError:
                    pass
                time.sleep(0.05)
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait()
                raise RuntimeError("server did not answer /healthz within %.0f s (see %s)"
                                   % (timeout, self.log_path))
            # Exited at once (for example the port still held): try again shortly.
            time.sleep(0.5)
        raise RuntimeError("server would not start (see %s)" % self.log_path)

    def kill(self):
        """SIGKILL: no shutdown, no flush, no drain."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


# ---------------------------------------------------------------------------------------------
# HTTP with outcome classification
# ---------------------------------------------------------------------------------------------

NOT_SENT = "not_sent"  # the connection was refused: the request never reached a server
UNKNOWN = "unknown"  # sent, no answer (reset, closed, timeout): it may or may not have happened
ANSWERED = "answered"


class Reply:
    def __init__(self, kind, status=None, headers=None, body=b"", error=None):
        self.kind, self.status, self.headers, self.body, self.error = (
            kind, status, headers or {}, body, error)

    def json(self):
        return loads(self.body)

    @property
    def replayed(self):
        return self.headers.get("idempotent-replayed") == "true"

    def describe(self):
        if self.kind != ANSWERED:
            return "%s (%s)" % (self.kind, self.error)
        return "%s %s" % (self.status, self.body[:300].decode("utf-8", "replace"))


class Client:
    """One keep-alive connection per thread."""

    def __init__(self, port, auth, timeout=30.0):
        self.port, self.auth, self.timeout = port, auth, timeout
        self.local = threading.local()

    def close(self):
        conn = getattr(self.local, "conn", None)
        if conn is not None:
            conn.close()
        self.local.conn = None

    def call(self, method, path, body=None, headers=None):
        conn = getattr(self.local, "conn", None)
        if conn is None:
            conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=self.timeout)
            try:
                conn.connect()
            except OSError as e:
                conn.close()
                return Reply(NOT_SENT, error=repr(e))
            self.local.conn = conn
        h = {"Authorization": self.auth}
        if body is not None:
            h["Content-Type"] = "application/json"
        h.update(headers or {})
        try:
            conn.request(method, path, body=body, headers=h)
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            self.close()
            return Reply(UNKNOWN, error=repr(e))
        if resp.will_close:
            self.close()
        return Reply(ANSWERED, resp.status,
                     {k.lower(): v for k, v in resp.getheaders()}, data)


# ---------------------------------------------------------------------------------------------
# The model: what the client knows from acknowledged answers
# ---------------------------------------------------------------------------------------------


class Tx:
    def __init__(self, key, body, currency, n_items):
        self.key, self.body, self.currency, self.n_items = key, body, currency, n_items
        self.id = None
        self.paid = False
        self.paid_amount = Decimal(0)
        self.pay_ref = None
        self.active = set(range(1, n_items + 1))
        self.cancels = []  # acknowledged or settled SUCCESS cancellations (the 200 bodies)
        self.cancelled_after_payment = False
        self.refunds = defaultdict(Decimal)  # order -> refund
        self.busy = False
        self.unsettled = False  # an operation whose outcome is not known yet
        self.touched = 0  # last cycle with an operation


class Op:
    def __init__(self, kind, tx, method, path, body, key=None, cycle=0):
        self.kind, self.tx, self.method, self.path, self.body, self.key = (
            kind, tx, method, path, body, key)
        self.cycle = cycle
        self.first_cycle = cycle
        self.retries = 0
        self.meta = {}

    def headers(self):
        return {"Idempotency-Key": self.key} if self.key else {}


class Stats:
    def __init__(self):
        self.lock = threading.Lock()
        self.c = Counter()

    def add(self, name, n=1):
        with self.lock:
            self.c[name] += n


class Soak:
    def __init__(self, args, client, server, store):
        self.args, self.client, self.server, self.store = args, client, server, store
        self.rng = random.Random(args.seed)
        self.lock = threading.RLock()
        self.txs = []  # every Tx ever attempted
        self.by_id = {}
        self.by_key = {}  # creation key -> Tx
        self.available = []  # ids of transactions that may take another operation
        self.pooled = set()  # the same, as a set
        self.never_sent = set()  # creation keys whose request never reached a server
        self.unsettled = []  # Ops whose outcome is unknown
        self.acked_sample = []  # (kind, key, path, body, status, body json) to replay
        self.stats = Stats()
        self.anomalies = []
        self.cycle = 0
        self.seq = 0
        self.run_id = "%08x" % self.rng.getrandbits(32)

    # -- anomalies ------------------------------------------------------------------------

    def anomaly(self, kind, detail, tx=None, op=None):
        entry = {"cycle": self.cycle, "kind": kind, "detail": detail}
        if tx is not None:
            entry["transactionId"] = tx.id
            entry["creationKey"] = tx.key
        if op is not None:
            entry["op"] = op.kind
            entry["key"] = op.key
            entry["path"] = op.path
            entry["body"] = op.body.decode() if isinstance(op.body, bytes) else op.body
        with self.lock:
            self.anomalies.append(entry)
        print("ANOMALY cycle %d: %s: %s" % (self.cycle, kind, detail), file=sys.stderr,
              flush=True)

    # -- operations -----------------------------------------------------------------------

    def next_key(self, prefix):
        with self.lock:
            self.seq += 1
            return "%s-%s-%d" % (prefix, self.run_id, self.seq)

    def make_create(self, rng):
        key = self.next_key("create")
        currency = rng.choice(list(CURRENCIES))
        scale = CURRENCIES[currency]
        q = Decimal(1).scaleb(-scale)
        items = []
        for _ in range(rng.randint(1, 4)):
            price = (Decimal(rng.randint(100, 200000)) / 100).quantize(q, rounding=ROUND_DOWN)
            if currency == "JPY":
                price = Decimal(rng.randint(1000, 300000))
            item = {"name": "Item", "category": rng.choice(CATEGORIES), "price": price}
            if rng.random() < 0.4:
                item["quantity"] = {"amount": rng.choice([Decimal(2), Decimal("1.5"), Decimal(3)]),
                                    "unit": "PER_NIGHT"}
            if rng.random() < 0.7:
                item["taxes"] = [{"value": Decimal(rng.choice([7, 10, 19]))}]
            policy = rng.random()
            if policy < 0.25:
                # Payment-date penalties 24 and 48 hours after payment: none applies during a run.
                item["cancellationPolicy"] = {"reference": "PAYMENT_DATE", "penalties": [
                    {"type": "OFFSET_PENALTY", "value": {"amount": 25, "unit": "PERCENTAGE"},
                     "offset": {"amount": 24, "unit": "HOURS"}},
                    {"type": "OFFSET_PENALTY", "value": {"amount": 50, "unit": "PERCENTAGE"},
                     "offset": {"amount": 48, "unit": "HOURS"}}]}
            elif policy < 0.5:
                # A period that started in the past: the penalties already apply, for good.
                item["period"] = {"start": "2025-06-01T10:00:00", "startTimeZone": "Europe/Berlin"}
                item["cancellationPolicy"] = {"reference": "START_PERIOD", "penalties": [
                    {"type": "OFFSET_PENALTY", "value": {"amount": 30, "unit": "PERCENTAGE"},
                     "offset": {"amount": 7, "unit": "DAYS"}},
                    {"type": "OFFSET_PENALTY",
                     "value": {"amount": Decimal(15 if scale == 0 else 5).quantize(q),
                               "unit": "FIXED_AMOUNT"},
                     "offset": {"amount": 1, "unit": "DAYS"}}]}
            elif policy < 0.6:
                item["period"] = {"start": "2025-03-10T08:00:00"}
                item["cancellationPolicy"] = {"reference": "START_PERIOD", "penalties": [
                    {"type": "DATE_PENALTY", "value": {"amount": 100, "unit": "PERCENTAGE"},
                     "until": "2025-03-01"}]}
            items.append(item)
        body = {"title": "Soak " + key, "currency": currency, "refIDs": {MARKER: key},
                "items": items}
        data = dumps(body).encode()
        tx = Tx(key, data, currency, len(items))
        return Op("create", tx, "POST", "/initialize", data, key=key, cycle=self.cycle)

    def make_pay(self, tx):
        tx.pay_ref = tx.pay_ref or ("PAY-" + tx.key)
        body = dumps({"payment": {"reference": tx.pay_ref, "provider": "sandbox"}}).encode()
        return Op("pay", tx, "POST", "/sandbox/transactions/%s/pay" % tx.id, body,
                  cycle=self.cycle)

    def make_cancel(self, tx, rng, amount=None):
        orders = sorted(rng.sample(sorted(tx.active), rng.randint(1, len(tx.active))))
        key = self.next_key("cancel")
        req = {"itemsOrder": orders, "invoiceNumber": "CN-" + key}
        if amount is not None:
            req["amount"] = amount
        return Op("cancel", tx, "PATCH", "/cancel/%s" % tx.id, dumps(req).encode(), key=key,
                  cycle=self.cycle)

    def pick(self, rng):
        """The next operation, its transaction marked busy; None to create."""
        with self.lock:
            for _ in range(8):
                if not self.available or rng.random() < self.args.create_share:
                    return None
                # Mostly recent transactions, so that each lives through a few operations.
                window = min(len(self.available), 400)
                i = len(self.available) - 1 - int(rng.random() ** 2 * window)
                tx = self.by_id[self.available[i]]
                if not tx.active:
                    self.available.pop(i)
                    self.pooled.discard(tx.id)
                    continue
                self.available.pop(i)
                self.pooled.discard(tx.id)
                tx.busy = True
                return tx
            return None

    def release(self, tx):
        """The transaction may take its next operation, unless one is still unsettled."""
        with self.lock:
            tx.busy = False
            if tx.active and not tx.unsettled and tx.id and tx.id not in self.pooled:
                self.available.append(tx.id)
                self.pooled.add(tx.id)

    def worker(self, seed, stop):
        rng = random.Random(seed)
        while not stop.is_set():
            tx = self.pick(rng)
            if tx is None:
                with self.lock:
                    op = self.make_create(rng)
                    self.txs.append(op.tx)
                    self.by_key[op.tx.key] = op.tx
                self.run_op(op, first=True)
                self.release(op.tx)
                continue
            try:
                if not tx.paid and rng.random() < 0.75:
                    op = self.make_pay(tx)
                else:
                    amount = None
                    if tx.paid and rng.random() < 0.2:
                        amount = self.partial_amount(tx, rng)
                        if amount is False:  # the quote got no answer (the kill): skip
                            continue
                    op = self.make_cancel(tx, rng, amount)
                    if amount is not None:
                        op.meta["amount"] = amount
                self.run_op(op, first=True)
            finally:
                self.release(tx)

    def partial_amount(self, tx, rng):
        """Half the refundable amount of a random part of the active items (R-4.3), from the
        refund preview (R-11); False when the preview got no answer."""
        # The cancel request draws its own items; preview all active ones and take a share
        # small enough for any subset: at most the smallest item's refundable amount.
        body = dumps({"itemsOrder": sorted(tx.active)}).encode()
        reply = self.client.call("POST", "/cancel/%s/quote" % tx.id, body)
        if reply.kind != ANSWERED:
            return False
        if reply.status != 200:
            self.anomaly("quote refused", reply.describe(), tx=tx)
            return False
        preview = reply.json()
        smallest = min(D(i["refundable"]) for i in preview["items"])
        q = Decimal(1).scaleb(-CURRENCIES[tx.currency])
        amount = (smallest / 2).quantize(q, rounding=ROUND_DOWN)
        return amount if amount > 0 else None

    # -- outcomes -------------------------------------------------------------------------

    def run_op(self, op, first):
        reply = self.client.call(op.method, op.path, op.body, op.headers())
        if first:
            self.stats.add("sent." + op.kind)
        else:
            op.retries += 1
            op.meta["last"] = reply.describe()
            self.stats.add("retry_attempts." + op.kind)
        return self.outcome(op, reply, first)

    def outcome(self, op, reply, first):
        """Applies an answer to the model; returns True when the operation is settled."""
        tx = op.tx
        if reply.kind == NOT_SENT:
            if first:
                self.stats.add("not_sent." + op.kind)
                if op.kind == "create":
                    with self.lock:
                        self.never_sent.add(op.key)
                time.sleep(0.05)  # the server is down: do not spin until the cycle ends
                return True
            return False
        if reply.kind == UNKNOWN or reply.status >= 500 or (not first and reply.status == 409):
            if first:
                self.stats.add("unknown." + op.kind)
                if reply.kind == ANSWERED:
                    self.stats.add("unknown_5xx." + op.kind)
                with self.lock:
                    tx.unsettled = True
                    self.unsettled.append(op)
            return False
        with self.lock:
            tx.touched = self.cycle
        body = None
        try:
            body = reply.json()
        except ValueError:
            pass
        label = "acked." if first else "settled."
        if op.kind == "create":
            if reply.status == 201 and body and body.get("transactionId"):
                with self.lock:
                    if tx.id is not None and tx.id != body["transactionId"]:
                        self.anomaly("create answered two ids",
                                     "%s then %s" % (tx.id, body["transactionId"]), tx=tx, op=op)
                    tx.id = body["transactionId"]
                    self.by_id[tx.id] = tx
                    tx.unsettled = False
                self.stats.add(label + "create")
                self.note_replayed(op, reply, first)
                self.remember(op, reply, body)
                return True
            self.anomaly("create refused", reply.describe(), tx=tx, op=op)
            return True
        if op.kind == "pay":
            if reply.status == 200 and body and body.get("status") == "PAID":
                tx.paid = True
                tx.paid_amount = D(body["amounts"]["paid"])
                self.stats.add(label + "pay")
                if not first:
                    self.stats.add("settled_executed.pay")  # the first attempt had not paid
                tx.unsettled = False
                return True
            if not first and reply.status == 400:
                # The first attempt was recorded (R-3.3: one payment only): read it back.
                status = self.client.call("GET", "/status/%s" % tx.id)
                if status.kind == ANSWERED and status.status == 200:
                    record = status.json()
                    pay = (record.get("checkout") or {}).get("payment") or {}
                    if record["status"] in FINAL_STATUSES_PAID and pay.get("reference") == tx.pay_ref:
                        tx.paid = True
                        tx.paid_amount = D(record["amounts"]["paid"])
                        self.stats.add("settled.pay")
                        self.stats.add("settled_replayed.pay")
                        tx.unsettled = False
                        return True
                    self.anomaly("retried payment refused, but not paid",
                                 "%s; status %s" % (reply.describe(), status.describe()),
                                 tx=tx, op=op)
                    tx.unsettled = False
                    return True
                return False
            self.anomaly("payment refused", reply.describe(), tx=tx, op=op)
            tx.unsettled = False
            return True
        # cancel
        if reply.status == 200 and body and body.get("status") in ("SUCCESS", "FAILED"):
            if body["status"] == "SUCCESS":
                tx.cancels.append(body)
                tx.cancelled_after_payment |= tx.paid
                for line in body["items"]:
                    tx.active.discard(line["order"])
                    tx.refunds[line["order"]] += D(line["refund"])
                ordered = [line["order"] for line in body["items"]]
                requested = loads(op.body)["itemsOrder"]
                if sorted(ordered) != sorted(requested):
                    self.anomaly("cancellation answered other items",
                                 "asked %s, answered %s" % (requested, ordered), tx=tx, op=op)
                if "amount" in op.meta and D(body["refund"]) != op.meta["amount"]:
                    self.anomaly("refund differs from the amount asked (R-4.3)",
                                 "asked %s, refunded %s" % (op.meta["amount"], body["refund"]),
                                 tx=tx, op=op)
            else:
                self.stats.add(label + "cancel_failed")
            self.stats.add(label + "cancel")
            self.note_replayed(op, reply, first)
            self.remember(op, reply, body)
            tx.unsettled = False
            return True
        if first and reply.status == 400 and "amount" in op.meta:
            self.stats.add("refused.cancel")  # the amount no longer fits; nothing done
            return True
        self.anomaly("cancellation refused" if first else "retried cancellation refused",
                     reply.describe(), tx=tx, op=op)
        tx.unsettled = False
        return True

    def note_replayed(self, op, reply, first):
        if not first:
            self.stats.add(("settled_replayed." if reply.replayed else "settled_executed.")
                           + op.kind)
        elif reply.replayed:
            self.anomaly("first request answered as a replay", reply.describe(), op=op)

    def remember(self, op, reply, body):
        with self.lock:
            self.acked_sample.append((op, reply.status, body))
            if len(self.acked_sample) > 2000:
                del self.acked_sample[:1000]

    # -- the cycle ------------------------------------------------------------------------

    def load(self, seconds):
        stop = threading.Event()
        threads = [threading.Thread(target=self.worker, args=(self.rng.random(), stop),
                                    daemon=True) for _ in range(self.args.threads)]
        for t in threads:
            t.start()
        try:
            time.sleep(seconds)
            self.server.kill()  # at this instant, whatever is in flight
        finally:
            stop.set()
        for t in threads:
            t.join()
        self.client.close()

    def settle(self, deadline_s, final=False):
        """Retries every unknown outcome with its key and body until it settles or the deadline
        passes (then it waits for the next cycle). Outside the final settling, operations left
        over from earlier cycles get one attempt per cycle, so that one that stays blocked does
        not lengthen every cycle."""
        deadline = time.monotonic() + deadline_s
        with self.lock:
            pending = list(self.unsettled)
        carried = []
        pause = 0.2
        while pending:
            still = []
            for op in pending:
                if self.run_op(op, first=False):
                    self.release(op.tx)
                elif final or op.first_cycle == self.cycle:
                    still.append(op)
                else:
                    carried.append(op)
            pending = still
            if not pending or time.monotonic() >= deadline:
                break
            if not final and self.only_blocked(pending):
                # 409 while no refund is pending: nothing this server runs will free the key
                # before the next cycle (one more pass for a refund that settled meanwhile).
                still = []
                for op in pending:
                    if self.run_op(op, first=False):
                        self.release(op.tx)
                    else:
                        still.append(op)
                pending = still
                break
            time.sleep(pause)
            pause = min(pause * 1.5, 2.0)
        pending += carried
        with self.lock:
            self.unsettled = pending
        return pending

    def only_blocked(self, ops):
        """Every op answered 409 (its key held by a running claim) and no refund is pending."""
        if not all(op.meta.get("last", "").startswith("409 ") for op in ops):
            return False
        pending = self.store.scalar("SELECT count(*) FROM cancellations WHERE outcome = 'PENDING'")
        return int(pending) == 0

    def check_tx(self, tx):
        """One transaction against the model."""
        reply = self.client.call("GET", "/status/%s" % tx.id)
        self.stats.add("checked.status_reads")
        if reply.kind != ANSWERED or reply.status != 200:
            self.anomaly("acknowledged transaction not readable", reply.describe(), tx=tx)
            return
        r = reply.json()
        problems = []
        if (r.get("refIDs") or {}).get(MARKER) != tx.key:
            problems.append("refIDs %s" % r.get("refIDs"))
        status = r["status"]
        amounts = r["amounts"]
        paid, refunded = D(amounts["paid"]), D(amounts["refunded"])
        items = {i["order"]: i for i in r["items"]}
        if len(items) != tx.n_items:
            problems.append("%d items, created %d" % (len(items), tx.n_items))
        if tx.paid:
            if status not in FINAL_STATUSES_PAID:
                problems.append("acknowledged payment, status %s" % status)
            if paid != tx.paid_amount:
                problems.append("paid %s, acknowledged %s" % (paid, tx.paid_amount))
        else:
            if status not in ("PENDING", "CANCELLED") or paid != 0:
                problems.append("no payment acknowledged, status %s paid %s" % (status, paid))
        successes = [c for c in r.get("cancellations", []) if c["outcome"] == "SUCCESS"]
        others = [c for c in r.get("cancellations", []) if c["outcome"] not in ("SUCCESS", "FAILED")]
        if others:
            problems.append("cancellations neither SUCCESS nor FAILED: %s" % others)
        if len(successes) != len(tx.cancels):
            problems.append("%d SUCCESS cancellations, %d acknowledged"
                            % (len(successes), len(tx.cancels)))
        seen = Counter(tuple(sorted(c["items"])) for c in successes)
        for ack in tx.cancels:
            orders = tuple(sorted(line["order"] for line in ack["items"]))
            match = [c for c in successes if tuple(sorted(c["items"])) == orders
                     and D(c["refund"]) == D(ack["refund"])
                     and c.get("receiptNumber") == ack.get("receiptNumber")]
            if not match:
                problems.append("acknowledged cancellation %s (receipt %s, refund %s) missing"
                                % (list(orders), ack.get("receiptNumber"), ack["refund"]))
            for order in orders:
                if items.get(order, {}).get("status") != "CANCELLED":
                    problems.append("item %d of a SUCCESS cancellation is %s"
                                    % (order, items.get(order, {}).get("status")))
        if any(n > 1 for n in seen.values()):
            problems.append("duplicate cancellations %s" % seen)
        for order, item in items.items():
            expect = "ACTIVE" if order in tx.active else "CANCELLED"
            if item["status"] != expect:
                problems.append("item %d is %s, expected %s" % (order, item["status"], expect))
            if D(item["refunded"]) != tx.refunds.get(order, Decimal(0)):
                problems.append("item %d refunded %s, acknowledged %s"
                                % (order, item["refunded"], tx.refunds.get(order, 0)))
            if D(item["refunded"]) > D(item["total"]):
                problems.append("item %d refunded %s > total %s"
                                % (order, item["refunded"], item["total"]))
        expected_refunded = sum((D(c["refund"]) for c in tx.cancels), Decimal(0))
        if refunded != expected_refunded:
            problems.append("refunded %s, acknowledged %s" % (refunded, expected_refunded))
        if refunded > paid:
            problems.append("refunded %s > paid %s (R-4.5)" % (refunded, paid))
        if not tx.active:
            expect = "CANCELLED"
        elif tx.paid:
            # Items voided before the payment leave it PAID.
            expect = "PARTIALLY_CANCELLED" if tx.cancelled_after_payment else "PAID"
        else:
            expect = "PENDING"
        if status != expect:
            problems.append("status %s, expected %s (R-3.3)" % (status, expect))
        if problems:
            self.anomaly("status record differs from the acknowledged history",
                         "; ".join(problems), tx=tx)

    def check(self, txs):
        # The pool's connections close with its threads (thread-local).
        with concurrent.futures.ThreadPoolExecutor(self.args.threads) as pool:
            list(pool.map(self.check_tx, txs))

    def replay_sample(self, n):
        with self.lock:
            sample = self.rng.sample(self.acked_sample, min(n, len(self.acked_sample)))
        for op, status, body in sample:
            reply = self.client.call(op.method, op.path, op.body, op.headers())
            self.stats.add("checked.replays")
            if reply.kind != ANSWERED:
                self.anomaly("replay got no answer", reply.describe(), op=op)
                continue
            try:
                again = reply.json()
            except ValueError:
                again = None
            if reply.status != status or again != body or not reply.replayed:
                self.anomaly("replay differs (R-9.1)",
                             "first %s %s; again %s replayed=%s"
                             % (status, body, reply.describe(), reply.replayed), op=op)

    # -- database -------------------------------------------------------------------------

    def check_database(self, scope=None):
        """Integrity and the global rules every cycle; the row-by-row rules over the
        transactions in `scope` (every transaction when None)."""
        store = self.store
        # Refunds still pending are being completed by the restarted server: wait.
        deadline = time.monotonic() + 60
        while True:
            pending = store.scalar("SELECT count(*) FROM cancellations WHERE outcome = 'PENDING'")
            if int(pending) == 0:
                break
            if time.monotonic() > deadline:
                self.anomaly("pending refunds not completed 60 s after restart",
                             "%s PENDING cancellations" % pending)
                break
            time.sleep(0.2)
        t0 = time.monotonic()
        for problem in store.integrity():
            self.anomaly("database integrity", problem)
        self.stats.add("checked.integrity_ms", int((time.monotonic() - t0) * 1000))
        self.stats.add("checked.database")
        self.check_global()
        if scope is None or scope:
            self.check_rows(store.rows(scope), scope)

    def check_global(self):
        """Rules over the whole database that SQL aggregates answer cheaply."""
        store = self.store
        for marker, n in store.query(
                "SELECT %s, count(*) FROM transactions GROUP BY 1 HAVING count(*) > 1"
                % store.marker):
            self.anomaly("database consistency",
                         "creation key %s made %s transactions (R-9.1)" % (marker, n))
        with self.lock:
            known = sum(1 for t in self.txs if t.id is not None)
            open_creates = sum(1 for op in self.unsettled if op.kind == "create")
        stored = int(store.scalar("SELECT count(*) FROM transactions"))
        if not known <= stored <= known + open_creates:
            self.anomaly("database consistency",
                         "%d transactions stored, %d acknowledged, %d creates unsettled"
                         % (stored, known, open_creates))
        # Receipt numbers per provider: unique and gap-free, the counter one past the last.
        for provider, n, distinct, last, next_no in store.query(
                "SELECT p.id, count(c.receipt_number), count(DISTINCT c.receipt_number), "
                "COALESCE(max(CAST(substr(c.receipt_number, 4) AS integer)), 0), "
                "p.next_receipt_no FROM providers p LEFT JOIN cancellations c "
                "ON c.provider_id = p.id AND c.receipt_number IS NOT NULL GROUP BY p.id, "
                "p.next_receipt_no"):
            if not int(n) == int(distinct) == int(last) == int(next_no) - 1:
                self.anomaly("database consistency",
                             "receipts of %s: %s, %s distinct, last %s, next %s (R-10.2)"
                             % (provider, n, distinct, last, next_no))

    def check_rows(self, rows, scope=None):
        txs, items, cancels, ledger, providers = rows
        problems = []
        by_marker = defaultdict(list)
        tx_rows = {}
        for (tid, provider, status, total, paid, refunded, marker) in txs:
            tx_rows[tid] = (provider, status, D(total), paid, D(refunded))
            by_marker[marker].append(tid)
        with self.lock:
            model = {k: t for k, t in self.by_key.items()
                     if scope is None or (t.id is not None and t.id in scope)}
            never_sent = set(self.never_sent)
            unsettled_keys = {op.tx.key for op in self.unsettled if op.kind == "create"}
        for marker, ids in by_marker.items():
            if len(ids) > 1:
                problems.append("creation key %s made %d transactions %s (R-9.1)"
                                % (marker, len(ids), ids))
            tx = model.get(marker) if scope is None else self.by_key.get(marker)
            if tx is None:
                problems.append("transaction %s of unknown key %s" % (ids, marker))
            elif marker in never_sent:
                problems.append("a create that never reached a server exists: %s %s"
                                % (marker, ids))
            elif tx.id is None and marker not in unsettled_keys:
                problems.append("transaction %s exists, its create was refused" % ids)
            elif tx.id is not None and tx.id not in ids:
                problems.append("key %s answered %s, stored %s" % (marker, tx.id, ids))
        for key, tx in model.items():
            if tx.id is not None and key not in by_marker:
                problems.append("acknowledged transaction %s (key %s) not stored" % (tx.id, key))
        item_rows = defaultdict(dict)
        for (tid, order, status, total, refunded) in items:
            if tid not in tx_rows:
                problems.append("item %s/%s without transaction" % (tid, order))
            item_rows[tid][int(order)] = (status, D(total), D(refunded))
        success_by_tx = defaultdict(list)
        refund_by_id = {}
        receipts = defaultdict(list)
        after_payment = set()
        for (cid, tid, provider, receipt, its, refund, outcome, after) in cancels:
            if tid not in tx_rows:
                problems.append("cancellation %s without transaction" % cid)
            if outcome == "SUCCESS":
                success_by_tx[tid].append((json.loads(its), D(refund)))
                if int(after):
                    after_payment.add(tid)
                refund_by_id[cid] = (tid, D(refund))
            elif outcome == "PENDING":
                problems.append("cancellation %s still PENDING" % cid)
            if receipt:
                receipts[provider].append(receipt)
        ledger_by_tx = defaultdict(Decimal)
        for (rid, tid, amount) in ledger:
            ledger_by_tx[tid] += D(amount)
            if rid not in refund_by_id:
                problems.append("ledger refund %s (%s) of no SUCCESS cancellation" % (rid, tid))
            elif refund_by_id[rid] != (tid, D(amount)):
                problems.append("ledger refund %s is %s %s, cancellation %s"
                                % (rid, tid, amount, refund_by_id[rid]))
        for tid, (provider, status, total, paid_raw, refunded) in tx_rows.items():
            paid = D(paid_raw)  # NULL until paid
            its = item_rows.get(tid, {})
            sum_items = sum((r for (_, _, r) in its.values()), Decimal(0))
            successes = success_by_tx.get(tid, [])
            sum_success = sum((r for (_, r) in successes), Decimal(0))
            if not refunded == sum_items == sum_success:
                problems.append("%s refunded %s, items %s, SUCCESS cancellations %s"
                                % (tid, refunded, sum_items, sum_success))
            if refunded > paid:
                problems.append("%s refunded %s > paid %s (R-4.5)" % (tid, refunded, paid))
            if ledger_by_tx.get(tid, Decimal(0)) != sum_success:
                problems.append("%s ledger refunds %s, SUCCESS cancellations %s"
                                % (tid, ledger_by_tx.get(tid, Decimal(0)), sum_success))
            covered = Counter(o for (orders, _) in successes for o in orders)
            for order, (istatus, itotal, irefunded) in its.items():
                if covered[order] > 1:
                    problems.append("%s item %d in %d SUCCESS cancellations"
                                    % (tid, order, covered[order]))
                if (istatus == "CANCELLED") != (covered[order] == 1):
                    problems.append("%s item %d is %s, in %d SUCCESS cancellations"
                                    % (tid, order, istatus, covered[order]))
                if irefunded > itotal:
                    problems.append("%s item %d refunded %s > total %s"
                                    % (tid, order, irefunded, itotal))
            cancelled = sum(1 for (s, _, _) in its.values() if s == "CANCELLED")
            if cancelled == len(its):
                expect = "CANCELLED"
            elif paid_raw is not None:
                # Items voided before the payment leave it PAID.
                expect = "PARTIALLY_CANCELLED" if tid in after_payment else "PAID"
            else:
                expect = "PENDING"
            if status != expect:
                problems.append("%s status %s, items say %s (R-3.3)" % (tid, status, expect))
        next_no = {pid: int(n) for (pid, n) in providers}
        for provider, numbers in (receipts.items() if scope is None else ()):
            nos = sorted(int(n.split("-")[1]) for n in numbers)
            if nos != list(range(1, len(nos) + 1)):
                gaps = sorted(set(range(1, (nos[-1] if nos else 0) + 1)) - set(nos))
                dups = [n for n, c in Counter(nos).items() if c > 1]
                problems.append("receipt numbers of %s not gap-free: missing %s, repeated %s"
                                % (provider, gaps[:10], dups[:10]))
            if next_no.get(provider) != len(nos) + 1:
                problems.append("provider %s next receipt %s after %d receipts"
                                % (provider, next_no.get(provider), len(nos)))
        for p in problems[:50]:
            self.anomaly("database consistency", p)
        if len(problems) > 50:
            self.anomaly("database consistency", "… and %d more" % (len(problems) - 50))
        self.stats.add("checked.rows", len(txs))


# ---------------------------------------------------------------------------------------------
# Database access for the checks
# ---------------------------------------------------------------------------------------------

# name -> (query, column its rows are scoped by)
QUERIES = {
    "transactions": ("SELECT id, provider_id, status, total, paid_amount, refunded_amount, "
                     "{marker} FROM transactions", "id"),
    "items": ("SELECT transaction_id, order_no, status, total, refunded FROM items",
              "transaction_id"),
    # after_payment: 1 for a cancellation requested once the transaction was paid.
    "cancellations": ("SELECT c.id, c.transaction_id, c.provider_id, c.receipt_number, c.items, "
                      "c.refund, c.outcome, CASE WHEN t.paid_at IS NOT NULL AND c.created_at >= "
                      "t.paid_at THEN 1 ELSE 0 END FROM cancellations c "
                      "LEFT JOIN transactions t ON t.id = c.transaction_id", "c.transaction_id"),
    "ledger": ("SELECT refund_id, transaction_id, amount FROM ledger_refunds", "transaction_id"),
    "providers": ("SELECT id, next_receipt_no FROM providers", None),
}
TABLES = ("transactions", "items", "cancellations", "ledger", "providers")


def scoped(name, marker, ids_sql):
    """The query of `name`, limited to the transactions `ids_sql` lists (SQL text or None)."""
    sql, column = QUERIES[name]
    sql = sql.format(marker=marker)
    if ids_sql is not None and column is not None:
        sql += " WHERE %s IN (%s)" % (column, ids_sql)
    return sql


class SqliteStore:
    marker = "json_extract(ref_ids, '$.%s')" % MARKER

    def __init__(self, path):
        self.path = path

    def connect(self):
        return sqlite3.connect("file:%s?mode=ro" % self.path, uri=True, timeout=30)

    def query(self, sql):
        conn = self.connect()
        try:
            return conn.execute(sql).fetchall()
        finally:
            conn.close()

    def scalar(self, sql):
        return self.query(sql)[0][0]

    def integrity(self):
        conn = self.connect()
        try:
            result = [r[0] for r in conn.execute("PRAGMA integrity_check")]
            problems = [] if result == ["ok"] else ["integrity_check: %s" % result[:20]]
            fk = conn.execute("PRAGMA foreign_key_check").fetchall()
            if fk:
                problems.append("foreign_key_check: %s" % fk[:20])
            return problems
        finally:
            conn.close()

    def rows(self, scope=None):
        ids = None if scope is None else sorted(scope)
        placeholders = None if ids is None else ",".join("?" * len(ids))
        conn = self.connect()
        try:
            conn.execute("BEGIN")  # one snapshot for every table
            out = []
            for name in TABLES:
                sql = scoped(name, self.marker, placeholders)
                params = ids if ids is not None and QUERIES[name][1] else []
                out.append(conn.execute(sql, params).fetchall())
            conn.execute("COMMIT")
            return out
        finally:
            conn.close()


class PgStore:
    marker = "ref_ids->>'%s'" % MARKER

    def __init__(self, url):
        self.url = url

    def psql(self, sql):
        args = ["psql", self.url, "-X", "-q", "-v", "ON_ERROR_STOP=1", "-At"]
        proc = subprocess.run(args, input=sql, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError("psql failed: %s" % proc.stderr.strip())
        return proc.stdout

    def scalar(self, sql):
        return self.psql(sql + ";").strip()

    def query(self, sql):
        out = self.psql("COPY (%s) TO STDOUT WITH (FORMAT csv);" % sql)
        return [tuple(row) for row in csv.reader(io.StringIO(out))]

    def integrity(self):
        # amcheck (contrib): every B-tree index verified against its table (heapallindexed).
        out = self.psql(
            "CREATE EXTENSION IF NOT EXISTS amcheck;"
            "SELECT count(*) FROM (SELECT bt_index_check(c.oid, true) FROM pg_index i "
            "JOIN pg_class c ON c.oid = i.indexrelid JOIN pg_am a ON a.oid = c.relam "
            "WHERE a.amname = 'btree' AND c.relnamespace = 'public'::regnamespace) s;")
        problems = []
        if int(out.strip() or 0) == 0:
            problems.append("amcheck verified no index")
        # Rows that a foreign key or a sum would forbid, counted by the database itself.
        checks = {
            "items without transaction":
                "SELECT count(*) FROM items i LEFT JOIN transactions t ON t.id = i.transaction_id "
                "WHERE t.id IS NULL",
            "transactions whose refunded differs from their items":
                "SELECT count(*) FROM transactions t WHERE t.refunded_amount <> "
                "(SELECT COALESCE(sum(refunded), 0) FROM items i WHERE i.transaction_id = t.id)",
            "transactions refunded more than paid (R-4.5)":
                "SELECT count(*) FROM transactions WHERE refunded_amount > COALESCE(paid_amount, 0)",
        }
        for name, sql in checks.items():
            n = int(self.scalar(sql))
            if n:
                problems.append("%s: %d" % (name, n))
        return problems

    def rows(self, scope=None):
        ids_sql = None
        if scope is not None:
            ids = sorted(scope)
            assert all(re.fullmatch(r"[0-9a-f-]{36}", i) for i in ids)
            ids_sql = ",".join("'%s'" % i for i in ids)
        script = ["BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY;"]
        names = TABLES
        for name in names:
            script.append("COPY (%s) TO STDOUT WITH (FORMAT csv);"
                          % scoped(name, self.marker, ids_sql))
            script.append("\\echo ==END==")
        script.append("COMMIT;")
        out = self.psql("\n".join(script))
        parts = out.split("==END==\n")
        result = []
        for part in parts[:len(names)]:
            rows = [tuple(None if v == "" else v for v in row)
                    for row in csv.reader(io.StringIO(part))]
            result.append(rows)
        return result


# ---------------------------------------------------------------------------------------------


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def provider_credential(binary, db):
    out = subprocess.run([binary, "provider", "create", "--db", db, "--name", "Soak",
                          "--scopes", "transactions:read,transactions:write,refunds:write"],
                         capture_output=True, text=True, check=True).stdout
    cred = json.loads(out)
    token = base64.b64encode(("%s:%s" % (cred["widgetId"], cred["backendSecret"])).encode())
    return "Basic " + token.decode()


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--bin", required=True, help="checkout-server binary")
    p.add_argument("--db", required=True, help="SQLite file path or postgres:// URL (fresh)")
    p.add_argument("--work", required=True, help="directory for the server log and summary")
    p.add_argument("--cycles", type=int, default=200)
    p.add_argument("--min-load", type=float, default=2.0, help="least seconds of load per cycle")
    p.add_argument("--max-load", type=float, default=4.0, help="most seconds of load per cycle")
    p.add_argument("--threads", type=int, default=4, help="client threads")
    p.add_argument("--create-share", type=float, default=0.35,
                   help="share of operations that create a transaction")
    p.add_argument("--replays", type=int, default=20, help="replays checked per cycle")
    p.add_argument("--lease-ms", type=int, default=1000,
                   help="serve --refund-lease-ms: how soon a restarted server takes over the "
                        "refunds the killed one left pending")
    p.add_argument("--settle-s", type=float, default=5.0,
                   help="how long each cycle retries unknown outcomes before carrying them over "
                        "to the next cycle")
    p.add_argument("--final-settle-s", type=float, default=200.0,
                   help="longest wait for unknown outcomes to settle after the last cycle "
                        "(PostgreSQL takes over a killed request's claim after 2 minutes)")
    p.add_argument("--seed", type=int, default=None)
    p.add_argument("--log-level", default=os.environ.get("RUST_LOG", "warn"))
    args = p.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1 << 31)
    postgres = args.db.startswith(("postgres://", "postgresql://"))
    store = PgStore(args.db) if postgres else SqliteStore(args.db)

    started = time.time()
    auth = provider_credential(args.bin, args.db)
    port = free_port()
    server = Server(args.bin, args.db, port, args.work, args.lease_ms, args.log_level)
    client = Client(port, auth)
    soak = Soak(args, client, server, store)
    print("soak: %s, %d cycles, %g–%g s of load each, %d threads, seed %d, port %d"
          % ("PostgreSQL" if postgres else "SQLite", args.cycles, args.min_load, args.max_load,
             args.threads, args.seed, port), flush=True)

    server.start()
    try:
        for cycle in range(1, args.cycles + 1):
            soak.cycle = cycle
            seconds = soak.rng.uniform(args.min_load, args.max_load)
            soak.load(seconds)
            unknown_now = len(soak.unsettled)
            t0 = time.monotonic()
            server.start()
            t1 = time.monotonic()
            left = soak.settle(deadline_s=args.settle_s)
            with soak.lock:
                touched = [t for t in soak.txs if t.touched == cycle and t.id and not t.unsettled]
            t2 = time.monotonic()
            soak.check(touched)
            soak.replay_sample(args.replays)
            t3 = time.monotonic()
            soak.check_database(scope={t.id for t in touched})
            t4 = time.monotonic()
            c = soak.stats.c
            print("cycle %3d: load %.1f s, acked %d/%d/%d (create/pay/cancel), unknown %d, "
                  "unsettled %d, checked %d, anomalies %d; restart %.1f s, settle %.1f s, "
                  "reads %.1f s, database %.1f s"
                  % (cycle, seconds, c["acked.create"], c["acked.pay"], c["acked.cancel"],
                     unknown_now, len(left), len(touched), len(soak.anomalies),
                     t1 - t0, t2 - t1, t3 - t2, t4 - t3), flush=True)
        # The end: every unknown outcome settles, then every transaction is checked once more.
        soak.cycle = args.cycles + 1
        left = soak.settle(deadline_s=args.final_settle_s, final=True)
        if left:
            # One more restart (graceful), in case only a start-up clean-up frees them.
            server.stop()
            server.start()
            left = soak.settle(deadline_s=args.settle_s, final=True)
        for op in left:
            soak.anomaly("unknown outcome never settled",
                         "first sent in cycle %d, retried %d times until %.0f s after the last "
                         "cycle and once more after a restart; last answer: %s"
                         % (op.first_cycle, op.retries, args.final_settle_s,
                            op.meta.get("last")), tx=op.tx, op=op)
        with soak.lock:
            everything = [t for t in soak.txs if t.id and not t.unsettled]
        soak.check(everything)
        soak.check_database()
    finally:
        server.stop()

    c = soak.stats.c
    kinds = ("create", "pay", "cancel")
    summary = {
        "store": "postgres" if postgres else "sqlite",
        "cycles": args.cycles,
        "seed": args.seed,
        "threads": args.threads,
        "loadSecondsPerCycle": [args.min_load, args.max_load],
        "durationSeconds": round(time.time() - started),
        "sent": {k: c["sent." + k] for k in kinds},
        "acknowledged": {k: c["acked." + k] for k in kinds},
        "unknownOutcomes": {k: c["unknown." + k] for k in kinds},
        "unknownWere5xx": sum(c["unknown_5xx." + k] for k in kinds),
        "notSent": {k: c["not_sent." + k] for k in kinds},
        "retried": {k: c["settled." + k] for k in kinds},
        "retryAttempts": sum(c["retry_attempts." + k] for k in kinds),
        "settledAsReplay": {k: c["settled_replayed." + k] for k in kinds},
        "settledByExecution": {k: c["settled_executed." + k] for k in kinds},
        "cancelFailed": c["acked.cancel_failed"] + c["settled.cancel_failed"],
        "cancelRefusedAmount": c["refused.cancel"],
        "transactions": len([t for t in soak.txs if t.id]),
        "statusReads": c["checked.status_reads"],
        "replaysChecked": c["checked.replays"],
        "databaseChecks": c["checked.database"],
        "anomalies": len(soak.anomalies),
        "anomalyList": soak.anomalies[:100],
    }
    with open(os.path.join(args.work, "summary.json"), "w") as f:
        json.dump(summary, f, indent=2, default=str)
    print()
    print("== soak summary ==")
    print("store:               %s" % summary["store"])
    print("cycles:              %d (seed %d, %d threads, %g–%g s of load each, %d s in all)"
          % (args.cycles, args.seed, args.threads, args.min_load, args.max_load,
             summary["durationSeconds"]))
    for name, field in (("sent", "sent"), ("acknowledged", "acknowledged"),
                        ("unknown outcomes", "unknownOutcomes"), ("never sent", "notSent"),
                        ("retried, settled", "retried"), ("  … as a replay", "settledAsReplay"),
                        ("  … executed anew", "settledByExecution")):
        v = summary[field]
        print("%-20s %s" % (name + ":", ", ".join("%s %d" % (k, v[k]) for k in kinds)))
    print("transactions:        %d (status reads %d, replays %d, database checks %d)"
          % (summary["transactions"], summary["statusReads"], summary["replaysChecked"],
             summary["databaseChecks"]))
    print("anomalies:           %d" % summary["anomalies"])
    for a in soak.anomalies[:20]:
        print("  cycle %s: %s: %s" % (a["cycle"], a["kind"], a["detail"]))
    return 1 if soak.anomalies else 0


if __name__ == "__main__":
    sys.exit(main())
