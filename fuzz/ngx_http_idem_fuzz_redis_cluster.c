
/*
 * Fuzz target: what Redis Cluster and Sentinel send that decides where
 * the store's commands go, from the bytes on the wire (hiredis' parser)
 * to the store's nodes: a CLUSTER SLOTS reply (the slot map), a MOVED or
 * ASK error reply (a redirect), a sentinel's answer to
 * get-master-addr-by-name, its +switch-master message, and the ROLE a
 * master gives.
 *
 * ngx_http_idem_redis_cluster.c and ngx_http_idem_redis_sentinel.c are
 * the module's own; the connections they use (ngx_http_idem_redis_common.h's
 * node functions, ngx_http_idem_redis.c) are stand-ins here that record
 * what was asked of them.  Beyond the sanitizers: the slot map is the
 * reply's, entry by entry, read independently; a redirect goes where its
 * error line says, or nowhere when the line is not one; a master address
 * is taken only when it is an IP and a port.  With a resolver, a node of
 * the cluster, or the master a sentinel names, may be a host name, known
 * by its name and port and kept whole in the node's own buffer.
 *
 * Input: a flags byte (bits 0-2: which reply, as above, modulo 5, with a
 * resolver from 5 on; bit 3: the nodes connect at once; bits 4-6:
 * redirects the command had already, or for a sentinel's answers, bit 4:
 * a resolver too), then RESP bytes, as the server sends them.
 */


#include "ngx_http_idem_redis_cluster.c"
#include "ngx_http_idem_redis_sentinel.c"

#include "ngx_http_idem_fuzz.h"


#define NGX_HTTP_IDEM_FUZZ_HOST      "10.0.0.1"
#define NGX_HTTP_IDEM_FUZZ_PORT      7000


typedef struct {
    u_char                          host[NGX_HTTP_IDEM_REDIS_HOST_LEN + 1];
    size_t                          len;
    ngx_int_t                       port;
    ngx_uint_t                      named;     /* a host name */
} ngx_http_idem_fuzz_addr_t;


/* what the stand-ins were asked */
typedef struct {
    ngx_uint_t                      up;        /* connects: made at once */
    ngx_uint_t                      connecting; /* else being made, or
                                                   failed at once (0) */
    ngx_uint_t                      commands;
    ngx_http_idem_redis_node_t     *command_node[2];
    const char                     *command[2];
    ngx_uint_t                      connects;
    ngx_uint_t                      drops;
    ngx_http_idem_redis_node_t     *dropped;
} ngx_http_idem_fuzz_store_t;


static void ngx_http_idem_fuzz_slots(ngx_http_idem_redis_t *rd,
    redisReply *reply);
static void ngx_http_idem_fuzz_redirect(ngx_http_idem_redis_t *rd,
    redisReply *reply, ngx_uint_t redirects);
static void ngx_http_idem_fuzz_master(ngx_http_idem_redis_t *rd,
    ngx_uint_t which, redisReply *reply);
static ngx_int_t ngx_http_idem_fuzz_ip(u_char *host, size_t len);
static ngx_int_t ngx_http_idem_fuzz_name(ngx_http_idem_redis_t *rd,
    u_char *host, size_t len);
static ngx_int_t ngx_http_idem_fuzz_same(ngx_uint_t named, u_char *a,
    size_t alen, u_char *b, size_t blen);
static ngx_int_t ngx_http_idem_fuzz_number(u_char *p, size_t len);
static ngx_http_idem_redis_node_t *ngx_http_idem_fuzz_find(
    ngx_http_idem_redis_t *rd, u_char *host, size_t len, ngx_int_t port);


static ngx_http_idem_fuzz_store_t  ngx_http_idem_fuzz_store;



