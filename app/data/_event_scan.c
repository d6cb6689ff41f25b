/* One pass over a JSON array of Kineto trace events into columns (data layer, optional accelerator).

   The pure-Python parse (msgspec structs, then Arrow columns from them: app.data.trace_decode and
   app.data.trace_columns) makes a Python object per event field; this module reads the same fields
   straight from the bytes into flat arrays, which app.data.trace_columns.columns_from_scan turns
   into the same Arrow tables. It reads only the common case and gives up on anything else, so
   that the Python path (which knows every leniency and warning) reads that piece instead:

     - a string holding a backslash or a byte >= 0x80, where the string is a key or a kept value
       (escapes in skipped values are checked for validity, except \u, which gives up);
     - a kept field of another JSON type than the structs of trace_decode accept (a string id or
       stream; a float where an int is kept; a null ph or args; a bool), or named twice;
     - an int beyond 64 bits, a float out of range, nesting deeper than MAX_DEPTH;
     - anything that is not a valid JSON array of objects (a wrong cut, a cut file).

   scan(data) returns None in those cases, else a dict of bytes objects (see scan's docstring).
   Every field read here is one of trace_decode.KINETO_FIELDS; the parity of the two paths is
   tested on every trace of the test data and on generated and mutated events
   (tests/data/test_event_scan.py). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#define MAX_DEPTH 64
#define GIVE_UP (-1)
#define NO_MEMORY (-2)

/* ---------------------------------------------------------------- growable arrays */
/* (PyMem_Raw*: the reading runs without the GIL) */

typedef struct {
    char *data;
    Py_ssize_t len, cap; /* bytes */
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) return 0;
    Py_ssize_t cap = b->cap ? b->cap : 4096;
    while (cap < b->len + extra) cap *= 2;
    char *p = PyMem_RawRealloc(b->data, (size_t)cap);
    if (!p) return NO_MEMORY;
    b->data = p;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const void *src, Py_ssize_t n) {
    if (buf_reserve(b, n)) return NO_MEMORY;
    memcpy(b->data + b->len, src, (size_t)n);
    b->len += n;
    return 0;
}

/* ---------------------------------------------------------------- the columns */

/* Integer fields of the event and its args, in the order of INT_NAMES below. */
enum {
    I_PID, I_TID, I_ID, I_EXT, I_EXT_LC, I_CORR, I_DEVICE, I_STREAM, I_NBYTES, I_MEM_BYTES, I_TOTAL_ALLOC,
    I_TOTAL_RES, I_ADDR, I_DEVICE_TYPE, I_DEVICE_ID, I_SEQUENCE, I_FWD_TID, N_INTS
};
static const char *INT_NAMES[N_INTS] = {
    "pid", "tid", "id", "external_id", "external_id_lc", "correlation", "device", "stream", "nbytes",
    "mem_bytes", "total_allocated", "total_reserved", "addr", "device_type", "device_id", "sequence",
    "fwd_tid"};
enum { F_TS, F_DUR, N_FLOATS };
enum { S_NAME, S_CAT, S_ARG_NAME, N_STRS };
enum { R_DIMS, R_DIMS_LC, R_TYPE, N_RAWS };

typedef struct {
    const char *s;
    Py_ssize_t len;
} Span;

typedef struct {
    /* fixed-width columns, one value per event, all of capacity ``cap`` */
    uint8_t *ph;                          /* the ph string's byte when it has one, else 0 */
    int64_t *ints[N_INTS];
    uint8_t *int_ok[N_INTS];
    double *floats[N_FLOATS];
    uint8_t *float_ok[N_FLOATS];
    int32_t *strs[N_STRS];                /* codes into the interned strings, -1 for none */
    int64_t *raw_end[N_RAWS];             /* end offset of each event's raw JSON text in raw_data */
    Buf raw_data[N_RAWS];
    Py_ssize_t n, cap;
    /* interned strings: open addressing over spans of the input */
    Span *words;
    Py_ssize_t n_words, cap_words;
    int32_t *slots;
    Py_ssize_t n_slots;
} Columns;

#define GROW(ptr, cap) do { void *q_ = PyMem_RawRealloc((ptr), (size_t)(cap) * sizeof *(ptr)); \
    if (!q_) return NO_MEMORY; (ptr) = q_; } while (0)

