#!/usr/bin/python3
"""An example consumer of idem_unknown_stream: follows up calls that ended
UNKNOWN, in bounded rounds, then hands what is still unknown to a person.

    util/unknown-consumer.py --redis 127.0.0.1:6379 --stream idem:unknown

It joins a consumer group (created at the stream's start when missing, so
that entries written before its first run are followed up too), reads new
entries with XREADGROUP, and for each one reads the call's record under
the entry's "key" field (the record of a dedupe scope too: the key names
it by the scope's digest, the consumer never learns the scope's value).

  - The record says a later execution of the same call id succeeded: the
    call is resolved, nothing to undo.  XACK.
  - The record is gone (its idem_record_ttl passed): nothing left to ask
    about from here: escalated to a person.  XACK.
  - Still UNKNOWN: one round.  With --check CMD, CMD is run (sh -c) with
    the entry in IDEM_* variables and asks the service for its receipt:
    exit 0, it took effect (XACK); exit 1, it did not, nothing to undo
    (XACK); anything else, still unknown.  Without --check the consumer
    prints what it would ask.  An entry still unknown stays pending; it is
    taken again (XAUTOCLAIM, which also takes over the entries of a
    consumer that died) once it has been idle --retry-after ms, and each
    delivery is one round.  After --rounds rounds it is escalated to a
    person (printed, and appended to --escalate-to when given).  XACK.
  - The record says the service's word is in already (a resolution, "z:"
    of the execution): resolved.  XACK.

With --resolve-url URL (a status location with "idem_status resolve=on"),
the check's verdict goes back to the gateway: POST URL<call id> with
{"outcome": "applied" | "not_applied", "receipt": <the first line the
check printed, when it is a receipt>, "by": "unknown-consumer:<consumer>"},
so that the record, the status endpoint and, on a dedupe route, a resend
learn the truth (not_applied: the resend runs; applied: it gets 409
call-applied).  A 404 (the record is gone) is taken as done.  A 409 is
taken as done only when the record, read again, is settled (resolved by
someone else first, or an execution succeeded); otherwise (the gateway
resolves only a latest execution that is UNKNOWN, and one that is not
stands in front of this one; or it answers 409 resolution-too-early: the
latest execution's claim lapsed, but its owner may still answer) the
entry stays pending, a round used, and goes to a person after the last
round.  No answer keeps the entry
pending too, a round used.  Each call is posted the way the list's
links name it (idem_status without an id, docs/records.md):

  - under a dedupe scope: with its scope's digest (the entry's key
    carries it), POST URL<call id>?scope_digest=<digest>, which only a
    status location with "idem_status ... scope_digest=on" takes (one for
    operators: any other answers 400, and the entry stays pending);
  - recorded without a scope: POST URL<call id>?scope_digest=none first,
    which a scope_digest=on location reads as that call even where it has
    an idem_dedupe_scope of its own (inherited from server {}, say);
    posted bare there, the call would be read under the consumer's own
    scope: 400 empty-dedupe-scope, or, where that scope has a value for
    the consumer (a $remote_addr), another record, whose 404 would pass
    for "gone" and drop the entry.  A location without scope_digest=on
    (or a gateway before 0.8.0, which knows no "none") refuses it with
    400 invalid-scope-digest, never reads it otherwise; on that answer
    alone the verdict is posted again once, bare, as such a location
    links its calls.

Without --resolve-url it never changes the record.  --once makes one pass
(entries due again, then the new ones) and exits, for cron or for tests.

Needs Debian's python3 and python3-redis (util/deps.sh installs them).
"""

import argparse
import http.client
import json
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request

import redis


