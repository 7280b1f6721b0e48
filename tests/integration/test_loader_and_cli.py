"""`starscan load` (through the session's Spark) and the user-management CLI."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

import pytest

from starscan.security.users import UserStore


def _csv(path, rows):
    with open(path, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["id", "city", "amount"])
        for i in range(rows):
            w.writerow([i, ["paris", "lima", "oslo"][i % 3], f"{i * 1.25:.2f}"])


def test_load_csv_in_bounded_tablets_and_read_it_back(server, client, spark, tmp_path):
    from starscan.app.loader import load_table

    src = tmp_path / "orders.csv"
    _csv(src, 20_000)
    result = load_table(spark, server.warehouse, "loaded", "orders", str(src), tablet_target_bytes=64 << 10,
                        progress=False)
    snap = server.warehouse.snapshot("loaded", "orders")
    assert result["rows"] == 20_000 and result["files"] == len(snap.files) > 1
    table = client.read("loaded", "orders", "select id, city from loaded.orders where city = 'lima'")
    assert sorted(table.column("id").to_pylist()) == [i for i in range(20_000) if i % 3 == 1]


def test_load_partitioned_then_prune(server, client, spark, tmp_path):
    from starscan.app.loader import load_table

    src = tmp_path / "orders.csv"
    _csv(src, 3_000)
    load_table(spark, server.warehouse, "loaded", "by_city", str(src), partition_by=["city"], progress=False)
    snap = server.warehouse.snapshot("loaded", "by_city")
    assert snap.partition_columns == ("city",)
    plan = client.plan("loaded", "by_city", "select id from loaded.by_city where city = 'oslo'")
    oslo = {str(t.tablet_id) for t in snap.tablets if t.partition["city"] == "oslo"}
    assert set(plan["partitions"]) == oslo
    table = client.read("loaded", "by_city", "select id from loaded.by_city where city = 'oslo'")
    assert sorted(table.column("id").to_pylist()) == list(range(2, 3_000, 3))


def test_load_rejects_bad_input(server, spark, tmp_path):
    from starscan.app.loader import load_table
    from starscan.core.errors import InvalidInput

    src = tmp_path / "x.csv"
    _csv(src, 3)
    with pytest.raises(InvalidInput, match="table name"):
        load_table(spark, server.warehouse, "loaded", "../evil", str(src), progress=False)
    with pytest.raises(InvalidInput, match="does not exist"):
        load_table(spark, server.warehouse, "loaded", "t", str(tmp_path / "missing.csv"), progress=False)
    with pytest.raises(InvalidInput, match="nope"):
        load_table(spark, server.warehouse, "loaded", "t", str(src), partition_by=["nope"], progress=False)


def _cli(*args, stdin=None):
    return subprocess.run([sys.executable, "-m", "starscan", *args], capture_output=True, text=True, input=stdin,
                          timeout=120)


def test_user_cli_manages_the_users_file(tmp_path):
    wh = tmp_path / "wh"
    added = _cli("user", "add", "alice", "--grant", "sales.*", "--warehouse", str(wh), stdin="pässwörd\n")
    assert added.returncode == 0, added.stderr
    store = UserStore(wh / "_starscan" / "users.json")
    assert store.authenticate("alice", "pässwörd") and not store.authenticate("alice", "wrong")
    assert store.authenticate("root", "")  # the default root is there too
    assert store.can_select("alice", "sales", "orders") and not store.can_select("alice", "hr", "pay")

    assert _cli("user", "grant", "alice", "hr.pay", "--warehouse", str(wh)).returncode == 0
    assert _cli("user", "grant", "alice", "sales.*", "--revoke", "--warehouse", str(wh)).returncode == 0
    assert _cli("user", "passwd", "alice", "--password", "new", "--warehouse", str(wh)).returncode == 0
    store = UserStore(wh / "_starscan" / "users.json")
    assert store.can_select("alice", "hr", "pay") and not store.can_select("alice", "sales", "orders")
    assert store.authenticate("alice", "new") and not store.authenticate("alice", "pässwörd")
    listed = _cli("user", "list", "--warehouse", str(wh))
    assert "alice\thr.pay" in listed.stdout

    dup = _cli("user", "add", "alice", "--password", "x", "--warehouse", str(wh))
    assert dup.returncode != 0 and "already exists" in dup.stderr
    missing = _cli("user", "passwd", "bob", "--password", "x", "--warehouse", str(wh))
    assert missing.returncode != 0 and "no user 'bob'" in missing.stderr
    bad = _cli("user", "grant", "alice", "nodot", "--warehouse", str(wh))
    assert bad.returncode != 0 and "db.table" in bad.stderr

    # DIRECT_READ: a grant of its own, off until given (root has none), needing SELECT too.
    assert not store.can_direct_read("root", "hr", "pay") and not store.can_direct_read("alice", "hr", "pay")
    granted = _cli("user", "grant", "alice", "hr.*", "--direct-read", "--warehouse", str(wh))
    assert granted.returncode == 0 and "granted DIRECT_READ on hr.*" in granted.stdout
    store = UserStore(wh / "_starscan" / "users.json")
    assert store.can_direct_read("alice", "hr", "pay") and not store.can_direct_read("alice", "hr", "other")
    assert _cli("user", "revoke", "alice", "hr.*", "--direct-read", "--warehouse", str(wh)).returncode == 0
    store = UserStore(wh / "_starscan" / "users.json")
    assert not store.can_direct_read("alice", "hr", "pay") and store.can_select("alice", "hr", "pay")
    assert "password_hash" in (wh / "_starscan" / "users.json").read_text()
    assert "pässwörd" not in (wh / "_starscan" / "users.json").read_text()


def test_cli_tables(server, tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
    env["COLUMNS"] = "200"
    out = subprocess.run([sys.executable, "-m", "starscan", "tables", "--warehouse", str(server.warehouse.root)],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()

    def row(db, table):
        return [ln for ln in lines if f" {db} " in ln and f" {table} " in ln]

    assert row("demo", "lineitem"), out.stdout
    assert row("demo", "all_types"), out.stdout
    assert row("db1", "t1"), out.stdout
    sales = row("db1", "sales")
    assert sales and "region, day" in sales[0], out.stdout
    t1 = row("db1", "t1")[0]
    from starscan.tables.catalog import Warehouse

    snap = Warehouse(server.warehouse.root, 0).snapshot("db1", "t1")  # the CLI's default tablet sizes
    assert f" {len(snap.tablets)} " in t1 and f" {snap.version} " in t1
