
/*
 * Stand-ins for the nginx core functions the module's parsers call, for
 * the fuzz targets: nginx-dev ships headers only, not the core's objects.
 *
 * Written for this project, after nginx's documented behaviour (not a copy
 * of its code).  Where the module depends on what a function does, it
 * does the same: the pool gives every allocation its own malloc() so that
 * AddressSanitizer sees any byte read or written past one; ngx_atoi and
 * ngx_atoof refuse what nginx's refuse; the printf family knows every
 * format the module uses and writes no byte past "last".  The rest aborts:
 * a target that reaches it needs a better stub, not a silent one.
 */


#include <ngx_config.h>
#include <ngx_core.h>
#include <ngx_event.h>
#include <ngx_http.h>

#include "ngx_http_idem_fuzz.h"


static u_char *ngx_http_idem_fuzz_number(u_char *buf, u_char *last,
    uint64_t ui64, u_char zero, ngx_uint_t hex, ngx_uint_t width);
static u_char *ngx_http_idem_fuzz_copy(u_char *buf, u_char *last,
    u_char *p, size_t len, ngx_uint_t hex);


/* nginx's globals, as a worker has them between two events */

static ngx_time_t          ngx_http_idem_fuzz_time = { 1700000000, 0, 0 };

volatile ngx_time_t       *ngx_cached_time = &ngx_http_idem_fuzz_time;
volatile ngx_msec_t        ngx_current_msec = 1000000;

ngx_uint_t                 ngx_pagesize = 4096;
ngx_pid_t                  ngx_pid = 1;
ngx_uint_t                 ngx_process = NGX_PROCESS_WORKER;
ngx_uint_t                 ngx_exiting;
sig_atomic_t               ngx_quit;
sig_atomic_t               ngx_terminate;
ngx_atomic_t              *ngx_connection_counter;

ngx_rbtree_t               ngx_event_timer_rbtree;
ngx_queue_t                ngx_posted_events;
ngx_event_actions_t        ngx_event_actions;
ngx_os_io_t                ngx_io;

static ngx_log_t           ngx_http_idem_fuzz_cycle_log;
static ngx_cycle_t         ngx_http_idem_fuzz_cycle = {
    .log = &ngx_http_idem_fuzz_cycle_log
};
volatile ngx_cycle_t      *ngx_cycle = &ngx_http_idem_fuzz_cycle;

ngx_module_t               ngx_http_module;
ngx_module_t               ngx_http_core_module;
ngx_module_t               ngx_http_upstream_module;

ngx_http_output_header_filter_pt  ngx_http_top_header_filter;
ngx_http_output_body_filter_pt    ngx_http_top_body_filter;
ngx_http_request_body_filter_pt   ngx_http_top_request_body_filter;


/* the pool: every allocation is its own, freed when the pool goes */

ngx_pool_t *
ngx_create_pool(size_t size, ngx_log_t *log)
{
    ngx_pool_t  *pool;

    pool = calloc(1, sizeof(ngx_pool_t));
    if (pool == NULL) {
        return NULL;
    }

    pool->max = size;
    pool->current = pool;
    pool->log = log;

    return pool;
}


void
ngx_destroy_pool(ngx_pool_t *pool)
{
    ngx_pool_large_t    *l, *next;
    ngx_pool_cleanup_t  *c;

    for (c = pool->cleanup; c; c = c->next) {
        if (c->handler) {
            c->handler(c->data);
        }
    }

    for (l = pool->large; l; l = next) {
        next = l->next;
        free(l->alloc);
        free(l);
    }

    /* the cleanup records were allocated from the pool: freed above */

    free(pool);
}


void *
ngx_palloc(ngx_pool_t *pool, size_t size)
{
    ngx_pool_large_t  *l;

    l = malloc(sizeof(ngx_pool_large_t));
    if (l == NULL) {
        return NULL;
    }

    /* malloc(0) may give NULL: nginx never fails a zero-sized palloc */

    l->alloc = malloc(size ? size : 1);
    if (l->alloc == NULL) {
        free(l);
        return NULL;
    }

    l->next = pool->large;
    pool->large = l;

    return l->alloc;
}


