#!/usr/bin/python3
"""A real gRPC service and client (Debian's python3-grpcio) for
t/165-grpc-client.t: the gateway between them is nginx with the module.

    grpc_peer.py serve PORT          the service (until killed)
    grpc_peer.py call PORT METHOD [key=value ...]
                                     one call; prints one JSON line

Service methods, on /idem.Test/<name>, with raw bytes as messages:
    Echo      answers "echo:<request>" and the metadata it received as
              "<name>=<value>" lines in its answer, with the deadline it
              runs under as time-remaining-ms
    Internal  ends the call with INTERNAL
    Flaky     UNAVAILABLE for the first call of a call id, then like Echo
    Slow      sleeps 1 s, then like Echo; with the message "hold" and
              GRPC_PEER_RELEASE naming a file, until that file exists
              (at most 30 s): the test says when the call ends
Every call is counted per x-call-id; "Count" answers the count of the
call id in its request message.
"""

import json
import os
import sys
import threading
import time
from concurrent import futures

import grpc

counts = {}
lock = threading.Lock()


def seen(context):
    md = dict(context.invocation_metadata())
    cid = md.get("x-call-id", "none")
    with lock:
        counts[cid] = counts.get(cid, 0) + 1
        n = counts[cid]
    return md, cid, n


def echo_answer(request, md, context):
    left = context.time_remaining()
    if left is not None:
        md["time-remaining-ms"] = str(int(left * 1000))
    lines = ["%s=%s" % (k, v) for k, v in sorted(md.items())]
    return b"echo:" + request + b"\n" + "\n".join(lines).encode()


def handler(name):
    def call(request, context):
        md, cid, n = seen(context)
        if name == "Internal":
            context.abort(grpc.StatusCode.INTERNAL, "boom")
        if name == "Flaky" and n == 1:
            context.abort(grpc.StatusCode.UNAVAILABLE, "try again")
        if name == "Slow":
            release = os.environ.get("GRPC_PEER_RELEASE")
            if request == b"hold" and release:
                for _ in range(3000):
                    if os.path.exists(release):
                        break
                    time.sleep(0.01)
            else:
                time.sleep(1)
        if name == "Count":
            with lock:
                return str(counts.get(request.decode(), 0)).encode()
        return echo_answer(request, md, context)
    return grpc.unary_unary_rpc_method_handler(call)


def serve(port):
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    methods = {m: handler(m)
               for m in ("Echo", "Internal", "Flaky", "Slow", "Count")}
    server.add_generic_rpc_handlers(
        (grpc.method_handlers_generic_handler("idem.Test", methods),))
    server.add_insecure_port("127.0.0.1:%s" % port)
    server.start()
    print("ready", flush=True)
    server.wait_for_termination()


def call(port, method, args):
    opts = dict(a.split("=", 1) for a in args)
    metadata = []
    for k, v in opts.items():
        if k.startswith("md:"):
            metadata.append((k[3:], v))
    timeout = float(opts["timeout"]) if "timeout" in opts else None
    message = opts.get("message", "hello").encode()

    out = {}
    with grpc.insecure_channel("127.0.0.1:%s" % port) as channel:
        stub = channel.unary_unary("/idem.Test/%s" % method)
        try:
            answer, c = stub.with_call(message, metadata=metadata,
                                       timeout=timeout)
            out["code"] = c.code().name
            out["answer"] = answer.decode("utf-8", "replace")
            out["initial"] = dict(c.initial_metadata())
            out["trailing"] = dict(c.trailing_metadata())
        except grpc.RpcError as e:
            out["code"] = e.code().name
            out["details"] = e.details()
            out["initial"] = dict(e.initial_metadata() or ())
            out["trailing"] = dict(e.trailing_metadata() or ())
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "serve":
        serve(sys.argv[2])
    else:
        call(sys.argv[2], sys.argv[3], sys.argv[4:])