def parse_args():
    ap = argparse.ArgumentParser(
        description="Follow up the calls idem_unknown_stream lists.")
    ap.add_argument("--redis", default="127.0.0.1:6379",
                    help="HOST:PORT or unix:/PATH (default %(default)s)")
    ap.add_argument("--cluster", action="store_true",
                    help="--redis is a node of a Redis Cluster")
    ap.add_argument("--password", default=os.environ.get("IDEM_REDIS_PASSWORD"),
                    help="AUTH (default: $IDEM_REDIS_PASSWORD)")
    ap.add_argument("--db", type=int, default=0)
    ap.add_argument("--stream", default="idem:unknown",
                    help="<idem_key_prefix><NAME> (default %(default)s)")
    ap.add_argument("--group", default="compensation")
    ap.add_argument("--consumer",
                    default="%s-%d" % (socket.gethostname(), os.getpid()))
    ap.add_argument("--rounds", type=int, default=5,
                    help="rounds per entry before a person takes it "
                         "(default %(default)s)")
    ap.add_argument("--retry-after", type=int, default=60000, metavar="MS",
                    help="idle time before an entry is tried again "
                         "(default %(default)s)")
    ap.add_argument("--check", metavar="CMD",
                    help="asks the service for the call's receipt: exit 0 "
                         "took effect, 1 did not, other: still unknown")
    ap.add_argument("--resolve-url", metavar="URL",
                    help="a status location with idem_status resolve=on "
                         "(and scope_digest=on, for calls under a dedupe "
                         "scope; e.g. http://127.0.0.1:8080/_idem/calls/): "
                         "the check's verdict is posted there, each call "
                         "named as the location's list links it")
    ap.add_argument("--escalate-to", metavar="STREAM",
                    help="also XADD escalated entries there")
    ap.add_argument("--count", type=int, default=10)
    ap.add_argument("--block", type=int, default=5000, metavar="MS")
    ap.add_argument("--once", action="store_true",
                    help="one pass, then exit")
    args = ap.parse_args()
    if args.rounds < 1:
        ap.error("--rounds must be at least 1")
    return args


def connect(args):
    common = dict(password=args.password, decode_responses=True,
                  socket_timeout=max(10, args.block / 1000 + 5))
    if args.redis.startswith("unix:"):
        return redis.Redis(unix_socket_path=args.redis[5:], db=args.db,
                           **common)
    host, _, port = args.redis.rpartition(":")
    if args.cluster:
        from redis.cluster import RedisCluster
        return RedisCluster(host=host, port=int(port), **common)
    return redis.Redis(host=host, port=int(port), db=args.db, **common)


def say(entry_id, f, text):
    print("%s %s: %s" % (entry_id, f.get("call_id", "?"), text), flush=True)


def judge(f, record):
    """What the record says now: (verdict, detail)."""
    if not record:
        return "gone", "its record is gone (idem_record_ttl passed)"

    # an execution of the same call id that succeeded, kept or folded into
    # the summary "x": the service has the call (the id travels upstream)
    for field, value in record.items():
        v = value.split(" ")
        if field.startswith("f:") and v[0] == "SUCCESS" and len(v) > 3:
            later = v[3].isdigit() and f.get("created_ms", "").isdigit() \
                and int(v[3]) >= int(f["created_ms"])
            when = "later" if later else "earlier"
            return "resolved", ("an execution of the same id that started "
                                "%s succeeded (%s): nothing to undo"
                                % (when, v[1]))
    summary = record.get("x", "").split(" ")
    if len(summary) > 1 and summary[1].isdigit() and int(summary[1]) > 0:
        return "resolved", ("an earlier execution of the same id succeeded: "
                            "nothing to undo")

    z = record.get("z:" + f.get("token", ""))
    if z:
        outcome = z.split(" ")[0]
        return "resolved", ("the service's word is in the record already: "
                            "%s" % outcome.replace("_", " "))

    final = record.get("f:" + f.get("token", ""))
    if final is None:
        # a cluster's stream and record are on two masters: the final
        # write may be a moment behind the entry, or lost with its master
        return "unknown", "still UNKNOWN (the record has no final write " \
                          "for this execution yet)"
    state, status = (final.split(" ") + ["-"])[0:2]
    return "unknown", "still %s (final status %s)" % (state, status)


def check(cmd, f, rnd):
    """The check's exit code and the receipt it printed (its first line,
    when that is one), or None."""
    env = dict(os.environ)
    for name in ("call_id", "trace_id", "key", "token", "method", "uri",
                 "node", "attempts", "last_outcome", "final_status",
                 "receipt"):
        env["IDEM_" + name.upper()] = f.get(name, "")
    env["IDEM_ROUND"] = str(rnd)
    p = subprocess.run(["sh", "-c", cmd], env=env, stdout=subprocess.PIPE)
    first = p.stdout.decode(errors="replace").split("\n")[0].strip()
    return p.returncode, first if PLAIN.match(first) else None


