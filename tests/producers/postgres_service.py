#!/usr/bin/env python3
"""A service written in Python that enqueues through the producer contract,
`"{schema}"."{prefix}_enqueue"(...)`, in its own transactions, with psycopg.

Usage: postgres_service.py URL SCHEMA PREFIX
Prints one JSON object: the ids it committed and rolled back, the dedupe answers, and the
error (SQLSTATE, message) of each invalid call, by case name. Run by tests/producers.rs.
"""
import datetime
import json
import sys

import psycopg
from psycopg.types.json import Jsonb

url, schema, prefix = sys.argv[1:4]
function = f'"{schema}"."{prefix}_enqueue"'


def enqueue(cur, lane, target, payload, **named):
    """One call of the function; named arguments as PostgreSQL's `name => value`."""
    args = ["%s", "%s", "%s::json"] + [f"{name} => %s" for name in named]
    cur.execute(
        f"SELECT outbox_id, duplicate FROM {function}({', '.join(args)})",
        [lane, target, json.dumps(payload), *named.values()],
    )
    outbox_id, duplicate = cur.fetchone()
    return str(outbox_id), duplicate


out = {"committed": [], "rolled_back": [], "dedupe": [], "errors": {}}
with psycopg.connect(url, autocommit=True) as conn:
    cur = conn.cursor()
    cur.execute(f'CREATE TABLE "{schema}".orders (id int PRIMARY KEY)')

    # The business row and its messages commit together.
    with conn.transaction():
        cur.execute(f'INSERT INTO "{schema}".orders VALUES (1)')
        for n in (1, 2, 3):
            out["committed"].append(enqueue(cur, "orders", "billing", {"n": n}, ordering_key="c-7")[0])
        out["committed"].append(enqueue(
            cur, "orders", "billing", {"n": 10},
            headers=Jsonb({"content-type": "application/json"}), max_attempts=3)[0])

    # Rolled back: neither the order nor its message exists.
    with conn.transaction():
        cur.execute(f'INSERT INTO "{schema}".orders VALUES (2)')
        out["rolled_back"].append(enqueue(cur, "orders", "billing", {"n": 99}, ordering_key="c-7")[0])
        raise psycopg.Rollback()

    with conn.transaction():
        for n in (4, 5):
            out["committed"].append(enqueue(cur, "orders", "billing", {"n": n}, ordering_key="c-7")[0])
        # Due in an hour: committed, not delivered during the test.
        out["delayed"] = enqueue(
            cur, "orders", "billing", {"n": 50}, delay=datetime.timedelta(hours=1))[0]

    # Dedupe: the same content answers the first message; other content is a conflict.
    with conn.transaction():
        first = enqueue(cur, "orders", "billing", {"n": 20}, dedupe_key="order-20")
        again = enqueue(cur, "orders", "billing", {"n": 20}, dedupe_key="order-20")
        out["dedupe"] = [first, again]
        out["committed"].append(first[0])

    cases = {
        "lane_empty": ("", "billing", {"n": 1}, {}),
        "lane_slash": ("or/ders", "billing", {"n": 1}, {}),
        "target_long": ("orders", "t" * 65, {"n": 1}, {}),
        "ordering_key_blank": ("orders", "billing", {"n": 1}, {"ordering_key": "   "}),
        "dedupe_key_long": ("orders", "billing", {"n": 1}, {"dedupe_key": "d" * 257}),
        "max_attempts_zero": ("orders", "billing", {"n": 1}, {"max_attempts": 0}),
        "header_name": ("orders", "billing", {"n": 1}, {"headers": Jsonb({"bad name": "v"})}),
        "header_value": ("orders", "billing", {"n": 1}, {"headers": Jsonb({"x-a": "a\nb"})}),
        "payload_size": ("orders", "billing", "x" * (1024 * 1024), {}),
        "dedupe_conflict": ("orders", "billing", {"n": 21}, {"dedupe_key": "order-20"}),
    }
    for case, (lane, target, payload, named) in cases.items():
        try:
            with conn.transaction():
                enqueue(cur, lane, target, payload, **named)
            out["errors"][case] = None
        except psycopg.Error as error:
            out["errors"][case] = [error.sqlstate, error.diag.message_primary]

print(json.dumps(out))