static int columns_grow(Columns *c) {
    Py_ssize_t cap = c->cap ? c->cap * 2 : 4096;
    GROW(c->ph, cap);
    for (int i = 0; i < N_INTS; i++) { GROW(c->ints[i], cap); GROW(c->int_ok[i], cap); }
    for (int i = 0; i < N_FLOATS; i++) { GROW(c->floats[i], cap); GROW(c->float_ok[i], cap); }
    for (int i = 0; i < N_STRS; i++) GROW(c->strs[i], cap);
    for (int i = 0; i < N_RAWS; i++) GROW(c->raw_end[i], cap);
    c->cap = cap;
    return 0;
}

static void columns_free(Columns *c) {
    PyMem_RawFree(c->ph);
    for (int i = 0; i < N_INTS; i++) { PyMem_RawFree(c->ints[i]); PyMem_RawFree(c->int_ok[i]); }
    for (int i = 0; i < N_FLOATS; i++) { PyMem_RawFree(c->floats[i]); PyMem_RawFree(c->float_ok[i]); }
    for (int i = 0; i < N_STRS; i++) PyMem_RawFree(c->strs[i]);
    for (int i = 0; i < N_RAWS; i++) { PyMem_RawFree(c->raw_end[i]); PyMem_RawFree(c->raw_data[i].data); }
    PyMem_RawFree(c->words);
    PyMem_RawFree(c->slots);
}

