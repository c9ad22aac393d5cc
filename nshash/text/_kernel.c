/* The compiled text kernel of nshash: Fingerprinter.prepare in one pass, in C.
 *
 * It computes exactly what the pure-Python path of nshash/fingerprint.py computes (the tests
 * compare both on arbitrary Unicode and on real articles), from tables the Python side builds
 * once from the same functions the pure path calls (rapidfuzz's default_process, unicodedata,
 * OpenCC's character set). Whatever the tables cannot prove is handed back to Python:
 *
 *   - a key that may need folding (NFKC, OpenCC, casefolding) goes through the very
 *     fold_keys function of the pure path, then the kernel carries on;
 *   - prepare returns None where the pure path must answer (not a str, an empty document),
 *     so errors are raised in one place only.
 *
 * Anchors and the exact fingerprint are computed by calling the configured hash function
 * (farmhash.fingerprint64 by default) on the selected substrings, so values stay bit-identical
 * to farmhash's. Built as an optional extension: without a C compiler nshash runs the pure path.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "_u64sort.h"

#define BMP 0x10000
#define KERNEL_ABI 11 /* bump with every change of Kernel's arguments or tables */

/* default_process of every BMP code point (0: dropped), and what folding a kept character
 * needs: 0 nothing, 1 full-width digit or letter (its NFKC form is c - 0xFEE0), 2 the pure
 * fold_keys. Shared by every Kernel; set once by set_tables. */
static uint32_t dp_map[BMP];
static uint8_t fold_class[BMP];
static int tables_ready = 0;

enum { FOLD_NONE = 0, FOLD_WIDE = 1, FOLD_SLOW = 2 };
#define FAST_SLOW 0xFFFFFFFFu

static const uint64_t MIX1 = 0xFF51AFD7ED558CCDULL, MIX2 = 0xC4CEB9FE1A85EC53ULL;

/* The UTF-8 form of every BMP code point, as the bytes to store (in memory order, padded)
 * with their number in the fourth byte (FORM_LEN); 0 for a surrogate (no UTF-8). Made once,
 * so that encoding the stream is a lookup and one 4-byte store a code point. */
static uint32_t utf8_form[BMP];
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define FORM_LEN(f) ((f) & 0xFF)
#else
#define FORM_LEN(f) ((f) >> 24)
#endif