int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    void                         *reply;
    ngx_uint_t                    flags, which, i, resolver;
    ngx_cycle_t                   cycle;
    redisReader                  *reader;
    ngx_http_idem_fuzz_t          fz;
    ngx_http_idem_redis_t        *rd;
    ngx_http_idem_store_addr_t   *seed;
    ngx_http_idem_store_conf_t    conf;
    ngx_http_idem_fuzz_input_t    input;

    if (ngx_http_idem_fuzz_init(&fz, data, size, &input) != NGX_OK) {
        ngx_http_idem_fuzz_abort("init");
    }

    flags = ngx_http_idem_fuzz_byte(&input);
    which = (flags & 7) % 5;
    resolver = (flags & 7) >= 5 || (which >= 2 && (flags & 16));

    ngx_memzero(&ngx_http_idem_fuzz_store, sizeof(ngx_http_idem_fuzz_store_t));
    ngx_http_idem_fuzz_store.up = (flags & 8) ? 1 : 0;
    ngx_http_idem_fuzz_store.connecting = (flags & 128) ? 1 : 0;

    if (ngx_http_idem_fuzz_resp_too_large(input.pos, input.last)) {
        ngx_http_idem_fuzz_done(&fz);
        return 0;
    }

    reader = redisReaderCreate();
    if (reader == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    reply = NULL;

    if (redisReaderFeed(reader, (char *) input.pos, input.last - input.pos)
        != REDIS_OK
        || redisReaderGetReply(reader, &reply) != REDIS_OK
        || reply == NULL)
    {
        redisReaderFree(reader);
        ngx_http_idem_fuzz_done(&fz);
        return 0;
    }

    redisReaderFree(reader);

    /* a worker's store: one seed, a cluster node or a sentinel */

    ngx_memzero(&conf, sizeof(ngx_http_idem_store_conf_t));
    conf.max_pending = 10;
    conf.timeout = 1000;
    ngx_str_set(&conf.master_name, "mymaster");

    /* http{}'s resolver: nothing resolves here, a node named is made */

    if (resolver) {
        conf.resolver = ngx_pcalloc(fz.pool, sizeof(ngx_resolver_t));
        if (conf.resolver == NULL) {
            ngx_http_idem_fuzz_abort("no memory");
        }

        conf.resolver->connections.nelts = 1;
    }

    conf.seeds = ngx_array_create(fz.pool, 2,
                                  sizeof(ngx_http_idem_store_addr_t));
    if (conf.seeds == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    seed = ngx_array_push(conf.seeds);
    if (seed == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    ngx_memzero(seed, sizeof(ngx_http_idem_store_addr_t));
    ngx_str_set(&seed->host, NGX_HTTP_IDEM_FUZZ_HOST);
    seed->port = NGX_HTTP_IDEM_FUZZ_PORT;

    ngx_memzero(&cycle, sizeof(ngx_cycle_t));
    cycle.pool = fz.pool;
    cycle.log = fz.request->connection->log;

    rd = ngx_pcalloc(fz.pool, sizeof(ngx_http_idem_redis_t));
    if (rd == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    rd->conf = &conf;
    rd->log = cycle.log;
    ngx_str_set(&rd->name, "fuzz");

    /* as ngx_http_idem_store_init_process(): no op waits for the map */

    ngx_queue_init(&rd->parked);

    if (which <= 1) {
        ngx_http_idem_fuzz_assert(ngx_http_idem_redis_cluster_init(rd, &cycle)
                                  == NGX_OK);

        if (which == 0) {
            ngx_http_idem_fuzz_slots(rd, reply);

        } else {
            ngx_http_idem_fuzz_redirect(rd, reply, (flags >> 4) & 7);
        }

        ngx_http_idem_redis_cluster_exit(rd);

    } else {
        ngx_http_idem_fuzz_assert(ngx_http_idem_redis_sentinel_init(rd,
                                                                    &cycle)
                                  == NGX_OK);

        ngx_http_idem_fuzz_master(rd, which, reply);
    }

    for (i = 0; i < rd->nnodes; i++) {
        ngx_free(rd->nodes[i]);
    }

    freeReplyObject(reply);

    ngx_http_idem_fuzz_done(&fz);

    return 0;
}


/*
 * CLUSTER SLOTS, read again here: each entry [start, end, [ip, port ...]
 * ...] that is whole, in range and names an IP and a port gives its slots
 * to that node (a later entry wins); an empty ip is the node asked.  Nodes are
 * made as they are named, up to the store's limit.
 */

static void
ngx_http_idem_fuzz_slots(ngx_http_idem_redis_t *rd, redisReply *reply)
{
    u_char                      *host;
    size_t                       len;
    ngx_int_t                    port;
    ngx_uint_t                   i, s, naddrs, k;
    redisReply                  *e, *m;
    redisAsyncContext            ac;
    ngx_http_idem_fuzz_addr_t   *addrs, **owner;
    ngx_http_idem_redis_node_t  *asked, *node;

    addrs = ngx_pcalloc(rd->conf->seeds->pool, NGX_HTTP_IDEM_REDIS_MAX_NODES
                        * sizeof(ngx_http_idem_fuzz_addr_t));
    owner = ngx_pcalloc(rd->conf->seeds->pool,
                        NGX_HTTP_IDEM_CLUSTER_SLOTS * sizeof(void *));

    if (addrs == NULL || owner == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    asked = rd->nodes[0];

    /* the nodes there are before the reply */

    for (naddrs = 0; naddrs < rd->nnodes; naddrs++) {
        node = rd->nodes[naddrs];
        addrs[naddrs].named = node->resolve.len != 0;
        addrs[naddrs].len = node->resolve.len ? node->resolve.len
                                              : ngx_strlen(node->host);
        ngx_memcpy(addrs[naddrs].host,
                   node->resolve.len ? node->resolve.data : node->host,
                   addrs[naddrs].len);
        addrs[naddrs].port = node->port;
    }

    if (reply->type == REDIS_REPLY_ARRAY) {

        for (i = 0; i < reply->elements; i++) {
            e = reply->element[i];

            if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) {
                continue;
            }

            m = e->element[2];

            if (e->element[0]->type != REDIS_REPLY_INTEGER
                || e->element[1]->type != REDIS_REPLY_INTEGER
                || m->type != REDIS_REPLY_ARRAY || m->elements < 2
                || m->element[0]->type != REDIS_REPLY_STRING
                || m->element[1]->type != REDIS_REPLY_INTEGER
                || e->element[0]->integer < 0
                || e->element[0]->integer > e->element[1]->integer
                || e->element[1]->integer >= NGX_HTTP_IDEM_CLUSTER_SLOTS
                || m->element[1]->integer < 1
                || m->element[1]->integer > 65535)
            {
                continue;
            }

            host = (u_char *) m->element[0]->str;
            len = m->element[0]->len;

            if (len == 0) {
                host = addrs[0].host;
                len = addrs[0].len;
            }

            port = (ngx_int_t) m->element[1]->integer;

            for (k = 0; k < naddrs; k++) {
                if (addrs[k].port == port
                    && ngx_http_idem_fuzz_same(addrs[k].named, addrs[k].host,
                                               addrs[k].len, host, len))
                {
                    break;
                }
            }

            if (k == naddrs) {
                if (naddrs == NGX_HTTP_IDEM_REDIS_MAX_NODES) {
                    continue;
                }

                /* an IP, or with a resolver a name DNS can look up */

                if (len <= NGX_SOCKADDR_STRLEN
                    && ngx_http_idem_fuzz_ip(host, len) == NGX_OK)
                {
                    addrs[k].named = 0;

                } else if (ngx_http_idem_fuzz_name(rd, host, len) == NGX_OK) {
                    addrs[k].named = 1;

                } else {
                    continue;
                }

                ngx_memcpy(addrs[k].host, host, len);
                addrs[k].len = len;
                addrs[k].port = port;
                naddrs++;
            }

            for (s = (ngx_uint_t) e->element[0]->integer;
                 s <= (ngx_uint_t) e->element[1]->integer;
                 s++)
            {
                owner[s] = &addrs[k];
            }
        }
    }

    /* the reply on the seed's connection */

    ngx_memzero(&ac, sizeof(redisAsyncContext));
    ac.data = asked;

    rd->stats.pending = 1;

    ngx_http_idem_redis_cluster_slots_done(&ac, reply, asked);

    ngx_http_idem_fuzz_assert(rd->stats.pending == 0);
    ngx_http_idem_fuzz_assert(!rd->parked_ev.posted);
    ngx_http_idem_fuzz_assert(rd->nnodes == naddrs);

    if (reply->type != REDIS_REPLY_ARRAY) {
        ngx_http_idem_fuzz_assert(!rd->cluster->mapped);
        return;
    }

    ngx_http_idem_fuzz_assert(rd->cluster->mapped);

    for (s = 0; s < NGX_HTTP_IDEM_CLUSTER_SLOTS; s++) {
        node = rd->cluster->slots[s];

        if (owner[s] == NULL) {
            ngx_http_idem_fuzz_assert(node == NULL);
            continue;
        }

        ngx_http_idem_fuzz_assert(node != NULL && node->serving);
        ngx_http_idem_fuzz_assert(node->port == owner[s]->port);

        /* a name is the node's own, and its address is left to DNS */

        if (owner[s]->named) {
            ngx_http_idem_fuzz_assert(node->resolve.len == owner[s]->len
                                      && ngx_strncasecmp(node->resolve.data,
                                                         owner[s]->host,
                                                         owner[s]->len)
                                         == 0
                                      && node->host[0] == '\0');

        } else {
            ngx_http_idem_fuzz_assert(node->resolve.len == 0
                                      && ngx_strlen(node->host)
                                         == owner[s]->len
                                      && ngx_memcmp(node->host,
                                                    owner[s]->host,
                                                    owner[s]->len) == 0);
        }

        /* a port the node can be reached on */

        ngx_http_idem_fuzz_assert(node->port >= 1 && node->port <= 65535);
    }

    /* a node that serves no slot is not kept trying */

    for (k = 0; k < rd->nnodes; k++) {
        node = rd->nodes[k];

        if (!node->serving) {
            ngx_http_idem_fuzz_assert(node->idle);
            ngx_http_idem_fuzz_assert(!node->reconnect_ev.timer_set);
        }
    }
}


/*
 * "MOVED <slot> <ip>:<port>" or "ASK <slot> <ip>:<port>" (a host name
 * in place of the ip with a resolver), read again here: the command goes
 * to that node (after ASKING for ASK), a MOVED gives it the slot; a line
 * that is not one is left to the caller.
 */

static void
ngx_http_idem_fuzz_redirect(ngx_http_idem_redis_t *rd, redisReply *reply,
    ngx_uint_t redirects)
{
    u_char                      *p, *last, *sp, *colon;
    size_t                       lens[1];
    ngx_int_t                    rc, slot, port;
    ngx_uint_t                   ask, valid, known, nnodes, took, connects;
    const char                  *argv[1];
    ngx_http_idem_redis_node_t  *node, *before, *to;
    ngx_http_idem_store_op_t     op;

    if (reply->type != REDIS_REPLY_ERROR) {
        return;
    }

    p = (u_char *) reply->str;
    last = p + reply->len;

    ask = 0;
    valid = 1;
    slot = -1;
    port = -1;
    sp = NULL;
    colon = NULL;

    if (reply->len > 6 && ngx_memcmp(p, "MOVED ", 6) == 0) {
        p += 6;

    } else if (reply->len > 4 && ngx_memcmp(p, "ASK ", 4) == 0) {
        ask = 1;
        p += 4;

    } else {
        valid = 0;
    }

    if (valid) {
        sp = memchr(p, ' ', last - p);
        valid = sp != NULL;
    }

    if (valid) {
        slot = ngx_http_idem_fuzz_number(p, sp - p);
        valid = slot >= 0 && slot < NGX_HTTP_IDEM_CLUSTER_SLOTS
                && sp + 1 < last;
    }

    if (valid) {

        /* the port is after the last colon (IPv6 has no brackets here) */

        for (colon = last - 1; colon > sp + 1 && *colon != ':'; colon--) {
            /* void */
        }

        valid = colon > sp + 1;
    }

    if (valid) {
        port = ngx_http_idem_fuzz_number(colon + 1, last - colon - 1);
        valid = port >= 1 && port <= 65535;
    }

    before = NULL;
    known = 0;
    took = 0;

    if (valid) {
        before = ngx_http_idem_fuzz_find(rd, sp + 1, colon - sp - 1, port);
        known = before != NULL;
        took = known && before->state != NGX_HTTP_IDEM_REDIS_DOWN;
        valid = known
                || (colon - sp - 1 <= NGX_SOCKADDR_STRLEN
                    && ngx_http_idem_fuzz_ip(sp + 1, colon - sp - 1)
                       == NGX_OK)
                || ngx_http_idem_fuzz_name(rd, sp + 1, colon - sp - 1)
                   == NGX_OK;
    }

    ngx_memzero(&op, sizeof(ngx_http_idem_store_op_t));

    argv[0] = "HGETALL";
    lens[0] = sizeof("HGETALL") - 1;

    op.argc = 1;
    op.argv = argv;
    op.lens = lens;
    op.redirects = redirects;

    nnodes = rd->nnodes;
    connects = ngx_http_idem_fuzz_store.connects;
    ngx_http_idem_fuzz_store.commands = 0;

    to = NULL;
    rc = ngx_http_idem_redis_cluster_redirect(rd, &op, reply, &to);

    if (!valid || redirects >= NGX_HTTP_IDEM_CLUSTER_REDIRECTS) {
        ngx_http_idem_fuzz_assert(rc == NGX_DECLINED);
        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_store.commands == 0);
        ngx_http_idem_fuzz_assert(rd->nnodes == nnodes);
        return;
    }

    node = ngx_http_idem_fuzz_find(rd, sp + 1, colon - sp - 1, port);

    ngx_http_idem_fuzz_assert(node != NULL);
    ngx_http_idem_fuzz_assert(rd->nnodes == nnodes + !known);
    ngx_http_idem_fuzz_assert(op.redirects == redirects + 1);

    if (!ask) {
        ngx_http_idem_fuzz_assert(rd->cluster->slots[slot] == node
                                  && node->serving);
    }

    /*
     * Nothing sent nor connected here: the op goes to that node, which
     * sends it (ASKING first for an ASK) or holds it until it is up
     * (ngx_http_idem_redis_op.c)
     */

    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_store.connects == connects);
    ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_store.commands == 0);
    if (rc != NGX_OK) {

        /* no room for the command and an ASKING */

        ngx_http_idem_fuzz_assert(rc == NGX_ERROR
                                  && rd->stats.pending + 2
                                     > rd->conf->max_pending);
        return;
    }

    ngx_http_idem_fuzz_assert(to == node);
    ngx_http_idem_fuzz_assert(op.asking == ask);
    ngx_http_idem_fuzz_assert(!took
                              || node->state != NGX_HTTP_IDEM_REDIS_DOWN);
}


