"""starscan.client against StarRocks' side of the protocol, not starscan's.

No StarRocks runs here, so the test brings a stand-in written from docs/protocol.md, with
nothing of starscan in it: an FE answering `_query_plan` and `_schema` as sections 2.1-2.3
say (a plain http.server), and BEs built with the official Apache Thrift library from code
the Apache Thrift compiler generates from the IDL (the fixture of test_wire_official.py),
behaving as StarRocks does where starscan differs: `properties` ignored (so no order is
acknowledged), a repeated offset refused, eos in a reply of its own.

The reader must read such a cluster exactly, fail over a scanner that had handed out no
rows, and refuse, rather than guess, to resume one that had.
"""

from __future__ import annotations

import base64
import json
import threading
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pytest
from support.thrift_gen import official_thrift_client
from support.waits import free_port

from starscan.client import AuthenticationError, NetworkError, QueryError, connect

DATE, DATETIME, LARGEINT, BIGINT, VARCHAR = 9, 10, 14, 6, 15
TABLETS = {10001: range(0, 700), 10002: range(700, 1500), 10003: range(1500, 2000)}
COLUMNS = [("id", BIGINT), ("name", VARCHAR), ("day", DATE), ("at", DATETIME), ("big", LARGEINT)]


@pytest.fixture(scope="module")
def gen(tmp_path_factory):
    """The official Apache Thrift library and the code its compiler generates from our IDL."""
    return official_thrift_client(tmp_path_factory.mktemp("thrift_gen_py"))


def _rows(ids: range) -> pa.Table:
    """A tablet's rows in the wire types of docs/protocol.md 5.2 (dates and LARGEINT as text)."""
    return pa.table({
        "id": pa.array(list(ids), pa.int64()),
        "name": pa.array([None if i % 9 == 0 else f"n{i}" for i in ids]),
        "day": pa.array([f"2024-01-{1 + i % 28:02d}" for i in ids]),
        "at": pa.array([f"2024-02-03 04:05:{i % 60:02d}" + (".250000" if i % 2 else "") for i in ids]),
        "big": pa.array([str(170141183460469231731687303715884105 * (1 if i % 2 else -1) + i) for i in ids]),
    })


class StandInBE:
    """A BE as StarRocks behaves (section 4), on the official Apache Thrift library.
    ``lose_after``: after that many replies with rows, every context is forgotten, as a BE
    that restarted."""

    def __init__(self, gen, lose_after: int | None = None):
        from thrift.server import TServer

        self.gen = gen
        self.lose_after = lose_after
        self.replies = 0
        self.contexts: dict[str, dict] = {}
        self.properties_seen: list[dict] = []
        handler = self
        processor = gen.service.Processor(handler)
        self.socket = gen.TSocket.TServerSocket(host="127.0.0.1", port=0)
        self.server = TServer.TThreadedServer(processor, self.socket, gen.TTransport.TBufferedTransportFactory(),
                                              gen.TBinaryProtocol.TBinaryProtocolFactory())
        self.server.daemon = True
        self.socket.listen()
        self.port = self.socket.handle.getsockname()[1]
        self.socket.listen = lambda: None  # already listening: serve() calls it again
        threading.Thread(target=self.server.serve, daemon=True).start()

    def _status(self, code: int = 0, msg: str | None = None):
        t = self.gen.ttypes
        return t.TStatus(status_code=code, error_msgs=[msg] if msg else None)

    def open_scanner(self, params):
        t = self.gen.ttypes
        self.properties_seen.append(dict(params.properties or {}))
        plan = json.loads(base64.b64decode(params.opaqued_query_plan))
        unknown = [tid for tid in params.tablet_ids if tid not in TABLETS]
        cid = str(uuid.uuid4())
        columns = [t.TScanColumnDesc(name=n, type=c) for n, c in COLUMNS if n in plan["columns"]]
        if unknown:
            return t.TScanOpenResult(status=self._status(31, f"tablet_id: {unknown[0]} not found"), context_id=cid,
                                     selected_columns=[])
        rows = pa.concat_tables([_rows(TABLETS[tid]) for tid in params.tablet_ids]).select(plan["columns"])
        self.contexts[cid] = {"rows": rows, "offset": 0, "batch": params.batch_size}
        return t.TScanOpenResult(status=self._status(), context_id=cid, selected_columns=columns)

    def get_next(self, params):
        t = self.gen.ttypes
        ctx = self.contexts.get(params.context_id)
        if ctx is None:
            return t.TScanBatchResult(status=self._status(31, f"context_id: {params.context_id} not found"))
        if params.offset != ctx["offset"]:  # StarRocks refuses a repeated offset (4.2)
            return t.TScanBatchResult(status=self._status(
                31, f"context_id={params.context_id}, send_offset={params.offset}, context_offset={ctx['offset']}"))
        rows = ctx["rows"].slice(ctx["offset"], ctx["batch"])
        if rows.num_rows == 0:
            return t.TScanBatchResult(status=self._status(), eos=True)
        ctx["offset"] += rows.num_rows
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, rows.schema) as writer:
            writer.write_table(rows)
        self.replies += 1
        if self.lose_after is not None and self.replies >= self.lose_after:
            self.contexts.clear()  # "restarted": what it held is gone
        return t.TScanBatchResult(status=self._status(), eos=False, rows=sink.getvalue().to_pybytes())

    def close_scanner(self, params):
        self.contexts.pop(params.context_id, None)
        return self.gen.ttypes.TScanCloseResult(status=self._status())