static void utf8_forms_make(void)
{
    for (uint32_t c = 0; c < BMP; c++) {
        unsigned char b[4] = {0, 0, 0, 0};
        if (c < 0x80) {
            b[0] = (unsigned char)c;
            b[3] = 1;
        } else if (c < 0x800) {
            b[0] = (unsigned char)(0xC0 | (c >> 6));
            b[1] = (unsigned char)(0x80 | (c & 0x3F));
            b[3] = 2;
        } else if (c < 0xD800 || c > 0xDFFF) {
            b[0] = (unsigned char)(0xE0 | (c >> 12));
            b[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            b[2] = (unsigned char)(0x80 | (c & 0x3F));
            b[3] = 3;
        }
        memcpy(&utf8_form[c], b, sizeof b);
    }
}

typedef struct {
    PyObject_HEAD
    uint8_t brk[BMP / 8]; /* sentence ends (other than the period rule) */
    /* The optimistic pass in one lookup: what each BMP character adds to the stream (its
     * folded key character), 0 for nothing (dropped, or a sentence end), FAST_SLOW when the
     * slow pass must run. Built from the tables and brk when the Kernel is made. */
    uint32_t *fast;
    uint32_t *fast_u8; /* the UTF-8 form (utf8_form) of each character's fast entry; 0 for none */
    Py_ssize_t shingle, wide_units, narrow_units, max_sentences, sketch_size;
    /* A page whose sketch values reach long_page into its stream also offers the anchors of
     * the first 1/top_part of its stream, in turn with the whole's (fingerprint.LONG_PAGE). */
    Py_ssize_t long_page, top_part;
    uint32_t wide;
    uint64_t mask, base, base_inv, salt, no_limit;
    int shift, hash_bytes;
    /* farmhash's own Fingerprint64 (in pyfarmhash's module), when kernel.py found it and
     * checked it against farmhash.fingerprint64: keys are hashed without a Python call. */
    uint64_t (*fp64)(const char *, size_t);
    PyObject *hashfunc, *fold, *dproc, *docprint;
    PyObject *n_sentences, *n_sketch, *n_exact, *n_limit, *n_packed, *n_places;
    /* Where a docprint keeps each of those (slot_offsets, in that order), found for its
     * class at dp_version; dp_slots 0: set them by PyObject_GenericSetAttr. */
    Py_ssize_t dp_off[6];
    unsigned int dp_version;
    int dp_slots;
    /* The working memory of prepare, kept from one call to the next (see Arena); busy while
     * a call uses it (a call that Python code in fold or hashfunc makes meanwhile, on this
     * thread or another, gets its own). */
    char *scratch;
    size_t scratch_cap;
    int scratch_busy;
} Kernel;

/* prepare's arrays, taken one after another from the Kernel's scratch block (no call to an
 * allocator for most texts: a text used to make ten), or each from PyMem_Malloc where the
 * block is busy or too small; all given back at once (arena_release). */
#define ARENA_EXTRA 16
#define SCRATCH_MOST ((size_t)1 << 22) /* the most a Kernel keeps between calls: 4 MiB */
typedef struct {
    char *base;
    size_t cap, used;
    void *extra[ARENA_EXTRA];
    int nextra, owns_scratch;
} Arena;

/* An arena for a text of *n* code points: the Kernel's scratch block, grown to *want* bytes,
 * when it is free and that is not too much. */
static void arena_open(Kernel *k, Arena *a, size_t want)
{
    memset(a, 0, sizeof *a);
    if (k->scratch_busy || want > SCRATCH_MOST)
        return;
    if (k->scratch_cap < want) {
        char *more = PyMem_Realloc(k->scratch, want);
        if (!more)
            return; /* each array then on its own */
        k->scratch = more;
        k->scratch_cap = want;
    }
    k->scratch_busy = 1;
    a->owns_scratch = 1;
    a->base = k->scratch;
    a->cap = k->scratch_cap;
}

/* *bytes* of the arena (aligned for any of prepare's arrays), or NULL with MemoryError. */
static void *arena_take(Arena *a, size_t bytes)
{
    size_t at = (a->used + 15) & ~(size_t)15;
    if (a->base && at <= a->cap && bytes <= a->cap - at) {
        a->used = at + bytes;
        return a->base + at;
    }
    if (a->nextra == ARENA_EXTRA) {
        PyErr_SetString(PyExc_SystemError, "nshash.text._kernel: too many arrays for one text");
        return NULL;
    }
    void *p = PyMem_Malloc(bytes ? bytes : 1);
    if (!p)
        return PyErr_NoMemory();
    a->extra[a->nextra++] = p;
    return p;
}

static void arena_release(Kernel *k, Arena *a)
{
    for (int i = 0; i < a->nextra; i++)
        PyMem_Free(a->extra[i]);
    if (a->owns_scratch)
        k->scratch_busy = 0;
}

enum { S_SENTENCES, S_SKETCH, S_EXACT, S_LIMIT, S_PACKED, S_PLACES, S_NAMES };

static inline int is_brk(const Kernel *k, Py_UCS4 c)
{
    return c < BMP && (k->brk[c >> 3] >> (c & 7)) & 1;
}

static inline int is_closer(Py_UCS4 c)
{
    return c == '"' || c == '\'' || c == 0x201D || c == 0x2019 || c == ')' || c == ']';
}

static inline int is_han(Py_UCS4 c)
{
    return (c >= 0x3400 && c <= 0x9FFF) || (c >= 0xF900 && c <= 0xFAFF);
}

/* The period rule of fingerprint._PERIOD: a period ends a sentence before white space or the
 * end of the text (closing quotes and brackets may stand between), or right after a Chinese
 * character. */
static int period_ends(int kind, const void *data, Py_ssize_t n, Py_ssize_t i)
{
    Py_ssize_t j = i + 1;
    while (j < n && is_closer(PyUnicode_READ(kind, data, j)))
        j++;
    if (j == n || Py_UNICODE_ISSPACE(PyUnicode_READ(kind, data, j)))
        return 1;
    return i > 0 && is_han(PyUnicode_READ(kind, data, i - 1));
}

/* default_process of one code point past the BMP (rare: called once per occurrence). Returns
 * 0 when dropped, the mapped code point otherwise, (Py_UCS4)-1 on error. */
static Py_UCS4 dp_astral(Kernel *k, Py_UCS4 c)
{
    PyObject *ch = PyUnicode_FromOrdinal((int)c);
    if (!ch)
        return (Py_UCS4)-1;
    PyObject *out = PyObject_CallOneArg(k->dproc, ch);
    Py_DECREF(ch);
    if (!out)
        return (Py_UCS4)-1;
    Py_UCS4 m = 0;
    if (!PyUnicode_Check(out)) {
        PyErr_SetString(PyExc_TypeError, "default_process returned a non-str");
        m = (Py_UCS4)-1;
    } else if (PyUnicode_GET_LENGTH(out) == 1) {
        m = PyUnicode_READ_CHAR(out, 0);
        if (m == ' ')
            m = 0;
    } else if (PyUnicode_GET_LENGTH(out) > 1) {
        PyErr_SetString(PyExc_ValueError, "default_process changed a length");
        m = (Py_UCS4)-1;
    }
    Py_DECREF(out);
    return m;
}

/* Whether a kept character (default_process's output) may change under fold_keys in a way
 * the tables do not spell out: its line then goes through fold_keys itself. */
static inline int line_needs_fold(uint32_t m)
{
    return m >= BMP || fold_class[m] == FOLD_SLOW;
}

/* The key stream of *text*: its letters and digits, normalized, sentence keys joined.
 * Writes into buf (room for cap >= n code points); returns its length, -1 on error, or
 * -2 - m when the folded keys need room for m code points. With u8 (room for 4n + 4 bytes)
 * and off (n + 1), a text of one or two bytes a character that takes the optimistic pass
 * also gets the stream's UTF-8 and offsets there (as utf8_offsets makes them), and *encoded
 * is set; else the caller encodes the stream. *narrow is set when the stream is known to
 * hold no wide character (0: it may). */
static Py_ssize_t key_stream(Kernel *k, PyObject *text, uint32_t *buf, Py_ssize_t cap,
                             char *u8, Py_ssize_t *off, int *encoded, int *narrow)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), len = 0, i;
    int slow = 0;

    /* Optimistic pass: the stream itself, as long as nothing needs the slow fold (one table
     * lookup a character; a loop for each width of str). */
    const uint32_t *fast = k->fast, *fu8 = k->fast_u8;
    *encoded = 0;
    *narrow = 0;
    if (u8 && kind != PyUnicode_4BYTE_KIND) {
        /* Branch-free: every character is stored, and counts only if kept (m != 0; its form
         * then is its UTF-8, else 0 bytes); a FAST_SLOW (the only value with the top bit)
         * sends the text to the slow pass afterwards. */
        unsigned char *o = (unsigned char *)u8;
        uint32_t all = 0;
#define FUSED_PASS(T)                                                                         \
        do {                                                                                  \
            const T *d = data;                                                                \
            for (i = 0; i < n; i++) {                                                         \
                uint32_t m = fast[d[i]], f = fu8[d[i]];                                       \
                all |= m;                                                                     \
                buf[len] = m;                                                                 \
                off[len] = (Py_ssize_t)(o - (unsigned char *)u8);                             \
                memcpy(o, &f, sizeof f);                                                      \
                o += FORM_LEN(f);                                                             \
                len += m != 0;                                                                \
            }                                                                                 \
        } while (0)
        if (kind == PyUnicode_1BYTE_KIND)
            FUSED_PASS(Py_UCS1);
        else
            FUSED_PASS(Py_UCS2);
#undef FUSED_PASS
        if (!(all & 0x80000000u)) {
            off[len] = (Py_ssize_t)(o - (unsigned char *)u8);
            *encoded = 1;
            *narrow = all < k->wide; /* each character kept is at most all */
            return len;
        }
        slow = 1;
    } else if (kind == PyUnicode_1BYTE_KIND) {
        const Py_UCS1 *d = data;
        for (i = 0; i < n; i++) {
            uint32_t m = fast[d[i]];
            if (m == FAST_SLOW) {
                slow = 1;
                break;
            }
            if (m)
                buf[len++] = m;
        }
    } else if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *d = data;
        for (i = 0; i < n; i++) {
            uint32_t m = fast[d[i]];
            if (m == FAST_SLOW) {
                slow = 1;
                break;
            }
            if (m)
                buf[len++] = m;
        }
    } else {
        const Py_UCS4 *d = data;
        for (i = 0; i < n; i++) {
            Py_UCS4 c = d[i];
            if (c >= BMP) {
                Py_UCS4 m = dp_astral(k, c);
                if (m == (Py_UCS4)-1)
                    return -1;
                if (m) {
                    slow = 1;
                    break;
                }
                continue;
            }
            uint32_t m = fast[c];
            if (m == FAST_SLOW) {
                slow = 1;
                break;
            }
            if (m)
                buf[len++] = m;
        }
    }
    if (!slow)
        return len;

    /* Slow pass: the keys, one sentence a line, exactly as the pure path hands them to
     * fold_keys. Folding works line by line (no step of fold_keys, NFKC, casefolding or
     * OpenCC's phrase segmentation reaches across a line break), so only the lines that hold
     * a character the tables cannot prove go through fold_keys, in one call for all of them;
     * the other lines fold here, as the optimistic pass does. */
    uint32_t *keys = PyMem_Malloc((size_t)(n + 1) * sizeof *keys);
    if (!keys) {
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t kn = 0;
    for (i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ(kind, data, i);
        Py_UCS4 m;
        if (c >= BMP) {
            m = dp_astral(k, c);
            if (m == (Py_UCS4)-1) {
                PyMem_Free(keys);
                return -1;
            }
        } else if (is_brk(k, c)
                   || ((c == '.' || c == 0xFF0E) && period_ends(kind, data, n, i))) {
            m = '\n';
        } else {
            m = dp_map[c];
        }
        if (m)
            keys[kn++] = m;
    }
    /* The slow lines, joined by line breaks, in a second area of the same block. */
    uint32_t *slow_buf = PyMem_Malloc((size_t)(kn + 1) * sizeof *slow_buf);
    if (!slow_buf) {
        PyMem_Free(keys);
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t sn = 0, nslow = 0, fast_len = 0, a = 0;
    while (a < kn) {
        Py_ssize_t b = a;
        int needs = 0;
        for (; b < kn && keys[b] != '\n'; b++)
            if (line_needs_fold(keys[b]))
                needs = 1;
        if (needs) {
            if (nslow++)
                slow_buf[sn++] = '\n';
            memcpy(slow_buf + sn, keys + a, (size_t)(b - a) * sizeof *keys);
            sn += b - a;
        } else {
            fast_len += b - a;
        }
        a = b + 1;
    }
    PyObject *folded = NULL;
    Py_ssize_t fn = 0;
    if (nslow) {
        PyObject *text_slow = PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, slow_buf, sn);
        if (text_slow) {
            folded = PyObject_CallOneArg(k->fold, text_slow);
            Py_DECREF(text_slow);
        }
        if (folded && !PyUnicode_Check(folded)) {
            Py_CLEAR(folded);
            PyErr_SetString(PyExc_TypeError, "fold_keys returned a non-str");
        }
        if (!folded) {
            PyMem_Free(keys);
            PyMem_Free(slow_buf);
            return -1;
        }
        fn = PyUnicode_GET_LENGTH(folded);
        Py_ssize_t breaks = 0;
        int fk = PyUnicode_KIND(folded);
        const void *fd = PyUnicode_DATA(folded);
        for (i = 0; i < fn; i++)
            breaks += PyUnicode_READ(fk, fd, i) == '\n';
        if (breaks != nslow - 1) {
            Py_DECREF(folded);
            PyMem_Free(keys);
            PyMem_Free(slow_buf);
            PyErr_SetString(PyExc_ValueError, "fold_keys changed the number of lines");
            return -1;
        }
    }
    PyMem_Free(slow_buf);
    if (fast_len + fn > cap) { /* NFKC may lengthen a key: not within buf (the caller retries) */
        Py_XDECREF(folded);
        PyMem_Free(keys);
        return -2 - (fast_len + fn);
    }
    int fkind = folded ? PyUnicode_KIND(folded) : PyUnicode_1BYTE_KIND;
    const void *fdata = folded ? PyUnicode_DATA(folded) : NULL;
    Py_ssize_t f = 0;
    len = 0;
    a = 0;
    while (a < kn) {
        Py_ssize_t b = a;
        int needs = 0;
        for (; b < kn && keys[b] != '\n'; b++)
            if (line_needs_fold(keys[b]))
                needs = 1;
        if (needs) { /* the next line of fold_keys' answer */
            for (; f < fn; f++) {
                Py_UCS4 c = PyUnicode_READ(fkind, fdata, f);
                if (c == '\n')
                    break;
                buf[len++] = c;
            }
            f++;
        } else {
            for (Py_ssize_t j = a; j < b; j++) {
                uint32_t m = keys[j];
                buf[len++] = fold_class[m] == FOLD_WIDE ? m - 0xFEE0 : m;
            }
        }
        a = b + 1;
    }
    Py_XDECREF(folded);
    PyMem_Free(keys);
    return len;
}