/*
 * Sentinel: the master's address, asked (which 2) or switched (3), and a
 * master's ROLE (4).  An address is taken when it is an IP and a port.
 */

static void
ngx_http_idem_fuzz_master(ngx_http_idem_redis_t *rd, ngx_uint_t which,
    redisReply *reply)
{
    u_char                      *host, *p, *last, *sp;
    size_t                       len;
    ngx_int_t                    port;
    ngx_uint_t                   n;
    redisReply                  *msg;
    redisAsyncContext            ac;
    ngx_http_idem_redis_node_t  *master, *sentinel;

    master = rd->node;
    sentinel = rd->sentinel->node;

    ngx_memzero(&ac, sizeof(redisAsyncContext));

    host = NULL;
    len = 0;
    port = -1;

    if (which == 4) {

        /* ROLE, on the master's connection */

        ac.data = master;
        rd->stats.pending = 1;

        ngx_http_idem_redis_master_role(&ac, reply, NULL);

        ngx_http_idem_fuzz_assert(rd->stats.pending == 0);

        /* not "master": closed, and another sentinel asked */

        if (reply->type == REDIS_REPLY_ARRAY && reply->elements
            && reply->element[0]->type == REDIS_REPLY_STRING
            && !(reply->element[0]->len == 6
                 && ngx_memcmp(reply->element[0]->str, "master", 6) == 0))
        {
            ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_store.dropped
                                      == master);

        } else {
            ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_store.drops == 0);
        }

        return;
    }

    ac.data = sentinel;

    if (which == 2) {
        if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 2
            && reply->element[0]->type == REDIS_REPLY_STRING
            && reply->element[1]->type == REDIS_REPLY_STRING)
        {
            host = (u_char *) reply->element[0]->str;
            len = reply->element[0]->len;
            port = ngx_http_idem_fuzz_number(
                       (u_char *) reply->element[1]->str,
                       reply->element[1]->len);
        }

        ngx_http_idem_redis_sentinel_addr_done(&ac, reply, NULL);

        if (host == NULL) {

            /* a sentinel that does not know the master: the next one */

            ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_store.dropped
                                      == sentinel);
        }

    } else {

        /* "message", channel, "<name> <old ip> <old port> <ip> <port>" */

        if (reply->type == REDIS_REPLY_ARRAY && reply->elements == 3
            && reply->element[0]->type == REDIS_REPLY_STRING
            && reply->element[0]->len == 7
            && ngx_memcmp(reply->element[0]->str, "message", 7) == 0
            && reply->element[2]->type == REDIS_REPLY_STRING)
        {
            msg = reply->element[2];
            p = (u_char *) msg->str;
            last = p + msg->len;

            for (n = 0; n < 5 && p < last; n++) {
                sp = memchr(p, ' ', last - p);

                if (sp == NULL) {
                    sp = last;
                }

                if (n == 0
                    && !(sp - p == 8 && ngx_memcmp(p, "mymaster", 8) == 0))
                {
                    break;
                }

                if (n == 3) {
                    host = p;
                    len = sp - p;
                }

                if (n == 4) {
                    port = ngx_http_idem_fuzz_number(p, sp - p);
                }

                p = sp + 1;
            }

            if (n != 5) {
                host = NULL;
            }
        }

        ngx_http_idem_redis_sentinel_message(&ac, reply, NULL);
    }

    if (host != NULL && port >= 1 && port <= 65535
        && len <= NGX_SOCKADDR_STRLEN
        && ngx_http_idem_fuzz_ip(host, len) == NGX_OK)
    {
        ngx_http_idem_fuzz_assert(master->port == port
                                  && master->resolve.len == 0
                                  && ngx_strlen(master->host) == len
                                  && ngx_memcmp(master->host, host, len)
                                     == 0);
        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_store.connects >= 2);

    } else if (host != NULL && port >= 1 && port <= 65535
               && ngx_http_idem_fuzz_name(rd, host, len) == NGX_OK)
    {
        /* a name, kept whole in the node's own buffer, to be resolved */

        ngx_http_idem_fuzz_assert(master->port == port
                                  && master->resolve.len == len
                                  && master->resolve.data
                                     == master->resolve_buf
                                  && ngx_memcmp(master->resolve.data, host,
                                                len) == 0
                                  && master->host[0] == '\0');
        ngx_http_idem_fuzz_assert(ngx_http_idem_fuzz_store.connects >= 2);

    } else {
        ngx_http_idem_fuzz_assert(master->port == 0
                                  && master->resolve.len == 0);
    }
}


