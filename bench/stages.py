"""Where a scan's CPU goes, stage by stage (not a test).

A scan on the ``arrow`` engine passes every row through the same stages: a Spark task's
pyarrow reads the split's row groups, applies the plan's predicate, converts the rows to
the wire types and serializes them; the BE receives them; ``get_next`` wraps each batch in
a Thrift reply; the reader decodes it. On this machine all of them share two cores with the
JVM scheduling the tasks, so the sum of their CPU per row bounds the rows per second of the
whole path.

This script starts an in-process server on the ``compare.py`` warehouse (``demo.lineitem``
written when missing), asks the FE for the full and the filtered scan's plans as a reader
would, and turns each plan into the read instructions and splits exactly as the BE does
(``plan_arrow``). Then it runs each stage over all of the scan's rows, one batch at a time,
and reads the CPU clock of the thread (or threads) doing it:

- read: ``read_split`` of every split on one thread, as a Spark task or the BE's own reader
  reads it (in runs of up to 64 Ki rows, ``cut=False``), without the predicate;
- filter: the same read with the predicate, minus the read alone (the row groups the
  statistics skip are skipped in both);
- convert: ``BatchConverter.convert`` of each run to the wire types, and ``rechunk`` to
  ``batch_size`` rows, as the task does;
- ipc: ``RecordBatch.serialize`` of each batch, as the task sends it;
- push: the task's ``sendall`` of each frame over a Unix socket (as tasks on the BE's machine
  push) plus the BE's receive into Arrow's memory pool and ``read_record_batch``, in a process
  of its own (both CPU times);
- reply: the BE's ``get_next`` answer, written by the BE's own reply writer
  (``starscan/thrift/server._Processor``: thriftpy2 for the header, one scatter-gather send of the
  IPC stream's parts) to 127.0.0.1;
- decode: the reader's receive through the Python client's own transport (the rows straight
  into an Arrow buffer, starscan/client/transport.py) and thriftpy2's binary protocol, and the
  Arrow IPC read, in a process of its own.

Not in the sum: Spark's JVM scheduling the tasks (one job per split), Python's thread
hand-offs in the BE (queue, locks, the GIL) and the waits of a request/reply protocol.

    python bench/stages.py                      # scale 1, the compare warehouse
    python bench/stages.py --scale 0.1 --no-append
"""

from __future__ import annotations

import argparse
import dataclasses
import socket
import struct
import sys
import time
from pathlib import Path

import common

STAGES = ("read", "filter", "convert", "ipc", "push", "reply", "decode")


def _plans(server, queries: dict[str, str]) -> dict[str, tuple]:
    """Each query's plan as the BE decodes it: (plan, planned tablets, tablet ids)."""
    import httpx

    from starscan.plans import codec as plan_codec
    from starscan.plans.tablet_lists import planned_tablets

    out = {}
    for name, sql in queries.items():
        resp = httpx.post(f"http://127.0.0.1:{server.http_port}/api/demo/lineitem/_query_plan",
                          json={"sql": sql}, auth=("root", ""), timeout=300)
        resp.raise_for_status()
        body = resp.json()
        plan = plan_codec.decode(body["opaqued_query_plan"], server.signer)
        out[name] = (plan, planned_tablets(plan, server.tablet_lists, server.warehouse),
                     [int(t) for t in body["partitions"]])
    return out


LENGTH = struct.Struct(">I")