typedef struct {
    uint64_t h;
    Py_ssize_t start, end;
} Pick;

/* Pick order: hash, then position (numpy's stable argsort of the hashes). */
static inline int pick_less(const Pick *a, const Pick *b)
{
    return a->h < b->h || (a->h == b->h && a->start < b->start);
}

/* Move the m smallest picks of p[0:n] to p[0:m], the m-th smallest last (quickselect;
 * picks are never equal: their starts differ). */
static void select_picks(Pick *p, Py_ssize_t n, Py_ssize_t m)
{
    Py_ssize_t lo = 0, hi = n - 1, want = m - 1;
    while (lo < hi) {
        Pick pivot = p[lo + (hi - lo) / 2];
        Py_ssize_t i = lo, j = hi;
        while (i <= j) {
            while (pick_less(&p[i], &pivot))
                i++;
            while (pick_less(&pivot, &p[j]))
                j--;
            if (i <= j) {
                Pick t = p[i];
                p[i++] = p[j];
                p[j--] = t;
            }
        }
        if (want <= j)
            hi = j;
        else if (want >= i)
            lo = i;
        else
            break;
    }
}

/* The *n* sampled values at *from* (hashes, spread evenly over [0, 2**bits)) sorted into
 * *to*: a counting sort into about n/2 buckets by their top bits, then an insertion sort,
 * which moves each value only within its bucket (about two a bucket). A value past the range
 * lands in a wrong bucket and the insertion sort still puts it right (slower, never wrong).
 * Fewer instructions than sort_u64 on news text's sketches (measured: a fifth fewer on
 * zh_reposts_dev's, half on en_reposts_dev's longer ones); sort_u64 below 64. */
static void sort_spread(const uint64_t *from, uint64_t *to, Py_ssize_t n, int bits)
{
    if (n < 64) {
        memcpy(to, from, (size_t)n * sizeof *to);
        sort_u64(to, n);
        return;
    }
    int b = 5; /* 2**b buckets: 32 to 1024, at most n/2 */
    while (b < 10 && ((Py_ssize_t)1 << (b + 1)) <= n / 2)
        b++;
    const int down = bits > b ? bits - b : 0;
    const uint64_t mask = ((uint64_t)1 << b) - 1;
    uint32_t start[1025];
    memset(start, 0, ((size_t)mask + 2) * sizeof *start);
    Py_ssize_t i;
    for (i = 0; i < n; i++)
        start[((from[i] >> down) & mask) + 1]++;
    for (i = 1; i <= (Py_ssize_t)mask; i++)
        start[i] += start[i - 1];
    for (i = 0; i < n; i++)
        to[start[(from[i] >> down) & mask]++] = from[i];
    for (i = 1; i < n; i++) {
        uint64_t x = to[i];
        Py_ssize_t j = i;
        for (; j > 0 && to[j - 1] > x; j--)
            to[j] = to[j - 1];
        to[j] = x;
    }
}

static void sort_picks(Pick *p, Py_ssize_t n)
{
    for (Py_ssize_t i = 1; i < n; i++) {
        Pick x = p[i];
        Py_ssize_t j = i;
        for (; j > 0 && pick_less(&x, &p[j - 1]); j--)
            p[j] = p[j - 1];
        p[j] = x;
    }
}

/* A window's hash from its rolled sum: the salt, then MurmurHash3's finalizer. */
static inline uint64_t shingle_hash(uint64_t hw, uint64_t salt)
{
    uint64_t h = hw ^ salt;
    h ^= h >> 33;
    h *= MIX1;
    h ^= h >> 33;
    h *= MIX2;
    h ^= h >> 33;
    return h;
}

/* Keep pick p among the m smallest so far, picks[0:*size) (room for 3m): every pick below
 * *thr is kept, and when 3m are, the m smallest of them stay and the m-th becomes *thr. */
static inline void keep_pick(Pick *picks, Py_ssize_t *size, Pick *thr, Pick p, Py_ssize_t m)
{
    if (pick_less(&p, thr)) {
        picks[(*size)++] = p;
        if (*size == 3 * m) {
            select_picks(picks, *size, m);
            *size = m;
            *thr = picks[m - 1];
        }
    }
}

/* The UTF-8 bytes of code points (what str.encode gives), or NULL with no error set when
 * they hold a surrogate (the caller then hashes a str, which raises as the pure path does). */
static PyObject *utf8_bytes(const uint32_t *s, Py_ssize_t n)
{
    Py_ssize_t size = 0, i;
    for (i = 0; i < n; i++) {
        uint32_t c = s[i];
        if (c >= 0xD800 && c <= 0xDFFF)
            return NULL;
        size += c < 0x80 ? 1 : c < 0x800 ? 2 : c < 0x10000 ? 3 : 4;
    }
    PyObject *b = PyBytes_FromStringAndSize(NULL, size);
    if (!b)
        return NULL;
    unsigned char *o = (unsigned char *)PyBytes_AS_STRING(b);
    for (i = 0; i < n; i++) {
        uint32_t c = s[i];
        if (c < 0x80) {
            *o++ = (unsigned char)c;
        } else if (c < 0x800) {
            *o++ = (unsigned char)(0xC0 | (c >> 6));
            *o++ = (unsigned char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            *o++ = (unsigned char)(0xE0 | (c >> 12));
            *o++ = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            *o++ = (unsigned char)(0x80 | (c & 0x3F));
        } else {
            *o++ = (unsigned char)(0xF0 | (c >> 18));
            *o++ = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
            *o++ = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            *o++ = (unsigned char)(0x80 | (c & 0x3F));
        }
    }
    return b;
}

/* The key made of code points s[0:n] as the hash function takes it: UTF-8 bytes where the
 * function hashes those (farmhash), else a str. */
static PyObject *hash_arg(Kernel *k, const uint32_t *s, Py_ssize_t n)
{
    if (k->hash_bytes) {
        PyObject *b = utf8_bytes(s, n);
        if (b || PyErr_Occurred())
            return b;
    }
    return PyUnicode_FromKindAndData(PyUnicode_4BYTE_KIND, s, n);
}

/* hashfunc(s) as an unsigned 64-bit int; sets *value. Returns -1 on error. */
static int call_hash(Kernel *k, PyObject *s, uint64_t *value, PyObject **obj)
{
    PyObject *r = PyObject_CallOneArg(k->hashfunc, s);
    if (!r)
        return -1;
    if (!PyLong_Check(r)) {
        Py_DECREF(r);
        PyErr_SetString(PyExc_TypeError, "hashfunc returned a non-int");
        return -1;
    }
    *value = PyLong_AsUnsignedLongLong(r);
    if (*value == (uint64_t)-1 && PyErr_Occurred()) {
        Py_DECREF(r);
        return -1;
    }
    *obj = r;
    return 0;
}

/* The UTF-8 bytes of the stream s[0:n] into out (room for 4n + 4 bytes: a BMP code point
 * stores 4 bytes and keeps its own), and where each code point's bytes start (off[n]: the
 * end). Returns -1 when s holds a surrogate (no UTF-8). */
static int utf8_offsets(const uint32_t *s, Py_ssize_t n, char *out, Py_ssize_t *off)
{
    unsigned char *o = (unsigned char *)out;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t c = s[i];
        off[i] = (Py_ssize_t)(o - (unsigned char *)out);
        if (c < BMP) {
            uint32_t f = utf8_form[c];
            if (!f)
                return -1;
            memcpy(o, &f, sizeof f);
            o += FORM_LEN(f);
        } else {
            *o++ = (unsigned char)(0xF0 | (c >> 18));
            *o++ = (unsigned char)(0x80 | ((c >> 12) & 0x3F));
            *o++ = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            *o++ = (unsigned char)(0x80 | (c & 0x3F));
        }
    }
    off[n] = (Py_ssize_t)(o - (unsigned char *)out);
    return 0;
}