static uint64_t hash_bytes(const char *s, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL ^ (uint64_t)n; /* FNV-1a style, a word at a time */
    Py_ssize_t i = 0;
    for (; i + 8 <= n; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 1099511628211ULL;
        h ^= h >> 29;
    }
    for (; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ULL;
    return h ^ (h >> 32);
}

static int grow_slots(Columns *c) {
    Py_ssize_t n = c->n_slots ? c->n_slots * 2 : 1024;
    int32_t *slots = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
    if (!slots) return NO_MEMORY;
    for (Py_ssize_t i = 0; i < n; i++) slots[i] = -1;
    for (Py_ssize_t w = 0; w < c->n_words; w++) {
        Py_ssize_t i = (Py_ssize_t)(hash_bytes(c->words[w].s, c->words[w].len) & (uint64_t)(n - 1));
        while (slots[i] >= 0) i = (i + 1) & (n - 1);
        slots[i] = (int32_t)w;
    }
    PyMem_RawFree(c->slots);
    c->slots = slots;
    c->n_slots = n;
    return 0;
}

/* The code of the string s[:n] (its index among the distinct strings, in order of first use). */
static int32_t intern(Columns *c, const char *s, Py_ssize_t n) {
    if ((c->n_words + 1) * 2 > c->n_slots && grow_slots(c)) return NO_MEMORY;
    Py_ssize_t mask = c->n_slots - 1;
    Py_ssize_t i = (Py_ssize_t)(hash_bytes(s, n) & (uint64_t)mask);
    while (c->slots[i] >= 0) {
        Span *w = &c->words[c->slots[i]];
        if (w->len == n && memcmp(w->s, s, (size_t)n) == 0) return c->slots[i];
        i = (i + 1) & mask;
    }
    if (c->n_words == c->cap_words) {
        Py_ssize_t cap = c->cap_words ? c->cap_words * 2 : 256;
        Span *words = PyMem_RawRealloc(c->words, (size_t)cap * sizeof(Span));
        if (!words) return NO_MEMORY;
        c->words = words;
        c->cap_words = cap;
    }
    c->words[c->n_words].s = s;
    c->words[c->n_words].len = n;
    c->slots[i] = (int32_t)c->n_words;
    return (int32_t)c->n_words++;
}

/* ---------------------------------------------------------------- the JSON reader */

typedef struct {
    const char *p, *end;
} Reader;

static inline void skip_ws(Reader *r) {
    while (r->p < r->end && (*r->p == ' ' || *r->p == '\n' || *r->p == '\r' || *r->p == '\t')) r->p++;
}

/* Bytes a string's scan stops at: the closing quote, a backslash, a control byte, a non-ASCII byte. */
static unsigned char STOP[256];

static void init_stop(void) {
    for (int ch = 0; ch < 256; ch++) STOP[ch] = ch == '"' || ch == '\\' || ch < 0x20 || ch >= 0x80;
}

/* A string at r->p (its opening quote); *s, *n: its bytes between the quotes. Plain: no escape and
   ASCII only (kept strings and keys), else escapes are checked (skipped strings). */
static int read_string(Reader *r, const char **s, Py_ssize_t *n, int plain) {
    const unsigned char *p = (const unsigned char *)r->p + 1, *end = (const unsigned char *)r->end;
    const unsigned char *start = p;
    for (;;) {
#ifdef __SSE2__
        /* 16 bytes at a time: a stop byte is '"', '\\', or below 0x20 or above 0x7f (negative as int8) */
        const __m128i quote = _mm_set1_epi8('"'), backslash = _mm_set1_epi8('\\'), space = _mm_set1_epi8(0x20);
        while (end - p >= 16) {
            __m128i v = _mm_loadu_si128((const __m128i *)p);
            __m128i stop = _mm_or_si128(_mm_or_si128(_mm_cmpeq_epi8(v, quote), _mm_cmpeq_epi8(v, backslash)),
                                        _mm_cmplt_epi8(v, space));
            int mask = _mm_movemask_epi8(stop);
            if (mask) { p += __builtin_ctz((unsigned)mask); break; }
            p += 16;
        }
#endif
        while (p < end && !STOP[*p]) p++;
        if (p >= end) return GIVE_UP;
        unsigned char ch = *p;
        if (ch == '"') {
            *s = (const char *)start;
            *n = (const char *)p - (const char *)start;
            r->p = (const char *)p + 1;
            return 0;
        }
        if (ch != '\\' || plain || p + 1 >= end) return GIVE_UP; /* control or non-ASCII (UTF-8 is the Python path's) */
        unsigned char e = p[1];
        if (!(e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' || e == 'n' || e == 'r' || e == 't'))
            return GIVE_UP; /* \u (surrogates) and invalid escapes: the Python path */
        p += 2;
    }
}

/* A JSON number at r->p: its text in *s, *n; *is_int when it has no fraction and no exponent. */
static int read_number(Reader *r, const char **s, Py_ssize_t *n, int *is_int) {
    const char *p = r->p, *end = r->end;
    const char *start = p;
    *is_int = 1;
    if (p < end && *p == '-') p++;
    if (p >= end) return GIVE_UP;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && *p >= '0' && *p <= '9') p++;
    } else {
        return GIVE_UP;
    }
    if (p < end && *p == '.') {
        *is_int = 0;
        p++;
        if (p >= end || *p < '0' || *p > '9') return GIVE_UP;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        *is_int = 0;
        p++;
        if (p < end && (*p == '+' || *p == '-')) p++;
        if (p >= end || *p < '0' || *p > '9') return GIVE_UP;
        while (p < end && *p >= '0' && *p <= '9') p++;
    }
    *s = start;
    *n = p - start;
    r->p = p;
    return 0;
}

static int skip_value(Reader *r, int depth);

static int skip_literal(Reader *r, const char *word, Py_ssize_t n) {
    if (r->end - r->p < n || memcmp(r->p, word, (size_t)n) != 0) return GIVE_UP;
    r->p += n;
    return 0;
}

static int skip_container(Reader *r, int depth, char close, int is_object) {
    if (depth > MAX_DEPTH) return GIVE_UP;
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == close) { r->p++; return 0; }
    for (;;) {
        if (is_object) {
            const char *s;
            Py_ssize_t n;
            if (r->p >= r->end || *r->p != '"' || read_string(r, &s, &n, 0)) return GIVE_UP;
            skip_ws(r);
            if (r->p >= r->end || *r->p != ':') return GIVE_UP;
            r->p++;
            skip_ws(r);
        }
        if (skip_value(r, depth + 1)) return GIVE_UP;
        skip_ws(r);
        if (r->p >= r->end) return GIVE_UP;
        if (*r->p == ',') { r->p++; skip_ws(r); continue; }
        if (*r->p == close) { r->p++; return 0; }
        return GIVE_UP;
    }
}

static int skip_value(Reader *r, int depth) {
    if (r->p >= r->end) return GIVE_UP;
    const char *s;
    Py_ssize_t n;
    int is_int;
    switch (*r->p) {
    case '{': return skip_container(r, depth, '}', 1);
    case '[': return skip_container(r, depth, ']', 0);
    case '"': return read_string(r, &s, &n, 0);
    case 't': return skip_literal(r, "true", 4);
    case 'f': return skip_literal(r, "false", 5);
    case 'n': return skip_literal(r, "null", 4);
    default: return read_number(r, &s, &n, &is_int);
    }
}

