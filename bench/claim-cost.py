#!/usr/bin/env python3
# What the candidate command sets of a new dedupe call cost Redis (issue
# 46): redis-server's CPU time per call, on a private redis-server.
#
#   bench/claim-cost.py        (CLAIM_COST_PORT=<port>: the server's port;
#                               unset: a free one the kernel picks)
#
# Each candidate is a claim (one round trip) and the owner's final write
# (another), sent for CLAIM_COST_CALLS new call ids, in two ways: one
# round trip at a time (what `make redis-cost` sends one call at a time
# through the gateway: each round trip's commands in one write, Redis's
# reading and answering counted), and all calls pipelined (the commands'
# own work, Redis hot in its caches).  The figure is redis-server's CPU
# (INFO cpu, used_cpu_user + used_cpu_sys) before and after, divided by
# the calls: much less moved by the machine's other load than a rate is.
# Then each claim once more on the ids it made (the duplicate's cost, the
# loser's claim).  The values are those a gateway sends (MONITOR of `make
# redis-cost`'s dedupe call).  A report, not a test.
#
#   CLAIM_COST_CALLS=20000   CLAIM_COST_RUNS=3 (the median is reported)
#   CLAIM_COST_ONE=1         one round trip at a time too (slow: the
#                            client's Python paces it)
#   CLAIM_COST_ONLY="today rename ..."  some candidates only

import os, socket, statistics, subprocess, sys, tempfile, time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
lua_dir = os.path.join(root, 'ngx_idem_module/store/redis/lua')
calls = int(os.environ.get('CLAIM_COST_CALLS', '20000'))
one = os.environ.get('CLAIM_COST_ONE', '') != ''
runs = int(os.environ.get('CLAIM_COST_RUNS', '3'))


def lua(*names):
    # the scripts as config makes them: comment lines left out
    out = []
    for n in names:
        for line in open(os.path.join(lua_dir,
                                      'ngx_http_idem_redis_%s.lua' % n)):
            if not line.lstrip().startswith('--'):
                out.append(line)
    return ''.join(out)


def resp(*args):
    out = [b'*%d\r\n' % len(args)]
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out.append(b'$%d\r\n%s\r\n' % (len(a), a))
    return b''.join(out)