/* The fingerprint of the key s[a:e] of the stream. With the stream's UTF-8 (u8, off), the
 * bytes are hashed in place (by farmhash's own function, or one Python call on a bytes
 * object); without (md5 hashes a str; a surrogate), as hash_arg gives it. Sets *value and,
 * when a Python call made one, *obj (a new reference; else NULL). Returns -1 on error. */
static int hash_key(Kernel *k, const uint32_t *s, const char *u8, const Py_ssize_t *off,
                    Py_ssize_t a, Py_ssize_t e, uint64_t *value, PyObject **obj)
{
    PyObject *arg;
    *obj = NULL;
    if (u8) {
        const char *p = u8 + off[a];
        size_t nb = (size_t)(off[e] - off[a]);
        if (k->fp64) {
            *value = k->fp64(p, nb);
            return 0;
        }
        arg = PyBytes_FromStringAndSize(p, (Py_ssize_t)nb);
    } else {
        arg = hash_arg(k, s + a, e - a);
    }
    if (!arg)
        return -1;
    int rc = call_hash(k, arg, value, obj);
    Py_DECREF(arg);
    return rc;
}


/* Whether k->dp_off holds where a new docprint keeps its fields now (read again if its class
 * has changed since). */
static int docprint_slots(Kernel *k)
{
    PyTypeObject *tp = (PyTypeObject *)k->docprint;
    if (k->dp_slots && slots_valid(tp, k->dp_version))
        return 1;
    PyObject *names[S_NAMES] = {k->n_sentences, k->n_sketch, k->n_exact,
                                k->n_limit,     k->n_packed, k->n_places};
    k->dp_slots = slot_offsets(tp, names, S_NAMES, k->dp_off, &k->dp_version);
    return k->dp_slots;
}