void *
ngx_pnalloc(ngx_pool_t *pool, size_t size)
{
    return ngx_palloc(pool, size);
}


void *
ngx_pcalloc(ngx_pool_t *pool, size_t size)
{
    void  *p;

    p = ngx_palloc(pool, size);
    if (p != NULL) {
        ngx_memzero(p, size);
    }

    return p;
}


/* stricter than nginx: any block is freed, so a later use is reported */

ngx_int_t
ngx_pfree(ngx_pool_t *pool, void *p)
{
    ngx_pool_large_t  *l;

    for (l = pool->large; l; l = l->next) {
        if (p == l->alloc) {
            free(l->alloc);
            l->alloc = NULL;
            return NGX_OK;
        }
    }

    return NGX_DECLINED;
}


ngx_pool_cleanup_t *
ngx_pool_cleanup_add(ngx_pool_t *p, size_t size)
{
    ngx_pool_cleanup_t  *c;

    c = ngx_palloc(p, sizeof(ngx_pool_cleanup_t));
    if (c == NULL) {
        return NULL;
    }

    if (size) {
        c->data = ngx_palloc(p, size);
        if (c->data == NULL) {
            return NULL;
        }

    } else {
        c->data = NULL;
    }

    c->handler = NULL;
    c->next = p->cleanup;

    p->cleanup = c;

    return c;
}


void *
ngx_alloc(size_t size, ngx_log_t *log)
{
    return malloc(size ? size : 1);
}


void *
ngx_calloc(size_t size, ngx_log_t *log)
{
    return calloc(1, size ? size : 1);
}


ngx_buf_t *
ngx_create_temp_buf(ngx_pool_t *pool, size_t size)
{
    ngx_buf_t  *b;

    b = ngx_calloc_buf(pool);
    if (b == NULL) {
        return NULL;
    }

    b->start = ngx_palloc(pool, size);
    if (b->start == NULL) {
        return NULL;
    }

    b->pos = b->start;
    b->last = b->start;
    b->end = b->last + size;
    b->temporary = 1;

    return b;
}


ngx_chain_t *
ngx_alloc_chain_link(ngx_pool_t *pool)
{
    return ngx_palloc(pool, sizeof(ngx_chain_t));
}


ngx_array_t *
ngx_array_create(ngx_pool_t *p, ngx_uint_t n, size_t size)
{
    ngx_array_t  *a;

    a = ngx_palloc(p, sizeof(ngx_array_t));
    if (a == NULL) {
        return NULL;
    }

    if (ngx_array_init(a, p, n, size) != NGX_OK) {
        return NULL;
    }

    return a;
}


/* as nginx: a full array moves to twice the room; the old one stays */

void *
ngx_array_push(ngx_array_t *a)
{
    void    *elt, *new;
    size_t   size;

    if (a->nelts == a->nalloc) {
        size = a->size * a->nalloc;

        new = ngx_palloc(a->pool, 2 * size);
        if (new == NULL) {
            return NULL;
        }

        ngx_memcpy(new, a->elts, size);
        a->elts = new;
        a->nalloc *= 2;
    }

    elt = (u_char *) a->elts + a->size * a->nelts;
    a->nelts++;

    return elt;
}


void *
ngx_list_push(ngx_list_t *l)
{
    void             *elt;
    ngx_list_part_t  *last;

    last = l->last;

    if (last->nelts == l->nalloc) {
        last = ngx_palloc(l->pool, sizeof(ngx_list_part_t));
        if (last == NULL) {
            return NULL;
        }

        last->elts = ngx_palloc(l->pool, l->nalloc * l->size);
        if (last->elts == NULL) {
            return NULL;
        }

        last->nelts = 0;
        last->next = NULL;

        l->last->next = last;
        l->last = last;
    }

    elt = (u_char *) last->elts + l->size * last->nelts;
    last->nelts++;

    return elt;
}


/* strings */

ngx_int_t
ngx_atoi(u_char *line, size_t n)
{
    ngx_int_t  value, cutoff, cutlim;

    if (n == 0) {
        return NGX_ERROR;
    }

    cutoff = NGX_MAX_INT_T_VALUE / 10;
    cutlim = NGX_MAX_INT_T_VALUE % 10;

    for (value = 0; n--; line++) {
        if (*line < '0' || *line > '9') {
            return NGX_ERROR;
        }

        if (value >= cutoff && (value > cutoff || *line - '0' > cutlim)) {
            return NGX_ERROR;
        }

        value = value * 10 + (*line - '0');
    }

    return value;
}