/* an IP address as nginx reads one */

static ngx_int_t
ngx_http_idem_fuzz_ip(u_char *host, size_t len)
{
    u_char  inaddr6[16];

    if (ngx_inet_addr(host, len) != INADDR_NONE
        || ngx_inet6_addr(host, len, inaddr6) == NGX_OK)
    {
        return NGX_OK;
    }

    return NGX_ERROR;
}


/*
 * A host name the store may resolve: a resolver, at most 253 bytes, dot-
 * separated labels of 1 to 63 letters, digits, '-' or '_'
 */

static ngx_int_t
ngx_http_idem_fuzz_name(ngx_http_idem_redis_t *rd, u_char *host, size_t len)
{
    u_char  *p, *last, *dot, *q;

    if (rd->conf->resolver == NULL || len == 0 || len > 253) {
        return NGX_ERROR;
    }

    p = host;
    last = host + len;

    while (p <= last) {
        dot = memchr(p, '.', last - p);

        if (dot == NULL) {
            dot = last;
        }

        if (dot == p || dot - p > 63) {
            return NGX_ERROR;
        }

        for (q = p; q < dot; q++) {
            if (!isalnum(*q) && *q != '-' && *q != '_') {
                return NGX_ERROR;
            }
        }

        p = dot + 1;
    }

    return NGX_OK;
}


