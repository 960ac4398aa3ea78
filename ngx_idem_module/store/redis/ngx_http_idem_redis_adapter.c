
/*
 * hiredis' event hooks mapped to an nginx connection.  The events are
 * level-triggered: hiredis reads at most 16 KB per redisAsyncHandleRead()
 * call and does not loop until EAGAIN, so an edge-triggered event (what
 * ngx_handle_read_event() arms with epoll) could leave replies unread in
 * the socket with no further notification.  A level-triggered write event
 * fires as long as the socket is writable: hiredis deletes it as soon as
 * its output buffer is empty.
 *
 * Once connected, a write is not armed in epoll at all: the write event
 * waits on a timer of NGX_HTTP_IDEM_REDIS_FLUSH_DELAY, so that the writes
 * of every call in that time leave in one write(2) (and their replies come
 * back in one read), without two epoll_ctl(2) calls per flush.  A command
 * someone waits for (a claim, a read) is flushed now, the writes queued
 * before it with it: ngx_http_idem_redis_flush() posts the write event.
 * Only a write that could not finish (the socket is full) arms the
 * level-triggered event.
 *
 * The socket belongs to hiredis: it creates it, connects it and closes it
 * after the cleanup hook, which only releases the nginx connection.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_redis_adapter.h"


/* writes nobody waits for leave within this (ms) */
#define NGX_HTTP_IDEM_REDIS_FLUSH_DELAY  1


static void ngx_http_idem_redis_add_read(void *privdata);
static void ngx_http_idem_redis_del_read(void *privdata);
static void ngx_http_idem_redis_add_write(void *privdata);
static void ngx_http_idem_redis_del_write(void *privdata);
static void ngx_http_idem_redis_cleanup(void *privdata);
static void ngx_http_idem_redis_read_handler(ngx_event_t *rev);
static void ngx_http_idem_redis_write_handler(ngx_event_t *wev);
static void ngx_http_idem_redis_add_event(ngx_connection_t *c,
    ngx_event_t *ev, ngx_int_t event);
static void ngx_http_idem_redis_del_event(ngx_event_t *ev, ngx_int_t event);


ngx_int_t
ngx_http_idem_redis_attach(redisAsyncContext *ac, ngx_log_t *log)
{
    ngx_connection_t  *c;

    if (ac->ev.data != NULL || ac->c.fd == -1) {
        return NGX_ERROR;
    }

    c = ngx_get_connection(ac->c.fd, log);
    if (c == NULL) {
        return NGX_ERROR;
    }

    c->data = ac;
    c->number = ngx_atomic_fetch_add(ngx_connection_counter, 1);

    c->read->log = log;
    c->write->log = log;
    c->read->handler = ngx_http_idem_redis_read_handler;
    c->write->handler = ngx_http_idem_redis_write_handler;

    /*
     * hiredis 0.14 only learns that the non-blocking connect(2) finished
     * from the first write event, and does not ask for one itself.
     */

    if (ngx_add_event(c->write, NGX_WRITE_EVENT, NGX_LEVEL_EVENT) != NGX_OK) {
        ngx_free_connection(c);
        c->fd = (ngx_socket_t) -1;
        return NGX_ERROR;
    }

    ac->ev.data = c;
    ac->ev.addRead = ngx_http_idem_redis_add_read;
    ac->ev.delRead = ngx_http_idem_redis_del_read;
    ac->ev.addWrite = ngx_http_idem_redis_add_write;
    ac->ev.delWrite = ngx_http_idem_redis_del_write;
    ac->ev.cleanup = ngx_http_idem_redis_cleanup;

    return NGX_OK;
}


static void
ngx_http_idem_redis_add_read(void *privdata)
{
    ngx_connection_t *c = privdata;

    ngx_http_idem_redis_add_event(c, c->read, NGX_READ_EVENT);
}


static void
ngx_http_idem_redis_del_read(void *privdata)
{
    ngx_connection_t *c = privdata;

    ngx_http_idem_redis_del_event(c->read, NGX_READ_EVENT);
}


static void
ngx_http_idem_redis_add_write(void *privdata)
{
    ngx_connection_t *c = privdata;

    redisAsyncContext  *ac;

    ac = c->data;

    /* c->write->ready: set while a posted flush runs (see write_handler) */

    if ((ac->c.flags & REDIS_CONNECTED) && !c->write->ready && !c->error) {
        if (!c->write->posted && !c->write->active
            && !c->write->timer_set)
        {
            ngx_add_timer(c->write, NGX_HTTP_IDEM_REDIS_FLUSH_DELAY);
        }

        return;
    }

    ngx_http_idem_redis_add_event(c, c->write, NGX_WRITE_EVENT);
}


/* what is queued leaves at the end of this turn, not after the delay */

