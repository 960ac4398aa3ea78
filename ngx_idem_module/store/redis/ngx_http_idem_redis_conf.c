
/*
 * "idem_redis": where the store is (one Redis, a cluster's nodes, the
 * sentinels of a master) and how it is used, parsed at configuration time.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>

#include "ngx_http_idem_util.h"
#include "ngx_http_idem_store.h"
#include "ngx_http_idem_redis_common.h"
#include "ngx_http_idem_redis_adapter.h"


/* what an address may be besides an IP and port (parse_addr's "allow") */
#define NGX_HTTP_IDEM_REDIS_ADDR_NAME  1
#define NGX_HTTP_IDEM_REDIS_ADDR_UNIX  2


static ngx_int_t ngx_http_idem_redis_parse_addr(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_str_t *addr, ngx_http_idem_store_addr_t *a,
    ngx_uint_t allow);
static ngx_int_t ngx_http_idem_redis_parse_seeds(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_str_t *value,
    ngx_http_idem_store_conf_t *conf);
static ngx_int_t ngx_http_idem_redis_parse_msec(ngx_str_t *value,
    size_t skip, ngx_msec_t *msec);
static ngx_int_t ngx_http_idem_redis_parse_auth(ngx_conf_t *cf,
    ngx_command_t *cmd, ngx_str_t *arg, ngx_str_t *value,
    ngx_http_idem_store_auth_t *auth);
static char *ngx_http_idem_redis_check_auth(ngx_conf_t *cf,
    ngx_http_idem_store_auth_t *auth, const char *prefix);
static ngx_int_t ngx_http_idem_redis_read_secret(ngx_conf_t *cf,
    ngx_str_t *name, ngx_str_t *secret);


/*
 * idem_redis ADDR [db=N] [user=U] [password=S | password_file=F]
 *            [connect_timeout=T] [timeout=T] [max_pending=N]
 * idem_redis cluster ADDR ... [user=U] [password=S] [connect_timeout=T] ...
 * idem_redis sentinel=NAME ADDR ... [sentinel_user=U]
 *            [sentinel_password=S | sentinel_password_file=F] [db=N] ...
 */

char *
ngx_http_idem_store_parse(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_http_idem_store_conf_t *conf)
{
    char                        *rv;
    ngx_int_t                    n, rc;
    ngx_str_t                   *value, v;
    ngx_uint_t                   i;
    ngx_http_idem_store_addr_t   a;

    if (conf->addr.data != NULL) {
        return "is duplicate";
    }

    value = cf->args->elts;

    conf->addr = value[1];
    conf->db = 0;
    ngx_memzero(&conf->auth, sizeof(ngx_http_idem_store_auth_t));
    ngx_memzero(&conf->sentinel_auth, sizeof(ngx_http_idem_store_auth_t));
    conf->connect_timeout = NGX_HTTP_IDEM_REDIS_CONNECT_TIMEOUT;
    conf->timeout = NGX_HTTP_IDEM_REDIS_TIMEOUT;
    conf->max_pending = NGX_HTTP_IDEM_REDIS_MAX_PENDING;

    if (value[1].len == 7 && ngx_strncmp(value[1].data, "cluster", 7) == 0) {
        conf->mode = NGX_HTTP_IDEM_STORE_CLUSTER;

    } else if (value[1].len > 9
               && ngx_strncmp(value[1].data, "sentinel=", 9) == 0)
    {
        conf->mode = NGX_HTTP_IDEM_STORE_SENTINEL;
        conf->master_name.data = value[1].data + 9;
        conf->master_name.len = value[1].len - 9;

    } else {
        conf->mode = NGX_HTTP_IDEM_STORE_SINGLE;

        if (ngx_http_idem_redis_parse_addr(cf, cmd, &value[1], &a,
                                           NGX_HTTP_IDEM_REDIS_ADDR_NAME
                                           | NGX_HTTP_IDEM_REDIS_ADDR_UNIX)
            != NGX_OK)
        {
            return NGX_CONF_ERROR;
        }

        conf->host = a.host;
        conf->port = a.port;
        conf->unix_path = a.unix_path;
        conf->resolve = a.resolve;
    }

    if (conf->mode != NGX_HTTP_IDEM_STORE_SINGLE
        && ngx_http_idem_redis_parse_seeds(cf, cmd, value, conf) != NGX_OK)
    {
        return NGX_CONF_ERROR;
    }

    for (i = 2; i < cf->args->nelts; i++) {

        if (conf->mode != NGX_HTTP_IDEM_STORE_SINGLE
            && ngx_strlchr(value[i].data, value[i].data + value[i].len, '=')
               == NULL)
        {
            /* a seed, parsed above */
            continue;
        }

        if (ngx_strncmp(value[i].data, "db=", 3) == 0
            && conf->mode != NGX_HTTP_IDEM_STORE_CLUSTER)
        {
            n = ngx_atoi(value[i].data + 3, value[i].len - 3);
            if (n == NGX_ERROR || n > NGX_MAX_INT32_VALUE) {
                return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
            }

            conf->db = n;
            continue;
        }

        if (value[i].len > 9
            && ngx_strncmp(value[i].data, "sentinel_", 9) == 0
            && conf->mode == NGX_HTTP_IDEM_STORE_SENTINEL)
        {
            v.data = value[i].data + 9;
            v.len = value[i].len - 9;

            rc = ngx_http_idem_redis_parse_auth(cf, cmd, &value[i], &v,
                                                &conf->sentinel_auth);
        } else {
            rc = ngx_http_idem_redis_parse_auth(cf, cmd, &value[i],
                                                &value[i], &conf->auth);
        }

        if (rc == NGX_ERROR) {
            return NGX_CONF_ERROR;
        }

        if (rc == NGX_OK) {
            continue;
        }

        if (ngx_strncmp(value[i].data, "connect_timeout=", 16) == 0) {
            if (ngx_http_idem_redis_parse_msec(&value[i], 16,
                                               &conf->connect_timeout)
                != NGX_OK)
            {
                return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "timeout=", 8) == 0) {
            if (ngx_http_idem_redis_parse_msec(&value[i], 8, &conf->timeout)
                != NGX_OK)
            {
                return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
            }

            continue;
        }

        if (ngx_strncmp(value[i].data, "max_pending=", 12) == 0) {
            n = ngx_atoi(value[i].data + 12, value[i].len - 12);
            if (n == NGX_ERROR || n == 0) {
                return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
            }

            conf->max_pending = n;
            continue;
        }

        return ngx_http_idem_conf_invalid(cf, cmd, &value[i]);
    }

    rv = ngx_http_idem_redis_check_auth(cf, &conf->auth, "");
    if (rv != NGX_CONF_OK) {
        return rv;
    }

    return ngx_http_idem_redis_check_auth(cf, &conf->sentinel_auth,
                                          "sentinel_");
}