/* A new docprint with *n* of its fields set: names[i] (an S_ index) to values[i]. */
static PyObject *new_docprint(Kernel *k, const int *names, PyObject *const *values, int n)
{
    PyTypeObject *tp = (PyTypeObject *)k->docprint;
    PyObject *obj = tp->tp_alloc(tp, 0);
    if (!obj)
        return NULL;
    if (docprint_slots(k)) {
        for (int i = 0; i < n; i++)
            slot_set_new(obj, k->dp_off[names[i]], values[i]);
        return obj;
    }
    PyObject *const all[S_NAMES] = {k->n_sentences, k->n_sketch, k->n_exact,
                                    k->n_limit,     k->n_packed, k->n_places};
    for (int i = 0; i < n; i++)
        if (PyObject_GenericSetAttr(obj, all[names[i]], values[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    return obj;
}

/* The fingerprints of the shingles picks[0:size) (sorted) start, without repeats, into fps and
 * objs (an object where a Python call made one, else NULL); *count says how many so far, also
 * when it fails (-1, an exception set). */
static int pick_fingerprints(Kernel *k, const uint32_t *buf, const char *u8, const Py_ssize_t *off,
                             const Pick *picks, Py_ssize_t size, uint64_t *fps, PyObject **objs,
                             Py_ssize_t *count)
{
    for (Py_ssize_t i = 0; i < size; i++) {
        Py_ssize_t s0 = picks[i].start, slen = picks[i].end - s0, j;
        if (i > 0 && picks[i].h == picks[i - 1].h && picks[i - 1].end - picks[i - 1].start == slen
            && memcmp(buf + picks[i - 1].start, buf + s0, (size_t)slen * sizeof *buf) == 0)
            continue; /* the same shingle again: the same fingerprint */
        uint64_t v;
        PyObject *o;
        if (hash_key(k, buf, u8, off, s0, picks[i].end, &v, &o) < 0)
            return -1;
        for (j = 0; j < *count && fps[j] != v; j++)
            ;
        if (j < *count) {
            Py_XDECREF(o);
            continue;
        }
        fps[*count] = v;
        objs[(*count)++] = o;
    }
    return 0;
}

static PyObject *make_docprint(Kernel *k, PyObject *anchors, PyObject *sketch, PyObject *exact,
                               PyObject *limit, PyObject *places)
{
    static const int names[] = {S_SENTENCES, S_SKETCH, S_EXACT, S_LIMIT, S_PLACES};
    PyObject *const values[] = {anchors, sketch, exact, limit, places};
    return new_docprint(k, names, values, 5);
}

/* A DocPrint whose anchors and sketch stay packed: its _packed slot holds their count, the
 * anchors and the sketch values as native 64-bit words, and the sentences and sketch slots
 * are left empty (DocPrint.__getattr__ makes the tuples when they are first read). The
 * compiled assignment reads the words themselves: the ~80 ints a document's values would
 * be are made only where Python reads them. */
static PyObject *make_packed(Kernel *k, const uint64_t *anchors, Py_ssize_t na,
                             const uint64_t *sketch, Py_ssize_t u, PyObject *exact,
                             PyObject *limit, PyObject *places)
{
    PyObject *packed = PyBytes_FromStringAndSize(NULL, (1 + na + u) * (Py_ssize_t)sizeof(uint64_t));
    if (!packed)
        return NULL;
    char *p = PyBytes_AS_STRING(packed);
    uint64_t count = (uint64_t)na;
    memcpy(p, &count, sizeof count);
    memcpy(p + sizeof count, anchors, (size_t)na * sizeof *anchors);
    memcpy(p + (1 + na) * sizeof count, sketch, (size_t)u * sizeof *sketch);
    static const int names[] = {S_PACKED, S_EXACT, S_LIMIT, S_PLACES};
    PyObject *const values[] = {packed, exact, limit, places};
    PyObject *obj = new_docprint(k, names, values, 4);
    Py_DECREF(packed);
    return obj;
}

static PyObject *Kernel_prepare(Kernel *k, PyObject *text)
{
    if (!tables_ready) {
        PyErr_SetString(PyExc_RuntimeError, "nshash.text._kernel: set_tables was not called");
        return NULL;
    }
    if (!PyUnicode_Check(text))
        Py_RETURN_NONE;
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), cap = n + 1;
    uint32_t *buf = NULL;
    Pick *picks = NULL;
    uint64_t *svals = NULL, *fps = NULL, *kept = NULL;
    uint32_t *spos = NULL; /* where each sampled value's shingle starts, in stream order */
    int32_t *slots = NULL; /* the kept values' table (see the places below) */
    PyObject **objs = NULL;
    Py_ssize_t na = 0, j;
    Pick *tpicks = NULL;   /* a long page's top: its picks (see Kernel.long_page) */
    uint64_t *tfps = NULL; /* ... and their fingerprints */
    PyObject **tobjs = NULL;
    Py_ssize_t nt = 0, tsize = 0;
    PyObject *result = NULL, *stream = NULL, *exact = NULL, *anchors = NULL, *sketch = NULL;
    PyObject *limit = NULL, *places = NULL;
    Py_ssize_t len;
    char *u8 = NULL;      /* the stream's UTF-8, when keys are hashed as bytes */
    Py_ssize_t *off = NULL; /* where each code point's bytes start in u8 */
    int encoded = 0;        /* whether key_stream wrote them */
    int narrow = 0;         /* whether it found no wide character */
    Arena arena;

    /* What a text of n code points whose stream is no longer takes (see the arrays below),
     * with room for each array's alignment. */
    Py_ssize_t m = k->max_sentences;
    size_t per = 4 + sizeof *off + sizeof *buf + 2 * sizeof *svals + sizeof *spos;
    arena_open(k, &arena, ((size_t)n + 1) * per + 4 + (size_t)m * (3 * sizeof *picks + 64)
                              + (size_t)(4 * k->sketch_size + 16) * sizeof *slots + 16 * 12);
    if (k->hash_bytes) {
        u8 = arena_take(&arena, (size_t)n * 4 + 4);
        off = u8 ? arena_take(&arena, ((size_t)n + 1) * sizeof *off) : NULL;
        if (!u8 || !off)
            goto done;
    }
    for (;;) {
        buf = arena_take(&arena, (size_t)cap * sizeof *buf);
        if (!buf)
            goto done;
        len = key_stream(k, text, buf, cap, u8, off, &encoded, &narrow);
        if (len >= -1)
            break;
        buf = NULL; /* (given back with the arena) */
        cap = -2 - len; /* the folded keys are longer than the text: make room */
    }
    if (len < 0)
        goto done;
    if (len == 0) { /* no letters or digits: the pure path raises EmptyDocumentError */
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (k->hash_bytes && !encoded) {
        if (len > n) { /* folding lengthened the stream */
            u8 = arena_take(&arena, (size_t)len * 4 + 4);
            off = u8 ? arena_take(&arena, ((size_t)len + 1) * sizeof *off) : NULL;
            if (!u8 || !off)
                goto done;
        }
        if (utf8_offsets(buf, len, u8, off) < 0) /* a surrogate: hashed as a str, which */
            u8 = NULL;                            /* raises as the pure path does */
    }
    uint64_t exact_v;
    if (hash_key(k, buf, u8, off, 0, len, &exact_v, &exact) < 0)
        goto done;
    if (!exact && !(exact = PyLong_FromUnsignedLongLong(exact_v)))
        goto done;

    /* Shingles: a window from every start to the first end that weighs `shingle` units. */
    const Py_ssize_t width = k->shingle;
    Py_ssize_t i;
    Py_ssize_t size = 0, ns = 0;
    if (!(picks = arena_take(&arena, (size_t)m * 3 * sizeof *picks)) /* m, and 2m more */
        || !(svals = arena_take(&arena, (size_t)len * sizeof *svals))
        || !(kept = arena_take(&arena, (size_t)len * sizeof *kept))
        || !(spos = arena_take(&arena, (size_t)len * sizeof *spos))
        || !(fps = arena_take(&arena, (size_t)m * sizeof *fps))
        || !(objs = arena_take(&arena, (size_t)m * sizeof *objs)))
        goto done;
    const uint64_t B = k->base, BI = k->base_inv, salt = k->salt, mask = k->mask;
    const uint32_t wide = k->wide;
    const Py_ssize_t wu = k->wide_units, nu = k->narrow_units;
    const int shift = k->shift;
    /* The window's hash before the salt and the mix: sum of code * B**(j - i) for j in
     * [i, e), mod 2**64, rolled: a code enters at e times B**(e - i) (pw), and the one at i
     * leaves by (hw - code) * B**-1, which leaves every other power one lower. */
    uint64_t hw, pw;
    Py_ssize_t e, acc;
    /* The m smallest picks: every pick below thr is kept, and when 3m are, the m smallest of
     * them stay (select_picks) and the m-th becomes thr. Hashes are uniform, so thr starts
     * at the value 2m of the text's starts are expected to fall below (a text has at least
     * len - width + 1): most texts keep about 2m and select once, at the end. Should fewer
     * than m fall below it, the pass runs again with no bound (the answer is the same). */
    uint64_t bound = UINT64_MAX;
    if (len - width + 1 > 2 * m)
        bound = UINT64_MAX / (uint64_t)(len - width + 1) * (uint64_t)(2 * m);
    Pick thr;
    /* The run of characters of one weight that ends at e - 1 starts at run (wd: whether they
     * are wide), and goes on to stop at least (where a character of the other weight or the
     * end of the stream was seen). */
    Py_ssize_t run, stop;
    int wd;
    /* Each start's shingle: its hash mixed, sampled for the sketch, kept among the picks. */
#define SHINGLE_AT(I, E)                                                                      \
    do {                                                                                      \
        uint64_t h = shingle_hash(hw, salt);                                                  \
        if ((h & mask) == 0) {                                                                \
            spos[ns] = (uint32_t)(I);                                                         \
            svals[ns++] = h >> shift;                                                         \
        }                                                                                     \
        if (h <= thr.h)                                                                       \
            keep_pick(picks, &size, &thr, (Pick){h, (I), (E)}, m);                            \
    } while (0)
shingle_pass:
    hw = 0;
    pw = 1;
    e = acc = ns = size = 0;
    thr = (Pick){bound, PY_SSIZE_T_MAX, 0};
    run = 0;
    wd = -1;
    stop = narrow ? len : 0; /* a stream of narrow characters only: one run */
    for (i = 0;; i++) {
        while (acc < width) {
            if (e == len) /* what is left from i weighs less than a shingle: no more starts */
                goto shingled;
            uint32_t c = buf[e];
            int w = c >= wide;
            if (w != wd) {
                wd = w;
                run = e;
            }
            e++;
            acc += w ? wu : nu;
            hw += (uint64_t)c * pw;
            pw *= B;
        }
        SHINGLE_AT(i, e);
        if (run <= i) {
            /* The shingle is all of one weight: so is each next one, one character on, until
             * a character of the other weight would enter (it weighs what this one does, and
             * keeps its length L): the hash rolls without weighing anything. */
            if (stop <= e) {
                for (stop = e; stop < len && (buf[stop] >= wide) == wd; stop++)
                    ;
            }
            const Py_ssize_t L = e - i;
            if (stop - L > i) {
                const uint64_t pw1 = pw * BI; /* B**(L - 1) */
                const uint32_t *q = buf + i, *last = buf + (stop - L);
                while (q < last) {
                    hw = (hw - q[0]) * BI + (uint64_t)q[L] * pw1;
                    q++;
                    SHINGLE_AT(q - buf, q - buf + L);
                }
                i = q - buf;
                e = i + L;
            }
        }
        uint32_t c = buf[i];
        acc -= c >= wide ? wu : nu;
        hw = (hw - c) * BI;
        pw *= BI;
    }
#undef SHINGLE_AT
shingled:
    if (size < m && size < i && bound != UINT64_MAX) { /* i: the number of starts */
        bound = UINT64_MAX;
        goto shingle_pass;
    }
    if (size == 0) { /* shorter than one shingle: the whole text is the one anchor */
        anchors = PyTuple_Pack(1, exact);
        PyObject *v = PyLong_FromUnsignedLongLong(exact_v >> k->shift);
        if (!anchors || !v) {
            Py_XDECREF(v);
            goto done;
        }
        sketch = PyTuple_New(1);
        if (!sketch) {
            Py_DECREF(v);
            goto done;
        }
        PyTuple_SET_ITEM(sketch, 0, v);
        limit = PyLong_FromUnsignedLongLong(k->no_limit);
        if (limit && (places = PyBytes_FromStringAndSize(NULL, 0)))
            result = make_docprint(k, anchors, sketch, exact, limit, places);
        goto done;
    }

    /* Anchors: the fingerprints of the picked shingles, smallest hash first, no repeats. */
    if (size > m) {
        select_picks(picks, size, m);
        size = m;
    }
    sort_picks(picks, size);
    uint64_t least = picks[0].h; /* the smallest hash of all (the picks kept the smallest) */
    if (pick_fingerprints(k, buf, u8, off, picks, size, fps, objs, &na) < 0)
        goto done;

    /* The sketch: the sampled values, ascending, without repeats, cut at sketch_size. */
    sort_spread(svals, kept, ns, 64 - shift);
    Py_ssize_t u = 0;
    for (i = 0; i < ns; i++)
        if (u == 0 || kept[i] != kept[u - 1])
            kept[u++] = kept[i];
    uint64_t limit_v = k->no_limit;
    if (u > k->sketch_size) {
        limit_v = kept[k->sketch_size];
        u = k->sketch_size;
    }
    if (!(places = PyBytes_FromStringAndSize(NULL, (u ? u : 1) * (Py_ssize_t)sizeof(uint32_t))))
        goto done;
    uint32_t *pl = (uint32_t *)PyBytes_AS_STRING(places);
    if (u == 0) { /* no value sampled: the smallest hash of all stands for the text */
        kept[0] = least >> k->shift;
        pl[0] = (uint32_t)picks[0].start;
        u = 1;
    } else { /* each value's place: the start of its first shingle (stream order) */
        /* An open-addressing table of the kept values (hashes: their low bits spread them)
         * -> their index, so each sampled value finds its slot in a probe or two. */
        Py_ssize_t cap2 = 16;
        while (cap2 < 2 * u)
            cap2 <<= 1;
        if (!(slots = arena_take(&arena, (size_t)cap2 * sizeof *slots)))
            goto done;
        const uint64_t smask = (uint64_t)cap2 - 1;
        memset(slots, 0xFF, (size_t)cap2 * sizeof *slots); /* -1: empty */
        memset(pl, 0xFF, (size_t)u * sizeof *pl);          /* UINT32_MAX: not seen yet */
        for (i = 0; i < u; i++) {
            uint64_t at = kept[i] & smask;
            while (slots[at] >= 0)
                at = (at + 1) & smask;
            slots[at] = (int32_t)i;
        }
        for (i = 0; i < ns; i++) {
            uint64_t v = svals[i];
            if (v >= limit_v)
                continue;
            uint64_t at = v & smask;
            while (kept[slots[at]] != v) /* every value below the limit is kept */
                at = (at + 1) & smask;
            if (pl[slots[at]] == UINT32_MAX)
                pl[slots[at]] = spos[i];
        }
    }
    /* A long page (its values reach long_page; no place is past len): its top's anchors and
     * the whole page's, in turn, top first. Its top's are the m smallest hashes of the
     * shingles that start in its first 1/top_part (then their start), as the whole's are. */
    Py_ssize_t reach = 0;
    if (len > k->long_page)
        for (i = 0; i < u; i++)
            if (pl[i] > reach)
                reach = pl[i];
    if (reach >= k->long_page) {
        if (!(tpicks = arena_take(&arena, (size_t)m * 3 * sizeof *tpicks))
            || !(tfps = arena_take(&arena, (size_t)m * sizeof *tfps))
            || !(tobjs = arena_take(&arena, (size_t)m * sizeof *tobjs)))
            goto done;
        /* The shingles that start in the first 1/top_part, hashed again (rolled as above,
         * one start at a time: a long page's top is an eighth of it). */
        const Py_ssize_t top_end = len / k->top_part;
        Pick tthr = {UINT64_MAX, PY_SSIZE_T_MAX, 0};
        hw = 0;
        pw = 1;
        e = acc = 0;
        for (i = 0; i < top_end; i++) {
            while (acc < width && e < len) {
                uint32_t c = buf[e++];
                acc += c >= wide ? wu : nu;
                hw += (uint64_t)c * pw;
                pw *= B;
            }
            if (acc < width) /* (no shingle starts here: never in a long page's top) */
                break;
            keep_pick(tpicks, &tsize, &tthr, (Pick){shingle_hash(hw, salt), i, e}, m);
            uint32_t c = buf[i];
            acc -= c >= wide ? wu : nu;
            hw = (hw - c) * BI;
            pw *= BI;
        }
        if (tsize > m) {
            select_picks(tpicks, tsize, m);
            tsize = m;
        }
        sort_picks(tpicks, tsize);
        if (pick_fingerprints(k, buf, u8, off, tpicks, tsize, tfps, tobjs, &nt) < 0)
            goto done;
        uint64_t *mf = arena_take(&arena, (size_t)m * 2 * sizeof *mf);
        PyObject **mo = mf ? arena_take(&arena, (size_t)m * 2 * sizeof *mo) : NULL;
        if (!mo)
            goto done;
        Py_ssize_t nm = 0, a = 0, b = 0;
        while (nm < 2 * m && (a < nt || b < na)) {
            for (int side = 0; side < 2 && nm < 2 * m; side++) {
                uint64_t *from = side ? fps : tfps;
                PyObject **with = side ? objs : tobjs;
                Py_ssize_t *at = side ? &b : &a;
                if (*at >= (side ? na : nt))
                    continue;
                uint64_t v = from[*at];
                PyObject **slot = &with[(*at)++];
                for (j = 0; j < nm && mf[j] != v; j++)
                    ;
                if (j < nm)
                    continue; /* a repeat: its object is released below */
                mf[nm] = v;
                mo[nm++] = *slot; /* moved */
                *slot = NULL;
            }
        }
        for (j = 0; j < na; j++)
            Py_XDECREF(objs[j]);
        fps = mf;
        objs = mo;
        na = nm;
    }
    /* With farmhash in place no anchor is an object yet: the DocPrint keeps them packed. */
    const int packed = k->fp64 && u8;
    if (!packed) {
        anchors = PyTuple_New(na);
        if (!anchors)
            goto done;
        for (j = 0; j < na; j++) {
            if (!objs[j] && !(objs[j] = PyLong_FromUnsignedLongLong(fps[j])))
                goto done;
            PyTuple_SET_ITEM(anchors, j, Py_NewRef(objs[j]));
        }
    }
    limit = PyLong_FromUnsignedLongLong(limit_v);
    if (!limit)
        goto done;
    if (packed) {
        result = make_packed(k, fps, na, kept, u, exact, limit, places);
        goto done;
    }
    sketch = PyTuple_New(u);
    if (!sketch)
        goto done;
    for (i = 0; i < u; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(kept[i]);
        if (!v)
            goto done;
        PyTuple_SET_ITEM(sketch, i, v);
    }
    result = make_docprint(k, anchors, sketch, exact, limit, places);
done:
    for (j = 0; j < na; j++)
        Py_XDECREF(objs[j]);
    for (j = 0; j < nt; j++)
        Py_XDECREF(tobjs[j]);
    Py_XDECREF(stream);
    Py_XDECREF(exact);
    Py_XDECREF(anchors);
    Py_XDECREF(sketch);
    Py_XDECREF(limit);
    Py_XDECREF(places);
    arena_release(k, &arena);
    return result;
}

static int Kernel_init(Kernel *k, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"ends", "shingle", "wide", "wide_units", "narrow_units",
                             "max_sentences", "long_page", "top_part", "sketch_rate",
                             "sketch_size", "sketch_bits",
                             "base", "salt", "hashfunc", "fold", "default_process", "docprint",
                             "hash_bytes", "fingerprint64", NULL};
    PyObject *ends, *hashfunc, *fold, *dproc, *docprint;
    Py_ssize_t shingle, wide_units, narrow_units, max_sentences, long_page, top_part,
        sketch_rate, sketch_size, sketch_bits;
    unsigned long wide;
    unsigned long long base, salt;
    int hash_bytes = 0;
    unsigned long long fp64 = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UnknnnnnnnnKKOOOO|pK", kwlist, &ends,
                                     &shingle, &wide, &wide_units, &narrow_units,
                                     &max_sentences, &long_page, &top_part, &sketch_rate,
                                     &sketch_size, &sketch_bits, &base, &salt, &hashfunc,
                                     &fold, &dproc, &docprint, &hash_bytes, &fp64))
        return -1;
    if (shingle < 1 || wide_units < 1 || narrow_units < 1 || max_sentences < 1
        || long_page < 1 || top_part < 1
        || sketch_size < 1 || sketch_rate < 1 || (sketch_rate & (sketch_rate - 1))
        || sketch_bits < 1 || sketch_bits > 63 || !(base & 1)) {
        PyErr_SetString(PyExc_ValueError, "nshash.text._kernel: parameter out of range");
        return -1;
    }
    if (!PyType_Check(docprint)) {
        PyErr_SetString(PyExc_TypeError, "docprint must be a class");
        return -1;
    }
    memset(k->brk, 0, sizeof k->brk);
    Py_ssize_t n = PyUnicode_GET_LENGTH(ends);
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_UCS4 c = PyUnicode_READ_CHAR(ends, i);
        if (c >= BMP) {
            PyErr_SetString(PyExc_ValueError, "nshash.text._kernel: a sentence end past the BMP");
            return -1;
        }
        k->brk[c >> 3] |= (uint8_t)(1 << (c & 7));
    }
    if (!tables_ready) {
        PyErr_SetString(PyExc_RuntimeError, "nshash.text._kernel: set_tables was not called");
        return -1;
    }
    if (!k->fast_u8 && !(k->fast_u8 = PyMem_Malloc(BMP * sizeof *k->fast_u8))) {
        PyErr_NoMemory();
        return -1;
    }
    if (!k->fast && !(k->fast = PyMem_Malloc(BMP * sizeof *k->fast))) {
        PyErr_NoMemory();
        return -1;
    }
    for (uint32_t c = 0; c < BMP; c++) {
        uint32_t m = dp_map[c], v; /* a period is never kept: dropped or a sentence end */
        if (is_brk(k, c) || !m)
            v = 0;
        else if (m >= BMP || fold_class[m] == FOLD_SLOW)
            v = FAST_SLOW;
        else
            v = fold_class[m] == FOLD_WIDE ? m - 0xFEE0 : m;
        /* (a kept surrogate, which has no UTF-8: the slow pass, exact for any text) */
        if (v && v != FAST_SLOW && !utf8_form[v])
            v = FAST_SLOW;
        k->fast[c] = v;
        k->fast_u8[c] = !v || v == FAST_SLOW ? 0 : utf8_form[v];
    }
    uint64_t inv = 1; /* B**-1 mod 2**64 by Newton's iteration (B is odd) */
    for (int i = 0; i < 7; i++)
        inv *= 2 - base * inv;
    k->shingle = shingle;
    k->wide = (uint32_t)wide;
    k->wide_units = wide_units;
    k->narrow_units = narrow_units;
    k->max_sentences = max_sentences;
    k->long_page = long_page;
    k->top_part = top_part;
    k->sketch_size = sketch_size;
    k->mask = (uint64_t)sketch_rate - 1;
    k->shift = 64 - (int)sketch_bits;
    k->no_limit = 1ULL << sketch_bits;
    k->base = base;
    k->base_inv = inv;
    k->salt = salt;
    k->hash_bytes = hash_bytes;
    /* An address kernel.py took from pyfarmhash's module and checked (0: call hashfunc). */
    k->fp64 = hash_bytes && fp64 ? (uint64_t(*)(const char *, size_t))(uintptr_t)fp64 : NULL;
    Py_XSETREF(k->hashfunc, Py_NewRef(hashfunc));
    Py_XSETREF(k->fold, Py_NewRef(fold));
    Py_XSETREF(k->dproc, Py_NewRef(dproc));
    Py_XSETREF(k->docprint, Py_NewRef(docprint));
    Py_XSETREF(k->n_sentences, PyUnicode_InternFromString("sentences"));
    Py_XSETREF(k->n_sketch, PyUnicode_InternFromString("sketch"));
    Py_XSETREF(k->n_exact, PyUnicode_InternFromString("exact"));
    Py_XSETREF(k->n_limit, PyUnicode_InternFromString("limit"));
    Py_XSETREF(k->n_packed, PyUnicode_InternFromString("_packed"));
    Py_XSETREF(k->n_places, PyUnicode_InternFromString("places"));
    if (!k->n_sentences || !k->n_sketch || !k->n_exact || !k->n_limit || !k->n_packed
        || !k->n_places)
        return -1;
    k->dp_slots = 0; /* found on first use (docprint_slots) */
    return 0;
}