def receive(kind: str, schema_b64: str) -> int:
    """A receiving end in a process of its own (the BE's or the reader's, as in a real scan):
    prints its port, takes the length-prefixed frames of one connection, then prints its
    CPU seconds and the rows it received as JSON."""
    import base64
    import json
    import os
    import tempfile

    import pyarrow as pa
    from thriftpy2.protocol.binary import TBinaryProtocol
    from thriftpy2.transport import TSocket, TTransportException

    from starscan.client.transport import ArrowReadTransport
    from starscan.core.thrift_defs import wire
    from starscan.provider.push.wire import recv_arrow_buffer, recv_exact

    schema = pa.ipc.read_schema(pa.py_buffer(base64.b64decode(schema_b64)))
    if kind == "be":  # a Unix socket, as the BE offers to Spark tasks on its own machine
        path = os.path.join(tempfile.mkdtemp(prefix="stages-"), "push.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        print(path, flush=True)
    else:
        listener = socket.create_server(("127.0.0.1", 0))
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        print(listener.getsockname()[1], flush=True)
    sock, _ = listener.accept()
    before = os.times()
    rows = 0
    if kind == "reader":  # get_next replies, read as the Python client reads them
        proto = TBinaryProtocol(ArrowReadTransport(TSocket(sock=sock)))
        while True:
            try:
                proto.read_message_begin()
            except TTransportException:
                break
            result = wire.TStarrocksExternalService.get_next_result()
            proto.read_struct(result)
            proto.read_message_end()
            for batch in pa.ipc.open_stream(result.success.rows):
                rows += batch.num_rows
    while kind == "be":  # the BE's push receive (provider/push/listener.py)
        head = recv_exact(sock, LENGTH.size)
        if head is None:
            break
        size = LENGTH.unpack(head)[0]
        rows += pa.ipc.read_record_batch(recv_arrow_buffer(sock, size), schema).num_rows
    after = os.times()
    if kind == "be":
        listener.close()
        os.unlink(path)
        os.rmdir(os.path.dirname(path))
    print(json.dumps({"cpu_s": after.user - before.user + after.system - before.system, "rows": rows}), flush=True)
    return 0


class _Receiver:
    """``receive`` in a child process, and a connection to it."""

    def __init__(self, kind: str, schema):
        import base64
        import subprocess

        self.proc = subprocess.Popen([sys.executable, str(Path(__file__).resolve()), "--receive", kind,
                                      base64.b64encode(schema.serialize().to_pybytes()).decode()],
                                     stdout=subprocess.PIPE, text=True)
        assert self.proc.stdout is not None
        where = self.proc.stdout.readline().strip()
        if kind == "be":
            self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            self.sock.connect(where)
        else:
            self.sock = socket.create_connection(("127.0.0.1", int(where)))
            self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)

    def send(self, payload) -> None:
        self.sock.sendall(LENGTH.pack(len(payload) if isinstance(payload, bytes) else payload.size))
        self.sock.sendall(payload)

    def finish(self) -> dict:
        import json

        self.sock.close()
        out, _ = self.proc.communicate(timeout=600)
        return json.loads(out.strip().splitlines()[-1])