off_t
ngx_atoof(u_char *line, size_t n)
{
    off_t  value, cutoff, cutlim;

    if (n == 0) {
        return NGX_ERROR;
    }

    cutoff = NGX_MAX_OFF_T_VALUE / 10;
    cutlim = NGX_MAX_OFF_T_VALUE % 10;

    for (value = 0; n--; line++) {
        if (*line < '0' || *line > '9') {
            return NGX_ERROR;
        }

        if (value >= cutoff && (value > cutoff || *line - '0' > cutlim)) {
            return NGX_ERROR;
        }

        value = value * 10 + (*line - '0');
    }

    return value;
}


u_char *
ngx_hex_dump(u_char *dst, u_char *src, size_t len)
{
    static u_char  hex[] = "0123456789abcdef";

    while (len--) {
        *dst++ = hex[*src >> 4];
        *dst++ = hex[*src++ & 0xf];
    }

    return dst;
}


u_char *
ngx_cpystrn(u_char *dst, u_char *src, size_t n)
{
    if (n == 0) {
        return dst;
    }

    while (--n) {
        *dst = *src;

        if (*dst == '\0') {
            return dst;
        }

        dst++;
        src++;
    }

    *dst = '\0';

    return dst;
}


u_char *
ngx_pstrdup(ngx_pool_t *pool, ngx_str_t *src)
{
    u_char  *dst;

    dst = ngx_pnalloc(pool, src->len);
    if (dst == NULL) {
        return NULL;
    }

    ngx_memcpy(dst, src->data, src->len);

    return dst;
}


ngx_int_t
ngx_strncasecmp(u_char *s1, u_char *s2, size_t n)
{
    ngx_uint_t  c1, c2;

    while (n) {
        c1 = ngx_tolower(*s1);
        c2 = ngx_tolower(*s2);

        if (c1 != c2) {
            return c1 - c2;
        }

        if (c1 == 0) {
            return 0;
        }

        s1++;
        s2++;
        n--;
    }

    return 0;
}


ngx_int_t
ngx_strcasecmp(u_char *s1, u_char *s2)
{
    return ngx_strncasecmp(s1, s2, (size_t) -1);
}


ngx_int_t
ngx_memn2cmp(u_char *s1, u_char *s2, size_t n1, size_t n2)
{
    ngx_int_t  m, rc;

    m = (n1 < n2) ? n1 : n2;

    rc = (m == 0) ? 0 : ngx_memcmp(s1, s2, m);

    if (rc || n1 == n2) {
        return rc;
    }

    return (n1 < n2) ? -1 : 1;
}


/*
 * nginx's contract: "<", ">", "&" and '"' as entities; with a NULL dst,
 * the number of bytes the escaping adds.
 */

uintptr_t
ngx_escape_html(u_char *dst, u_char *src, size_t size)
{
    char    *entity;
    size_t   len;

    if (dst == NULL) {
        for (len = 0; size; size--, src++) {
            len += (*src == '<' || *src == '>') ? 3
                   : (*src == '&') ? 4 : (*src == '"') ? 5 : 0;
        }

        return (uintptr_t) len;
    }

    for ( /* void */ ; size; size--, src++) {
        entity = (*src == '<') ? "&lt;" : (*src == '>') ? "&gt;"
                 : (*src == '&') ? "&amp;" : (*src == '"') ? "&quot;" : NULL;

        if (entity == NULL) {
            *dst++ = *src;
            continue;
        }

        len = ngx_strlen(entity);
        ngx_memcpy(dst, entity, len);
        dst += len;
    }

    return (uintptr_t) dst;
}


/*
 * As nginx's: any non-negative time, the full year and months 1..12 (a
 * time far ahead has a year of more than four digits); days to a civil
 * date by the usual era arithmetic.
 */