class Conn:
    def __init__(self, port):
        self.s = socket.create_connection(('127.0.0.1', port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b''

    def _more(self):
        d = self.s.recv(1 << 20)
        if not d:
            raise EOFError
        self.buf += d

    def _line(self):
        while True:
            i = self.buf.find(b'\r\n')
            if i >= 0:
                line, self.buf = self.buf[:i], self.buf[i + 2:]
                return line
            self._more()

    def reply(self):
        line = self._line()
        t, rest = line[:1], line[1:]
        if t in (b'+', b':'):
            return rest
        if t == b'-':
            return Exception(rest.decode())
        if t == b'$':
            n = int(rest)
            if n < 0:
                return None
            while len(self.buf) < n + 2:
                self._more()
            v, self.buf = self.buf[:n], self.buf[n + 2:]
            return v
        if t == b'*':
            n = int(rest)
            return None if n < 0 else [self.reply() for _ in range(n)]
        raise ValueError(line)

    def send(self, data):
        self.s.sendall(data)

    def call(self, *args):
        self.send(resp(*args))
        return self.reply()


TTL, LEASE = b'86400000', b'8000'
TOKEN = b'f3e33c5bf86cb5fc'
DIGEST = b'f130b852dcc1b25aa1a6b733bb762ff070fc62ce3457934112d2718796293dae'
ARRIVAL = b'R 1796594859599 client vm GET d2e00c0a360055fddd5fe23ac407118c ' \
          b'/dedupe'
FINAL = [b'f:' + TOKEN, b'SUCCESS 200 1796594859601 1796594859599 client vm'
         b' GET d2e00c0a360055fddd5fe23ac407118c /dedupe',
         b'a:' + TOKEN + b':1', b'1796594859601 0 ok 1 200 5be3844b25442fbe',
         b'k:' + TOKEN, b'R', b'r', b'200 OK\nContent-Type: text/plain\n\nok\n']
REL = b'+' + LEASE + b' ' + TTL     # a lease without Redis's clock

# a take script with the new-id path only, no preludes: what Lua costs
LEAN = '''
if redis.call('EXISTS', KEYS[1]) == 0 then
  local t = redis.call('TIME')
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  redis.call('HSET', KEYS[1], 'o', ARGV[1], 'd', ARGV[2],
    'l:' .. ARGV[1], string.format('%.0f', now + tonumber(ARGV[3])),
    'b:' .. ARGV[1], string.format('%.0f', now + tonumber(ARGV[6])),
    'e:' .. ARGV[1], ARGV[5], 'v', '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {'claimed', '1'}
end
return {'busy'}
'''


# the owner's final write as a script (issue 36 to 46): its fields, the
# expiry, the waiters told
FINAL_LUA = '''
local k = KEYS[1]
local ch = ARGV[#ARGV]
local n = redis.pcall('HSET', k, unpack(ARGV, 2, #ARGV - 1))
if type(n) == 'table' and n.err then
  hash()
  n = redis.call('HSET', k, unpack(ARGV, 2, #ARGV - 1))
end
if ARGV[1] ~= '0' then redis.call('PEXPIRE', k, ARGV[1]) end
if ch ~= '' then redis.call('PUBLISH', ch, k) end
return n
'''


# the take script before issue 46: after the preludes, on their clock
OLD_TAKE = '''
if redis.call('EXISTS', KEYS[1]) == 0 then
  local b = ARGV[6] or '-'
  if b ~= '-' then b = string.format('%.0f', now + tonumber(b)) end
  redis.call('HSET', KEYS[1], 'o', ARGV[1], 'd', ARGV[2],
    'l:' .. ARGV[1], string.format('%.0f', now + tonumber(ARGV[3])),
    'b:' .. ARGV[1], b, 'e:' .. ARGV[1], ARGV[5], 'v', '1')
  redis.call('PEXPIRE', KEYS[1], ARGV[4])
  return {'claimed', '1'}
end
'''


def key(i):
    return b'idem:c:{cc-%08d}' % i


def tmp(i):
    return b'idem:t:{cc-%08d}:' % i + TOKEN


def claim_fields(rel):
    lease = REL if rel else b'1796594867601'
    return [b'o', TOKEN, b'd', DIGEST, b'l:' + TOKEN, lease,
            b'b:' + TOKEN, lease, b'e:' + TOKEN, ARRIVAL, b'v', b'1']


def short(i):
    f = [b'e:' + TOKEN, ARRIVAL] + FINAL[:4]
    v = b''.join(b'%s %d %s\n' % (f[j], len(f[j + 1]), f[j + 1])
                 for j in range(0, len(f), 2))
    return [resp(b'SET', key(i), v, b'PX', TTL, b'NX')]


# each: (claim's commands, final's commands) for call i; shas filled in
def candidates(sha):
    def take(i):
        return [resp(b'EVALSHA', sha['take'], 1, key(i), TOKEN, DIGEST,
                     LEASE, TTL, ARRIVAL, LEASE)]

    def front(i):
        return [resp(b'EVALSHA', sha['front'], 1, key(i), TOKEN, DIGEST,
                     LEASE, TTL, ARRIVAL, LEASE)]

    def lean(i):
        return [resp(b'EVALSHA', sha['lean'], 1, key(i), TOKEN, DIGEST,
                     LEASE, TTL, ARRIVAL, LEASE)]

    def rename(read):
        def f(i):
            c = [resp(b'MULTI'), resp(b'HSET', tmp(i), *claim_fields(True)),
                 resp(b'PEXPIRE', tmp(i), TTL),
                 resp(b'RENAMENX', tmp(i), key(i)), resp(b'DEL', tmp(i))]
            if read:
                c += [resp(b'HGETALL', key(i)), resp(b'PTTL', key(i)),
                      resp(b'TIME')]
            return c + [resp(b'EXEC')]
        return f

    def packed(i):
        v = b' '.join([TOKEN, DIGEST, REL.replace(b' ', b'/'),
                       REL.replace(b' ', b'/'), b'1', ARRIVAL])
        return [resp(b'MULTI'), resp(b'HSETNX', key(i), b'c', v),
                resp(b'PEXPIRE', key(i), TTL, b'NX'),
                resp(b'HGETALL', key(i)), resp(b'PTTL', key(i)),
                resp(b'EXEC')]

    def pack(f):
        return b''.join(b'%s %d %s\n' % (f[j], len(f[j + 1]), f[j + 1])
                        for j in range(0, len(f), 2))

    def setget(i):
        return [resp(b'SET', key(i), pack(claim_fields(True)), b'PX', TTL,
                     b'NX', b'GET')]

    def final_append(i):
        return [resp(b'APPEND', key(i), pack(FINAL))]

    def final_append_pub(i):
        return [resp(b'APPEND', key(i), pack(FINAL)),
                resp(b'PUBLISH', b'idem:w:0', key(i))]

    def final_setxx(i):
        return [resp(b'SET', key(i), pack(claim_fields(True)) + pack(FINAL),
                     b'XX', b'KEEPTTL', b'GET')]

    def plain07(i):
        return [resp(b'HSETNX', key(i), b'o', TOKEN),
                resp(b'HSET', key(i), *claim_fields(True)[2:]),
                resp(b'PEXPIRE', key(i), TTL)]

    def final_script(i):
        return [resp(b'EVALSHA', sha['final'], 1, key(i), b'0', *FINAL,
                     b'')]

    def final_plain(i):
        return [resp(b'HSET', key(i), *FINAL)]

    def final_pub(i):
        return [resp(b'HSET', key(i), *FINAL),
                resp(b'PUBLISH', b'idem:w:0', key(i))]

    return {
        'record': (short, None),
        'today': (take, final_script),
        'take+hset': (take, final_plain),
        'front+hset': (front, final_plain),
        'lean+hset': (lean, final_plain),
        'rename+hset': (rename(False), final_plain),
        'rename-read+hset': (rename(True), final_plain),
        'rename-read+hset+pub': (rename(True), final_pub),
        'packed+hset': (packed, final_plain),
        'plain07+hset': (plain07, final_plain),
        'setget+append': (setget, final_append),
        'setget+append+pub': (setget, final_append_pub),
        'setget+setxx': (setget, final_setxx),
    }


def cpu(c):
    info = c.call(b'INFO', b'cpu').decode()
    v = dict(l.split(':', 1) for l in info.split('\r\n') if ':' in l)
    return float(v['used_cpu_user']) + float(v['used_cpu_sys'])


def run(c, parts, mode):
    t0 = cpu(c)
    if mode == 'one':
        for i in range(calls):
            for p in parts:
                cmds = p(i)
                c.send(b''.join(cmds))
                for _ in range(len(cmds)):
                    r = c.reply()
                    if isinstance(r, Exception):
                        sys.exit('claim-cost: %s' % r)
    else:
        step = 500
        for j in range(0, calls, step):
            out = []
            for i in range(j, min(j + step, calls)):
                for p in parts:
                    out += p(i)
            c.send(b''.join(out))
            for _ in range(len(out)):
                r = c.reply()
                if isinstance(r, Exception):
                    sys.exit('claim-cost: %s' % r)
    return (cpu(c) - t0) * 1e6 / calls


def main():
    port = os.environ.get('CLAIM_COST_PORT')
    if not port:
        s = socket.socket()
        s.bind(('127.0.0.1', 0))
        port = str(s.getsockname()[1])
        s.close()
    d = tempfile.mkdtemp(prefix='claim-cost-')
    srv = subprocess.Popen(['redis-server', '--bind', '127.0.0.1',
                            '--port', port, '--save', '', '--appendonly',
                            'no', '--dir', d, '--logfile',
                            os.path.join(d, 'redis.log')])
    try:
        for _ in range(100):
            try:
                c = Conn(int(port))
                break
            except OSError:
                time.sleep(0.05)
        sha = {
            'take': c.call(b'SCRIPT', b'LOAD', lua('short', 'record')
                           + OLD_TAKE + lua('claim')),
            'final': c.call(b'SCRIPT', b'LOAD', lua('short') + FINAL_LUA),
            'lean': c.call(b'SCRIPT', b'LOAD', LEAN),
            # this tree's: the new-id path first, the preludes and the
            # rare paths after it
            'front': c.call(b'SCRIPT', b'LOAD',
                            lua('take', 'short', 'record', 'claim')),
        }
        only = os.environ.get('CLAIM_COST_ONLY', '').split()
        ver = c.call(b'INFO', b'server').decode()
        ver = [l for l in ver.split('\r\n') if l.startswith('redis_version')]
        print('claim-cost: %s, %d calls a run, %d runs, median µs of '
              'redis-server CPU per call; load average %s'
              % (ver[0], calls, runs, os.getloadavg()))
        print('%-22s %12s %12s %12s %12s' % ('candidate', 'one-at-a-time',
              'pipelined', 'dup one', 'dup piped'))
        sys.stdout.flush()
        cands = [(n, v) for n, v in candidates(sha).items()
                 if not only or n in only]
        res = {n: {'one': [], 'pipe': [], 'dupone': [], 'duppipe': []}
               for n, _ in cands}
        # the candidates in turn within each run: the machine's load moves
        # them alike
        for _ in range(runs):
            for name, (claim, final) in cands:
                parts = [p for p in (claim, final) if p]
                r = res[name]
                for mode in ('one', 'pipe') if one else ('pipe',):
                    c.call(b'FLUSHALL')
                    r[mode].append(run(c, parts, mode))
                    if final:
                        r['dup' + mode].append(run(c, [claim], mode))
        for name, _ in cands:
            med = {k: ('%.1f' % statistics.median(v)) if v else '-'
                   for k, v in res[name].items()}
            print('%-22s %12s %12s %12s %12s' % (name, med['one'],
                  med['pipe'], med['dupone'], med['duppipe']))
        print('load average after: %s' % (os.getloadavg(),))
    finally:
        srv.terminate()
        srv.wait()


main()
