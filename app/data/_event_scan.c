/* One pass over a JSON array of Kineto trace events into columns (data layer, optional accelerator).

   The pure-Python parse (msgspec structs, then Arrow columns from them: app.data.trace_decode and
   app.data.trace_columns) makes a Python object per event field; this module reads the same fields
   straight from the bytes into flat arrays, which app.data.trace_columns.columns_from_scan turns
   into the same Arrow tables. It reads only the common case and gives up on anything else, so
   that the Python path (which knows every leniency and warning) reads that piece instead:

     - a string holding a backslash or a byte >= 0x80, where the string is a key or a kept value
       (escapes in skipped values are checked for validity, except \u, which gives up);
     - a kept field of another JSON type than the structs of trace_decode accept (a string flow id; a float where an int is kept; a null ph or args; a bool), or named twice;
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

/* ---------------------------------------------------------------- interned strings */

typedef struct {
    const char *s;
    Py_ssize_t len;
} Span;

/* Distinct byte strings (spans of the input) in order of first use: open addressing. */
typedef struct {
    Span *words;
    Py_ssize_t n_words, cap_words;
    int32_t *slots;
    Py_ssize_t n_slots;
} Interner;

static void interner_free(Interner *t) {
    PyMem_RawFree(t->words);
    PyMem_RawFree(t->slots);
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

static int grow_slots(Interner *t) {
    Py_ssize_t n = t->n_slots ? t->n_slots * 2 : 1024;
    int32_t *slots = PyMem_RawMalloc((size_t)n * sizeof(int32_t));
    if (!slots) return NO_MEMORY;
    for (Py_ssize_t i = 0; i < n; i++) slots[i] = -1;
    for (Py_ssize_t w = 0; w < t->n_words; w++) {
        Py_ssize_t i = (Py_ssize_t)(hash_bytes(t->words[w].s, t->words[w].len) & (uint64_t)(n - 1));
        while (slots[i] >= 0) i = (i + 1) & (n - 1);
        slots[i] = (int32_t)w;
    }
    PyMem_RawFree(t->slots);
    t->slots = slots;
    t->n_slots = n;
    return 0;
}

/* The code of the string s[:n]: its index among the distinct strings, in order of first use. */
static int32_t intern(Interner *t, const char *s, Py_ssize_t n) {
    if ((t->n_words + 1) * 2 > t->n_slots && grow_slots(t)) return NO_MEMORY;
    Py_ssize_t mask = t->n_slots - 1;
    Py_ssize_t i = (Py_ssize_t)(hash_bytes(s, n) & (uint64_t)mask);
    while (t->slots[i] >= 0) {
        Span *w = &t->words[t->slots[i]];
        if (w->len == n && memcmp(w->s, s, (size_t)n) == 0) return t->slots[i];
        i = (i + 1) & mask;
    }
    if (t->n_words == t->cap_words) {
        Py_ssize_t cap = t->cap_words ? t->cap_words * 2 : 256;
        Span *words = PyMem_RawRealloc(t->words, (size_t)cap * sizeof(Span));
        if (!words) return NO_MEMORY;
        t->words = words;
        t->cap_words = cap;
    }
    t->words[t->n_words].s = s;
    t->words[t->n_words].len = n;
    t->slots[i] = (int32_t)t->n_words;
    return (int32_t)t->n_words++;
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
static const char *FLOAT_NAMES[N_FLOATS] = {"ts", "dur"};
enum { S_NAME, S_CAT, S_ARG_NAME, N_STRS };
enum { R_DIMS, R_DIMS_LC, R_TYPE, N_RAWS };
/* The kinds of event, each its own table (trace_columns.columns_from_events splits them alike). */
enum { K_EVENTS, K_MEMORY, K_FLOWS, K_THREADS, N_KINDS };
static const char *KIND_NAMES[N_KINDS] = {"events", "memory", "flows", "threads"};
/* name and cat of a kind, dictionary-encoded in the kind's own order of first use (null as "") */
enum { L_NAME, L_CAT, N_LOCALS };
static const char *LOCAL_NAMES[N_LOCALS] = {"name", "cat"};
/* raw texts of complete events, dictionary-encoded: shapes ("Input Dims", else "Input dims"), types */
enum { T_SHAPES, T_TYPES, N_TEXTS };
static const char *TEXT_NAMES[N_TEXTS] = {"input_shapes", "input_types"};

typedef struct {
    Py_ssize_t n, cap;
    uint8_t *ph;                       /* the ph string's byte */
    int64_t *ints[N_INTS];
    uint8_t *int_ok[N_INTS];           /* 0 null or absent, 1 an int, 2 (pid, tid) a string: its word */
    double *floats[N_FLOATS];
    uint8_t *float_ok[N_FLOATS];
    int32_t *strs[N_STRS];             /* word codes, -1 for null */
    int32_t *local[N_LOCALS];          /* codes into this kind's own dictionary of name, of cat */
    int32_t *text[N_TEXTS];            /* codes into the texts' dictionaries (complete events) */
    /* the kind's dictionaries: word code -> local code (-1 unset), and the words in local order */
    int32_t *local_of[N_LOCALS];
    Py_ssize_t cap_local_of[N_LOCALS];
    Buf local_words[N_LOCALS];         /* int32 word codes */
} Group;

typedef struct {
    Interner words;                    /* name, cat, args.name, string pid/tid */
    Interner texts[N_TEXTS];           /* raw JSON texts of complete events */
    Group groups[N_KINDS];
    int32_t empty_word;                /* the code of "" (what null becomes in name and cat), -1 unset */
    Py_ssize_t n_events;
    int has_counters;
} Scanner;

#define GROW(ptr, cap) do { void *q_ = PyMem_RawRealloc((ptr), (size_t)(cap) * sizeof *(ptr)); \
        if (!q_) return NO_MEMORY; \
        (ptr) = q_; \
    } while (0)

static int group_grow(Group *g) {
    Py_ssize_t cap = g->cap ? g->cap * 2 : 1024;
    GROW(g->ph, cap);
    for (int i = 0; i < N_INTS; i++) { GROW(g->ints[i], cap); GROW(g->int_ok[i], cap); }
    for (int i = 0; i < N_FLOATS; i++) { GROW(g->floats[i], cap); GROW(g->float_ok[i], cap); }
    for (int i = 0; i < N_STRS; i++) GROW(g->strs[i], cap);
    for (int i = 0; i < N_LOCALS; i++) GROW(g->local[i], cap);
    for (int i = 0; i < N_TEXTS; i++) GROW(g->text[i], cap);
    g->cap = cap;
    return 0;
}

static void group_free(Group *g) {
    PyMem_RawFree(g->ph);
    for (int i = 0; i < N_INTS; i++) { PyMem_RawFree(g->ints[i]); PyMem_RawFree(g->int_ok[i]); }
    for (int i = 0; i < N_FLOATS; i++) { PyMem_RawFree(g->floats[i]); PyMem_RawFree(g->float_ok[i]); }
    for (int i = 0; i < N_STRS; i++) PyMem_RawFree(g->strs[i]);
    for (int i = 0; i < N_LOCALS; i++) {
        PyMem_RawFree(g->local[i]);
        PyMem_RawFree(g->local_of[i]);
        PyMem_RawFree(g->local_words[i].data);
    }
    for (int i = 0; i < N_TEXTS; i++) PyMem_RawFree(g->text[i]);
}

static void scanner_free(Scanner *sc) {
    interner_free(&sc->words);
    for (int i = 0; i < N_TEXTS; i++) interner_free(&sc->texts[i]);
    for (int k = 0; k < N_KINDS; k++) group_free(&sc->groups[k]);
}

/* The code of word ``w`` in the kind's dictionary of field ``f``, adding it there on first use. */
static int32_t local_code(Group *g, int f, int32_t w) {
    if (w >= g->cap_local_of[f]) {
        Py_ssize_t cap = g->cap_local_of[f] ? g->cap_local_of[f] : 256;
        while (cap <= w) cap *= 2;
        int32_t *m = PyMem_RawRealloc(g->local_of[f], (size_t)cap * sizeof(int32_t));
        if (!m) return NO_MEMORY;
        for (Py_ssize_t i = g->cap_local_of[f]; i < cap; i++) m[i] = -1;
        g->local_of[f] = m;
        g->cap_local_of[f] = cap;
    }
    if (g->local_of[f][w] < 0) {
        g->local_of[f][w] = (int32_t)(g->local_words[f].len / (Py_ssize_t)sizeof(int32_t));
        if (buf_put(&g->local_words[f], &w, sizeof w)) return NO_MEMORY;
    }
    return g->local_of[f][w];
}

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

/* Members of an object or array: after '{' or '[' (at r->p), whether it closes at once (1), else 0. */
static int open_container(Reader *r, char close) {
    r->p++;
    skip_ws(r);
    if (r->p < r->end && *r->p == close) { r->p++; return 1; }
    return 0;
}

/* `"key" :` of an object's member, and the whitespace after it; plain: see read_string. */
static int read_key(Reader *r, const char **s, Py_ssize_t *n, int plain) {
    if (r->p >= r->end || *r->p != '"' || read_string(r, s, n, plain)) return GIVE_UP;
    skip_ws(r);
    if (r->p >= r->end || *r->p != ':') return GIVE_UP;
    r->p++;
    skip_ws(r);
    return 0;
}

/* After a member's value: 1 when another member follows (',' read), 0 when ``close`` ends it. */
static int next_member(Reader *r, char close) {
    skip_ws(r);
    if (r->p >= r->end) return GIVE_UP;
    if (*r->p == ',') { r->p++; skip_ws(r); return 1; }
    if (*r->p == close) { r->p++; return 0; }
    return GIVE_UP;
}

static int skip_container(Reader *r, int depth, char close, int is_object) {
    if (depth > MAX_DEPTH) return GIVE_UP;
    if (open_container(r, close)) return 0;
    for (;;) {
        const char *s;
        Py_ssize_t n;
        if (is_object && read_key(r, &s, &n, 0)) return GIVE_UP;
        if (skip_value(r, depth + 1)) return GIVE_UP;
        int more = next_member(r, close);
        if (more <= 0) return more;
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

/* A number field's value: 1 for null, 0 for a number (its text in *s, *n), else GIVE_UP. */
static int number_or_null(Reader *r, const char **s, Py_ssize_t *n, int *is_int) {
    if (at_null(r)) return 1;
    if (r->p >= r->end || !(*r->p == '-' || (*r->p >= '0' && *r->p <= '9'))) return GIVE_UP;
    return read_number(r, s, n, is_int);
}

/* An int field (int | None in trace_decode's structs): a JSON integer within int64, or null. */
static int read_int(Reader *r, int64_t *v, uint8_t *ok) {
    const char *s;
    Py_ssize_t n;
    int is_int;
    int rc = number_or_null(r, &s, &n, &is_int);
    if (rc == 1) { *ok = 0; *v = 0; return 0; }
    if (rc || !is_int) return GIVE_UP;
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
    const char *s;
    Py_ssize_t n;
    int is_int;
    int rc = number_or_null(r, &s, &n, &is_int);
    if (rc == 1) { *ok = 0; *v = 0.0; return 0; }
    if (rc) return GIVE_UP;
    if (is_int && n > 18) return GIVE_UP; /* beyond int64: the Python path's conversion */
    if (is_int && n == 2 && s[0] == '-' && s[1] == '0') { *v = 0.0; *ok = 1; return 0; } /* int -0: msgspec reads 0, so +0.0 */
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
static int read_str(Reader *r, Scanner *sc, int32_t *code) {
    if (at_null(r)) { *code = -1; return 0; }
    const char *s;
    Py_ssize_t n;
    if (r->p >= r->end || *r->p != '"' || read_string(r, &s, &n, 1)) return GIVE_UP;
    int32_t k = intern(&sc->words, s, n);
    if (k == NO_MEMORY) return NO_MEMORY;
    *code = k;
    return 0;
}

/* pid, tid and args.stream (int | str | None): an int (ok 1), a string (ok 2, its code in *v:
   "Spans", "PyTorch Profiler" on the profiler's own events, ROCm's "0x0" streams), or null (ok 0). */
static int read_id(Reader *r, Scanner *sc, int64_t *v, uint8_t *ok) {
    if (r->p < r->end && *r->p == '"') {
        int32_t code;
        int rc = read_str(r, sc, &code);
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

static int read_args(Reader *r, Scanner *sc, Event *e) {
    if (r->p >= r->end || *r->p != '{') return GIVE_UP; /* null or another type: not the struct */
    if (open_container(r, '}')) return 0;
    uint32_t seen = 0;
    for (;;) {
        const char *s;
        Py_ssize_t n;
        if (read_key(r, &s, &n, 1)) return GIVE_UP;
        int k = args_int(s, n), rc;
        if (k >= 0) {
            if (seen & (1u << k)) return GIVE_UP;
            seen |= 1u << k;
            /* stream: int | str (ROCm writes "0x0"), read as trace_columns reads it */
            rc = k == I_STREAM ? read_id(r, sc, &e->ints[k], &e->int_ok[k]) : read_int(r, &e->ints[k], &e->int_ok[k]);
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
            rc = read_str(r, sc, &e->strs[S_ARG_NAME]);
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
        int more = next_member(r, '}');
        if (more <= 0) return more;
    }
}

static int read_event(Reader *r, Scanner *sc, Event *e) {
    memset(e, 0, sizeof *e);
    for (int i = 0; i < N_STRS; i++) e->strs[i] = -1;
    if (open_container(r, '}')) return 0;
    uint32_t seen = 0;
    for (;;) {
        const char *s;
        Py_ssize_t n;
        if (read_key(r, &s, &n, 1)) return GIVE_UP;
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
        case 1: rc = read_str(r, sc, &e->strs[S_CAT]); break;
        case 2: rc = read_str(r, sc, &e->strs[S_NAME]); break;
        case 3: rc = read_id(r, sc, &e->ints[I_PID], &e->int_ok[I_PID]); break;
        case 4: rc = read_id(r, sc, &e->ints[I_TID], &e->int_ok[I_TID]); break;
        case 5: rc = read_float(r, &e->floats[F_TS], &e->float_ok[F_TS]); break;
        case 6: rc = read_float(r, &e->floats[F_DUR], &e->float_ok[F_DUR]); break;
        case 7: rc = read_int(r, &e->ints[I_ID], &e->int_ok[I_ID]); break;
        case 8: rc = read_args(r, sc, e); break;
        default: rc = skip_value(r, 1);
        }
        if (rc) return rc;
        int more = next_member(r, '}');
        if (more <= 0) return more;
    }
}


static int is_word(Scanner *sc, int32_t w, const char *lit, Py_ssize_t n) {
    return w >= 0 && sc->words.words[w].len == n && memcmp(sc->words.words[w].s, lit, (size_t)n) == 0;
}

/* Count the event, and add it to the table of its kind (if any), as columns_from_events splits them. */
static int add_event(Scanner *sc, const Event *e) {
    int kind;
    sc->n_events++;
    switch (e->ph) {
    case 'X': kind = K_EVENTS; break;
    case 'i': case 'I': kind = is_word(sc, e->strs[S_NAME], "[memory]", 8) ? K_MEMORY : -1; break;
    case 's': case 'f': case 't': kind = K_FLOWS; break;
    case 'M': kind = K_THREADS; break;
    case 'C': sc->has_counters = 1; kind = -1; break; /* read from the bytes by trace_decode.counters_from */
    default: kind = -1;
    }
    if (kind < 0) return 0;
    Group *g = &sc->groups[kind];
    if (g->n == g->cap && group_grow(g)) return NO_MEMORY;
    Py_ssize_t k = g->n;
    g->ph[k] = e->ph;
    for (int i = 0; i < N_INTS; i++) { g->ints[i][k] = e->ints[i]; g->int_ok[i][k] = e->int_ok[i]; }
    for (int i = 0; i < N_FLOATS; i++) { g->floats[i][k] = e->floats[i]; g->float_ok[i][k] = e->float_ok[i]; }
    for (int i = 0; i < N_STRS; i++) g->strs[i][k] = e->strs[i];
    static const int LOCAL_STR[N_LOCALS] = {S_NAME, S_CAT};
    for (int f = 0; f < N_LOCALS; f++) {
        int32_t w = e->strs[LOCAL_STR[f]];
        if (w < 0) { /* null: "" (trace_columns._encode) */
            if (sc->empty_word < 0 && (sc->empty_word = intern(&sc->words, "", 0)) < 0) return NO_MEMORY;
            w = sc->empty_word;
        }
        int32_t code = local_code(g, f, w);
        if (code < 0) return NO_MEMORY;
        g->local[f][k] = code;
    }
    if (kind == K_EVENTS) { /* "Input Dims", else "Input dims" (older torch); absent: "" */
        const Span *shapes = e->raws[R_DIMS].len ? &e->raws[R_DIMS] : &e->raws[R_DIMS_LC];
        const Span *texts[N_TEXTS] = {shapes, &e->raws[R_TYPE]};
        for (int t = 0; t < N_TEXTS; t++) {
            int32_t code = intern(&sc->texts[t], texts[t]->len ? texts[t]->s : "", texts[t]->len);
            if (code < 0) return NO_MEMORY;
            g->text[t][k] = code;
        }
    }
    g->n++;
    return 0;
}

static int read_array(Reader *r, Scanner *sc) {
    skip_ws(r);
    if (r->p >= r->end || *r->p != '[') return GIVE_UP;
    if (!open_container(r, ']')) {
        Event e;
        for (;;) {
            if (r->p >= r->end || *r->p != '{') return GIVE_UP; /* not an object: the Python path says where */
            int rc = read_event(r, sc, &e);
            if (rc) return rc;
            if (add_event(sc, &e)) return NO_MEMORY;
            int more = next_member(r, ']');
            if (more < 0) return more;
            if (!more) break;
        }
    }
    skip_ws(r);
    return r->p == r->end ? 0 : GIVE_UP;
}

/* ---------------------------------------------------------------- the module */

static PyObject *column(const void *data, Py_ssize_t n, Py_ssize_t width) {
    return PyBytes_FromStringAndSize(data ? (const char *)data : "", n * width);
}

static int put(PyObject *d, const char *key, PyObject *v) {
    if (!v) return -1;
    int rc = PyDict_SetItemString(d, key, v);
    Py_DECREF(v);
    return rc;
}

static PyObject *group_dict(Group *g, int kind) {
    static const char *STR_NAMES[N_STRS] = {"name_word", "cat_word", "arg_name_word"};
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    Py_ssize_t n = g->n;
    char key[64];
    if (put(d, "n", PyLong_FromSsize_t(n)) || put(d, "ph", column(g->ph, n, 1))) goto fail;
    for (int i = 0; i < N_INTS; i++) {
        snprintf(key, sizeof key, "%s_ok", INT_NAMES[i]);
        if (put(d, INT_NAMES[i], column(g->ints[i], n, 8)) || put(d, key, column(g->int_ok[i], n, 1))) goto fail;
    }
    for (int i = 0; i < N_FLOATS; i++) {
        snprintf(key, sizeof key, "%s_ok", FLOAT_NAMES[i]);
        if (put(d, FLOAT_NAMES[i], column(g->floats[i], n, 8)) || put(d, key, column(g->float_ok[i], n, 1)))
            goto fail;
    }
    for (int i = 0; i < N_STRS; i++)
        if (put(d, STR_NAMES[i], column(g->strs[i], n, 4))) goto fail;
    for (int f = 0; f < N_LOCALS; f++) {
        snprintf(key, sizeof key, "%s_words", LOCAL_NAMES[f]);
        if (put(d, LOCAL_NAMES[f], column(g->local[f], n, 4)) ||
            put(d, key, column(g->local_words[f].data, g->local_words[f].len, 1)))
            goto fail;
    }
    if (kind == K_EVENTS)
        for (int t = 0; t < N_TEXTS; t++)
            if (put(d, TEXT_NAMES[t], column(g->text[t], n, 4))) goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

static PyObject *spans_list(Interner *t, int as_text) {
    PyObject *out = PyList_New(t->n_words);
    if (!out) return NULL;
    for (Py_ssize_t w = 0; w < t->n_words; w++) {
        PyObject *s = as_text ? PyUnicode_DecodeASCII(t->words[w].s, t->words[w].len, NULL)
                              : PyBytes_FromStringAndSize(t->words[w].s, t->words[w].len);
        if (!s) { Py_DECREF(out); return NULL; }
        PyList_SET_ITEM(out, w, s);
    }
    return out;
}

static PyObject *to_dict(Scanner *sc) {
    PyObject *d = PyDict_New();
    if (!d) return NULL;
    if (put(d, "n_events", PyLong_FromSsize_t(sc->n_events)) ||
        put(d, "has_counters", PyBool_FromLong(sc->has_counters)) || put(d, "words", spans_list(&sc->words, 1)))
        goto fail;
    for (int t = 0; t < N_TEXTS; t++) {
        char key[64];
        snprintf(key, sizeof key, "%s_texts", TEXT_NAMES[t]);
        if (put(d, key, spans_list(&sc->texts[t], 0))) goto fail;
    }
    for (int k = 0; k < N_KINDS; k++)
        if (put(d, KIND_NAMES[k], group_dict(&sc->groups[k], k))) goto fail;
    return d;
fail:
    Py_DECREF(d);
    return NULL;
}

PyDoc_STRVAR(scan_doc,
"scan(data) -> dict | None\n\n"
"Read a JSON array of trace events (a bytes-like object) into columns, or None when it holds\n"
"anything the Python path must read (see the module's source). The dict holds ``n_events``,\n"
"``has_counters``, ``words`` (the distinct strings), ``input_shapes_texts`` and ``input_types_texts``\n"
"(the distinct raw JSON texts of complete events, bytes; absent: b\"\"), and per kind of event\n"
"(``events``, ``memory``, ``flows``, ``threads``) a dict of columns as bytes, one value per event of\n"
"that kind: ``ph`` (uint8); per int field (``pid``, ``tid``, ``id``, ``external_id``, ... ``fwd_tid``)\n"
"int64 values and a uint8 ``<field>_ok`` (0 null or absent, 1 an int, 2 for pid and tid a string:\n"
"its word as the value); ``ts``/``dur`` float64 and ``_ok``; ``name_word``/``cat_word``/\n"
"``arg_name_word`` int32 word codes (-1 null); ``name``/``cat`` int32 codes into the kind's own\n"
"dictionary, in order of first use, null as \"\", whose words are ``name_words``/``cat_words``\n"
"(int32 word codes); for ``events``, ``input_shapes``/``input_types`` int32 codes into the texts.");

static PyObject *scan(PyObject *self, PyObject *arg) {
    (void)self;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) return NULL;
    Scanner sc;
    memset(&sc, 0, sizeof sc);
    sc.empty_word = -1;
    Reader r = {(const char *)view.buf, (const char *)view.buf + view.len};
    int rc;
    Py_BEGIN_ALLOW_THREADS
    rc = read_array(&r, &sc);
    Py_END_ALLOW_THREADS
    PyObject *out = NULL;
    if (rc == NO_MEMORY) {
        PyErr_NoMemory();
    } else if (rc) {
        out = Py_NewRef(Py_None);
    } else {
        out = to_dict(&sc);
    }
    scanner_free(&sc);
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
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__event_scan(void) {
    init_stop();
    return PyModule_Create(&module);
}