/*
 * "user=", "password=" or "password_file=" (after "sentinel_" for the
 * sentinels' own, "arg" being the whole parameter): NGX_OK when taken,
 * NGX_DECLINED when it is none of them, NGX_ERROR (logged) when invalid.
 */

static ngx_int_t
ngx_http_idem_redis_parse_auth(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *arg, ngx_str_t *value, ngx_http_idem_store_auth_t *auth)
{
    ngx_str_t  file;

    if (value->len >= 5 && ngx_strncmp(value->data, "user=", 5) == 0) {
        if (value->len == 5 || auth->user.data != NULL) {
            goto invalid;
        }

        auth->user.data = value->data + 5;
        auth->user.len = value->len - 5;
        return NGX_OK;
    }

    if (value->len >= 9 && ngx_strncmp(value->data, "password=", 9) == 0) {
        if (value->len == 9 || auth->password.data != NULL) {
            goto invalid;
        }

        auth->password.data = value->data + 9;
        auth->password.len = value->len - 9;
        return NGX_OK;
    }

    if (value->len >= 14
        && ngx_strncmp(value->data, "password_file=", 14) == 0)
    {
        if (value->len == 14 || auth->password.data != NULL) {
            goto invalid;
        }

        file.data = value->data + 14;
        file.len = value->len - 14;

        return ngx_http_idem_redis_read_secret(cf, &file, &auth->password);
    }

    return NGX_DECLINED;

invalid:

    (void) ngx_http_idem_conf_invalid(cf, cmd, arg);
    return NGX_ERROR;
}


/* a user with no password: AUTH needs one (any, for a "nopass" user) */

static char *
ngx_http_idem_redis_check_auth(ngx_conf_t *cf,
    ngx_http_idem_store_auth_t *auth, const char *prefix)
{
    if (auth->user.len && auth->password.len == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"idem_redis\": \"%suser=%V\" needs "
                           "\"%spassword=\" or \"%spassword_file=\"",
                           prefix, &auth->user, prefix, prefix);
        return NGX_CONF_ERROR;
    }

    return NGX_CONF_OK;
}


/*
 * A password file's first line (without its CR LF), read when the
 * configuration is: a secret kept out of nginx.conf, read again at each
 * reload.  A relative name is from the configuration's prefix, as
 * ssl_password_file's.
 */

#define NGX_HTTP_IDEM_REDIS_SECRET_MAX  4096