# a receipt, or "by": what the gateway keeps (a call id's characters)
PLAIN = re.compile(r"^[A-Za-z0-9._~:-]{1,128}$")

# the prefix of the gateway's problem types (RFC 9457 "type")
PROBLEM = "urn:ngx-idem:problem:"


def problem(e):
    """An error answer's problem document ({} when it has none), read
    once: the type and detail say why."""
    if not hasattr(e, "problem"):
        try:
            doc = json.loads(e.read().decode(errors="replace"))
        except (ValueError, AttributeError, OSError,
                http.client.HTTPException):
            doc = None
        e.problem = doc if isinstance(doc, dict) else {}
    return e.problem


def post(args, f, body, query):
    """POST the verdict; the answer's status (HTTPError for 4xx, 5xx)."""
    req = urllib.request.Request(
        args.resolve_url + f["call_id"] + query,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json",
                 "Accept": "application/json"}, method="POST")
    with urllib.request.urlopen(req, timeout=10) as rsp:
        return rsp.status


def resolve(r, args, f, applied, receipt):
    """Posts the verdict to the gateway: (done, what happened, and when
    not done, what the entry's detail says of it)."""
    # a scoped record's key names the scope by its digest, and so does
    # the post: the status location reads the record under it.  An
    # unscoped one is named "none", as the list links it where the
    # location has a scope of its own (bare, it would be read under the
    # consumer's scope); a location that takes no scope_digest refuses
    # that, and only then is it posted bare, as such a location reads it
    scoped = re.search(r"s:\{([0-9a-f]{64}):", f.get("key", ""))
    query = "?scope_digest=" + (scoped.group(1) if scoped else "none")
    body = {"outcome": "applied" if applied else "not_applied",
            "by": "unknown-consumer:" + re.sub(r"[^A-Za-z0-9._~:-]", "-",
                                               args.consumer)[:100]}
    if receipt:
        body["receipt"] = receipt
    try:
        try:
            status = post(args, f, body, query)
        except urllib.error.HTTPError as e:
            if scoped or e.code != 400 or problem(e).get("type") \
                    != PROBLEM + "invalid-scope-digest":
                raise
            status = post(args, f, body, "")
        return True, "resolved in the record (%d)" % status, None
    except urllib.error.HTTPError as e:
        if e.code == 409:
            return refused(r, f, e)
        if e.code == 404:
            return True, "its record is gone (404)", None
        kind = problem(e).get("type")
        kind = kind[len(PROBLEM):] if isinstance(kind, str) \
            and kind.startswith(PROBLEM) else None
        return False, "the gateway answered %d%s" % (
            e.code, " (%s)" % kind if kind and PLAIN.match(kind) else ""), \
            "the gateway was not told"
    except (urllib.error.URLError, OSError) as e:
        return False, "the gateway did not answer (%s)" % e, \
            "the gateway was not told"


def refused(r, f, e):
    """A 409: done only if the record, read again, is settled (someone
    resolved it first, an execution succeeded); a 409 alone says only that
    the gateway did not take this verdict."""
    why = problem(e).get("detail")
    why = "refused (409%s)" % (": " + why if isinstance(why, str) else "")
    verdict, detail = judge(f, record(r, f["key"]) if "key" in f else {})
    if verdict == "resolved":
        return True, "%s; resolved already: %s" % (why, detail), None
    if verdict == "gone":
        return True, "%s; its record is gone" % why, None
    return False, "%s, and the record is not settled" % why, \
        "the gateway refused the verdict"


def escalate(r, args, entry_id, f, why):
    say(entry_id, f, "ESCALATE to a person: %s" % why)
    if args.escalate_to:
        fields = dict(f)
        fields.update(entry=entry_id, reason=why)
        r.xadd(args.escalate_to, fields)