/* a node's name matches in any case, an address byte for byte */

static ngx_int_t
ngx_http_idem_fuzz_same(ngx_uint_t named, u_char *a, size_t alen, u_char *b,
    size_t blen)
{
    size_t  i;

    if (alen != blen) {
        return 0;
    }

    for (i = 0; i < alen; i++) {
        if (named ? tolower(a[i]) != tolower(b[i]) : a[i] != b[i]) {
            return 0;
        }
    }

    return 1;
}


/* 1*DIGIT as ngx_atoi() reads it (no overflow), or -1 */

static ngx_int_t
ngx_http_idem_fuzz_number(u_char *p, size_t len)
{
    size_t     i;
    ngx_int_t  n;

    if (len == 0) {
        return -1;
    }

    n = 0;

    for (i = 0; i < len; i++) {
        if (p[i] < '0' || p[i] > '9'
            || n > NGX_MAX_INT_T_VALUE / 10
            || (n == NGX_MAX_INT_T_VALUE / 10
                && p[i] - '0' > NGX_MAX_INT_T_VALUE % 10))
        {
            return -1;
        }

        n = n * 10 + (p[i] - '0');
    }

    return n;
}


static ngx_http_idem_redis_node_t *
ngx_http_idem_fuzz_find(ngx_http_idem_redis_t *rd, u_char *host, size_t len,
    ngx_int_t port)
{
    ngx_uint_t                   i;
    ngx_http_idem_redis_node_t  *node;

    for (i = 0; i < rd->nnodes; i++) {
        node = rd->nodes[i];

        if (node->port != port) {
            continue;
        }

        if (node->resolve.len
            ? ngx_http_idem_fuzz_same(1, node->resolve.data,
                                      node->resolve.len, host, len)
            : ngx_http_idem_fuzz_same(0, node->host, ngx_strlen(node->host),
                                      host, len))
        {
            return node;
        }
    }

    return NULL;
}


