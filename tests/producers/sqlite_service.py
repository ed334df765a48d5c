#!/usr/bin/env python3
"""A service written in Python that enqueues into a SQLite outbox with a plain INSERT into
the view `{prefix}outbox_enqueue`, in its own transactions, with the `sqlite3` module.

Usage: sqlite_service.py FILE PREFIX
Prints one JSON object: how many rows it committed and rolled back, and the error message
of each invalid INSERT, by case name. Run by tests/producers.rs.
"""
import json
import sqlite3
import sys

path, prefix = sys.argv[1:3]
view = f"{prefix}outbox_enqueue"


def enqueue(conn, lane, target, payload, **named):
    columns = ["lane", "target", "payload", *named]
    marks = ", ".join("?" for _ in columns)
    values = [lane, target, json.dumps(payload), *named.values()]
    conn.execute(f"INSERT INTO {view} ({', '.join(columns)}) VALUES ({marks})", values)


out = {"errors": {}}
# isolation_level=None: the transactions below are written out, as a service would.
conn = sqlite3.connect(path, isolation_level=None, timeout=30)
conn.execute("CREATE TABLE orders (id INTEGER PRIMARY KEY)")

conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO orders VALUES (1)")
for n in (1, 2, 3):
    enqueue(conn, "orders", "billing", {"n": n}, ordering_key="c-7")
enqueue(conn, "orders", "billing", {"n": 10}, headers=json.dumps({"content-type": "application/json"}),
        max_attempts=3)
conn.execute("COMMIT")

conn.execute("BEGIN IMMEDIATE")
conn.execute("INSERT INTO orders VALUES (2)")
enqueue(conn, "orders", "billing", {"n": 99}, ordering_key="c-7")
conn.execute("ROLLBACK")

conn.execute("BEGIN IMMEDIATE")
for n in (4, 5):
    enqueue(conn, "orders", "billing", {"n": n}, ordering_key="c-7")
enqueue(conn, "orders", "billing", {"n": 50}, delay_ms=3_600_000)
# The same dedupe key and content twice: one row.
enqueue(conn, "orders", "billing", {"n": 20}, dedupe_key="order-20")
enqueue(conn, "orders", "billing", {"n": 20}, dedupe_key="order-20")
conn.execute("COMMIT")

cases = {
    "lane_empty": ("", "billing", {"n": 1}, {}),
    "lane_slash": ("or/ders", "billing", {"n": 1}, {}),
    "target_long": ("orders", "t" * 65, {"n": 1}, {}),
    "ordering_key_blank": ("orders", "billing", {"n": 1}, {"ordering_key": "   "}),
    "dedupe_key_long": ("orders", "billing", {"n": 1}, {"dedupe_key": "d" * 257}),
    "max_attempts_zero": ("orders", "billing", {"n": 1}, {"max_attempts": 0}),
    "header_name": ("orders", "billing", {"n": 1}, {"headers": json.dumps({"bad name": "v"})}),
    "header_value": ("orders", "billing", {"n": 1}, {"headers": json.dumps({"x-a": "a\nb"})}),
    "payload_size": ("orders", "billing", "x" * (1024 * 1024), {}),
    "dedupe_conflict": ("orders", "billing", {"n": 21}, {"dedupe_key": "order-20"}),
}
for case, (lane, target, payload, named) in cases.items():
    conn.execute("BEGIN IMMEDIATE")
    try:
        enqueue(conn, lane, target, payload, **named)
        out["errors"][case] = None
    except sqlite3.Error as error:
        out["errors"][case] = str(error)
    conn.execute("ROLLBACK")
conn.close()
print(json.dumps(out))
