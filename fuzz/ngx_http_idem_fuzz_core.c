
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


/* a conversion of ngx_vslprintf(): its flags */
typedef struct {
    u_char                    pad;          /* '0' or ' ' */
    ngx_uint_t                width;
    ngx_uint_t                hex;          /* 1: lowercase, 2: uppercase */
    size_t                    len;          /* "%*s": the length */
    unsigned                  is_signed:1;
} ngx_http_idem_fuzz_spec_t;


static const char *ngx_http_idem_fuzz_spec(const char *fmt,
    ngx_http_idem_fuzz_spec_t *sp, va_list *ap);
static u_char *ngx_http_idem_fuzz_convert(u_char *buf, u_char *last,
    int letter, ngx_http_idem_fuzz_spec_t *sp, va_list *ap);
static u_char *ngx_http_idem_fuzz_number(u_char *buf, u_char *last,
    uint64_t value, ngx_http_idem_fuzz_spec_t *sp);
static u_char *ngx_http_idem_fuzz_copy(u_char *buf, u_char *last,
    u_char *p, size_t len, ngx_uint_t hex);
static int64_t ngx_http_idem_fuzz_decimal(u_char *p, size_t n,
    uint64_t max);
static const char *ngx_http_idem_fuzz_json_escape(u_char ch, char *u);


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
    void  *block;

    block = ngx_palloc(pool, size);

    return (block == NULL) ? NULL : memset(block, 0, size);
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
    void                *data;
    ngx_pool_cleanup_t  *cln;

    data = NULL;

    if (size > 0) {
        data = ngx_palloc(p, size);
        if (data == NULL) {
            return NULL;
        }
    }

    cln = ngx_pcalloc(p, sizeof(ngx_pool_cleanup_t));
    if (cln == NULL) {
        return NULL;
    }

    /* the pool runs them newest first */

    cln->data = data;
    cln->next = p->cleanup;
    p->cleanup = cln;

    return cln;
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
    u_char     *space;
    ngx_buf_t  *b;

    space = ngx_palloc(pool, size);
    b = ngx_calloc_buf(pool);

    if (space == NULL || b == NULL) {
        return NULL;
    }

    b->start = space;
    b->end = space + size;
    b->pos = space;
    b->last = space;
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
    ngx_array_t  *array;

    array = ngx_palloc(p, sizeof(ngx_array_t));

    if (array == NULL || ngx_array_init(array, p, n, size) != NGX_OK) {
        return NULL;
    }

    return array;
}


/* as nginx: a full array moves to twice the room; the old one stays */

void *
ngx_array_push(ngx_array_t *a)
{
    void    *room;
    size_t   used;

    if (a->nelts == a->nalloc) {
        used = a->nalloc * a->size;

        room = ngx_palloc(a->pool, 2 * used);
        if (room == NULL) {
            return NULL;
        }

        a->elts = memcpy(room, a->elts, used);
        a->nalloc *= 2;
    }

    return (u_char *) a->elts + a->size * a->nelts++;
}


/* a full last part gets a new part of the same room after it */

void *
ngx_list_push(ngx_list_t *l)
{
    ngx_list_part_t  *part;

    part = l->last;

    if (part->nelts == l->nalloc) {
        part = ngx_pcalloc(l->pool, sizeof(ngx_list_part_t));
        if (part == NULL) {
            return NULL;
        }

        part->elts = ngx_palloc(l->pool, l->nalloc * l->size);
        if (part->elts == NULL) {
            return NULL;
        }

        l->last->next = part;
        l->last = part;
    }

    return (u_char *) part->elts + l->size * part->nelts++;
}


/* strings */

/*
 * ngx_atoi() and ngx_atoof(): one decimal digit or more and nothing else,
 * up to the type's largest value; anything else is NGX_ERROR.
 */

static int64_t
ngx_http_idem_fuzz_decimal(u_char *p, size_t n, uint64_t max)
{
    u_char    *end;
    uint64_t   v, d;

    if (n == 0) {
        return NGX_ERROR;
    }

    v = 0;

    for (end = p + n; p < end; p++) {
        if (*p < '0' || *p > '9') {
            return NGX_ERROR;
        }

        d = *p - '0';

        /* v * 10 + d must stay within max */

        if (v > (max - d) / 10) {
            return NGX_ERROR;
        }

        v = v * 10 + d;
    }

    return (int64_t) v;
}


ngx_int_t
ngx_atoi(u_char *line, size_t n)
{
    return (ngx_int_t) ngx_http_idem_fuzz_decimal(line, n,
                                                  NGX_MAX_INT_T_VALUE);
}


