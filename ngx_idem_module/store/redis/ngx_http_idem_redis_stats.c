
/*
 * What the Redis store counts as it goes: the commands outstanding (a
 * worker that is exiting waits for them: the pending timer, whose handler
 * is in ngx_http_idem_redis.c), the commands it could not take, and the
 * errors requests ran into, said in one error line a second at most.
 * Every part of the store calls in here; this file calls none of them.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_store.h"
#include "ngx_http_idem_redis_common.h"


/*
 * While commands are outstanding a non-cancelable timer keeps a worker
 * that is shutting down alive (ngx_event_no_timers_left()); it is checked
 * once a second, or every 100 ms once the worker is exiting.
 */

void
ngx_http_idem_redis_pending_add(ngx_http_idem_redis_t *rd)
{
    rd->stats.pending++;
    rd->pending_ev.cancelable = 0;

    if (!rd->pending_ev.timer_set && !rd->closing) {
        ngx_add_timer(&rd->pending_ev, ngx_exiting
                                       ? NGX_HTTP_IDEM_REDIS_DRAIN_CHECK
                                       : NGX_HTTP_IDEM_REDIS_WATCH);
    }
}


void
ngx_http_idem_redis_pending_done(ngx_http_idem_redis_t *rd)
{
    if (rd->stats.pending) {
        rd->stats.pending--;
    }

    if (rd->stats.pending) {
        return;
    }

    rd->pending_ev.cancelable = 1;

    if (rd->draining) {
        rd->draining = 0;

        if (rd->pending_ev.timer_set) {
            ngx_del_timer(&rd->pending_ev);
        }

        ngx_log_error(NGX_LOG_INFO, rd->log, 0,
                      "idem: redis \"%V\": nothing outstanding after %M ms",
                      &rd->name, ngx_current_msec - rd->drain_start);
    }
}


void
ngx_http_idem_redis_report_later(ngx_http_idem_redis_t *rd)
{
    ngx_msec_t  elapsed;

    if (rd->report_ev.timer_set || rd->closing) {
        return;
    }

    elapsed = ngx_current_msec - rd->reported;

    if (elapsed >= NGX_HTTP_IDEM_REDIS_REPORT) {
        ngx_http_idem_redis_report(rd);
        return;
    }

    ngx_add_timer(&rd->report_ev, NGX_HTTP_IDEM_REDIS_REPORT - elapsed);
}


void
ngx_http_idem_redis_report_handler(ngx_event_t *ev)
{
    ngx_http_idem_redis_report(ev->data);
}


/* the counts since the last report, in one error line; then zero */

void
ngx_http_idem_redis_report(ngx_http_idem_redis_t *rd)
{
    u_char  *p, *last, buf[NGX_HTTP_IDEM_REDIS_ERRSTR_LEN + 256];

    p = buf;
    last = buf + sizeof(buf);

    if (rd->down) {
        p = ngx_slprintf(p, last, ", %ui dropped (not connected)", rd->down);
    }

    if (rd->full) {
        p = ngx_slprintf(p, last, ", %ui dropped (%ui pending)",
                         rd->full, rd->conf->max_pending);
    }

    if (rd->held_full) {
        p = ngx_slprintf(p, last, ", %ui dropped (not connected, "
                         "%ui or %uz bytes held)", rd->held_full,
                         rd->conf->max_pending,
                         (size_t) NGX_HTTP_IDEM_REDIS_HELD_BYTES);
    }

    if (rd->timedout) {
        p = ngx_slprintf(p, last, ", %ui timed out", rd->timedout);
    }

    if (rd->lost) {
        p = ngx_slprintf(p, last, ", %ui unanswered (disconnected)",
                         rd->lost);
    }

    if (rd->errors) {
        p = ngx_slprintf(p, last, ", %ui failed (last error: \"%*s\"%s%*s)",
                         rd->errors, rd->errstr_len, rd->errstr,
                         rd->errcmd_len ? ", to " : "",
                         rd->errcmd_len, rd->errcmd);
    }

    if (p == buf) {
        return;
    }

    ngx_log_error(NGX_LOG_ERR, rd->log, 0,
                  "idem: redis \"%V\": since the last report: %*s",
                  &rd->name, (size_t) (p - buf - 2), buf + 2);

    rd->reported = ngx_current_msec;
    rd->down = 0;
    rd->full = 0;
    rd->held_full = 0;
    rd->timedout = 0;
    rd->lost = 0;
    rd->errors = 0;
}


/*
 * Room on the node for n commands more (held, if it is not up); else
 * counted and reported.
 */

ngx_int_t
ngx_http_idem_redis_accept(ngx_http_idem_redis_t *rd,
    ngx_http_idem_redis_node_t *node, ngx_uint_t n)
{
    if (node == NULL) {
        return ngx_http_idem_redis_drop(rd, &rd->down);
    }

    if (rd->stats.pending + n > rd->conf->max_pending) {
        return ngx_http_idem_redis_drop(rd, &rd->full);
    }

    if (node->state != NGX_HTTP_IDEM_REDIS_UP
        && (node->nheld + n > rd->conf->max_pending
            || node->held_bytes >= NGX_HTTP_IDEM_REDIS_HELD_BYTES))
    {
        return ngx_http_idem_redis_drop(rd, &rd->held_full);
    }

    return NGX_OK;
}


