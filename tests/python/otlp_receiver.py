"""An OTLP/HTTP receiver on loopback for the telemetry tests and benchmark: it decodes what
warden exports with the official `opentelemetry-proto` messages and keeps it.

    with Receiver() as r:
        ... run warden with OTEL_EXPORTER_OTLP_ENDPOINT=r.url ...
        spans = r.wait_for_spans(lambda s: ..., timeout=10)

Run as a script it serves until killed and prints what it took on exit (the benchmark's
live receiver): `python otlp_receiver.py PORT`.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import (
    ExportMetricsServiceRequest,
    ExportMetricsServiceResponse,
)
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)
from opentelemetry.proto.common.v1.common_pb2 import AnyValue


def value(v: AnyValue):
    """An attribute's value as Python has it."""
    kind = v.WhichOneof("value")
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    return getattr(v, kind) if kind else None


def attributes(kvs) -> dict:
    return {kv.key: value(kv.value) for kv in kvs}


class Span(dict):
    """One span: name, kind, ids as hex, status, attributes, events, resource."""


class Receiver:
    def __init__(self, port: int = 0):
        self.spans: list[Span] = []
        self.metrics: list[dict] = []
        self.requests: list[dict] = []
        # Every body as it arrived, to search for what must never be exported.
        self.bodies: list[bytes] = []
        self.lock = threading.Condition()
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.requests.append({"path": self.path, "headers": dict(self.headers)})
                    receiver.bodies.append(body)
                if self.path == "/v1/traces":
                    receiver.take_traces(body)
                    answer = ExportTraceServiceResponse()
                elif self.path == "/v1/metrics":
                    receiver.take_metrics(body)
                    answer = ExportMetricsServiceResponse()
                else:
                    self.send_response(404)
                    self.end_headers()
                    return
                out = answer.SerializeToString()
                self.send_response(200)
                self.send_header("Content-Type", "application/x-protobuf")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def take_traces(self, body: bytes):
        request = ExportTraceServiceRequest.FromString(body)
        spans = []
        for rs in request.resource_spans:
            resource = attributes(rs.resource.attributes)
            for ss in rs.scope_spans:
                for s in ss.spans:
                    spans.append(
                        Span(
                            name=s.name,
                            kind=s.kind,
                            trace_id=s.trace_id.hex(),
                            span_id=s.span_id.hex(),
                            parent_span_id=s.parent_span_id.hex(),
                            status=s.status.code,
                            attributes=attributes(s.attributes),
                            events=[
                                {"name": e.name, "attributes": attributes(e.attributes)}
                                for e in s.events
                            ],
                            resource=resource,
                            duration_ns=s.end_time_unix_nano - s.start_time_unix_nano,
                        )
                    )
        with self.lock:
            self.spans.extend(spans)
            self.lock.notify_all()

    def take_metrics(self, body: bytes):
        request = ExportMetricsServiceRequest.FromString(body)
        taken = []
        for rm in request.resource_metrics:
            for sm in rm.scope_metrics:
                for m in sm.metrics:
                    kind = m.WhichOneof("data")
                    points = getattr(m, kind).data_points
                    for p in points:
                        point = {"name": m.name, "kind": kind, "attributes": attributes(p.attributes)}
                        if kind == "histogram":
                            point["count"] = p.count
                            point["sum"] = p.sum
                        else:
                            point["value"] = p.as_int if p.HasField("as_int") else p.as_double
                        taken.append(point)
        with self.lock:
            self.metrics.extend(taken)
            self.lock.notify_all()

    def wait_for(self, ready, timeout: float = 15.0):
        """Waits until `ready()` is true (under the lock); returns its last value."""
        deadline = time.monotonic() + timeout
        with self.lock:
            while True:
                got = ready()
                if got or time.monotonic() >= deadline:
                    return got
                self.lock.wait(max(0.0, deadline - time.monotonic()))

    def wait_for_spans(self, count: int, timeout: float = 15.0) -> list[Span]:
        self.wait_for(lambda: len(self.spans) >= count, timeout)
        return list(self.spans)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    # SIGTERM ends it as Ctrl-C does, printing the count: a script's background job (the
    # telemetry page's sample) ignores SIGINT, so `kill %1` is how a script stops it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    r = Receiver(int(sys.argv[1]))
    r.thread.start()
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        print(f"spans={len(r.spans)} metric_points={len(r.metrics)}", flush=True)