static inline int at_null(Reader *r) {
    if (r->end - r->p >= 4 && memcmp(r->p, "null", 4) == 0) { r->p += 4; return 1; }
    return 0;
}

/* An int field (int | None in trace_decode's structs): a JSON integer within int64, or null. */
static int read_int(Reader *r, int64_t *v, uint8_t *ok) {
    if (at_null(r)) { *ok = 0; *v = 0; return 0; }
    const char *s;
    Py_ssize_t n;
    int is_int;
    if (r->p >= r->end || !(*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))) return GIVE_UP;
    if (read_number(r, &s, &n, &is_int) || !is_int) return GIVE_UP;
    int neg = s[0] == '-';
    uint64_t acc = 0;
    for (Py_ssize_t i = neg; i < n; i++) {
        unsigned d = (unsigned)(s[i] - '0');
        if (acc > (UINT64_MAX - d) / 10) return GIVE_UP;
        acc = acc * 10 + d;
    }
    if (neg ? acc > (uint64_t)INT64_MAX + 1 : acc > (uint64_t)INT64_MAX) return GIVE_UP;
    *v = neg ? (int64_t)(0 - acc) : (int64_t)acc;
    *ok = 1;
    return 0;
}

/* Clinger's fast path: a decimal whose digits make an integer m <= 2^53, with at most 22 of them
   after the point and no exponent, is m / 10^k with m and 10^k exact doubles, so one correctly
   rounded division gives what strtod gives. Returns 0 when the text is not of that form (strtod
   then reads it). */
static int fast_decimal(const char *s, Py_ssize_t n, double *v) {
    static const double POW10[] = {1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11,
                                   1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22};
    Py_ssize_t i = 0;
    int neg = 0, digits = 0, frac = -1;
    uint64_t m = 0;
    if (s[0] == '-') { neg = 1; i = 1; }
    for (; i < n; i++) {
        char ch = s[i];
        if (ch == '.') { frac = 0; continue; }
        if (ch < '0' || ch > '9') return 0; /* an exponent */
        if (m || ch != '0') digits++;
        if (digits > 19) return 0;
        m = m * 10 + (uint64_t)(ch - '0');
        if (frac >= 0) frac++;
    }
    if (frac > 22 || m > (1ULL << 53)) return 0;
    double d = (double)m;
    if (frac > 0) d /= POW10[frac];
    *v = neg ? -d : d;
    return 1;
}

/* A float field (float | None): any JSON number (ints too), or null. */
static int read_float(Reader *r, double *v, uint8_t *ok) {
    if (at_null(r)) { *ok = 0; *v = 0.0; return 0; }
    const char *s;
    Py_ssize_t n;
    int is_int;
    if (r->p >= r->end || !(*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))) return GIVE_UP;
    if (read_number(r, &s, &n, &is_int)) return GIVE_UP;
    if (is_int && n > 18) return GIVE_UP; /* beyond int64: the Python path's conversion */
    if (fast_decimal(s, n, v)) { *ok = 1; return 0; }
    char tmp[64];
    if (n >= (Py_ssize_t)sizeof tmp) return GIVE_UP;
    memcpy(tmp, s, (size_t)n);
    tmp[n] = '\0';
    errno = 0;
    char *stop;
    double d = strtod(tmp, &stop);
    if (errno || stop != tmp + n) return GIVE_UP; /* out of range (or under): the Python path */
    *v = d;
    *ok = 1;
    return 0;
}

/* A string field (str | None): its code, -1 for null. */
static int read_str(Reader *r, Columns *c, int32_t *code) {
    if (at_null(r)) { *code = -1; return 0; }
    const char *s;
    Py_ssize_t n;
    if (r->p >= r->end || *r->p != '"' || read_string(r, &s, &n, 1)) return GIVE_UP;
    int32_t k = intern(c, s, n);
    if (k == NO_MEMORY) return NO_MEMORY;
    *code = k;
    return 0;
}