off_t
ngx_atoof(u_char *line, size_t n)
{
    return (off_t) ngx_http_idem_fuzz_decimal(line, n, NGX_MAX_OFF_T_VALUE);
}


u_char *
ngx_hex_dump(u_char *dst, u_char *src, size_t len)
{
    size_t             i;
    static const char  digit[] = "0123456789abcdef";

    for (i = 0; i < len; i++) {
        dst[2 * i] = digit[src[i] >> 4];
        dst[2 * i + 1] = digit[src[i] & 0x0f];
    }

    return dst + 2 * len;
}


/* at most n - 1 bytes, up to a NUL; then a NUL, where it points */

u_char *
ngx_cpystrn(u_char *dst, u_char *src, size_t n)
{
    size_t  i;

    if (n == 0) {
        return dst;
    }

    for (i = 0; i + 1 < n && src[i] != '\0'; i++) {
        dst[i] = src[i];
    }

    dst[i] = '\0';

    return dst + i;
}


u_char *
ngx_pstrdup(ngx_pool_t *pool, ngx_str_t *src)
{
    u_char  *copy;

    copy = ngx_pnalloc(pool, src->len);

    if (copy != NULL) {
        memcpy(copy, src->data, src->len);
    }

    return copy;
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
    u_char      *end;
    ngx_uint_t   key;

    key = 0;

    for (end = data + len; data < end; data++) {
        key = ngx_hash(key, *data);
    }

    return key;
}


/* the lowercase copy, and the hash of what was copied */