static ngx_int_t
ngx_http_idem_redis_read_secret(ngx_conf_t *cf, ngx_str_t *name,
    ngx_str_t *secret)
{
    u_char      *buf, *p, *last;
    ssize_t      n;
    ngx_int_t    rc;
    ngx_file_t   file;

    if (ngx_conf_full_name(cf->cycle, name, 1) != NGX_OK) {
        return NGX_ERROR;
    }

    buf = ngx_pnalloc(cf->pool, NGX_HTTP_IDEM_REDIS_SECRET_MAX + 1);
    if (buf == NULL) {
        return NGX_ERROR;
    }

    ngx_memzero(&file, sizeof(ngx_file_t));
    file.name = *name;
    file.log = cf->log;

    file.fd = ngx_open_file(name->data, NGX_FILE_RDONLY, NGX_FILE_OPEN, 0);
    if (file.fd == NGX_INVALID_FILE) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, ngx_errno,
                           ngx_open_file_n " \"%V\" failed", name);
        return NGX_ERROR;
    }

    rc = NGX_OK;

    n = ngx_read_file(&file, buf, NGX_HTTP_IDEM_REDIS_SECRET_MAX + 1, 0);

    if (n == NGX_ERROR) {
        rc = NGX_ERROR;

    } else if (n > NGX_HTTP_IDEM_REDIS_SECRET_MAX) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "password file \"%V\" is longer than %d bytes",
                           name, NGX_HTTP_IDEM_REDIS_SECRET_MAX);
        rc = NGX_ERROR;
    }

    if (ngx_close_file(file.fd) == NGX_FILE_ERROR) {
        ngx_conf_log_error(NGX_LOG_ALERT, cf, ngx_errno,
                           ngx_close_file_n " \"%V\" failed", name);
    }

    if (rc != NGX_OK) {
        return rc;
    }

    last = buf + n;
    p = ngx_strlchr(buf, last, LF);
    if (p != NULL) {
        last = p;
    }

    if (last > buf && last[-1] == CR) {
        last--;
    }

    if (last == buf) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "password file \"%V\" has an empty first line",
                           name);
        return NGX_ERROR;
    }

    secret->data = buf;
    secret->len = last - buf;

    return NGX_OK;
}


/* cluster nodes or sentinels, IPs or host names: the arguments without "=" */

static ngx_int_t
ngx_http_idem_redis_parse_seeds(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *value, ngx_http_idem_store_conf_t *conf)
{
    ngx_uint_t                   i;
    ngx_http_idem_store_addr_t  *a;

    conf->seeds = ngx_array_create(cf->pool, 4,
                                   sizeof(ngx_http_idem_store_addr_t));
    if (conf->seeds == NULL) {
        return NGX_ERROR;
    }

    for (i = 2; i < cf->args->nelts; i++) {

        if (ngx_strlchr(value[i].data, value[i].data + value[i].len, '=')
            != NULL)
        {
            continue;
        }

        if (conf->seeds->nelts == NGX_HTTP_IDEM_REDIS_MAX_NODES / 2) {
            ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                               "too many addresses in \"%V\" directive",
                               &cmd->name);
            return NGX_ERROR;
        }

        a = ngx_array_push(conf->seeds);
        if (a == NULL) {
            return NGX_ERROR;
        }

        /* a cluster's nodes and sentinels may be named: resolved at connect */

        if (ngx_http_idem_redis_parse_addr(cf, cmd, &value[i], a,
                                           NGX_HTTP_IDEM_REDIS_ADDR_NAME)
            != NGX_OK)
        {
            return NGX_ERROR;
        }
    }

    if (conf->seeds->nelts == 0) {
        ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                           "\"%V %V\" needs at least one IP address and port",
                           &cmd->name, &value[1]);
        return NGX_ERROR;
    }

    return NGX_OK;
}


/*
 * "IPv4:port", "[IPv6]:port", and where "allow" says "name:port" (marked
 * a->resolve: nginx's resolver finds it, never hiredis' blocking
 * getaddrinfo()) or "unix:/path".
 */