void
ngx_gmtime(time_t t, ngx_tm_t *tp)
{
    int64_t   days, secs, era, doe, yoe, doy, mp, d, m, y;

    if (t < 0) {
        t = 0;
    }

    days = t / 86400;
    secs = t % 86400;

    days += 719468;
    era = days / 146097;
    doe = days - era * 146097;
    yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
    y = yoe + era * 400;
    doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    mp = (5 * doy + 2) / 153;
    d = doy - (153 * mp + 2) / 5 + 1;
    m = mp < 10 ? mp + 3 : mp - 9;

    ngx_memzero(tp, sizeof(ngx_tm_t));

    tp->ngx_tm_sec = (int) (secs % 60);
    tp->ngx_tm_min = (int) (secs / 60 % 60);
    tp->ngx_tm_hour = (int) (secs / 3600);
    tp->ngx_tm_mday = (int) d;
    tp->ngx_tm_mon = (int) m;
    tp->ngx_tm_year = (int) (y + (m <= 2));
}


ngx_uint_t
ngx_hash_key(u_char *data, size_t len)
{
    ngx_uint_t  i, key;

    key = 0;

    for (i = 0; i < len; i++) {
        key = ngx_hash(key, data[i]);
    }

    return key;
}


ngx_uint_t
ngx_hash_strlow(u_char *dst, u_char *src, size_t n)
{
    ngx_uint_t  key;

    key = 0;

    while (n--) {
        *dst = ngx_tolower(*src);
        key = ngx_hash(key, *dst);
        dst++;
        src++;
    }

    return key;
}


/*
 * JSON string escaping as nginx's: '"' and '\' get a backslash, control
 * bytes become \n, \r, \t, \b, \f or \u00XX (six bytes, the worst case),
 * bytes above 0x7f pass as they are.  With dst NULL: the bytes it adds.
 */

uintptr_t
ngx_escape_json(u_char *dst, u_char *src, size_t size)
{
    u_char      ch;
    ngx_uint_t  len;

    static u_char  hex[] = "0123456789abcdef";

    if (dst == NULL) {
        len = 0;

        while (size--) {
            ch = *src++;

            if (ch == '\\' || ch == '"') {
                len++;

            } else if (ch <= 0x1f) {
                len += (ch == '\n' || ch == '\r' || ch == '\t' || ch == '\b'
                        || ch == '\f') ? 1 : 5;
            }
        }

        return (uintptr_t) len;
    }

    while (size--) {
        ch = *src++;

        if (ch > 0x7f || (ch > 0x1f && ch != '\\' && ch != '"')) {
            *dst++ = ch;
            continue;
        }

        *dst++ = '\\';

        switch (ch) {
        case '\n':
            *dst++ = 'n';
            break;
        case '\r':
            *dst++ = 'r';
            break;
        case '\t':
            *dst++ = 't';
            break;
        case '\b':
            *dst++ = 'b';
            break;
        case '\f':
            *dst++ = 'f';
            break;
        case '\\':
        case '"':
            *dst++ = ch;
            break;
        default:
            *dst++ = 'u';
            *dst++ = '0';
            *dst++ = '0';
            *dst++ = hex[ch >> 4];
            *dst++ = hex[ch & 0xf];
        }
    }

    return (uintptr_t) dst;
}


/* the printf family: the formats of nginx's ngx_vslprintf() */

u_char * ngx_cdecl
ngx_sprintf(u_char *buf, const char *fmt, ...)
{
    u_char   *p;
    va_list   args;

    va_start(args, fmt);
    p = ngx_vslprintf(buf, (void *) -1, fmt, args);
    va_end(args);

    return p;
}


u_char * ngx_cdecl
ngx_snprintf(u_char *buf, size_t max, const char *fmt, ...)
{
    u_char   *p;
    va_list   args;

    va_start(args, fmt);
    p = ngx_vslprintf(buf, buf + max, fmt, args);
    va_end(args);

    return p;
}


u_char * ngx_cdecl
ngx_slprintf(u_char *buf, u_char *last, const char *fmt, ...)
{
    u_char   *p;
    va_list   args;

    va_start(args, fmt);
    p = ngx_vslprintf(buf, last, fmt, args);
    va_end(args);

    return p;
}