void
ngx_http_idem_redis_flush(redisAsyncContext *ac)
{
    ngx_connection_t  *c;

    c = ac->ev.data;

    if (c == NULL || !(ac->c.flags & REDIS_CONNECTED) || c->write->ready
        || c->error || c->write->posted || c->write->active)
    {
        return;
    }

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    ngx_post_event(c->write, &ngx_posted_events);
}


static void
ngx_http_idem_redis_del_write(void *privdata)
{
    ngx_connection_t *c = privdata;

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    ngx_http_idem_redis_del_event(c->write, NGX_WRITE_EVENT);
}


/*
 * Called by hiredis just before it closes the socket: the connection goes
 * back to nginx the way ngx_close_connection() would give it back, except
 * for the close(2).
 */

static void
ngx_http_idem_redis_cleanup(void *privdata)
{
    ngx_connection_t *c = privdata;

    redisAsyncContext  *ac;

    ac = c->data;

    if (c->read->timer_set) {
        ngx_del_timer(c->read);
    }

    if (c->write->timer_set) {
        ngx_del_timer(c->write);
    }

    /* the socket is still open: take it out of the event set for good */

    ngx_http_idem_redis_del_event(c->read, NGX_READ_EVENT);
    ngx_http_idem_redis_del_event(c->write, NGX_WRITE_EVENT);

    if (c->read->posted) {
        ngx_delete_posted_event(c->read);
    }

    if (c->write->posted) {
        ngx_delete_posted_event(c->write);
    }

    c->read->closed = 1;
    c->write->closed = 1;

    ngx_free_connection(c);

    c->fd = (ngx_socket_t) -1;

    /* nothing may reach the connection after this */

    ac->ev.data = NULL;
    ac->ev.addRead = NULL;
    ac->ev.delRead = NULL;
    ac->ev.addWrite = NULL;
    ac->ev.delWrite = NULL;
    ac->ev.cleanup = NULL;
}


static void
ngx_http_idem_redis_read_handler(ngx_event_t *rev)
{
    ngx_connection_t   *c;
    redisAsyncContext  *ac;

    c = rev->data;
    ac = c->data;

    if (c->close && (ac->c.flags & REDIS_CONNECTED)) {

        /*
         * worker_shutdown_timeout expired: nginx closes every connection,
         * and the requests it ends now write their final states (and
         * release their claims).  This one stays until the store has
         * drained, which has a bound of its own (redis.c), or until the
         * worker's exit closes it.
         */

        c->close = 0;
        c->error = 0;
        return;
    }

    if (c->close || c->error) {

        /*
         * An event could not be armed (c->error), or the shutdown timeout
         * came while connecting: once connected, the context is freed and
         * its owner hears of it through the disconnect callback; before
         * that, the owner's connect timer ends it.
         */

        if (ac->c.flags & REDIS_CONNECTED) {
            redisAsyncFree(ac);
            return;
        }

        ngx_http_idem_redis_del_event(c->read, NGX_READ_EVENT);
        ngx_http_idem_redis_del_event(c->write, NGX_WRITE_EVENT);

        return;
    }

    /* the context and the connection may be gone after this */

    redisAsyncHandleRead(ac);
}


static void
ngx_http_idem_redis_write_handler(ngx_event_t *wev)
{
    ngx_connection_t   *c;
    redisAsyncContext  *ac;

    c = wev->data;
    ac = c->data;

    /* the delay is over, or the flush was asked for before it */

    wev->timedout = 0;

    if (wev->timer_set) {
        ngx_del_timer(wev);
    }

    if (c->error) {

        /* level-triggered: it would fire again and again */

        ngx_http_idem_redis_del_event(wev, NGX_WRITE_EVENT);
        return;
    }

    /*
     * While hiredis flushes, a request for another write event means the
     * socket is full: that one is armed in epoll, not posted again.
     */

    wev->ready = 1;

    redisAsyncHandleWrite(ac);

    /* the connection may be gone: only a live one is touched */

    if (wev->closed == 0) {
        wev->ready = 0;
    }
}


/*
 * The hooks run inside hiredis, where the context cannot be freed: when an
 * event cannot be armed, the connection is marked and its read handler
 * posted to end it from the event loop.
 */

static void
ngx_http_idem_redis_add_event(ngx_connection_t *c, ngx_event_t *ev,
    ngx_int_t event)
{
    if (ev->active || c->error) {
        return;
    }

    if (ngx_add_event(ev, event, NGX_LEVEL_EVENT) != NGX_OK) {
        c->error = 1;
        ngx_post_event(c->read, &ngx_posted_events);
    }
}


static void
ngx_http_idem_redis_del_event(ngx_event_t *ev, ngx_int_t event)
{
    if (!ev->active) {
        return;
    }

    /* a failed epoll_ctl() is logged by nginx; nothing else to do */

    (void) ngx_del_event(ev, event, 0);
}