/*
 * The store's connections (ngx_http_idem_redis.c): nodes that record what
 * they are asked and connect at once (flag bit 3) or stay connecting.
 */

ngx_http_idem_redis_node_t *
ngx_http_idem_redis_node_create(ngx_http_idem_redis_t *rd, ngx_uint_t role)
{
    ngx_http_idem_redis_node_t  *node;

    if (rd->nnodes == NGX_HTTP_IDEM_REDIS_MAX_NODES) {
        return NULL;
    }

    node = ngx_calloc(sizeof(ngx_http_idem_redis_node_t), rd->log);
    if (node == NULL) {
        ngx_http_idem_fuzz_abort("no memory");
    }

    node->rd = rd;
    node->role = role;
    node->name = rd->name;

    rd->nodes[rd->nnodes++] = node;

    return node;
}


void
ngx_http_idem_redis_node_set_addr(ngx_http_idem_redis_node_t *node,
    u_char *host, size_t len, ngx_int_t port)
{
    ngx_http_idem_fuzz_assert(len <= NGX_SOCKADDR_STRLEN);

    ngx_memcpy(node->host, host, len);
    node->host[len] = '\0';
    node->port = port;
}


void
ngx_http_idem_redis_node_set_name(ngx_http_idem_redis_node_t *node,
    u_char *host, size_t len, ngx_int_t port)
{
    ngx_http_idem_fuzz_assert(len <= NGX_HTTP_IDEM_REDIS_HOST_LEN);
    ngx_http_idem_fuzz_assert(node->rd->conf->resolver != NULL);

    ngx_memcpy(node->resolve_buf, host, len);
    node->resolve.data = node->resolve_buf;
    node->resolve.len = len;
    node->host[0] = '\0';
    node->port = port;
}