u_char *
ngx_vslprintf(u_char *buf, u_char *last, const char *fmt, va_list args)
{
    u_char                *p, zero;
    size_t                 len, slen;
    int64_t                i64;
    uint64_t               ui64;
    ngx_str_t             *v;
    ngx_msec_t             ms;
    ngx_uint_t             width, sign, hex;
    ngx_variable_value_t  *vv;

    while (*fmt && buf < last) {

        if (*fmt != '%') {
            *buf++ = *fmt++;
            continue;
        }

        fmt++;

        zero = (u_char) ((*fmt == '0') ? '0' : ' ');
        width = 0;
        sign = 1;
        hex = 0;
        slen = (size_t) -1;
        i64 = 0;
        ui64 = 0;

        while (*fmt >= '0' && *fmt <= '9') {
            width = width * 10 + (*fmt++ - '0');
        }

        for ( ;; ) {
            switch (*fmt) {

            case 'u':
                sign = 0;
                fmt++;
                continue;

            case 'x':
                hex = 1;
                sign = 0;
                fmt++;
                continue;

            case 'X':
                hex = 2;
                sign = 0;
                fmt++;
                continue;

            case '*':
                slen = va_arg(args, size_t);
                fmt++;
                continue;

            default:
                break;
            }

            break;
        }

        switch (*fmt) {

        case 'V':
            v = va_arg(args, ngx_str_t *);
            buf = ngx_http_idem_fuzz_copy(buf, last, v->data, v->len, hex);
            fmt++;
            continue;

        case 'v':
            vv = va_arg(args, ngx_variable_value_t *);
            buf = ngx_http_idem_fuzz_copy(buf, last, vv->data, vv->len, hex);
            fmt++;
            continue;

        case 's':
            p = va_arg(args, u_char *);
            len = (slen == (size_t) -1) ? ngx_strlen(p) : slen;
            buf = ngx_http_idem_fuzz_copy(buf, last, p, len, hex);
            fmt++;
            continue;

        case 'O':
            i64 = (int64_t) va_arg(args, off_t);
            sign = 1;
            break;

        case 'P':
            i64 = (int64_t) va_arg(args, ngx_pid_t);
            sign = 1;
            break;

        case 'T':
            i64 = (int64_t) va_arg(args, time_t);
            sign = 1;
            break;

        case 'M':
            ms = (ngx_msec_t) va_arg(args, ngx_msec_t);
            if ((ngx_msec_int_t) ms == -1) {
                sign = 1;
                i64 = -1;

            } else {
                sign = 0;
                ui64 = (uint64_t) ms;
            }
            break;

        case 'z':
            if (sign) {
                i64 = (int64_t) va_arg(args, ssize_t);
            } else {
                ui64 = (uint64_t) va_arg(args, size_t);
            }
            break;

        case 'i':
            if (sign) {
                i64 = (int64_t) va_arg(args, ngx_int_t);
            } else {
                ui64 = (uint64_t) va_arg(args, ngx_uint_t);
            }
            break;

        case 'd':
            if (sign) {
                i64 = (int64_t) va_arg(args, int);
            } else {
                ui64 = (uint64_t) va_arg(args, u_int);
            }
            break;

        case 'l':
            if (sign) {
                i64 = (int64_t) va_arg(args, long);
            } else {
                ui64 = (uint64_t) va_arg(args, u_long);
            }
            break;

        case 'D':
            if (sign) {
                i64 = (int64_t) va_arg(args, int32_t);
            } else {
                ui64 = (uint64_t) va_arg(args, uint32_t);
            }
            break;

        case 'L':
            if (sign) {
                i64 = va_arg(args, int64_t);
            } else {
                ui64 = va_arg(args, uint64_t);
            }
            break;

        case 'A':
            if (sign) {
                i64 = (int64_t) va_arg(args, ngx_atomic_int_t);
            } else {
                ui64 = (uint64_t) va_arg(args, ngx_atomic_uint_t);
            }
            break;

        case 'p':
            ui64 = (uintptr_t) va_arg(args, void *);
            hex = 2;
            sign = 0;
            zero = '0';
            width = 2 * sizeof(void *);
            break;

        case 'c':
            *buf++ = (u_char) (va_arg(args, int) & 0xff);
            fmt++;
            continue;

        case 'Z':
            *buf++ = '\0';
            fmt++;
            continue;

        case 'N':
            *buf++ = LF;
            fmt++;
            continue;

        case '%':
            *buf++ = '%';
            fmt++;
            continue;

        default:

            /* %f, %r, %m and the rest: the module's formats do not use them */
            ngx_http_idem_fuzz_abort("ngx_vslprintf: unknown format");
        }

        if (sign) {
            if (i64 < 0) {
                *buf++ = '-';
                ui64 = (uint64_t) -(i64 + 1) + 1;

            } else {
                ui64 = (uint64_t) i64;
            }
        }

        buf = ngx_http_idem_fuzz_number(buf, last, ui64, zero, hex, width);

        fmt++;
    }

    return buf;
}


