
/*
 * Rounds: when every server of an upstream was tried and the call has
 * attempts left, the next attempt goes round the upstream again (a single
 * server is tried again and again).
 *
 * The balancer is asked for a new round the way nginx asks for the first
 * one: through the upstream's peer.init, which builds fresh per-request
 * balancer data.  That data is the balancer's own: round robin's is in a
 * header, but keepalive's, hash's and least_conn's are not, and since
 * nginx 1.29.7 keepalive wraps every upstream{}.  Clearing round robin's
 * "tried" bits in place worked for round robin alone, and only where the
 * module's wrapper sat right on it.  peer.init is the same contract in
 * every nginx the module supports (1.22 to 1.31): nothing here depends on
 * nginx_version.
 */


#include "ngx_http_idem_round.h"


ngx_int_t
ngx_http_idem_new_round(ngx_http_request_t *r, ngx_http_idem_ctx_t *ctx)
{
    void                           *data;
    ngx_int_t                       rc;
    ngx_uint_t                      tries;
    ngx_http_upstream_t            *u;
    ngx_event_get_peer_pt           get;
    ngx_event_free_peer_pt          free_peer;
    ngx_event_notify_peer_pt        notify;
    ngx_http_idem_srv_conf_t       *iscf;
    ngx_http_upstream_srv_conf_t   *us;
#if (NGX_SSL || NGX_COMPAT)
    ngx_event_set_peer_session_pt   set_session;
    ngx_event_save_peer_session_pt  save_session;
#endif

    u = r->upstream;
    us = u->upstream;

    if (us == NULL) {
        return NGX_DECLINED;
    }

    ngx_log_debug2(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem: every server of \"%V\" tried, attempt %ui "
                   "goes round again", &us->host, ctx->upstream.attempt);

    /*
     * peer.init sets the callbacks of u->peer and the number of tries
     * for a request's first attempt: the module's, and the tries the call
     * has left, stay; only the balancer's own data is new
     */

    data = u->peer.data;
    get = u->peer.get;
    free_peer = u->peer.free;
    notify = u->peer.notify;
    tries = u->peer.tries;
#if (NGX_SSL || NGX_COMPAT)
    set_session = u->peer.set_session;
    save_session = u->peer.save_session;
#endif

    /*
     * as before the first round: round robin's init fills the data it
     * finds in u->peer.data (hash and least_conn put theirs there), and
     * keepalive's chains the notify it finds
     */

    u->peer.data = NULL;
    u->peer.notify = NULL;
#if (NGX_SSL || NGX_COMPAT)
    u->peer.set_session = NULL;
    u->peer.save_session = NULL;
#endif

    /* implicit upstreams (proxy_pass host:port) are round robin's */

    if (us->srv_conf != NULL) {
        iscf = ngx_http_conf_upstream_srv_conf(us, ngx_http_idem_module);
        rc = iscf->original_init(r, us);

    } else {
        rc = ngx_http_upstream_init_round_robin_peer(r, us);
    }

    if (rc == NGX_OK) {

        /* the whole contract of the new data, as in init_peer */

        ctx->upstream.peer_data = u->peer.data;
        ctx->upstream.original_get = u->peer.get;
        ctx->upstream.original_free = u->peer.free;
        ctx->upstream.original_notify = u->peer.notify;
#if (NGX_HTTP_SSL)
        ctx->upstream.original_set_session = u->peer.set_session;
        ctx->upstream.original_save_session = u->peer.save_session;
#endif
    }

    u->peer.data = data;
    u->peer.get = get;
    u->peer.free = free_peer;
    u->peer.notify = notify;
    u->peer.tries = tries;
#if (NGX_SSL || NGX_COMPAT)
    u->peer.set_session = set_session;
    u->peer.save_session = save_session;
#endif

    ngx_log_debug1(NGX_LOG_DEBUG_HTTP, r->connection->log, 0,
                   "idem: new round: %i", rc);

    return rc;
}