static int Kernel_traverse(Kernel *k, visitproc visit, void *arg)
{
    Py_VISIT(k->hashfunc);
    Py_VISIT(k->fold);
    Py_VISIT(k->dproc);
    Py_VISIT(k->docprint);
    return 0;
}

static int Kernel_clear(Kernel *k)
{
    Py_CLEAR(k->hashfunc);
    Py_CLEAR(k->fold);
    Py_CLEAR(k->dproc);
    Py_CLEAR(k->docprint);
    Py_CLEAR(k->n_sentences);
    Py_CLEAR(k->n_sketch);
    Py_CLEAR(k->n_exact);
    Py_CLEAR(k->n_limit);
    Py_CLEAR(k->n_packed);
    Py_CLEAR(k->n_places);
    return 0;
}

static void Kernel_dealloc(Kernel *k)
{
    PyObject_GC_UnTrack(k);
    Kernel_clear(k);
    PyMem_Free(k->fast);
    PyMem_Free(k->fast_u8);
    PyMem_Free(k->scratch);
    Py_TYPE(k)->tp_free((PyObject *)k);
}

static PyMethodDef Kernel_methods[] = {
    {"prepare", (PyCFunction)Kernel_prepare, METH_O,
     "prepare(text) -> DocPrint, or None where the pure path must answer."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject KernelType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nshash.text._kernel.Kernel",
    .tp_basicsize = sizeof(Kernel),
    .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_doc = "One Fingerprinter configuration, compiled.",
    .tp_new = PyType_GenericNew,
    .tp_init = (initproc)Kernel_init,
    .tp_dealloc = (destructor)Kernel_dealloc,
    .tp_traverse = (traverseproc)Kernel_traverse,
    .tp_clear = (inquiry)Kernel_clear,
    .tp_methods = Kernel_methods,
};

static PyObject *set_tables(PyObject *self, PyObject *args)
{
    Py_buffer dp, fold;
    if (!PyArg_ParseTuple(args, "y*y*", &dp, &fold))
        return NULL;
    PyObject *ret = NULL;
    if (dp.len != (Py_ssize_t)sizeof dp_map || fold.len != (Py_ssize_t)sizeof fold_class) {
        PyErr_SetString(PyExc_ValueError, "nshash.text._kernel: tables of the wrong size");
    } else {
        memcpy(dp_map, dp.buf, sizeof dp_map);
        memcpy(fold_class, fold.buf, sizeof fold_class);
        tables_ready = 1;
        ret = Py_NewRef(Py_None);
    }
    PyBuffer_Release(&dp);
    PyBuffer_Release(&fold);
    return ret;
}

/* surrogate_at(text): the index of the first lone surrogate in the str *text*, or -1 (a
 * str of one byte per character has none: nothing to scan). */
static PyObject *surrogate_at(PyObject *self, PyObject *text)
{
    if (!PyUnicode_Check(text)) {
        PyErr_SetString(PyExc_TypeError, "surrogate_at takes a str");
        return NULL;
    }
    int kind = PyUnicode_KIND(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), i;
    if (kind == PyUnicode_2BYTE_KIND) {
        const Py_UCS2 *d = PyUnicode_2BYTE_DATA(text);
        /* Four characters a step: a 16-bit lane of x is zero where a surrogate is, and the
         * classic zero-lane test says whether one is (the scalar loop then finds it). */
        for (i = 0; i + 4 <= n; i += 4) {
            uint64_t w;
            memcpy(&w, d + i, sizeof w);
            uint64_t x = (w & 0xF800F800F800F800ULL) ^ 0xD800D800D800D800ULL;
            if ((x - 0x0001000100010001ULL) & ~x & 0x8000800080008000ULL)
                break;
        }
        for (; i < n; i++)
            if ((d[i] & 0xF800) == 0xD800)
                return PyLong_FromSsize_t(i);
    } else if (kind == PyUnicode_4BYTE_KIND) {
        const Py_UCS4 *d = PyUnicode_4BYTE_DATA(text);
        for (i = 0; i < n; i++)
            if ((d[i] & 0xFFFFF800) == 0xD800)
                return PyLong_FromSsize_t(i);
    }
    return PyLong_FromLong(-1);
}

/* The DocPrint slot names narrow() reads and writes, interned once. */
static PyObject *s_sentences, *s_sketch, *s_exact, *s_limit, *s_places;

/* A Python int as a uint64: 0, or 1 when it is not an exact int in [0, 2**64) (the caller
 * then answers None), -1 on another error. */
static int exact_u64(PyObject *o, uint64_t *v)
{
    if (!PyLong_CheckExact(o))
        return 1;
    if (small_u64(o, v)) /* the unsigned conversion goes through a byte array */
        return 0;
    *v = PyLong_AsUnsignedLongLong(o);
    if (*v == (uint64_t)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    return 0;
}

/* narrow(doc, shift, no_limit): nshash.text.fingerprint.narrow on the DocPrint *doc*, in C:
 * a DocPrint (of doc's class, made without its __init__, as prepare makes one) with each
 * sketch value shifted right by *shift*, repeats dropped, and the limit likewise (kept as it
 * is when at least *no_limit*); a value that becomes the limit is dropped, and a sketch that
 * would be left empty so keeps its values with the limit moved past them. None where the
 * Python version must answer: a value that is not an int in [0, 2**64), a sketch that is not
 * a tuple, or one whose shifted values are not ascending (dict.fromkeys then keeps an order
 * a run of equal neighbours cannot show). The caller checks doc's class is DocPrint. */
static PyObject *narrow_doc(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "narrow(doc, shift, no_limit) takes 3 arguments");
        return NULL;
    }
    PyObject *doc = args[0], *result = NULL, *sketch = NULL, *limit = NULL, *values = NULL;
    PyObject *new_limit = NULL, *sentences = NULL, *exact = NULL, *places = NULL;
    PyObject *new_places = NULL;
    uint64_t no_limit, limit_v, *buf = NULL;
    uint32_t *pos = NULL;
    Py_ssize_t shift = PyLong_AsSsize_t(args[1]);
    if (shift == -1 && PyErr_Occurred())
        return NULL;
    int rc = exact_u64(args[2], &no_limit);
    if (rc || shift < 0 || shift > 63) {
        if (rc >= 0 && !PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "narrow: shift or no_limit out of range");
        return NULL;
    }
    if (!(sketch = PyObject_GetAttr(doc, s_sketch)) || !(limit = PyObject_GetAttr(doc, s_limit))
        || !(places = PyObject_GetAttr(doc, s_places)))
        goto done;
    if (!PyTuple_CheckExact(sketch) || (rc = exact_u64(limit, &limit_v)) > 0)
        goto fallback;
    if (rc < 0)
        goto done;
    int keep_limit = limit_v >= no_limit;
    Py_ssize_t n = PyTuple_GET_SIZE(sketch), u = n, i;
    if (!(buf = PyMem_Malloc(((size_t)n + 1) * sizeof *buf))) {
        PyErr_NoMemory();
        goto done;
    }
    for (i = 0; i < n; i++) {
        if ((rc = exact_u64(PyTuple_GET_ITEM(sketch, i), &buf[i])) != 0) {
            if (rc < 0)
                goto done;
            goto fallback;
        }
    }
    /* The places, when there is one for each value (else the narrow document has none). */
    if (n && PyBytes_CheckExact(places)
        && PyBytes_GET_SIZE(places) == n * (Py_ssize_t)sizeof(uint32_t)) {
        if (!(pos = PyMem_Malloc((size_t)n * sizeof *pos))) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(pos, PyBytes_AS_STRING(places), (size_t)n * sizeof *pos);
    }
    if (narrow_values(buf, pos, &u, (int)shift, &limit_v, &keep_limit))
        goto fallback;
    new_places = pos ? PyBytes_FromStringAndSize((const char *)pos, u * (Py_ssize_t)sizeof *pos)
                     : PyBytes_FromStringAndSize(NULL, 0);
    if (!new_places)
        goto done;
    if (!(values = PyTuple_New(u)))
        goto done;
    for (i = 0; i < u; i++) {
        PyObject *o = PyLong_FromUnsignedLongLong(buf[i]);
        if (!o)
            goto done;
        PyTuple_SET_ITEM(values, i, o);
    }
    new_limit = keep_limit ? Py_NewRef(limit) : PyLong_FromUnsignedLongLong(limit_v);
    if (!new_limit || !(sentences = PyObject_GetAttr(doc, s_sentences))
        || !(exact = PyObject_GetAttr(doc, s_exact)))
        goto done;
    PyTypeObject *tp = Py_TYPE(doc);
    PyObject *obj = tp->tp_alloc(tp, 0);
    if (!obj)
        goto done;
    if (PyObject_GenericSetAttr(obj, s_sentences, sentences) < 0
        || PyObject_GenericSetAttr(obj, s_sketch, values) < 0
        || PyObject_GenericSetAttr(obj, s_exact, exact) < 0
        || PyObject_GenericSetAttr(obj, s_limit, new_limit) < 0
        || PyObject_GenericSetAttr(obj, s_places, new_places) < 0) {
        Py_DECREF(obj);
        goto done;
    }
    result = obj;
    goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(buf);
    PyMem_Free(pos);
    Py_XDECREF(sketch);
    Py_XDECREF(limit);
    Py_XDECREF(places);
    Py_XDECREF(new_places);
    Py_XDECREF(values);
    Py_XDECREF(new_limit);
    Py_XDECREF(sentences);
    Py_XDECREF(exact);
    return result;
}