def profile(read, splits, batch_rows: int) -> dict:
    """CPU seconds per stage over every split, and the rows and wire bytes delivered."""
    from thriftpy2.protocol import TCyBinaryProtocolFactory
    from thriftpy2.transport import TCyBufferedTransport, TSocket

    from starscan.arrow.read import read_split
    from starscan.arrow.wire import BatchConverter
    from starscan.core.thrift_defs import wire
    from starscan.provider.push.task import rechunk
    from starscan.thrift.server import _Processor

    cpu = dict.fromkeys(STAGES, 0.0)
    clock = time.thread_time
    unfiltered = dataclasses.replace(read, filter=None)
    for split in splits:  # read alone
        batches = read_split(unfiltered, split, batch_rows, cut=False)  # runs, as tasks and the BE read
        while True:
            t = clock()
            batch = next(batches, None)
            cpu["read"] += clock() - t
            if batch is None:
                break

    converter = BatchConverter(list(read.output_columns))  # the wire conversion of the plan's columns
    out_factory = TCyBinaryProtocolFactory(strict_read=False, strict_write=True)
    be, reader = _Receiver("be", converter.schema), _Receiver("reader", converter.schema)
    service = wire.TStarrocksExternalService
    replies = _Processor(service, object(), out_factory)  # the BE's own reply writer
    to_reader = out_factory.get_protocol(TCyBufferedTransport(TSocket(sock=reader.sock)))
    rows = wire_bytes = 0
    ok = wire.TStatus(status_code=wire.TStatusCode.OK)
    for split in splits:
        batches = read_split(read, split, batch_rows, cut=False)
        while True:
            t = clock()
            batch = next(batches, None)
            cpu["filter"] += clock() - t  # read + filter; the read alone is taken off below
            if batch is None:
                break
            t = clock()
            converted = list(rechunk([converter.convert(batch)], batch_rows)) if batch.num_rows else []
            cpu["convert"] += clock() - t
            for piece in converted:
                t = clock()
                payload = piece.serialize()
                cpu["ipc"] += clock() - t
                t = clock()
                be.send(payload)
                cpu["push"] += clock() - t
                t = clock()
                replies.send_result(to_reader, "get_next", service.get_next_result(success=wire.TScanBatchResult(
                    status=ok, eos=False, rows=converter.ipc_stream(piece, payload))), rows)
                cpu["reply"] += clock() - t
                rows += piece.num_rows
                wire_bytes += piece.nbytes
    at_be, at_reader = be.finish(), reader.finish()
    cpu["filter"] = max(0.0, cpu["filter"] - cpu["read"])
    cpu["push"] += at_be["cpu_s"]
    cpu["decode"] = at_reader["cpu_s"]
    if at_be["rows"] != rows or at_reader["rows"] != rows:
        raise RuntimeError(f"rows lost in the profile: sent {rows}, BE {at_be['rows']}, reader {at_reader['rows']}")
    return {"cpu": cpu, "rows": rows, "bytes": wire_bytes, "splits": len(splits)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0, help="TPC-H scale of demo.lineitem (default 1.0: ~6 M rows)")
    ap.add_argument("--batch-size", type=int, default=4096, help="rows per batch and per reply (default 4096)")
    ap.add_argument("--filter-date", default="1998-01-01", help="the filtered scan's l_shipdate bound (as compare.py)")
    ap.add_argument("--tasks", type=int, default=2, help="tasks per scanner the splits are cut for (default 2)")
    ap.add_argument("--repeats", type=int, default=2, help="profiles per query; the one with least CPU is kept (default 2)")
    ap.add_argument("--warehouse", default="/tmp/starscan-compare-wh", help="compare.py's warehouse (reused)")
    ap.add_argument("--tablet-target-bytes", type=int, default=32 << 20)
    ap.add_argument("--no-append", action="store_true", help="print only; do not append to bench/RESULTS.md")
    ap.add_argument("--receive", nargs=2, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.receive:
        return receive(*args.receive)

    from starscan.app.demo import create_demo
    from starscan.provider.arrow_engine import plan_arrow

    env = common.environment()
    warehouse_dir = Path(args.warehouse).resolve() / f"sf{args.scale:g}-{args.tablet_target_bytes}"
    warehouse_dir.mkdir(parents=True, exist_ok=True)
    server, spark, settings = common.start_server(warehouse_dir, tablet_target_bytes=args.tablet_target_bytes,
                                                  warmup_rows=0)
    queries = {
        "full": "select * from demo.lineitem",
        "filter": "select l_orderkey, l_quantity, l_extendedprice, l_shipdate from demo.lineitem "
                  f"where l_shipdate >= '{args.filter_date}'",
    }
    results = {}
    try:
        create_demo(spark, server.warehouse, args.scale, args.tablet_target_bytes)
        for name, (plan, tablets, ids) in _plans(server, queries).items():
            read, splits = plan_arrow(plan, tablets, ids, settings.time_zone, tasks=args.tasks,
                                      storage=server.warehouse.storage)
            runs = []
            for _ in range(args.repeats):
                common.log(f"{name}: profiling {len(splits)} splits")
                runs.append(profile(read, splits, args.batch_size))
            results[name] = min(runs, key=lambda r: sum(r["cpu"].values()))
    finally:
        server.stop()
        spark.stop()

    header = ["scan", "rows", "wire MB"] + [f"{s} ms/M rows" for s in STAGES] + \
        ["total CPU s/M rows", "M rows/s if every stage shared 2 cores"]
    rows = []
    for name, r in results.items():
        per_m = {s: r["cpu"][s] / r["rows"] * 1e6 for s in STAGES} if r["rows"] else dict.fromkeys(STAGES, 0.0)
        total = sum(per_m.values())
        rows.append([name, f"{r['rows']:,}", common.fmt(r["bytes"] / 1e6)] +
                    [common.fmt(per_m[s] * 1e3, 0) for s in STAGES] +
                    [common.fmt(total, 2), common.fmt(2 / total, 2) if total else "–"])
    conditions = {
        "what": "CPU seconds of each stage of an arrow-engine scan over all of the scan's rows, on one thread each "
                "(push and decode: the receiving process's CPU too), per million rows delivered; "
                f"the stages are described in bench/stages.py; batch_size {args.batch_size}",
        "data": f"demo.lineitem scale {args.scale:g} (compare.py's warehouse), page cache warm",
        "plans": f"from the FE over HTTP, turned into read instructions and splits by plan_arrow "
                 f"(tasks={args.tasks}) as the BE does; {args.repeats} profile(s) per scan, the least CPU kept",
        "not counted": "Spark's JVM scheduling the tasks (a job per split), the BE's thread hand-offs (queue, locks, "
                       "the GIL) and the waits of the request/reply protocol",
    }
    common.report(f"stages: CPU per stage of an arrow-engine scan, lineitem scale {args.scale:g}", conditions,
                  common.markdown_table(header, rows) + "\n", env, append=not args.no_append)
    return 0


if __name__ == "__main__":
    sys.exit(main())