static u_char *
ngx_http_idem_fuzz_number(u_char *buf, u_char *last, uint64_t ui64,
    u_char zero, ngx_uint_t hex, ngx_uint_t width)
{
    u_char      *p, temp[NGX_INT64_LEN + 1];
    size_t       len;

    static u_char  lower[] = "0123456789abcdef";
    static u_char  upper[] = "0123456789ABCDEF";

    p = temp + NGX_INT64_LEN;

    if (hex == 0) {
        do {
            *--p = (u_char) (ui64 % 10 + '0');
        } while (ui64 /= 10);

    } else {
        do {
            *--p = (hex == 1 ? lower : upper)[ui64 & 0xf];
        } while (ui64 >>= 4);
    }

    len = (temp + NGX_INT64_LEN) - p;

    while (len++ < width && buf < last) {
        *buf++ = zero;
    }

    len = (temp + NGX_INT64_LEN) - p;

    if (buf + len > last) {
        len = last - buf;
    }

    return ngx_cpymem(buf, p, len);
}


static u_char *
ngx_http_idem_fuzz_copy(u_char *buf, u_char *last, u_char *p, size_t len,
    ngx_uint_t hex)
{
    if (hex) {
        while (len-- && buf + 1 < last) {
            buf = ngx_hex_dump(buf, p++, 1);
        }

        return buf;
    }

    len = ngx_min((size_t) (last - buf), len);

    return ngx_cpymem(buf, p, len);
}


/* the log: every line is formatted (arguments are checked), then dropped */

void ngx_cdecl
ngx_log_error_core(ngx_uint_t level, ngx_log_t *log, ngx_err_t err,
    const char *fmt, ...)
{
    u_char   *p, errstr[NGX_MAX_ERROR_STR];
    va_list   args;

    va_start(args, fmt);
    p = ngx_vslprintf(errstr, errstr + NGX_MAX_ERROR_STR, fmt, args);
    va_end(args);

    if (getenv("IDEM_FUZZ_LOG") != NULL) {
        fprintf(stderr, "log %d: %.*s\n", (int) level,
                (int) (p - errstr), errstr);
    }
}


/*
 * An HTTP date as nginx reads it (RFC 1123, RFC 850, asctime), after
 * libc's strptime(): the value the module gets matters, not nginx's exact
 * leniency.  Years before 1970 are refused, as nginx does.
 */

time_t
ngx_parse_http_time(u_char *value, size_t len)
{
    char        buf[64], *end;
    struct tm   tm;
    ngx_uint_t  i;

    static const char  *formats[] = {
        "%a, %d %b %Y %H:%M:%S GMT",
        "%A, %d-%b-%y %H:%M:%S GMT",
        "%a %b %e %H:%M:%S %Y",
        NULL
    };

    if (len == 0 || len >= sizeof(buf) || memchr(value, '\0', len)) {
        return NGX_ERROR;
    }

    ngx_memcpy(buf, value, len);
    buf[len] = '\0';

    for (i = 0; formats[i]; i++) {
        ngx_memzero(&tm, sizeof(struct tm));

        end = strptime(buf, formats[i], &tm);

        if (end == NULL || *end != '\0') {
            continue;
        }

        if (tm.tm_year < 70 || tm.tm_year > 9999 - 1900) {
            return NGX_ERROR;
        }

        return timegm(&tm);
    }

    return NGX_ERROR;
}


/* the call id pattern: PCRE2, as nginx built with PCRE2 runs it */

