#!/usr/bin/python3
"""A test OTLP/HTTP collector for t/210-otel.t and make bench.

    otlp_collector.py PORT OUT_DIR [--discard]

Compiles opentelemetry-proto's trace protos (t/data/otel-proto/, copied
from the upstream repository: see its VERSION) with protoc into a
temporary directory, then serves POST /v1/traces.  Every request body is
parsed as OTLP/JSON into ExportTraceServiceRequest with
google.protobuf.json_format.Parse, after the hex trace and span ids OTLP's
JSON encoding uses are turned into the base64 that the protobuf JSON
mapping expects.  A body that does not parse, or a field the message does
not have, is an error: answered 400, its text appended to
OUT_DIR/errors (a test fails when that file is not empty).

Each span of a parsed request is appended to OUT_DIR/spans as one JSON
line: traceId, spanId, parentSpanId (hex), name, kind, status code, times,
the attributes as a plain object, and the resource's service.name.

OUT_DIR/delay, when present, holds seconds to wait before each answer (a
slow collector).  --discard parses nothing and answers 200 at once (the
bench's collector).  Needs Debian's python3-protobuf and protoc
(protobuf-compiler).
"""

import base64
import binascii
import http.server
import json
import os
import socketserver
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.join(HERE, '..', 'data', 'otel-proto')
PROTOS = [
    'opentelemetry/proto/common/v1/common.proto',
    'opentelemetry/proto/resource/v1/resource.proto',
    'opentelemetry/proto/trace/v1/trace.proto',
    'opentelemetry/proto/collector/trace/v1/trace_service.proto',
]


def compile_protos():
    out = tempfile.mkdtemp(prefix='otlp-proto-')
    subprocess.run(['protoc', '-I', PROTO_ROOT, '--python_out=' + out]
                   + PROTOS, check=True)
    sys.path.insert(0, out)
    from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
    return trace_service_pb2


def hex_to_b64(value, size, where):
    """An OTLP/JSON id: hex of size bytes (empty allowed: no parent)."""
    if not isinstance(value, str):
        raise ValueError('%s: not a string: %r' % (where, value))
    if value == '':
        return ''
    if len(value) != 2 * size:
        raise ValueError('%s: %d hex digits, not %d: %r'
                         % (where, len(value), 2 * size, value))
    try:
        raw = binascii.unhexlify(value)
    except binascii.Error:
        raise ValueError('%s: not hex: %r' % (where, value))
    return base64.b64encode(raw).decode()


def ids_to_base64(doc):
    for rs in doc.get('resourceSpans', []):
        for ss in rs.get('scopeSpans', []):
            for sp in ss.get('spans', []):
                for key, size in (('traceId', 16), ('spanId', 8),
                                  ('parentSpanId', 8)):
                    if key in sp:
                        sp[key] = hex_to_b64(sp[key], size, key)
                for link in sp.get('links', []):
                    for key, size in (('traceId', 16), ('spanId', 8)):
                        if key in link:
                            link[key] = hex_to_b64(link[key], size, key)
    return doc


def attr_value(v):
    kind = v.WhichOneof('value')
    if kind == 'string_value':
        return v.string_value
    if kind == 'int_value':
        return v.int_value
    if kind == 'bool_value':
        return v.bool_value
    if kind == 'double_value':
        return v.double_value
    raise ValueError('attribute of an unexpected kind: %s' % kind)


def spans_of(req):
    out = []
    for rs in req.resource_spans:
        res = {a.key: attr_value(a.value) for a in rs.resource.attributes}
        for ss in rs.scope_spans:
            for sp in ss.spans:
                out.append({
                    'traceId': sp.trace_id.hex(),
                    'spanId': sp.span_id.hex(),
                    'parentSpanId': sp.parent_span_id.hex(),
                    'name': sp.name,
                    'kind': sp.kind,
                    'status': sp.status.code,
                    'start': sp.start_time_unix_nano,
                    'end': sp.end_time_unix_nano,
                    'attributes': {a.key: attr_value(a.value)
                                   for a in sp.attributes},
                    'service': res.get('service.name'),
                    'scope': ss.scope.name,
                })
    return out


class Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = 'HTTP/1.1'

    def log_message(self, fmt, *args):
        pass

    def answer(self, code, body=b'{}'):
        self.send_response(code)
        self.send_header('Content-Type', 'application/json')
        self.send_header('Content-Length', str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self):
        length = int(self.headers.get('Content-Length', '0'))
        body = self.rfile.read(length)

        if self.server.discard:
            self.answer(200)
            return

        # a slow collector, on purpose: the test that writes this file
        # checks that nothing in the gateway waits for it
        delay = os.path.join(self.server.out, 'delay')
        if os.path.exists(delay):
            with open(delay) as f:
                time.sleep(float(f.read().strip() or 0))

        try:
            if self.path != '/v1/traces':
                raise ValueError('path %s' % self.path)
            if self.headers.get('Content-Type') != 'application/json':
                raise ValueError('Content-Type %s'
                                 % self.headers.get('Content-Type'))
            doc = ids_to_base64(json.loads(body.decode('utf-8')))
            req = self.server.pb.ExportTraceServiceRequest()
            json_format.Parse(json.dumps(doc), req)
            spans = spans_of(req)
        except Exception as e:          # noqa: BLE001, the test reads it
            with self.server.lock:
                with open(os.path.join(self.server.out, 'errors'), 'a') as f:
                    f.write('%s: %s\n%s\n' % (type(e).__name__, e,
                                              body[:2000]))
            self.answer(400, b'{"error":"unparsable"}')
            return

        with self.server.lock:
            with open(os.path.join(self.server.out, 'spans'), 'a') as f:
                for s in spans:
                    f.write(json.dumps(s, sort_keys=True) + '\n')
            with open(os.path.join(self.server.out, 'requests'), 'a') as f:
                f.write('%d\n' % len(spans))

        self.answer(200)


class Server(socketserver.ThreadingMixIn, http.server.HTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def handle_error(self, request, client_address):
        # a client that gave up on a slow or paused collector: expected
        if not isinstance(sys.exc_info()[1], (BrokenPipeError,
                                              ConnectionResetError)):
            super().handle_error(request, client_address)


if __name__ == '__main__':
    port, out = int(sys.argv[1]), sys.argv[2]
    discard = '--discard' in sys.argv[3:]
    os.makedirs(out, exist_ok=True)

    srv = Server(('127.0.0.1', port), Handler)
    srv.out = out
    srv.discard = discard
    srv.lock = threading.Lock()

    if not discard:
        from google.protobuf import json_format
        srv.pb = compile_protos()

    with open(os.path.join(out, 'ready'), 'w') as f:
        f.write('%d\n' % os.getpid())

    srv.serve_forever()