static PyMethodDef module_methods[] = {
    {"narrow", (PyCFunction)(void (*)(void))narrow_doc, METH_FASTCALL,
     "narrow(doc, shift, no_limit) -> the DocPrint with a narrow sketch, or None."},
    {"set_tables", set_tables, METH_VARARGS,
     "set_tables(dp_map, fold_class): the character tables (native uint32 and uint8, BMP)."},
    {"surrogate_at", surrogate_at, METH_O,
     "surrogate_at(text) -> the index of the first lone surrogate, or -1."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT, "nshash.text._kernel",
    "The compiled text path of nshash.Fingerprinter (see nshash/kernel.py).", -1,
    module_methods};

PyMODINIT_FUNC PyInit__kernel(void)
{
    if (PyType_Ready(&KernelType) < 0)
        return NULL;
    utf8_forms_make();
    if ((!s_sentences && !(s_sentences = PyUnicode_InternFromString("sentences")))
        || (!s_sketch && !(s_sketch = PyUnicode_InternFromString("sketch")))
        || (!s_exact && !(s_exact = PyUnicode_InternFromString("exact")))
        || (!s_limit && !(s_limit = PyUnicode_InternFromString("limit")))
        || (!s_places && !(s_places = PyUnicode_InternFromString("places"))))
        return NULL;
    PyObject *m = PyModule_Create(&kernel_module);
    if (!m)
        return NULL;
    /* What kernel.py checks before it uses the module: a stale build is refused. */
    if (PyModule_AddIntConstant(m, "ABI", KERNEL_ABI) < 0
        || PyModule_AddObjectRef(m, "Kernel", (PyObject *)&KernelType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