ngx_int_t
ngx_regex_exec(ngx_regex_t *re, ngx_str_t *s, int *captures, ngx_uint_t size)
{
    int                rc;
    pcre2_match_data  *md;

    md = pcre2_match_data_create_from_pattern(re, NULL);
    if (md == NULL) {
        return NGX_ERROR;
    }

    rc = pcre2_match(re, s->data, s->len, 0, 0, md, NULL);

    pcre2_match_data_free(md);

    if (rc == PCRE2_ERROR_NOMATCH) {
        return NGX_REGEX_NO_MATCHED;
    }

    return rc < 0 ? rc : 0;
}


/* timers and posted events: a worker's, with nothing behind them */

void
ngx_rbtree_insert(ngx_rbtree_t *tree, ngx_rbtree_node_t *node)
{
}


void
ngx_rbtree_delete(ngx_rbtree_t *tree, ngx_rbtree_node_t *node)
{
}


/* the HTTP core: the answer is looked at, nothing is sent */

ngx_int_t
ngx_http_send_header(ngx_http_request_t *r)
{
    ngx_http_idem_fuzz_answer_t  *a;

    a = &ngx_http_idem_fuzz_answer;

    ngx_http_idem_fuzz_assert(!a->header_sent);
    ngx_http_idem_fuzz_assert(r->headers_out.status >= 100
                              && r->headers_out.status <= 999);

    a->header_sent = 1;
    a->status = r->headers_out.status;

    return NGX_OK;
}


ngx_int_t
ngx_http_output_filter(ngx_http_request_t *r, ngx_chain_t *in)
{
    u_char                       *p;
    size_t                        size;
    ngx_http_idem_fuzz_answer_t  *a;

    a = &ngx_http_idem_fuzz_answer;

    ngx_http_idem_fuzz_assert(a->header_sent);

    for ( /* void */ ; in; in = in->next) {
        ngx_http_idem_fuzz_assert(in->buf->pos <= in->buf->last);

        size = in->buf->last - in->buf->pos;

        /* every byte is read: a buffer past its memory is reported */

        p = ngx_pnalloc(r->pool, a->body.len + size);
        if (p == NULL) {
            return NGX_ERROR;
        }

        if (a->body.len) {
            ngx_memcpy(p, a->body.data, a->body.len);
        }

        if (size) {
            ngx_memcpy(p + a->body.len, in->buf->pos, size);
        }

        a->body.data = p;
        a->body.len += size;
    }

    return NGX_OK;
}


void
ngx_http_finalize_request(ngx_http_request_t *r, ngx_int_t rc)
{
    ngx_http_idem_fuzz_answer.finalized = rc;
}


void
ngx_http_run_posted_requests(ngx_connection_t *c)
{
}


ngx_int_t
ngx_http_discard_request_body(ngx_http_request_t *r)
{
    return NGX_OK;
}


void
ngx_http_core_run_phases(ngx_http_request_t *r)
{
}


/* not on any path a target takes */

ssize_t
ngx_read_file(ngx_file_t *file, u_char *buf, size_t size, off_t offset)
{
    ngx_http_idem_fuzz_unreached("ngx_read_file");
    return NGX_ERROR;
}


ngx_int_t
ngx_http_read_client_request_body(ngx_http_request_t *r,
    ngx_http_client_body_handler_pt post_handler)
{
    ngx_http_idem_fuzz_unreached("ngx_http_read_client_request_body");
    return NGX_ERROR;
}


ngx_int_t
ngx_http_complex_value(ngx_http_request_t *r, ngx_http_complex_value_t *val,
    ngx_str_t *value)
{
    ngx_http_idem_fuzz_unreached("ngx_http_complex_value");
    return NGX_ERROR;
}


ngx_int_t
ngx_http_compile_complex_value(ngx_http_compile_complex_value_t *ccv)
{
    ngx_http_idem_fuzz_unreached("ngx_http_compile_complex_value");
    return NGX_ERROR;
}


ngx_http_variable_t *
ngx_http_add_variable(ngx_conf_t *cf, ngx_str_t *name, ngx_uint_t flags)
{
    ngx_http_idem_fuzz_unreached("ngx_http_add_variable");
    return NULL;
}


