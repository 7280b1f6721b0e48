"""Helpers of the operations tests (metrics, profiles, admin page, CLI, runtime config):
a sequential BE reader on a real Thrift connection and a /metrics scrape."""

from __future__ import annotations

import httpx
import pyarrow as pa
from prometheus_client.parser import text_string_to_metric_families

from starscan.client import thrift_client
from starscan.core.thrift_defs import wire

OK = wire.TStatusCode.OK
NOT_FOUND = wire.TStatusCode.NOT_FOUND


def plan_for(client, db: str, table: str, sql: str) -> tuple[str, list[int]]:
    body = client.plan(db, table, sql)
    return body["opaqued_query_plan"], [int(t) for t in body["partitions"]]


class Reader:
    """One BE connection, calls made one after another as the Java readers do."""

    def __init__(self, be_addr, timeout_s: float = 120.0):
        self.client = thrift_client(*be_addr, timeout_s=timeout_s)

    def open(self, db, table, plan, tablets, batch_size=1024, user="root", passwd="", **kw):
        return self.client.open_scanner(wire.TScanOpenParams(
            cluster="default_cluster", database=db, table=table, tablet_ids=list(tablets),
            opaqued_query_plan=plan, batch_size=batch_size, user=user, passwd=passwd, **kw))

    def open_ok(self, *args, **kw) -> str:
        opened = self.open(*args, **kw)
        assert opened.status.status_code == OK, opened.status
        return opened.context_id

    def next(self, cid: str, offset: int):
        return self.client.get_next(wire.TScanNextBatchParams(context_id=cid, offset=offset))

    def next_batch(self, cid: str, offset: int) -> pa.RecordBatch:
        res = self.next(cid, offset)
        assert res.status.status_code == OK and not res.eos, res.status
        return pa.ipc.open_stream(res.rows).read_next_batch()

    def drain(self, cid: str, offset: int = 0) -> int:
        """get_next until eos; returns the rows read."""
        while True:
            res = self.next(cid, offset)
            assert res.status.status_code == OK, res.status
            if res.eos:
                return offset
            offset += pa.ipc.open_stream(res.rows).read_all().num_rows

    def read_tablets(self, db, table, plan, tablets, after_first_batch=None, batch_size=64) -> list[dict]:
        """Every row of the plan, a scanner per tablet read to eos; ``after_first_batch()`` runs
        once, right after the first batch arrived (a writer committing mid-read)."""
        rows: list[dict] = []
        for tablet in tablets:
            cid = self.open_ok(db, table, plan, [int(tablet)], batch_size=batch_size)
            offset = 0
            while True:
                res = self.next(cid, offset)
                assert res.status.status_code == OK, res.status
                if res.eos:
                    break
                batch = pa.ipc.open_stream(res.rows).read_all()
                rows += batch.to_pylist()
                offset += batch.num_rows
                if after_first_batch is not None:
                    after_first_batch()
                    after_first_batch = None
            self.close_scanner(cid)
        return rows

    def close_scanner(self, cid: str):
        return self.client.close_scanner(wire.TScanCloseParams(context_id=cid))

    def close(self):
        self.client.close()


def scrape(fe_url: str) -> dict:
    """{(sample name, frozenset(labels)): value} from /metrics."""
    resp = httpx.get(f"{fe_url}/metrics", timeout=30)
    assert resp.status_code == 200, resp.text
    assert resp.headers["content-type"].startswith("text/plain")
    out = {}
    for family in text_string_to_metric_families(resp.text):
        for sample in family.samples:
            out[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return out


def value(samples: dict, name: str, **labels) -> float:
    return samples.get((name, frozenset((k, str(v)) for k, v in labels.items())), 0.0)


def follow_process(fe: str, out, *extra: str, table: str = "inc.stream", consumer: str = "exporter"):
    """A `starscan follow` process writing ``table``'s appends into ``out`` (killed by tests)."""
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if not k.startswith("STARSCAN_")}
    return subprocess.Popen([sys.executable, "-m", "starscan", "follow", table, "--consumer", consumer,
                             "--into", str(out), "--fe", fe, "--poll-s", "0.05", *extra],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