class StandInFE:
    """`_query_plan` and `_schema` as sections 2.1-2.3 describe them; root with an empty
    password. Each tablet's routings are given per tablet id."""

    def __init__(self, routings: dict[int, list[str]]):
        fe = self

        class Handler(BaseHTTPRequestHandler):
            def _send(self, code: int, body: dict, extra: dict | None = None) -> None:
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for k, v in (extra or {}).items():
                    self.send_header(k, v)
                self.end_headers()
                self.wfile.write(data)

            def _authorized(self) -> bool:
                if self.headers.get("Authorization") == "Basic " + base64.b64encode(b"root:").decode():
                    return True
                self._send(401, {"status": "FAILED", "code": "1", "msg": "Access denied for user", "message":
                                 "Access denied for user"}, {"WWW-Authenticate": 'Basic realm=""'})
                return False

            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                if not self._authorized():
                    return
                if not self.path.startswith("/api/sr/t/"):
                    self._send(404, {"status": 404, "exception": "Table [nope] does not exists"})
                    return
                sql = body["sql"]
                selected = sql.split(" from ")[0].removeprefix("select ").replace("`", "")
                columns = [n for n, _ in COLUMNS] if selected.strip() == "*" else [c.strip() for c in selected.split(",")]
                plan = base64.b64encode(json.dumps({"columns": columns}).encode()).decode()
                partitions = {str(tid): {"routings": r, "version": 3, "schemaHash": 368169781}
                              for tid, r in fe.routings.items()}
                self._send(200, {"status": 200, "opaqued_query_plan": plan, "partitions": partitions})

            def do_GET(self) -> None:
                if not self._authorized():
                    return
                names = {BIGINT: "BIGINT", VARCHAR: "VARCHAR", DATE: "DATE", DATETIME: "DATETIME", LARGEINT: "LARGEINT"}
                self._send(200, {"status": 200, "properties": [{"name": n, "type": names[c], "comment": ""}
                                                               for n, c in COLUMNS]})

            def log_message(self, *args) -> None:
                pass

        self.routings = routings
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()


def _expected() -> pa.Table:
    return pa.concat_tables([_rows(r) for r in TABLETS.values()])


def test_a_starrocks_cluster_reads_exactly_in_parallel_and_in_native_types(gen):  # noqa: F811
    a, b = StandInBE(gen), StandInBE(gen)
    ea, eb = f"127.0.0.1:{a.port}", f"127.0.0.1:{b.port}"
    fe = StandInFE({10001: [ea, eb], 10002: [eb, ea], 10003: [ea, eb]})
    conn = connect(fe.url, "root", "", max_workers=3, request_tablet_size=1, batch_size=128)
    got = conn.read_arrow("sr.t")
    assert Counter(map(repr, got.to_pylist())) == Counter(map(repr, _expected().to_pylist()))
    assert a.replies and b.replies  # both BEs served tablets
    assert all(p.get("starscan.ordered") == "true" for p in a.properties_seen + b.properties_seen)
    native = conn.read_arrow("sr.t", columns=["id", "day", "at", "big"], native_types=True)
    assert native.schema.field("day").type == pa.date32()
    assert native.schema.field("at").type == pa.timestamp("us")
    assert native.schema.field("big").type == pa.decimal128(38, 0)
    by_id = {r["id"]: r for r in native.to_pylist()}
    assert str(by_id[3]["day"]) == "2024-01-04" and str(by_id[3]["at"]) == "2024-02-03 04:05:03.250000"
    assert str(by_id[3]["big"]) == "170141183460469231731687303715884108"


def test_a_dead_first_routing_is_skipped_before_any_row(gen):  # noqa: F811
    live = StandInBE(gen)
    dead = f"127.0.0.1:{free_port()}"  # a port nobody listens on
    fe = StandInFE({tid: [dead, f"127.0.0.1:{live.port}"] for tid in TABLETS})
    got = connect(fe.url, max_workers=2, request_tablet_size=1, request_retries=1).read_arrow("sr.t")
    assert Counter(got.column("id").to_pylist()) == Counter(range(2000))


def test_a_scanner_lost_after_handing_out_rows_is_not_resumed_by_guessing(gen):  # noqa: F811
    """StarRocks keeps no order a reader may rely on (it ignores `starscan.ordered`): a BE
    that forgets a scanner after rows were handed out ends the read with an error."""
    flaky, spare = StandInBE(gen, lose_after=2), StandInBE(gen)
    fe = StandInFE({10002: [f"127.0.0.1:{flaky.port}", f"127.0.0.1:{spare.port}"]})
    seen = []
    with pytest.raises(NetworkError) as lost:
        for batch in connect(fe.url, max_workers=1, batch_size=100).read_batches("sr.t", columns=["id"]):
            seen.extend(batch.column("id").to_pylist())
    assert "not found" in lost.value.message
    assert len(seen) == len(set(seen)) == 200  # what came was right, and nothing was repeated
    assert not spare.replies  # no rows were taken from the spare by skipping


def test_starrocks_errors_are_classified(gen):  # noqa: F811
    be = StandInBE(gen)
    fe = StandInFE({10001: [f"127.0.0.1:{be.port}"], 99999: [f"127.0.0.1:{be.port}"]})
    with pytest.raises(AuthenticationError) as refused:
        connect(fe.url, "root", "wrong").read_arrow("sr.t")
    assert refused.value.status == 401 and "Access denied" in refused.value.message
    with pytest.raises(QueryError) as missing:
        connect(fe.url).read_arrow("sr.nope")
    assert "does not exists" in missing.value.message
    with pytest.raises(QueryError) as tablet:
        connect(fe.url, request_tablet_size=1).read_arrow("sr.t")
    assert "tablet_id: 99999 not found" in tablet.value.message