/* pid and tid (int | str | None): an int (ok 1), a string (ok 2, its code in *v: "Spans", "PyTorch
   Profiler" on the profiler's own events), or null (ok 0). */
static int read_id(Reader *r, Columns *c, int64_t *v, uint8_t *ok) {
    if (r->p < r->end && *r->p == '"') {
        int32_t code;
        int rc = read_str(r, c, &code);
        if (rc) return rc;
        *v = code;
        *ok = 2;
        return 0;
    }
    return read_int(r, v, ok);
}

/* ---------------------------------------------------------------- one event */

typedef struct {
    int64_t ints[N_INTS];
    uint8_t int_ok[N_INTS];
    double floats[N_FLOATS];
    uint8_t float_ok[N_FLOATS];
    int32_t strs[N_STRS];
    Span raws[N_RAWS];
    uint8_t ph;
} Event;

#define KEY(lit) (n == (Py_ssize_t)(sizeof(lit) - 1) && memcmp(s, lit, sizeof(lit) - 1) == 0)

/* Fields of args (trace_decode._Args), by JSON key: the int column, else -1. */
static int args_int(const char *s, Py_ssize_t n) {
    if (n < 4 || n > 15) return -1;
    if (KEY("External id")) return I_EXT;
    if (KEY("external id")) return I_EXT_LC;
    if (KEY("correlation")) return I_CORR;
    if (KEY("device")) return I_DEVICE;
    if (KEY("stream")) return I_STREAM;
    if (KEY("bytes")) return I_NBYTES;
    if (KEY("Bytes")) return I_MEM_BYTES;
    if (KEY("Total Allocated")) return I_TOTAL_ALLOC;
    if (KEY("Total Reserved")) return I_TOTAL_RES;
    if (KEY("Addr")) return I_ADDR;
    if (KEY("Device Type")) return I_DEVICE_TYPE;
    if (KEY("Device Id")) return I_DEVICE_ID;
    if (KEY("Sequence number")) return I_SEQUENCE;
    if (KEY("Fwd thread id")) return I_FWD_TID;
    return -1;
}

static int read_args(Reader *r, Columns *c, Event *e) {
    if (r->p >= r->end || *r->p != '{') return GIVE_UP; /* null or another type: not the struct */
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == '}') { r->p++; return 0; }
    uint32_t seen = 0;
    for (;;) {
        const char *s;
        Py_ssize_t n;
        if (r->p >= r->end || *r->p != '"' || read_string(r, &s, &n, 1)) return GIVE_UP;
        skip_ws(r);
        if (r->p >= r->end || *r->p != ':') return GIVE_UP;
        r->p++;
        skip_ws(r);
        int k = args_int(s, n), rc;
        if (k >= 0) {
            if (seen & (1u << k)) return GIVE_UP;
            seen |= 1u << k;
            rc = read_int(r, &e->ints[k], &e->int_ok[k]);
        } else if (KEY("Input Dims") || KEY("Input dims") || KEY("Input type")) {
            int j = KEY("Input Dims") ? R_DIMS : KEY("Input dims") ? R_DIMS_LC : R_TYPE;
            if (seen & (1u << (N_INTS + j))) return GIVE_UP;
            seen |= 1u << (N_INTS + j);
            const char *start = r->p;
            rc = skip_value(r, 2);
            e->raws[j].s = start;
            e->raws[j].len = r->p - start;
        } else if (KEY("name")) {
            if (seen & (1u << (N_INTS + N_RAWS))) return GIVE_UP;
            seen |= 1u << (N_INTS + N_RAWS);
            rc = read_str(r, c, &e->strs[S_ARG_NAME]);
        } else if (KEY("sort_index")) {
            if (seen & (1u << (N_INTS + N_RAWS + 1))) return GIVE_UP;
            seen |= 1u << (N_INTS + N_RAWS + 1);
            int64_t v;
            uint8_t ok;
            rc = read_int(r, &v, &ok); /* read as the struct reads it; not a column */
        } else {
            rc = skip_value(r, 2);
        }
        if (rc) return rc;
        skip_ws(r);
        if (r->p >= r->end) return GIVE_UP;
        if (*r->p == ',') { r->p++; skip_ws(r); continue; }
        if (*r->p == '}') { r->p++; return 0; }
        return GIVE_UP;
    }
}