def record(r, key):
    """A record's fields, {} when it is gone.  A hash, or a short record:
    the one write that made it, a string of "<field> <length> <value>\n"
    (docs/records.md, "Records in Redis")."""
    if r.type(key) != "string":
        return r.hgetall(key)
    # the lengths count bytes
    s, out, i = (r.get(key) or "").encode(), {}, 0
    while i < len(s):
        field, sp, rest = s[i:].partition(b" ")
        length, sp2, _ = rest.partition(b" ")
        if not sp or not sp2 or not length.isdigit():
            break
        start = i + len(field) + len(length) + 2
        out[field.decode()] = s[start:start + int(length)].decode()
        i = start + int(length) + 1
    return out


def follow(r, args, entry_id, f, rnd):
    """One round of one entry; True when it is done with (to XACK)."""
    where = "%s %s, trace %s, node %s, record %s" % (
        f.get("method"), f.get("uri"), f.get("trace_id"), f.get("node"),
        f.get("key"))

    verdict, detail = judge(f, record(r, f["key"]) if "key" in f else {})

    if verdict == "resolved":
        say(entry_id, f, "round %d/%d: resolved: %s"
            % (rnd, args.rounds, detail))
        return True

    if verdict == "gone":
        escalate(r, args, entry_id, f, "%s (%s)" % (detail, where))
        return True

    if args.check:
        rc, receipt = check(args.check, f, rnd)
        if rc in (0, 1) and args.resolve_url:
            done, what, note = resolve(r, args, f, rc == 0, receipt)
            say(entry_id, f, "round %d/%d: %s%s: %s"
                % (rnd, args.rounds,
                   "took effect" if rc == 0 else "did not take effect",
                   " (receipt %s)" % receipt if receipt else "", what))
            if done:
                return True
            detail += ", " + note
        elif rc == 0:
            say(entry_id, f, "round %d/%d: took effect: the service has its "
                "receipt; would confirm it to the caller" % (rnd, args.rounds))
            return True
        elif rc == 1:
            say(entry_id, f, "round %d/%d: did not take effect: nothing to "
                "undo; the caller may send it again with the same id"
                % (rnd, args.rounds))
            return True
        else:
            detail += ", the service does not know yet"

    if rnd >= args.rounds:
        escalate(r, args, entry_id, f, "%s after %d rounds (%s)"
                 % (detail, rnd, where))
        return True

    say(entry_id, f, "round %d/%d: %s: would ask the service for the "
        "receipt of %s; again in %d ms"
        % (rnd, args.rounds, detail, where, args.retry_after))
    return False


def handle(r, args, entries):
    if not entries:
        return 0
    ids = [e[0] for e in entries]
    # each delivery is a round: the group counts them
    rounds = {p["message_id"]: p["times_delivered"]
              for p in r.xpending_range(args.stream, args.group, min(ids),
                                        max(ids), len(ids) * 2,
                                        args.consumer)}
    for entry_id, f in entries:
        if not f:
            # trimmed by maxlen while pending: nothing left to follow
            r.xack(args.stream, args.group, entry_id)
            continue
        if follow(r, args, entry_id, f, rounds.get(entry_id, 1)):
            r.xack(args.stream, args.group, entry_id)
    return len(entries)


def run(r, args):
    try:
        r.xgroup_create(args.stream, args.group, id="0", mkstream=True)
    except redis.ResponseError as e:
        if "BUSYGROUP" not in str(e):
            raise

    while True:
        # entries a round left unresolved, or a dead consumer left pending
        start = "0-0"
        while True:
            start, claimed = r.xautoclaim(args.stream, args.group,
                                          args.consumer, args.retry_after,
                                          start, count=args.count)[:2]
            handle(r, args, claimed)
            if start in ("0-0", b"0-0"):
                break

        # new entries
        while True:
            got = r.xreadgroup(args.group, args.consumer, {args.stream: ">"},
                               count=args.count,
                               block=None if args.once else args.block)
            n = sum(handle(r, args, entries) for _, entries in got or [])
            if n == 0 or not args.once:
                break

        if args.once:
            return


def main():
    args = parse_args()
    try:
        run(connect(args), args)
    except KeyboardInterrupt:
        pass
    except redis.RedisError as e:
        print("redis: %s" % e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