/* a command not taken: counted, and said in the next report */

ngx_int_t
ngx_http_idem_redis_drop(ngx_http_idem_redis_t *rd, ngx_uint_t *why)
{
    rd->stats.dropped++;
    (*why)++;
    ngx_http_idem_redis_report_later(rd);

    return NGX_DECLINED;
}


/*
 * A record's write given up: not taken, or taken and then held past its
 * timeout, lost with its connection before its answer, refused by Redis,
 * left when the worker exits: idem_record_writes_total{result="dropped"}
 * (the counter its caller gave, in the metrics' zone), once a write.
 */

void
ngx_http_idem_redis_write_dropped(ngx_atomic_t *dropped)
{
    ngx_log_debug0(NGX_LOG_DEBUG_EVENT, ngx_cycle->log, 0,
                   "idem redis: a record's write given up, counted");

    (void) ngx_atomic_fetch_add(dropped, 1);
}


/*
 * OOM, READONLY (a replica), MOVED (not a cluster, or too many
 * redirects), CLUSTERDOWN, LOADING ...: the store cannot take the command
 * now; counted and reported.
 */

void
ngx_http_idem_redis_error_reply(ngx_http_idem_redis_t *rd, u_char *cmd,
    size_t len, redisReply *reply)
{
    rd->errors++;
    rd->errstr_len = ngx_min(reply->len, NGX_HTTP_IDEM_REDIS_ERRSTR_LEN);
    ngx_memcpy(rd->errstr, reply->str, rd->errstr_len);

    /* named: an ACL's NOPERM for a key does not say which command it was */
    rd->errcmd_len = ngx_min(len, NGX_HTTP_IDEM_REDIS_ERRCMD_LEN);
    ngx_memcpy(rd->errcmd, cmd, rd->errcmd_len);

    ngx_http_idem_redis_report_later(rd);
}


/*
 * A connection made, or a connect that failed (its reason), counted for
 * the node's name now: the nodes idem_redis_up shows (the data nodes and
 * sentinels; not the connections of durable claims nor pub/sub's, which
 * follow their node).  A name new when every entry is taken takes the
 * entry of one no node has now, or is not counted.
 */

static ngx_http_idem_redis_count_t *
ngx_http_idem_redis_count(ngx_http_idem_redis_node_t *node)
{
    ngx_uint_t                    i, k;
    ngx_http_idem_redis_t        *rd;
    ngx_http_idem_redis_count_t  *c, *free;

    rd = node->rd;

    if (node->main != NULL || node->subscriber || node->name.len == 0) {
        return NULL;
    }

    free = NULL;

    for (i = 0; i < NGX_HTTP_IDEM_REDIS_COUNTS; i++) {
        c = &rd->counts[i];

        if (c->len == 0) {
            if (free == NULL) {
                free = c;
            }

            continue;
        }

        if (c->role == node->role && c->len == node->name.len
            && ngx_memcmp(c->name, node->name.data, c->len) == 0)
        {
            return c;
        }
    }

    for (i = 0; free == NULL && i < NGX_HTTP_IDEM_REDIS_COUNTS; i++) {
        c = &rd->counts[i];

        for (k = 0; k < rd->nnodes; k++) {
            if (rd->nodes[k]->role == c->role
                && rd->nodes[k]->name.len == c->len
                && ngx_memcmp(rd->nodes[k]->name.data, c->name, c->len) == 0)
            {
                break;
            }
        }

        if (k == rd->nnodes) {
            free = c;
        }
    }

    if (free == NULL) {
        return NULL;
    }

    ngx_memzero(free, sizeof(ngx_http_idem_redis_count_t));

    free->len = ngx_min(node->name.len, NGX_HTTP_IDEM_REDIS_NAME_LEN);
    ngx_memcpy(free->name, node->name.data, free->len);
    free->role = node->role;

    return free;
}


void
ngx_http_idem_redis_count_connect(ngx_http_idem_redis_node_t *node)
{
    ngx_http_idem_redis_count_t  *c;

    c = ngx_http_idem_redis_count(node);

    if (c != NULL) {
        c->connects++;
    }
}


void
ngx_http_idem_redis_count_failure(ngx_http_idem_redis_node_t *node,
    ngx_uint_t reason)
{
    ngx_http_idem_redis_count_t  *c;

    ngx_log_debug2(NGX_LOG_DEBUG_EVENT, node->rd->log, 0,
                   "idem redis: \"%V\": a failed connect counted (%ui)",
                   &node->name, reason);

    c = ngx_http_idem_redis_count(node);

    if (c != NULL) {
        c->failures[reason]++;
    }
}