static int read_event(Reader *r, Columns *c, Event *e) {
    memset(e, 0, sizeof *e);
    for (int i = 0; i < N_STRS; i++) e->strs[i] = -1;
    r->p++; /* '{' */
    skip_ws(r);
    if (r->p < r->end && *r->p == '}') { r->p++; return 0; }
    uint32_t seen = 0;
    for (;;) {
        const char *s;
        Py_ssize_t n;
        if (r->p >= r->end || *r->p != '"' || read_string(r, &s, &n, 1)) return GIVE_UP;
        skip_ws(r);
        if (r->p >= r->end || *r->p != ':') return GIVE_UP;
        r->p++;
        skip_ws(r);
        int bit, rc;
        if (KEY("ph")) bit = 0;
        else if (KEY("cat")) bit = 1;
        else if (KEY("name")) bit = 2;
        else if (KEY("pid")) bit = 3;
        else if (KEY("tid")) bit = 4;
        else if (KEY("ts")) bit = 5;
        else if (KEY("dur")) bit = 6;
        else if (KEY("id")) bit = 7;
        else if (KEY("args")) bit = 8;
        else bit = -1;
        if (bit >= 0) {
            if (seen & (1u << bit)) return GIVE_UP;
            seen |= 1u << bit;
        }
        switch (bit) {
        case 0: { /* ph: str (not null) */
            const char *v;
            Py_ssize_t vn;
            if (r->p >= r->end || *r->p != '"' || read_string(r, &v, &vn, 1)) return GIVE_UP;
            e->ph = vn == 1 ? (uint8_t)v[0] : 0;
            rc = 0;
            break;
        }
        case 1: rc = read_str(r, c, &e->strs[S_CAT]); break;
        case 2: rc = read_str(r, c, &e->strs[S_NAME]); break;
        case 3: rc = read_id(r, c, &e->ints[I_PID], &e->int_ok[I_PID]); break;
        case 4: rc = read_id(r, c, &e->ints[I_TID], &e->int_ok[I_TID]); break;
        case 5: rc = read_float(r, &e->floats[F_TS], &e->float_ok[F_TS]); break;
        case 6: rc = read_float(r, &e->floats[F_DUR], &e->float_ok[F_DUR]); break;
        case 7: rc = read_int(r, &e->ints[I_ID], &e->int_ok[I_ID]); break;
        case 8: rc = read_args(r, c, e); break;
        default: rc = skip_value(r, 1);
        }
        if (rc) return rc;
        skip_ws(r);
        if (r->p >= r->end) return GIVE_UP;
        if (*r->p == ',') { r->p++; skip_ws(r); continue; }
        if (*r->p == '}') { r->p++; return 0; }
        return GIVE_UP;
    }
}

static int add_event(Columns *c, const Event *e) {
    if (c->n == c->cap && columns_grow(c)) return NO_MEMORY;
    Py_ssize_t k = c->n;
    c->ph[k] = e->ph;
    for (int i = 0; i < N_INTS; i++) { c->ints[i][k] = e->ints[i]; c->int_ok[i][k] = e->int_ok[i]; }
    for (int i = 0; i < N_FLOATS; i++) { c->floats[i][k] = e->floats[i]; c->float_ok[i][k] = e->float_ok[i]; }
    for (int i = 0; i < N_STRS; i++) c->strs[i][k] = e->strs[i];
    for (int i = 0; i < N_RAWS; i++) {
        if (e->raws[i].len && buf_put(&c->raw_data[i], e->raws[i].s, e->raws[i].len)) return NO_MEMORY;
        c->raw_end[i][k] = (int64_t)c->raw_data[i].len;
    }
    c->n++;
    return 0;
}

static int read_array(Reader *r, Columns *c) {
    skip_ws(r);
    if (r->p >= r->end || *r->p != '[') return GIVE_UP;
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == ']') {
        r->p++;
    } else {
        Event e;
        for (;;) {
            if (r->p >= r->end || *r->p != '{') return GIVE_UP; /* not an object: the Python path says where */
            int rc = read_event(r, c, &e);
            if (rc) return rc;
            if (add_event(c, &e)) return NO_MEMORY;
            skip_ws(r);
            if (r->p >= r->end) return GIVE_UP;
            if (*r->p == ',') { r->p++; skip_ws(r); continue; }
            if (*r->p == ']') { r->p++; break; }
            return GIVE_UP;
        }
    }
    skip_ws(r);
    return r->p == r->end ? 0 : GIVE_UP;
}