ngx_uint_t
ngx_hash_strlow(u_char *dst, u_char *src, size_t n)
{
    size_t      i;
    ngx_uint_t  key;

    key = 0;

    for (i = 0; i < n; i++) {
        dst[i] = ngx_tolower(src[i]);
        key = ngx_hash(key, dst[i]);
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
    char         u[8];
    size_t       i, n, added;
    const char  *escape;

    added = 0;

    for (i = 0; i < size; i++) {
        escape = ngx_http_idem_fuzz_json_escape(src[i], u);

        if (escape == NULL) {
            if (dst != NULL) {
                *dst++ = src[i];
            }

            continue;
        }

        n = strlen(escape);
        added += n - 1;

        if (dst != NULL) {
            dst = ngx_cpymem(dst, escape, n);
        }
    }

    return (dst == NULL) ? (uintptr_t) added : (uintptr_t) dst;
}


/* a byte's escape in a JSON string; NULL: the byte goes as it is */

static const char *
ngx_http_idem_fuzz_json_escape(u_char ch, char *u)
{
    switch (ch) {

    case '"':
        return "\\\"";

    case '\\':
        return "\\\\";

    case '\n':
        return "\\n";

    case '\r':
        return "\\r";

    case '\t':
        return "\\t";

    case '\b':
        return "\\b";

    case '\f':
        return "\\f";
    }

    if (ch >= 0x20) {
        return NULL;
    }

    snprintf(u, 8, "\\u%04x", ch);

    return u;
}


/* the printf family: the formats of nginx's ngx_vslprintf() */

u_char * ngx_cdecl
ngx_sprintf(u_char *buf, const char *fmt, ...)
{
    u_char   *end;
    va_list   ap;

    /* no bound: as nginx's, the caller has sized buf */

    va_start(ap, fmt);
    end = ngx_vslprintf(buf, (u_char *) (uintptr_t) -1, fmt, ap);
    va_end(ap);

    return end;
}


u_char * ngx_cdecl
ngx_snprintf(u_char *buf, size_t max, const char *fmt, ...)
{
    u_char   *end;
    va_list   ap;

    va_start(ap, fmt);
    end = ngx_vslprintf(buf, buf + max, fmt, ap);
    va_end(ap);

    return end;
}


u_char * ngx_cdecl
ngx_slprintf(u_char *buf, u_char *last, const char *fmt, ...)
{
    u_char   *end;
    va_list   ap;

    va_start(ap, fmt);
    end = ngx_vslprintf(buf, last, fmt, ap);
    va_end(ap);

    return end;
}


u_char *
ngx_vslprintf(u_char *buf, u_char *last, const char *fmt, va_list args)
{
    va_list                    ap;
    ngx_http_idem_fuzz_spec_t  spec;

    va_copy(ap, args);

    while (*fmt != '\0' && buf < last) {

        if (*fmt == '%') {
            fmt = ngx_http_idem_fuzz_spec(fmt + 1, &spec, &ap);
            buf = ngx_http_idem_fuzz_convert(buf, last, *fmt, &spec, &ap);

        } else {
            *buf++ = *fmt;
        }

        fmt++;
    }

    va_end(ap);

    return buf;
}


/* "%[0][width][u][x|X][*]": the flags, up to the conversion's letter */

static const char *
ngx_http_idem_fuzz_spec(const char *fmt, ngx_http_idem_fuzz_spec_t *sp,
    va_list *ap)
{
    sp->pad = (u_char) (*fmt == '0' ? '0' : ' ');
    sp->width = 0;
    sp->hex = 0;
    sp->len = (size_t) -1;
    sp->is_signed = 1;

    for ( /* void */ ; *fmt >= '0' && *fmt <= '9'; fmt++) {
        sp->width = sp->width * 10 + (*fmt - '0');
    }

    for ( ;; fmt++) {

        if (*fmt == 'u') {
            sp->is_signed = 0;

        } else if (*fmt == 'x' || *fmt == 'X') {
            sp->hex = (*fmt == 'x') ? 1 : 2;
            sp->is_signed = 0;

        } else if (*fmt == '*') {
            sp->len = va_arg(*ap, size_t);

        } else {
            return fmt;
        }
    }
}


/* an integer argument, signed unless "u" or "x" came before */
#define ngx_http_idem_fuzz_int_arg(utype, stype)                             \
    if (!sp->is_signed) {                                                    \
        return ngx_http_idem_fuzz_number(buf, last, va_arg(*ap, utype), sp); \
    }                                                                        \
    value = va_arg(*ap, stype)


/*
 * One conversion.  The loop only calls it with room for a byte at buf, so
 * a one-byte conversion needs no check.  A signed value's "-" is not part
 * of the width, as with nginx's.
 */

static u_char *
ngx_http_idem_fuzz_convert(u_char *buf, u_char *last, int letter,
    ngx_http_idem_fuzz_spec_t *sp, va_list *ap)
{
    u_char                *str;
    int64_t                value;
    ngx_str_t             *v;
    ngx_msec_t             ms;
    ngx_variable_value_t  *vv;

    switch (letter) {

    case 'V':
        v = va_arg(*ap, ngx_str_t *);
        return ngx_http_idem_fuzz_copy(buf, last, v->data, v->len, sp->hex);

    case 'v':
        vv = va_arg(*ap, ngx_variable_value_t *);
        return ngx_http_idem_fuzz_copy(buf, last, vv->data, vv->len,
                                       sp->hex);

    case 's':
        str = va_arg(*ap, u_char *);
        return ngx_http_idem_fuzz_copy(buf, last, str,
                                       sp->len == (size_t) -1
                                       ? ngx_strlen(str) : sp->len,
                                       sp->hex);

    case 'c':
        *buf++ = (u_char) va_arg(*ap, int);
        return buf;

    case 'Z':
        *buf++ = '\0';
        return buf;

    case 'N':
        *buf++ = LF;
        return buf;

    case '%':
        *buf++ = '%';
        return buf;

    case 'p':
        sp->hex = 2;
        sp->pad = '0';
        sp->width = 2 * sizeof(void *);
        return ngx_http_idem_fuzz_number(buf, last,
                                         (uintptr_t) va_arg(*ap, void *),
                                         sp);

    case 'M':
        ms = va_arg(*ap, ngx_msec_t);

        /* NGX_TIMER_INFINITE and the like print as -1 */

        if ((ngx_msec_int_t) ms == -1) {
            *buf++ = '-';
            return ngx_http_idem_fuzz_number(buf, last, 1, sp);
        }

        return ngx_http_idem_fuzz_number(buf, last, ms, sp);

    /* always signed, whatever the flags */

    case 'O':
        value = va_arg(*ap, off_t);
        break;

    case 'P':
        value = va_arg(*ap, ngx_pid_t);
        break;

    case 'T':
        value = va_arg(*ap, time_t);
        break;

    case 'z':
        ngx_http_idem_fuzz_int_arg(size_t, ssize_t);
        break;

    case 'i':
        ngx_http_idem_fuzz_int_arg(ngx_uint_t, ngx_int_t);
        break;

    case 'd':
        ngx_http_idem_fuzz_int_arg(u_int, int);
        break;

    case 'l':
        ngx_http_idem_fuzz_int_arg(u_long, long);
        break;

    case 'D':
        ngx_http_idem_fuzz_int_arg(uint32_t, int32_t);
        break;

    case 'L':
        ngx_http_idem_fuzz_int_arg(uint64_t, int64_t);
        break;

    case 'A':
        ngx_http_idem_fuzz_int_arg(ngx_atomic_uint_t, ngx_atomic_int_t);
        break;

    default:

        /* %f, %r, %m and the rest: the module's formats do not use them */
        ngx_http_idem_fuzz_abort("ngx_vslprintf: unknown format");
        return buf;
    }

    if (value >= 0) {
        return ngx_http_idem_fuzz_number(buf, last, (uint64_t) value, sp);
    }

    /* INT64_MIN has no positive int64_t: the magnitude in uint64_t */

    *buf++ = '-';

    return ngx_http_idem_fuzz_number(buf, last, 0 - (uint64_t) value, sp);
}


/* digits, after the padding that brings them to the width */

static u_char *
ngx_http_idem_fuzz_number(u_char *buf, u_char *last, uint64_t value,
    ngx_http_idem_fuzz_spec_t *sp)
{
    u_char       digits[24], *d, *end;
    ngx_uint_t   base, n;
    const char  *set;

    set = (sp->hex == 2) ? "0123456789ABCDEF" : "0123456789abcdef";
    base = sp->hex ? 16 : 10;

    end = digits + sizeof(digits);
    d = end;

    do {
        *--d = set[value % base];
        value /= base;
    } while (value != 0);

    for (n = end - d; n < sp->width && buf < last; n++) {
        *buf++ = sp->pad;
    }

    while (d < end && buf < last) {
        *buf++ = *d++;
    }

    return buf;
}


/* a string, or with "x"/"X" its bytes in hex (whole pairs only) */

static u_char *
ngx_http_idem_fuzz_copy(u_char *buf, u_char *last, u_char *p, size_t len,
    ngx_uint_t hex)
{
    size_t  i;

    for (i = 0; i < len; i++) {

        if (!hex) {
            if (buf == last) {
                break;
            }

            *buf++ = p[i];
            continue;
        }

        if (last - buf < 2) {
            break;
        }

        buf = ngx_hex_dump(buf, &p[i], 1);
    }

    return buf;
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


/* a waiting duplicate's read handlers: set, never run here */

void
ngx_http_test_reading(ngx_http_request_t *r)
{
    ngx_http_idem_fuzz_unreached("ngx_http_test_reading");
}


void
ngx_http_block_reading(ngx_http_request_t *r)
{
    ngx_http_idem_fuzz_unreached("ngx_http_block_reading");
}


/* "Wed, 02 Dec 2026 17:55:04 GMT", as ngx_http_time() writes it */

u_char *
ngx_http_time(u_char *buf, time_t t)
{
    ngx_tm_t      tm;
    static char  *wday[] = { "Sun", "Mon", "Tue", "Wed", "Thu", "Fri",
                             "Sat" };
    static char  *mon[] = { "Jan", "Feb", "Mar", "Apr", "May", "Jun",
                            "Jul", "Aug", "Sep", "Oct", "Nov", "Dec" };

    ngx_gmtime(t, &tm);

    return ngx_sprintf(buf, "%s, %02d %s %4d %02d:%02d:%02d GMT",
                       wday[tm.ngx_tm_wday], tm.ngx_tm_mday,
                       mon[tm.ngx_tm_mon - 1], tm.ngx_tm_year,
                       tm.ngx_tm_hour, tm.ngx_tm_min, tm.ngx_tm_sec);
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
 * What nginx's reads: four decimal parts of at most 255 separated by
 * dots (an empty part is 0), nothing else; INADDR_NONE otherwise.
 */

in_addr_t
ngx_inet_addr(u_char *text, size_t len)
{
    size_t      i;
    uint32_t    part[4];
    ngx_uint_t  n;

    /* parts split at the dots; an empty part reads 0, as nginx's does */

    n = 0;
    part[0] = 0;

    for (i = 0; i < len; i++) {

        if (text[i] == '.') {
            if (++n == 4) {
                return INADDR_NONE;
            }

            part[n] = 0;

        } else if (text[i] >= '0' && text[i] <= '9') {
            part[n] = part[n] * 10 + (text[i] - '0');

            if (part[n] > 255) {
                return INADDR_NONE;
            }

        } else {
            return INADDR_NONE;
        }
    }

    if (n != 3) {
        return INADDR_NONE;
    }

    return htonl(part[0] << 24 | part[1] << 16 | part[2] << 8 | part[3]);
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