void
ngx_http_idem_redis_node_connect(ngx_http_idem_redis_node_t *node)
{
    ngx_http_idem_fuzz_assert(node->port != 0);

    ngx_http_idem_fuzz_store.connects++;

    node->state = ngx_http_idem_fuzz_store.up ? NGX_HTTP_IDEM_REDIS_UP
                  : ngx_http_idem_fuzz_store.connecting
                    ? NGX_HTTP_IDEM_REDIS_CONNECTING : NGX_HTTP_IDEM_REDIS_DOWN;
}


void
ngx_http_idem_redis_node_close(ngx_http_idem_redis_node_t *node)
{
    node->state = NGX_HTTP_IDEM_REDIS_DOWN;

    if (node->down) {
        node->down(node);
    }
}


void
ngx_http_idem_redis_node_drop(ngx_http_idem_redis_node_t *node)
{
    ngx_http_idem_fuzz_store.drops++;
    ngx_http_idem_fuzz_store.dropped = node;

    node->state = NGX_HTTP_IDEM_REDIS_DOWN;
}


ngx_int_t
ngx_http_idem_redis_node_command(ngx_http_idem_redis_node_t *node,
    redisCallbackFn *fn, void *privdata, ngx_uint_t argc, const char **argv,
    size_t *lens, ngx_uint_t now)
{
    ngx_uint_t  n;

    if (node->state == NGX_HTTP_IDEM_REDIS_DOWN) {
        return NGX_DECLINED;
    }

    n = ngx_http_idem_fuzz_store.commands++;

    if (n < 2) {
        ngx_http_idem_fuzz_store.command_node[n] = node;
        ngx_http_idem_fuzz_store.command[n] = argv[0];
    }

    return NGX_OK;
}


void
ngx_http_idem_redis_pending_done(ngx_http_idem_redis_t *rd)
{
    ngx_http_idem_fuzz_assert(rd->stats.pending > 0);
    rd->stats.pending--;
}


void
ngx_http_idem_redis_report_later(ngx_http_idem_redis_t *rd)
{
}


void
ngx_http_idem_redis_count_failure(ngx_http_idem_redis_node_t *node,
    ngx_uint_t reason)
{
    ngx_http_idem_fuzz_assert(reason < NGX_HTTP_IDEM_STORE_FAILS);
}


void
ngx_http_idem_redis_op_done(redisAsyncContext *ac, void *r, void *privdata)
{
    ngx_http_idem_fuzz_unreached("ngx_http_idem_redis_op_done");
}