static ngx_int_t
ngx_http_idem_redis_parse_addr(ngx_conf_t *cf, ngx_command_t *cmd,
    ngx_str_t *addr, ngx_http_idem_store_addr_t *a, ngx_uint_t allow)
{
    u_char              *p, *last;
    ngx_int_t            port;
    ngx_str_t            host;
    struct sockaddr_un  *saun;
#if (NGX_HAVE_INET6)
    u_char               inaddr6[16];
#endif

    ngx_memzero(a, sizeof(ngx_http_idem_store_addr_t));

    a->addr = *addr;

    if (addr->len >= 5 && ngx_strncmp(addr->data, "unix:", 5) == 0) {

        host.data = addr->data + 5;
        host.len = addr->len - 5;

        if (!(allow & NGX_HTTP_IDEM_REDIS_ADDR_UNIX)
            || host.len == 0 || host.len >= sizeof(saun->sun_path))
        {
            goto invalid;
        }

        a->unix_path.data = ngx_pnalloc(cf->pool, host.len + 1);
        if (a->unix_path.data == NULL) {
            return NGX_ERROR;
        }

        ngx_cpystrn(a->unix_path.data, host.data, host.len + 1);
        a->unix_path.len = host.len;

        return NGX_OK;
    }

    last = addr->data + addr->len;

    if (addr->len && addr->data[0] == '[') {

        p = ngx_strlchr(addr->data, last, ']');
        if (p == NULL || p + 1 == last || p[1] != ':') {
            goto invalid;
        }

        host.data = addr->data + 1;
        host.len = p - host.data;

#if (NGX_HAVE_INET6)
        if (ngx_inet6_addr(host.data, host.len, inaddr6) != NGX_OK) {
            goto invalid;
        }
#else
        goto invalid;
#endif

        p += 2;

    } else {

        p = ngx_strlchr(addr->data, last, ':');
        if (p == NULL) {
            goto invalid;
        }

        host.data = addr->data;
        host.len = p - addr->data;

        if (ngx_inet_addr(host.data, host.len) == INADDR_NONE) {

            /* a host name: resolved by nginx's resolver, never here */

            if (!(allow & NGX_HTTP_IDEM_REDIS_ADDR_NAME)
                || ngx_http_idem_redis_host_name(&host) != NGX_OK)
            {
                goto invalid;
            }

            a->resolve = 1;
        }

        p++;
    }

    port = ngx_atoi(p, last - p);
    if (port < 1 || port > 65535) {
        goto invalid;
    }

    a->host.data = ngx_pnalloc(cf->pool, host.len + 1);
    if (a->host.data == NULL) {
        return NGX_ERROR;
    }

    ngx_cpystrn(a->host.data, host.data, host.len + 1);
    a->host.len = host.len;
    a->port = port;

    return NGX_OK;

invalid:

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "invalid value \"%V\" in \"%V\" directive, "
                       "it must be an IP address and port%s",
                       addr, &cmd->name,
                       allow == NGX_HTTP_IDEM_REDIS_ADDR_NAME
                       ? ", or a host name and port"
                       : allow ? ", a host name and port, or unix:/path" : "");

    return NGX_ERROR;
}


static ngx_int_t
ngx_http_idem_redis_parse_msec(ngx_str_t *value, size_t skip,
    ngx_msec_t *msec)
{
    ngx_str_t   s;
    ngx_msec_t  ms;

    s.data = value->data + skip;
    s.len = value->len - skip;

    ms = ngx_parse_time(&s, 0);
    if (ms == (ngx_msec_t) NGX_ERROR || ms == 0) {
        return NGX_ERROR;
    }

    *msec = ms;

    return NGX_OK;
}


/*
 * After http{} is read (its resolver may follow idem_redis): a host name
 * needs a resolver there, which the caller has put in conf.  nginx's own
 * resolver, so that no worker ever blocks on DNS.
 */

ngx_int_t
ngx_http_idem_store_check(ngx_conf_t *cf, ngx_http_idem_store_conf_t *conf)
{
    ngx_str_t                   *name;
    ngx_uint_t                   i;
    ngx_http_idem_store_addr_t  *seed;

    if (conf->addr.data == NULL) {
        return NGX_OK;
    }

    /* http{} has a resolver of its own: else none (NULL) */

    if (conf->resolver != NULL && conf->resolver->connections.nelts == 0) {
        conf->resolver = NULL;
    }

    /* names a cluster announces, or sentinels give, are resolved too */

    if (conf->resolver != NULL
        && conf->resolver_timeout == NGX_CONF_UNSET_MSEC)
    {
        conf->resolver_timeout = 30000;
    }

    name = conf->resolve ? &conf->addr : NULL;

    if (conf->seeds != NULL) {
        seed = conf->seeds->elts;

        for (i = 0; name == NULL && i < conf->seeds->nelts; i++) {
            if (seed[i].resolve) {
                name = &seed[i].addr;
            }
        }
    }

    if (name == NULL || conf->resolver != NULL) {
        return NGX_OK;
    }

    ngx_conf_log_error(NGX_LOG_EMERG, cf, 0,
                       "\"idem_redis %s%V\" names a host: add a "
                       "\"resolver\" to http{}, which the module "
                       "resolves it with (without blocking a worker)",
                       conf->mode == NGX_HTTP_IDEM_STORE_CLUSTER
                       ? "cluster ... " : "", name);
    return NGX_ERROR;
}