void ngx_cdecl
ngx_conf_log_error(ngx_uint_t level, ngx_conf_t *cf, ngx_err_t err,
    const char *fmt, ...)
{
    ngx_http_idem_fuzz_unreached("ngx_conf_log_error");
}


char *
ngx_conf_set_flag_slot(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_fuzz_unreached("ngx_conf_set_flag_slot");
    return NGX_CONF_ERROR;
}


char *
ngx_conf_set_size_slot(ngx_conf_t *cf, ngx_command_t *cmd, void *conf)
{
    ngx_http_idem_fuzz_unreached("ngx_conf_set_size_slot");
    return NGX_CONF_ERROR;
}


ngx_int_t
ngx_parse_time(ngx_str_t *line, ngx_uint_t is_sec)
{
    ngx_http_idem_fuzz_unreached("ngx_parse_time");
    return NGX_ERROR;
}


ngx_shm_zone_t *
ngx_shared_memory_add(ngx_conf_t *cf, ngx_str_t *name, size_t size,
    void *tag)
{
    ngx_http_idem_fuzz_unreached("ngx_shared_memory_add");
    return NULL;
}


void *
ngx_slab_calloc(ngx_slab_pool_t *pool, size_t size)
{
    ngx_http_idem_fuzz_unreached("ngx_slab_calloc");
    return NULL;
}


/*
 * What nginx's reads: four decimal octets of at most 255 separated by
 * dots, nothing else; INADDR_NONE otherwise.
 */

in_addr_t
ngx_inet_addr(u_char *text, size_t len)
{
    u_char      *p;
    in_addr_t    addr;
    ngx_uint_t   octet, dots;

    addr = 0;
    octet = 0;
    dots = 0;

    for (p = text; p < text + len; p++) {

        if (*p >= '0' && *p <= '9') {
            octet = octet * 10 + (*p - '0');

            if (octet > 255) {
                return INADDR_NONE;
            }

            continue;
        }

        if (*p == '.') {
            addr = (addr << 8) + octet;
            octet = 0;
            dots++;
            continue;
        }

        return INADDR_NONE;
    }

    if (dots != 3) {
        return INADDR_NONE;
    }

    return htonl((addr << 8) + octet);
}


/* an approximation: libc's inet_pton() on a copy of the text */

ngx_int_t
ngx_inet6_addr(u_char *p, size_t len, u_char *addr)
{
    char  text[64];

    if (len == 0 || len >= sizeof(text) || memchr(p, '\0', len) != NULL) {
        return NGX_ERROR;
    }

    ngx_memcpy(text, p, len);
    text[len] = '\0';

    return inet_pton(AF_INET6, text, addr) == 1 ? NGX_OK : NGX_ERROR;
}


ngx_connection_t *
ngx_get_connection(ngx_socket_t s, ngx_log_t *log)
{
    ngx_http_idem_fuzz_unreached("ngx_get_connection");
    return NULL;
}


void
ngx_free_connection(ngx_connection_t *c)
{
    ngx_http_idem_fuzz_unreached("ngx_free_connection");
}


void
ngx_close_connection(ngx_connection_t *c)
{
    ngx_http_idem_fuzz_unreached("ngx_close_connection");
}


ngx_int_t
ngx_http_upstream_init_round_robin_peer(ngx_http_request_t *r,
    ngx_http_upstream_srv_conf_t *us)
{
    ngx_http_idem_fuzz_unreached("ngx_http_upstream_init_round_robin_peer");
    return NGX_ERROR;
}


ngx_int_t
ngx_http_upstream_get_round_robin_peer(ngx_peer_connection_t *pc,
    void *data)
{
    ngx_http_idem_fuzz_unreached("ngx_http_upstream_get_round_robin_peer");
    return NGX_ERROR;
}


ngx_int_t
ngx_event_connect_peer(ngx_peer_connection_t *pc)
{
    ngx_http_idem_fuzz_unreached("ngx_event_connect_peer");
    return NGX_ERROR;
}


#if (NGX_HAVE_FIONBIO)

int
ngx_nonblocking(ngx_socket_t s)
{
    ngx_http_idem_fuzz_unreached("ngx_nonblocking");
    return -1;
}

#endif