/* ---------------------------------------------------------------- the module */

static PyObject *bytes_of(Buf *b) { return PyBytes_FromStringAndSize(b->data ? b->data : "", b->len); }

static PyObject *column(const void *data, Py_ssize_t n, Py_ssize_t width) {
    return PyBytes_FromStringAndSize(data ? (const char *)data : "", n * width);
}

static int put(PyObject *d, const char *key, PyObject *v) {
    if (!v) return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *to_dict(Columns *c) {
    static const char *STR_NAMES[N_STRS] = {"name", "cat", "arg_name"};
    static const char *RAW_NAMES[N_RAWS] = {"input_dims", "input_dims_lc", "input_type"};
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    Py_ssize_t n = c->n;
    if (put(d, "n", PyLong_FromSsize_t(n)) || put(d, "ph", column(c->ph, n, 1))) goto fail;
    for (int i = 0; i < N_INTS; i++) {
        char key[64];
        if (put(d, INT_NAMES[i], column(c->ints[i], n, 8))) goto fail;
        snprintf(key, sizeof key, "%s_ok", INT_NAMES[i]);
        if (put(d, key, column(c->int_ok[i], n, 1))) goto fail;
    }
    if (put(d, "ts", column(c->floats[F_TS], n, 8)) || put(d, "ts_ok", column(c->float_ok[F_TS], n, 1)) ||
        put(d, "dur", column(c->floats[F_DUR], n, 8)) || put(d, "dur_ok", column(c->float_ok[F_DUR], n, 1)))
        goto fail;
    for (int i = 0; i < N_STRS; i++)
        if (put(d, STR_NAMES[i], column(c->strs[i], n, 4))) goto fail;
    for (int i = 0; i < N_RAWS; i++) {
        char key[64];
        if (put(d, RAW_NAMES[i], bytes_of(&c->raw_data[i]))) goto fail;
        snprintf(key, sizeof key, "%s_end", RAW_NAMES[i]);
        if (put(d, key, column(c->raw_end[i], n, 8))) goto fail;
    }
    PyObject *words = PyList_New(c->n_words);
    if (!words) goto fail;
    for (Py_ssize_t w = 0; w < c->n_words; w++) {
        PyObject *s = PyUnicode_DecodeASCII(c->words[w].s, c->words[w].len, NULL);
        if (!s) { Py_DECREF(words); goto fail; }
        PyList_SET_ITEM(words, w, s);
    }
    if (put(d, "words", words)) goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

PyDoc_STRVAR(scan_doc,
"scan(data) -> dict | None\n\n"
"Read a JSON array of trace events (a bytes-like object) into columns, or None when it holds\n"
"anything the Python path must read (see the module's source). The dict holds, per event:\n"
"``ph`` (uint8: the ph string's byte when it has one, else 0); for each int field (``pid``,\n"
"``tid``, ``id``, ``external_id``, ... ``fwd_tid``) int64 values and a uint8 ``<field>_ok`` mask\n"
"(0 null or absent, 1 an int, 2 for pid and tid: a string, its code into ``words`` as the value);\n"
"``ts``/``dur`` float64 and masks; ``name``/``cat``/``arg_name`` int32 codes into ``words``\n"
"(-1: null or absent); ``input_dims``/``input_dims_lc``/``input_type`` the raw JSON texts joined,\n"
"with ``<field>_end`` int64 end offsets (empty: absent); and ``n``, the number of events.");

static PyObject *scan(PyObject *self, PyObject *arg) {
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Columns c;
    memset(&c, 0, sizeof c);
    Reader r = {(const char *)view.buf, (const char *)view.buf + view.len};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = read_array(&r, &c);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (rc == NO_MEMORY) {
        PyErr_NoMemory();
    } else if (rc) {
        out = Py_NewRef(Py_None);
    } else {
        out = to_dict(&c);
    }
    columns_free(&c);
    PyBuffer_Release(&view);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_O, scan_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_event_scan",
    "Kineto trace events read from JSON bytes into columns (the parse's optional accelerator).", -1, methods,
};

PyMODINIT_FUNC PyInit__event_scan(void) {
    init_stop();
    return PyModule_Create(&module);
}
