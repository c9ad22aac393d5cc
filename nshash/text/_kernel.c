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

#define BMP 0x10000
#define KERNEL_ABI 5 /* bump with every change of Kernel's arguments or tables */

/* default_process of every BMP code point (0: dropped), and what folding a kept character
 * needs: 0 nothing, 1 full-width digit or letter (its NFKC form is c - 0xFEE0), 2 the pure
 * fold_keys. Shared by every Kernel; set once by set_tables. */
static uint32_t dp_map[BMP];
static uint8_t fold_class[BMP];
static int tables_ready = 0;

enum { FOLD_NONE = 0, FOLD_WIDE = 1, FOLD_SLOW = 2 };
#define FAST_SLOW 0xFFFFFFFFu

static const uint64_t MIX1 = 0xFF51AFD7ED558CCDULL, MIX2 = 0xC4CEB9FE1A85EC53ULL;

typedef struct {
    PyObject_HEAD
    uint8_t brk[BMP / 8]; /* sentence ends (other than the period rule) */
    /* The optimistic pass in one lookup: what each BMP character adds to the stream (its
     * folded key character), 0 for nothing (dropped, or a sentence end), FAST_SLOW when the
     * slow pass must run. Built from the tables and brk when the Kernel is made. */
    uint32_t *fast;
    Py_ssize_t shingle, wide_units, max_sentences, sketch_size;
    uint32_t wide;
    uint64_t mask, base, base_inv, salt, no_limit;
    int shift, hash_bytes;
    /* farmhash's own Fingerprint64 (in pyfarmhash's module), when kernel.py found it and
     * checked it against farmhash.fingerprint64: keys are hashed without a Python call. */
    uint64_t (*fp64)(const char *, size_t);
    PyObject *hashfunc, *fold, *dproc, *docprint;
    PyObject *n_sentences, *n_sketch, *n_exact, *n_limit;
} Kernel;

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
 * -2 - m when the folded keys need room for m code points. */
static Py_ssize_t key_stream(Kernel *k, PyObject *text, uint32_t *buf, Py_ssize_t cap)
{
    int kind = PyUnicode_KIND(text);
    const void *data = PyUnicode_DATA(text);
    Py_ssize_t n = PyUnicode_GET_LENGTH(text), len = 0, i;
    int slow = 0;

    /* Optimistic pass: the stream itself, as long as nothing needs the slow fold (one table
     * lookup a character; a loop for each width of str). */
    const uint32_t *fast = k->fast;
    if (kind == PyUnicode_1BYTE_KIND) {
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

static void heap_down(Pick *heap, Py_ssize_t size, Py_ssize_t i)
{
    for (;;) {
        Py_ssize_t l = 2 * i + 1, r = l + 1, top = i;
        if (l < size && pick_less(&heap[top], &heap[l]))
            top = l;
        if (r < size && pick_less(&heap[top], &heap[r]))
            top = r;
        if (top == i)
            return;
        Pick t = heap[i];
        heap[i] = heap[top];
        heap[top] = t;
        i = top;
    }
}

static void heap_up(Pick *heap, Py_ssize_t i)
{
    while (i > 0) {
        Py_ssize_t p = (i - 1) / 2;
        if (!pick_less(&heap[p], &heap[i]))
            return;
        Pick t = heap[i];
        heap[i] = heap[p];
        heap[p] = t;
        i = p;
    }
}

/* Sort small arrays of hashes in place (a few hundred at most: quicksort, then insertion). */
static void sort_u64(uint64_t *v, Py_ssize_t n)
{
    while (n > 16) {
        uint64_t a = v[0], b = v[n / 2], c = v[n - 1];
        uint64_t pivot = a < b ? (b < c ? b : (a < c ? c : a)) : (a < c ? a : (b < c ? c : b));
        Py_ssize_t i = 0, j = n - 1;
        for (;;) {
            while (v[i] < pivot)
                i++;
            while (v[j] > pivot)
                j--;
            if (i >= j)
                break;
            uint64_t t = v[i];
            v[i++] = v[j];
            v[j--] = t;
        }
        /* recurse into the smaller part, loop on the larger */
        Py_ssize_t left = j + 1;
        if (left < n - left) {
            sort_u64(v, left);
            v += left;
            n -= left;
        } else {
            sort_u64(v + left, n - left);
            n = left;
        }
    }
    for (Py_ssize_t i = 1; i < n; i++) {
        uint64_t x = v[i];
        Py_ssize_t j = i;
        for (; j > 0 && v[j - 1] > x; j--)
            v[j] = v[j - 1];
        v[j] = x;
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

/* The UTF-8 bytes of the stream s[0:n] into out (room for 4n bytes), and where each code
 * point's bytes start (off[n]: the end). Returns -1 when s holds a surrogate (no UTF-8). */
static int utf8_offsets(const uint32_t *s, Py_ssize_t n, char *out, Py_ssize_t *off)
{
    unsigned char *o = (unsigned char *)out;
    for (Py_ssize_t i = 0; i < n; i++) {
        uint32_t c = s[i];
        off[i] = (Py_ssize_t)(o - (unsigned char *)out);
        if (c < 0x80) {
            *o++ = (unsigned char)c;
        } else if (c - 0x800u < 0xD000u) { /* U+0800..U+D7FF: three bytes (CJK, kana...) */
            o[0] = (unsigned char)(0xE0 | (c >> 12));
            o[1] = (unsigned char)(0x80 | ((c >> 6) & 0x3F));
            o[2] = (unsigned char)(0x80 | (c & 0x3F));
            o += 3;
        } else if (c < 0x800) {
            *o++ = (unsigned char)(0xC0 | (c >> 6));
            *o++ = (unsigned char)(0x80 | (c & 0x3F));
        } else if (c < 0x10000) {
            if (c >= 0xD800 && c <= 0xDFFF)
                return -1;
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


static PyObject *make_docprint(Kernel *k, PyObject *anchors, PyObject *sketch, PyObject *exact,
                               PyObject *limit)
{
    PyTypeObject *tp = (PyTypeObject *)k->docprint;
    PyObject *obj = tp->tp_alloc(tp, 0);
    if (!obj)
        return NULL;
    if (PyObject_GenericSetAttr(obj, k->n_sentences, anchors) < 0
        || PyObject_GenericSetAttr(obj, k->n_sketch, sketch) < 0
        || PyObject_GenericSetAttr(obj, k->n_exact, exact) < 0
        || PyObject_GenericSetAttr(obj, k->n_limit, limit) < 0) {
        Py_DECREF(obj);
        return NULL;
    }
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
    Pick *heap = NULL;
    uint64_t *svals = NULL, *fps = NULL;
    PyObject **objs = NULL;
    Py_ssize_t na = 0, j;
    PyObject *result = NULL, *stream = NULL, *exact = NULL, *anchors = NULL, *sketch = NULL;
    PyObject *limit = NULL;
    Py_ssize_t len;
    char *u8 = NULL;      /* the stream's UTF-8, when keys are hashed as bytes */
    Py_ssize_t *off = NULL; /* where each code point's bytes start in u8 */

    for (;;) {
        buf = PyMem_Malloc((size_t)cap * sizeof *buf);
        if (!buf)
            return PyErr_NoMemory();
        len = key_stream(k, text, buf, cap);
        if (len >= -1)
            break;
        PyMem_Free(buf);
        cap = -2 - len; /* the folded keys are longer than the text: make room */
    }
    if (len < 0)
        goto done;
    if (len == 0) { /* no letters or digits: the pure path raises EmptyDocumentError */
        result = Py_NewRef(Py_None);
        goto done;
    }
    if (k->hash_bytes) {
        u8 = PyMem_Malloc((size_t)len * 4 + 1);
        off = PyMem_Malloc(((size_t)len + 1) * sizeof *off);
        if (!u8 || !off) {
            PyErr_NoMemory();
            goto done;
        }
        if (utf8_offsets(buf, len, u8, off) < 0) { /* a surrogate: hashed as a str, which */
            PyMem_Free(u8);                          /* raises as the pure path does */
            u8 = NULL;
        }
    }
    uint64_t exact_v;
    if (hash_key(k, buf, u8, off, 0, len, &exact_v, &exact) < 0)
        goto done;
    if (!exact && !(exact = PyLong_FromUnsignedLongLong(exact_v)))
        goto done;

    /* Shingles: a window from every start to the first end that weighs `shingle` units. */
    const Py_ssize_t width = k->shingle;
    Py_ssize_t i;
    Py_ssize_t m = k->max_sentences, size = 0, ns = 0;
    heap = PyMem_Malloc((size_t)m * sizeof *heap);
    svals = PyMem_Malloc((size_t)len * sizeof *svals);
    fps = PyMem_Malloc((size_t)m * sizeof *fps);
    objs = PyMem_Malloc((size_t)m * sizeof *objs);
    if (!heap || !svals || !fps || !objs) {
        PyErr_NoMemory();
        goto done;
    }
    const uint64_t B = k->base, BI = k->base_inv, salt = k->salt, mask = k->mask;
    const uint32_t wide = k->wide;
    const Py_ssize_t wu = k->wide_units;
    const int shift = k->shift;
    uint64_t pe = 0, pw_e = 1; /* prefix sum of code * B**j below e, and B**e */
    uint64_t pi = 0, pw_i = 1, inv_i = 1; /* the same below i, and B**-i */
    Py_ssize_t e = 0, acc = 0;
    for (i = 0;; i++) {
        while (acc < width && e < len) {
            acc += buf[e] >= wide ? wu : 1;
            pe += (uint64_t)buf[e] * pw_e;
            pw_e *= B;
            e++;
        }
        if (acc < width) /* what is left from i weighs less than a shingle: no more starts */
            break;
        uint64_t h = ((pe - pi) * inv_i) ^ salt;
        h ^= h >> 33;
        h *= MIX1;
        h ^= h >> 33;
        h *= MIX2;
        h ^= h >> 33;
        if ((h & mask) == 0)
            svals[ns++] = h >> shift;
        Pick p = {h, i, e};
        if (size < m) {
            heap[size] = p;
            heap_up(heap, size++);
        } else if (h <= heap[0].h && pick_less(&p, &heap[0])) { /* rarely: most are larger */
            heap[0] = p;
            heap_down(heap, size, 0);
        }
        Py_ssize_t w = buf[i] >= wide ? wu : 1;
        acc -= w;
        pi += (uint64_t)buf[i] * pw_i;
        pw_i *= B;
        inv_i *= BI;
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
        if (limit)
            result = make_docprint(k, anchors, sketch, exact, limit);
        goto done;
    }

    /* Anchors: the fingerprints of the picked shingles, smallest hash first, no repeats. */
    sort_picks(heap, size);
    uint64_t least = heap[0].h; /* the smallest hash of all (the heap kept the smallest) */
    for (i = 0; i < size; i++) {
        Py_ssize_t s0 = heap[i].start, slen = heap[i].end - s0;
        if (i > 0 && heap[i].h == heap[i - 1].h && heap[i - 1].end - heap[i - 1].start == slen
            && memcmp(buf + heap[i - 1].start, buf + s0, (size_t)slen * sizeof *buf) == 0)
            continue; /* the same shingle again: the same fingerprint */
        uint64_t v;
        PyObject *o;
        if (hash_key(k, buf, u8, off, s0, heap[i].end, &v, &o) < 0)
            goto done;
        for (j = 0; j < na && fps[j] != v; j++)
            ;
        if (j < na) {
            Py_XDECREF(o);
            continue;
        }
        if (!o && !(o = PyLong_FromUnsignedLongLong(v)))
            goto done;
        fps[na] = v;
        objs[na++] = o;
    }
    anchors = PyTuple_New(na);
    if (!anchors)
        goto done;
    for (j = 0; j < na; j++)
        PyTuple_SET_ITEM(anchors, j, objs[j]);
    na = 0; /* the tuple owns them now */

    /* The sketch: the sampled values, ascending, without repeats, cut at sketch_size. */
    sort_u64(svals, ns);
    Py_ssize_t u = 0;
    for (i = 0; i < ns; i++)
        if (u == 0 || svals[i] != svals[u - 1])
            svals[u++] = svals[i];
    uint64_t limit_v = k->no_limit;
    if (u > k->sketch_size) {
        limit_v = svals[k->sketch_size];
        u = k->sketch_size;
    }
    if (u == 0) {
        svals[0] = least >> k->shift;
        u = 1;
    }
    sketch = PyTuple_New(u);
    if (!sketch)
        goto done;
    for (i = 0; i < u; i++) {
        PyObject *v = PyLong_FromUnsignedLongLong(svals[i]);
        if (!v)
            goto done;
        PyTuple_SET_ITEM(sketch, i, v);
    }
    limit = PyLong_FromUnsignedLongLong(limit_v);
    if (limit)
        result = make_docprint(k, anchors, sketch, exact, limit);
done:
    for (j = 0; j < na; j++)
        Py_DECREF(objs[j]);
    Py_XDECREF(stream);
    Py_XDECREF(exact);
    Py_XDECREF(anchors);
    Py_XDECREF(sketch);
    Py_XDECREF(limit);
    PyMem_Free(buf);
    PyMem_Free(u8);
    PyMem_Free(off);
    PyMem_Free(heap);
    PyMem_Free(svals);
    PyMem_Free(fps);
    PyMem_Free(objs);
    return result;
}

static int Kernel_init(Kernel *k, PyObject *args, PyObject *kwds)
{
    static char *kwlist[] = {"ends", "shingle", "wide", "wide_units", "max_sentences",
                             "sketch_rate", "sketch_size", "sketch_bits", "base", "salt",
                             "hashfunc", "fold", "default_process", "docprint", "hash_bytes",
                             "fingerprint64", NULL};
    PyObject *ends, *hashfunc, *fold, *dproc, *docprint;
    Py_ssize_t shingle, wide_units, max_sentences, sketch_rate, sketch_size, sketch_bits;
    unsigned long wide;
    unsigned long long base, salt;
    int hash_bytes = 0;
    unsigned long long fp64 = 0;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "UnknnnnnKKOOOO|pK", kwlist, &ends, &shingle,
                                     &wide, &wide_units, &max_sentences, &sketch_rate,
                                     &sketch_size, &sketch_bits, &base, &salt, &hashfunc, &fold,
                                     &dproc, &docprint, &hash_bytes, &fp64))
        return -1;
    if (shingle < 1 || wide_units < 1 || max_sentences < 1 || sketch_size < 1
        || sketch_rate < 1 || (sketch_rate & (sketch_rate - 1)) || sketch_bits < 1
        || sketch_bits > 63 || !(base & 1)) {
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
        k->fast[c] = v;
    }
    uint64_t inv = 1; /* B**-1 mod 2**64 by Newton's iteration (B is odd) */
    for (int i = 0; i < 7; i++)
        inv *= 2 - base * inv;
    k->shingle = shingle;
    k->wide = (uint32_t)wide;
    k->wide_units = wide_units;
    k->max_sentences = max_sentences;
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
    if (!k->n_sentences || !k->n_sketch || !k->n_exact || !k->n_limit)
        return -1;
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
    return 0;
}

static void Kernel_dealloc(Kernel *k)
{
    PyObject_GC_UnTrack(k);
    Kernel_clear(k);
    PyMem_Free(k->fast);
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

/* A sketch value as a uint64: 0 on success, 1 when it is not an int in [0, 2**64) (the
 * caller then answers None: the Python version runs), -1 on another error. */
static int sketch_value(PyObject *o, uint64_t *v)
{
    if (!PyLong_CheckExact(o))
        return 1;
#if PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
    /* Up to 2 digits (60 bits, every sketch value): read them directly, the one cost that
     * shows when a guard compares a few hundred values. */
    Py_ssize_t size = Py_SIZE(o);
    if (size >= 0 && size <= 2) {
        const digit *d = ((PyLongObject *)o)->ob_digit;
        *v = size == 0 ? 0 : size == 1 ? d[0] : (uint64_t)d[0] | ((uint64_t)d[1] << 30);
        return 0;
    }
#endif
    /* Sketch values have 53 bits: the signed conversion reads the digits directly (the
     * unsigned one goes through a byte array). Past 63 bits or negative: the Python way. */
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(o, &overflow);
    if (x == -1 && PyErr_Occurred())
        return -1;
    if (overflow || x < 0)
        return 1;
    *v = (uint64_t)x;
    return 0;
}

/* cut_sketch(values, cap): cut the set *values* (more than cap ints, each below 2**64) to its
 * cap smallest, in place, and return the smallest value dropped (the new limit); None, with
 * the set unchanged, when a value is not such an int (the caller then cuts it in Python). */
static PyObject *cut_in_place(PyObject *values, Py_ssize_t cap);

static PyObject *cut_sketch(PyObject *self, PyObject *args)
{
    PyObject *values;
    Py_ssize_t cap;
    if (!PyArg_ParseTuple(args, "O!n", &PySet_Type, &values, &cap))
        return NULL;
    return cut_in_place(values, cap);
}

/* What cut_sketch does, for a set already checked. */
static PyObject *cut_in_place(PyObject *values, Py_ssize_t cap)
{
    Py_ssize_t n = PySet_GET_SIZE(values);
    if (cap < 0 || n <= cap)
        Py_RETURN_NONE;
    PyObject **objs = PyMem_Malloc((size_t)n * sizeof *objs);
    uint64_t *vals = PyMem_Malloc((size_t)n * sizeof *vals);
    uint64_t *sorted = PyMem_Malloc((size_t)n * sizeof *sorted);
    PyObject *it = NULL, *result = NULL;
    Py_ssize_t got = 0, i;
    if (!objs || !vals || !sorted) {
        PyErr_NoMemory();
        goto done;
    }
    it = PyObject_GetIter(values);
    if (!it)
        goto done;
    PyObject *item;
    while (got < n && (item = PyIter_Next(it)) != NULL) {
        objs[got++] = item;
        uint64_t v;
        int rc = sketch_value(item, &v);
        if (rc) { /* not a sketch value: the Python way (or an error) */
            if (rc > 0)
                result = Py_NewRef(Py_None);
            goto done;
        }
        vals[got - 1] = sorted[got - 1] = v;
    }
    if (PyErr_Occurred() || got != n) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_RuntimeError, "cut_sketch: the set changed size");
        goto done;
    }
    sort_u64(sorted, n);
    uint64_t bound = sorted[cap]; /* distinct values: exactly cap of them are below it */
    PyObject *bound_obj = NULL;
    for (i = 0; i < n; i++) {
        if (vals[i] < bound)
            continue;
        if (vals[i] == bound)
            bound_obj = objs[i];
        if (PySet_Discard(values, objs[i]) < 0)
            goto done;
    }
    result = bound_obj ? Py_NewRef(bound_obj) : PyLong_FromUnsignedLongLong(bound);
done:
    Py_XDECREF(it);
    if (objs)
        for (i = 0; i < got; i++)
            Py_DECREF(objs[i]);
    PyMem_Free(objs);
    PyMem_Free(vals);
    PyMem_Free(sorted);
    return result;
}

/* Whether *item* is in one of the sets *a*, *b* (either may be an empty set): 1, 0 or -1. */
static int in_either(PyObject *a, PyObject *b, PyObject *item)
{
    int in = PySet_GET_SIZE(a) ? PySet_Contains(a, item) : 0;
    if (in == 0 && PySet_GET_SIZE(b))
        in = PySet_Contains(b, item);
    return in;
}

/* Whether the sorted array v[0..n) holds x. */
static int sorted_has(const uint64_t *v, Py_ssize_t n, uint64_t x)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && v[lo] == x;
}

/* A packed sketch value (8 bytes, little-endian: how the memory store keeps a one-document
 * group's sketch) read and written. */
static inline uint64_t load_le64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static inline void store_le64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++, v >>= 8)
        p[i] = (unsigned char)v;
}

/* The guard's comparison (see sketch_guard): counts into *mine*, *theirs* and *shared_n*,
 * and appends the shared values to *shared* unless it is NULL. 0 on success, 1 when a value
 * is not a plain int below 2**63 (the Python version then answers), -1 on an error. */
static int guard_common(const void *ci, PyObject *common, PyObject *more, PyObject *item,
                        uint64_t v);

static int guard_core(PyObject *sketch, uint64_t doc_limit, PyObject *values,
                      uint64_t group_limit, PyObject *common, PyObject *more, PyObject *shared,
                      Py_ssize_t *shared_n, Py_ssize_t *mine, Py_ssize_t *theirs,
                      const void *ci)
{
    uint64_t limit = doc_limit < group_limit ? doc_limit : group_limit, v;
    PyObject *fast = PySequence_Fast(sketch, "sketch_guard: the sketch must be a sequence");
    if (!fast)
        return -1;
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast), kept = 0, i;
    PyObject **items = PySequence_Fast_ITEMS(fast);
    PyObject *it = NULL, *item;
    int rc = 0;
    *shared_n = *mine = *theirs = 0;
    uint64_t *live = PyMem_Malloc((size_t)(n ? n : 1) * sizeof *live);
    if (!live) {
        PyErr_NoMemory();
        rc = -1;
        goto done;
    }
    int sorted = 1;
    for (i = 0; i < n; i++) {
        rc = sketch_value(items[i], &v);
        if (rc)
            goto done;
        if (v >= limit)
            continue;
        int in = guard_common(ci, common, more, items[i], v);
        if (in < 0) {
            rc = -1;
            goto done;
        }
        if (in)
            continue;
        if (kept && live[kept - 1] >= v)
            sorted = 0;
        live[kept++] = v;
    }
    if (!sorted) { /* a sketch is ascending; anything else is sorted and its repeats dropped */
        sort_u64(live, kept);
        Py_ssize_t w = 0;
        for (i = 0; i < kept; i++)
            if (w == 0 || live[w - 1] != live[i])
                live[w++] = live[i];
        kept = w;
    }
    *mine = kept;
    if (PyBytes_CheckExact(values)) { /* packed values: no object until one is shared */
        const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(values);
        Py_ssize_t nv = PyBytes_GET_SIZE(values) / 8;
        for (i = 0; i < nv; i++) {
            v = load_le64(p + 8 * i);
            if (v >= limit)
                continue;
            int in = guard_common(ci, common, more, NULL, v);
            if (in < 0) {
                rc = -1;
                goto done;
            }
            if (in)
                continue;
            (*theirs)++;
            if (sorted_has(live, kept, v)) {
                (*shared_n)++;
                if (shared) {
                    PyObject *o = PyLong_FromUnsignedLongLong(v);
                    rc = o ? PyList_Append(shared, o) : -1;
                    Py_XDECREF(o);
                    if (rc)
                        goto done;
                }
            }
        }
        goto done;
    }
    it = PyObject_GetIter(values);
    if (!it) {
        rc = -1;
        goto done;
    }
    while ((item = PyIter_Next(it)) != NULL) {
        rc = sketch_value(item, &v);
        if (rc == 0 && v < limit) {
            int in = guard_common(ci, common, more, item, v);
            if (in < 0)
                rc = -1;
            else if (!in) {
                (*theirs)++;
                if (sorted_has(live, kept, v)) {
                    (*shared_n)++;
                    if (shared)
                        rc = PyList_Append(shared, item);
                }
            }
        }
        Py_DECREF(item);
        if (rc)
            goto done;
    }
    if (PyErr_Occurred())
        rc = -1;
done:
    Py_XDECREF(it);
    Py_DECREF(fast);
    PyMem_Free(live);
    return rc;
}

/* sketch_guard(sketch, doc_limit, values, group_limit, common, more): the guard's comparison
 * of a document's sketch (a sequence of ints) with a group's (a set, tuple or list), each
 * complete below its own limit, leaving out values at or past the smaller limit and values in
 * the sets *common* or *more* (boilerplate): (the values both hold (a list), how many of the
 * document's are compared, how many of the group's). No set is built: the document's values
 * are sorted into an array once, and each group value is looked up in it. None when a value
 * is not a plain int below 2**63 (the Python version then answers). */
static PyObject *sketch_guard(PyObject *self, PyObject *args)
{
    PyObject *sketch, *doc_limit_o, *values, *group_limit_o, *common, *more;
    if (!PyArg_ParseTuple(args, "OOOOO!O!", &sketch, &doc_limit_o, &values, &group_limit_o,
                          &PySet_Type, &common, &PySet_Type, &more))
        return NULL;
    uint64_t doc_limit, group_limit;
    int rc = sketch_value(doc_limit_o, &doc_limit);
    if (rc == 0)
        rc = sketch_value(group_limit_o, &group_limit);
    if (rc)
        return rc < 0 ? NULL : Py_NewRef(Py_None);
    PyObject *shared = PyList_New(0);
    if (!shared)
        return NULL;
    Py_ssize_t shared_n, mine, theirs;
    rc = guard_core(sketch, doc_limit, values, group_limit, common, more, shared, &shared_n,
                    &mine, &theirs, NULL);
    PyObject *result = rc == 0   ? Py_BuildValue("Onn", shared, mine, theirs)
                       : rc > 0 ? Py_NewRef(Py_None)
                                : NULL;
    Py_DECREF(shared);
    return result;
}

/* -- a mirror of the common hashes, for the memory store's compiled assignment ------------- */

/* The set of common hashes of a memory store's _Tables as a table of uint64 (open
 * addressing): a lookup costs a multiply and a probe or two, where PySet_Contains hashes a
 * Python int and walks a large set. It mirrors one Python set, and is valid while that set is
 * the same object with the size it had when mirrored: on the tables fast_assign runs on
 * (neither journaled nor undoable) the set only grows, by add_common or by fast_assign, which
 * adds to both; any other change of size makes the next call mirror it again. */
typedef struct {
    PyObject_HEAD
    PyObject *src;     /* the mirrored set (a strong reference) */
    Py_ssize_t seen;   /* its size when mirrored, plus what was added through both */
    uint64_t *keys;    /* 0 marks an empty slot; the value 0 itself is has_zero */
    Py_ssize_t cap, n; /* slots (a power of two), values held */
    int has_zero, valid; /* valid: every member is an int in [0, 2**64) */
} CommonIndex;

static void CommonIndex_dealloc(CommonIndex *ci)
{
    Py_XDECREF(ci->src);
    PyMem_Free(ci->keys);
    Py_TYPE(ci)->tp_free((PyObject *)ci);
}

static PyTypeObject CommonIndexType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "nshash.text._kernel.CommonIndex",
    .tp_basicsize = sizeof(CommonIndex),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The common hashes of a memory store, mirrored for fast_assign (internal).",
    .tp_dealloc = (destructor)CommonIndex_dealloc,
};

static inline Py_ssize_t index_slot(uint64_t v, Py_ssize_t cap)
{
    return (Py_ssize_t)((v * 0x9E3779B97F4A7C15ULL) >> 32) & (cap - 1);
}

static int index_has(const CommonIndex *ci, uint64_t v)
{
    if (v == 0)
        return ci->has_zero;
    for (Py_ssize_t i = index_slot(v, ci->cap);; i = (i + 1) & (ci->cap - 1)) {
        if (ci->keys[i] == v)
            return 1;
        if (ci->keys[i] == 0)
            return 0;
    }
}

static int index_put(CommonIndex *ci, uint64_t v);

static int index_grow(CommonIndex *ci, Py_ssize_t want)
{
    Py_ssize_t cap = 64;
    while (cap < 2 * want)
        cap *= 2;
    if (cap <= ci->cap)
        return 0;
    uint64_t *old = ci->keys;
    Py_ssize_t old_cap = ci->cap;
    ci->keys = PyMem_Calloc((size_t)cap, sizeof *ci->keys);
    if (!ci->keys) {
        ci->keys = old;
        PyErr_NoMemory();
        return -1;
    }
    ci->cap = cap;
    ci->n = 0;
    for (Py_ssize_t i = 0; i < old_cap; i++)
        if (old[i])
            index_put(ci, old[i]);
    PyMem_Free(old);
    return 0;
}

static int index_put(CommonIndex *ci, uint64_t v)
{
    if (v == 0) {
        ci->has_zero = 1;
        return 0;
    }
    if (2 * (ci->n + 1) > ci->cap && index_grow(ci, ci->n + 1) < 0)
        return -1;
    Py_ssize_t i = index_slot(v, ci->cap);
    while (ci->keys[i] && ci->keys[i] != v)
        i = (i + 1) & (ci->cap - 1);
    if (!ci->keys[i]) {
        ci->keys[i] = v;
        ci->n++;
    }
    return 0;
}

/* A Python int as a uint64: 0, or 1 when it is not an int in [0, 2**64), -1 on an error. */
static int u64_value(PyObject *o, uint64_t *v)
{
    if (sketch_value(o, v) == 0)
        return 0;
#if PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
    if (PyLong_CheckExact(o) && Py_SIZE(o) == 3) { /* 61 to 90 bits: an anchor's fingerprint */
        const digit *d = ((PyLongObject *)o)->ob_digit;
        if (d[2] >= 16) /* past 64 bits */
            return 1;
        *v = (uint64_t)d[0] | ((uint64_t)d[1] << 30) | ((uint64_t)d[2] << 60);
        return 0;
    }
#endif
    if (!PyLong_CheckExact(o) || _PyLong_Sign(o) < 0)
        return 1;
    unsigned long long x = PyLong_AsUnsignedLongLong(o);
    if (x == (unsigned long long)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    *v = (uint64_t)x;
    return 0;
}

/* The index of *t*'s common set, mirrored again when it is not current: a new reference. */
static CommonIndex *common_index(PyObject *t, PyObject *common, PyObject *name)
{
    PyObject *o = PyObject_GetAttr(t, name);
    if (!o)
        return NULL;
    CommonIndex *ci = NULL;
    if (Py_TYPE(o) == &CommonIndexType) {
        ci = (CommonIndex *)o;
        if (ci->src == common && ci->seen == PySet_GET_SIZE(common))
            return ci;
        Py_DECREF(o);
    } else {
        Py_DECREF(o);
    }
    ci = PyObject_New(CommonIndex, &CommonIndexType);
    if (!ci)
        return NULL;
    ci->src = Py_NewRef(common);
    ci->seen = PySet_GET_SIZE(common);
    ci->keys = NULL;
    ci->cap = ci->n = 0;
    ci->has_zero = 0;
    ci->valid = 1;
    if (index_grow(ci, ci->seen) < 0) {
        Py_DECREF(ci);
        return NULL;
    }
    Py_ssize_t pos = 0;
    PyObject *item;
    Py_hash_t hash;
    while (_PySet_NextEntry(common, &pos, &item, &hash)) {
        uint64_t v;
        int rc = u64_value(item, &v);
        if (rc < 0 || (rc == 0 && index_put(ci, v) < 0)) {
            Py_DECREF(ci);
            return NULL;
        }
        if (rc > 0)
            ci->valid = 0; /* a member the index cannot hold: lookups go to the set */
    }
    if (PyObject_SetAttr(t, name, (PyObject *)ci) < 0) {
        Py_DECREF(ci);
        return NULL;
    }
    return ci;
}

/* Whether *item* (with value *v* when have_v) is common: through the index when it is valid,
 * else through the set. 1, 0 or -1. */
static int is_common(const CommonIndex *ci, PyObject *common, PyObject *item, int have_v,
                     uint64_t v)
{
    if (ci && ci->valid) {
        if (!have_v) {
            int rc = u64_value(item, &v);
            if (rc < 0)
                return -1;
            if (rc > 0)
                return PySet_Contains(common, item);
        }
        return index_has(ci, v);
    }
    return PySet_GET_SIZE(common) ? PySet_Contains(common, item) : 0;
}

/* guard_core's test of a sketch value: through *ci* (a CommonIndex) when given and valid. */
static int guard_common(const void *ci, PyObject *common, PyObject *more, PyObject *item,
                        uint64_t v)
{
    const CommonIndex *index = ci;
    if (index && index->valid && !PySet_GET_SIZE(more))
        return index_has(index, v);
    if (!PySet_GET_SIZE(common) && !PySet_GET_SIZE(more))
        return 0;
    if (item)
        return in_either(common, more, item);
    PyObject *o = PyLong_FromUnsignedLongLong(v); /* a packed value: as an int to look up */
    int in = o ? in_either(common, more, o) : -1;
    Py_XDECREF(o);
    return in;
}

/* Add *h* to the common set and its index. 0 or -1. */
static int add_common(CommonIndex *ci, PyObject *common, PyObject *h)
{
    Py_ssize_t before = PySet_GET_SIZE(common);
    if (PySet_Add(common, h) < 0)
        return -1;
    if (!ci || PySet_GET_SIZE(common) == before)
        return 0;
    ci->seen++;
    uint64_t v;
    int rc = u64_value(h, &v);
    if (rc < 0)
        return -1;
    if (rc > 0)
        ci->valid = 0;
    else if (index_put(ci, v) < 0)
        return -1;
    return 0;
}

/* -- the memory store's common cases ------------------------------------------------------- */

/* The names of the _Tables attributes fast_assign reads, interned once (a lookup by a C
 * string would make a str each time). */
enum { T_DOCS, T_FP, T_EXACT, T_COMMON, T_PARENT, T_SKETCH, T_LIMIT, T_SIZE, T_VOTES, T_MEMBERS,
       T_LOG, T_UNDO, T_COUNTER, T_DOCUMENTS, T_COMMON_INDEX, T_NAMES };
static const char *const table_names[T_NAMES] = {
    "docs", "fp", "exact", "common", "parent", "sketch", "limit", "size", "votes", "members",
    "log", "undo", "counter", "documents", "common_index"};
static PyObject *table_keys[T_NAMES];

static int intern_table_names(void)
{
    for (int i = 0; i < T_NAMES; i++)
        if (!table_keys[i] && !(table_keys[i] = PyUnicode_InternFromString(table_names[i])))
            return -1;
    return 0;
}

/* A new reference to table *which* of *t*, which must be of *type* (dict or set). */
static PyObject *table(PyObject *t, int which, PyTypeObject *type)
{
    PyObject *o = PyObject_GetAttr(t, table_keys[which]);
    if (o && Py_TYPE(o) != type) {
        PyErr_Format(PyExc_TypeError, "fast_assign: table %s is a %s", table_names[which],
                     Py_TYPE(o)->tp_name);
        Py_CLEAR(o);
    }
    return o;
}

/* Follow merge links from *gid* in the dict *parent*: a new reference, or NULL on an error. */
static PyObject *resolve_in(PyObject *parent, PyObject *gid)
{
    Py_INCREF(gid);
    for (;;) {
        PyObject *up = PyDict_GetItemWithError(parent, gid);
        if (!up) {
            if (PyErr_Occurred()) {
                Py_DECREF(gid);
                return NULL;
            }
            return gid;
        }
        Py_INCREF(up);
        Py_DECREF(gid);
        gid = up;
    }
}

#define FAST_ANCHORS 64

/* The int 1 (made at import), for counting. */
static PyObject *ONE;

/* *o* + 1 into attribute or dict entry: helpers of fast_assign's counters. */
static int bump_attr(PyObject *t, int which)
{
    PyObject *o = PyObject_GetAttr(t, table_keys[which]), *more;
    if (!o)
        return -1;
    more = PyNumber_Add(o, ONE);
    Py_DECREF(o);
    int rc = more ? PyObject_SetAttr(t, table_keys[which], more) : -1;
    Py_XDECREF(more);
    return rc;
}

static int bump_item(PyObject *d, PyObject *key)
{
    PyObject *o = PyDict_GetItemWithError(d, key), *more;
    if (!o) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, key);
        return -1;
    }
    more = PyNumber_Add(o, ONE);
    int rc = more ? PyDict_SetItem(d, key, more) : -1;
    Py_XDECREF(more);
    return rc;
}

/* _vote of nshash.methods.nshash.assign: record that *groups* (a 2-tuple) were kept apart on
 * each hash of the sorted list *hs*; a hash becomes common once *votes* distinct groups
 * (after merges) have been. */
static int vote_on(PyObject *hs, PyObject *groups, Py_ssize_t votes, PyObject *table,
                   PyObject *common, CommonIndex *ci, PyObject *parent)
{
    Py_ssize_t i, n = PyList_GET_SIZE(hs);
    for (i = 0; i < n; i++) {
        PyObject *h = PyList_GET_ITEM(hs, i);
        PyObject *old = PyDict_GetItemWithError(table, h);
        if (!old && PyErr_Occurred())
            return -1;
        PyObject *seen = PySet_New(old);
        if (!seen || _PySet_Update(seen, groups) < 0) {
            Py_XDECREF(seen);
            return -1;
        }
        if (PySet_GET_SIZE(seen) >= votes) {
            PyObject *roots = PySet_New(NULL), *it = PyObject_GetIter(seen), *g;
            int rc = roots && it ? 0 : -1;
            while (rc == 0 && (g = PyIter_Next(it)) != NULL) {
                PyObject *r = resolve_in(parent, g);
                Py_DECREF(g);
                rc = r ? PySet_Add(roots, r) : -1;
                Py_XDECREF(r);
            }
            Py_XDECREF(it);
            if (rc < 0 || PyErr_Occurred()) {
                Py_XDECREF(roots);
                Py_DECREF(seen);
                return -1;
            }
            if (PySet_GET_SIZE(roots) >= votes) {
                Py_DECREF(roots);
                Py_DECREF(seen);
                if (add_common(ci, common, h) < 0)
                    return -1;
                if (PyDict_Contains(table, h) == 1 && PyDict_DelItem(table, h) < 0)
                    return -1;
                continue;
            }
            Py_SETREF(seen, roots); /* kept as resolved, as the Python version keeps them */
        }
        PyObject *ordered = PySequence_List(seen);
        Py_DECREF(seen);
        if (!ordered || PyList_Sort(ordered) < 0) {
            Py_XDECREF(ordered);
            return -1;
        }
        PyObject *kept = PyList_AsTuple(ordered);
        Py_DECREF(ordered);
        int rc = kept ? PyDict_SetItem(table, h, kept) : -1;
        Py_XDECREF(kept);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* fast_assign(t, sentences, sketch, exact, doc_limit, n, theta, min_overlap, cap, no_limit,
 * votes, doc_id, title): nshash.methods.nshash.assign.assign on the dicts of a memory store's
 * _Tables *t* (neither journaled nor undoable), for every case but a merge: an exact repeat,
 * a new story, and a document whose candidates the guard refuses (their hashes get votes)
 * but for at most one it accepts (the document joins it). Returns (similar_id, duplicate,
 * anchors), having made the writes assign makes; None, having written nothing, for the
 * other cases (a doc_id seen before, two accepted groups, an odd value): the caller then
 * runs assign. */
static PyObject *fast_assign(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 13 || !PyTuple_CheckExact(args[1]) || !PyTuple_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "fast_assign takes 13 arguments (see its docstring)");
        return NULL;
    }
    PyObject *t = args[0], *sentences = args[1], *sketch = args[2], *exact_h = args[3];
    PyObject *doc_limit_o = args[4], *no_limit_o = args[9], *doc_id = args[11];
    PyObject *title = args[12];
    Py_ssize_t n = PyLong_AsSsize_t(args[5]), min_overlap = PyLong_AsSsize_t(args[7]);
    Py_ssize_t cap = PyLong_AsSsize_t(args[8]), votes = PyLong_AsSsize_t(args[10]);
    double theta = PyFloat_AsDouble(args[6]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *result = NULL, *anchors = NULL, *root = NULL, *values = NULL, *bound = NULL;
    PyObject *fp = NULL, *exact = NULL, *common = NULL, *parent = NULL, *sketches = NULL;
    PyObject *limits = NULL, *size = NULL, *docs = NULL, *log = NULL, *undo = NULL;
    PyObject *vote_table = NULL, *empty = NULL;
    CommonIndex *ci = NULL;
    PyObject *known[FAST_ANCHORS], *picked[FAST_ANCHORS];
    /* The candidates: canonical id, the anchors that hit it, the values shared, accepted. */
    PyObject *cand[FAST_ANCHORS], *hits[FAST_ANCHORS], *shared[FAST_ANCHORS];
    int accepted[FAST_ANCHORS];
    Py_ssize_t i, k, nc = 0, np = 0, joined = -1;
    int duplicate = 1, fresh = 0;
    uint64_t doc_limit, no_limit;
    int rc = sketch_value(doc_limit_o, &doc_limit);
    if (rc == 0)
        rc = sketch_value(no_limit_o, &no_limit);
    if (rc || n > FAST_ANCHORS || n < 0)
        goto fallback;
    /* Journaled or undoable tables keep their ops: the Python path writes those. */
    if (!(log = PyObject_GetAttr(t, table_keys[T_LOG])) || !(undo = PyObject_GetAttr(t, table_keys[T_UNDO])))
        goto done;
    if (log != Py_None || undo != Py_None)
        goto fallback;
    if (!(docs = table(t, T_DOCS, &PyDict_Type)) || !(fp = table(t, T_FP, &PyDict_Type))
        || !(exact = table(t, T_EXACT, &PyDict_Type)) || !(common = table(t, T_COMMON, &PySet_Type))
        || !(parent = table(t, T_PARENT, &PyDict_Type))
        || !(sketches = table(t, T_SKETCH, &PyDict_Type))
        || !(limits = table(t, T_LIMIT, &PyDict_Type)) || !(size = table(t, T_SIZE, &PyDict_Type))
        || !(vote_table = table(t, T_VOTES, &PyDict_Type)) || !(empty = PySet_New(NULL)))
        goto done;
    if (doc_id != Py_None) {
        int seen = PyDict_Contains(docs, doc_id);
        if (seen < 0)
            goto done;
        if (seen)
            goto fallback; /* a retry: the Python path answers it */
    }
    /* The anchors: the first n candidates that are not common (all of them if none is). */
    Py_ssize_t ns = PyTuple_GET_SIZE(sentences);
    if (!(ci = common_index(t, common, table_keys[T_COMMON_INDEX])))
        goto done;
    if (PySet_GET_SIZE(common)) {
        for (i = 0; i < ns && np < n; i++) {
            int in = is_common(ci, common, PyTuple_GET_ITEM(sentences, i), 0, 0);
            if (in < 0)
                goto done;
            if (!in)
                picked[np++] = PyTuple_GET_ITEM(sentences, i);
        }
    }
    if (np == 0)
        for (i = 0; i < ns && np < n; i++)
            picked[np++] = PyTuple_GET_ITEM(sentences, i);
    if (!(anchors = PyTuple_New(np)))
        goto done;
    for (i = 0; i < np; i++) {
        PyTuple_SET_ITEM(anchors, i, Py_NewRef(picked[i]));
        known[i] = PyDict_GetItemWithError(fp, picked[i]);
        if (!known[i] && PyErr_Occurred())
            goto done;
    }
    /* The document's sketch is merged with a group's or kept packed as it is: it must be
     * ascending, as the text pipeline makes it (anything else goes the Python way). */
    {
        uint64_t prev = 0, v;
        for (i = 0; i < PyTuple_GET_SIZE(sketch); i++) {
            if ((rc = sketch_value(PyTuple_GET_ITEM(sketch, i), &v)) != 0)
                goto fail_or_fallback;
            if (i && v <= prev)
                goto fallback;
            prev = v;
        }
    }
    PyObject *hit = PyDict_GetItemWithError(exact, exact_h);
    if (!hit && PyErr_Occurred())
        goto done;
    if (hit) {
        if (!(root = resolve_in(parent, hit)))
            goto done;
        goto write;
    }
    /* Each group an anchor hits, in order of first hit, with the anchors that hit it. */
    for (i = 0; i < np; i++) {
        if (!known[i])
            continue;
        PyObject *r = resolve_in(parent, known[i]);
        if (!r)
            goto done;
        for (k = 0; k < nc; k++) {
            int same = PyObject_RichCompareBool(cand[k], r, Py_EQ);
            if (same < 0) {
                Py_DECREF(r);
                goto done;
            }
            if (same)
                break;
        }
        if (k == nc) {
            shared[nc] = PyList_New(0);
            hits[nc] = PyList_New(0);
            cand[nc++] = r;
            if (!shared[k] || !hits[k])
                goto done;
        } else {
            Py_DECREF(r);
        }
        if (PyList_Append(hits[k], picked[i]) < 0)
            goto done;
    }
    /* The guard, for each candidate. */
    for (k = 0; k < nc; k++) {
        PyObject *vals = PyDict_GetItemWithError(sketches, cand[k]);
        if (!vals && PyErr_Occurred())
            goto done;
        PyObject *gl = PyDict_GetItemWithError(limits, cand[k]);
        if (!gl && PyErr_Occurred())
            goto done;
        uint64_t group_limit = no_limit;
        if (gl && (rc = sketch_value(gl, &group_limit)) != 0)
            goto fail_or_fallback;
        Py_ssize_t same, mine, theirs;
        rc = guard_core(sketch, doc_limit, vals ? vals : empty, group_limit, common, empty,
                        shared[k], &same, &mine, &theirs, ci);
        if (rc)
            goto fail_or_fallback;
        Py_ssize_t smaller = mine < theirs ? mine : theirs;
        double score = 0.0;
        if (smaller && same >= (min_overlap < smaller ? min_overlap : smaller))
            score = (double)same / (double)smaller;
        accepted[k] = score >= theta;
        if (accepted[k]) {
            if (joined >= 0)
                goto fallback; /* two accepted groups: a merge may follow */
            if (!vals || !PyBytes_CheckExact(vals))
                goto fallback; /* a group without a packed sketch of its own: the Python way */
            const unsigned char *gp = (const unsigned char *)PyBytes_AS_STRING(vals);
            for (i = 1; i < PyBytes_GET_SIZE(vals) / 8; i++)
                if (load_le64(gp + 8 * (i - 1)) >= load_le64(gp + 8 * i))
                    goto fallback; /* packed, but not ascending: the Python way */
            joined = k;
        }
    }
    if (joined >= 0) { /* the document's values and the group's, joined (combine_sketch) */
        root = Py_NewRef(cand[joined]);
        PyObject *old = PyDict_GetItem(sketches, root); /* packed and ascending (checked) */
        const unsigned char *gp = (const unsigned char *)PyBytes_AS_STRING(old);
        Py_ssize_t ng = PyBytes_GET_SIZE(old) / 8, nd = PyTuple_GET_SIZE(sketch), a = 0, d = 0;
        PyObject *gl = PyDict_GetItem(limits, root);
        uint64_t old_limit = no_limit, cut;
        if (gl)
            sketch_value(gl, &old_limit); /* checked by the guard */
        cut = doc_limit < old_limit ? doc_limit : old_limit;
        if (!(values = PyBytes_FromStringAndSize(NULL, 8 * (ng + nd > cap ? cap : ng + nd))))
            goto done;
        unsigned char *out = (unsigned char *)PyBytes_AS_STRING(values);
        Py_ssize_t kept = 0;
        uint64_t gv = 0, dv = 0;
        /* A merge of the two ascending runs below the bound, without repeats, stopping at the
         * cap: the value that would come next is the new limit. */
        for (;;) {
            int has_g = a < ng && (gv = load_le64(gp + 8 * a)) < cut;
            int has_d = 0;
            if (d < nd) {
                sketch_value(PyTuple_GET_ITEM(sketch, d), &dv); /* checked by the guard */
                has_d = dv < cut;
            }
            if (!has_g && !has_d)
                break;
            uint64_t next = !has_d || (has_g && gv <= dv) ? gv : dv;
            if (has_g && gv == next)
                a++;
            if (has_d && dv == next)
                d++;
            if (kept == cap) {
                cut = next; /* the smallest value dropped */
                break;
            }
            store_le64(out + 8 * kept++, next);
        }
        if (kept < PyBytes_GET_SIZE(values) / 8 && _PyBytes_Resize(&values, 8 * kept) < 0)
            goto done;
        if (PyDict_SetItem(sketches, root, values) < 0 || !(bound = PyLong_FromUnsignedLongLong(cut)))
            goto done;
    } else { /* a new story */
        duplicate = 0;
        fresh = 1;
        uint64_t v;
        PyObject *counter = PyObject_GetAttr(t, table_keys[T_COUNTER]);
        if (!counter)
            goto done;
        root = PyNumber_Add(counter, ONE);
        Py_DECREF(counter);
        if (!root || PyObject_SetAttr(t, table_keys[T_COUNTER], root) < 0)
            goto done;
        /* The document's sketch is kept packed (cut to its cap smallest: the limit is then
         * the first value dropped, as combine_sketch makes it). */
        Py_ssize_t nsk = PyTuple_GET_SIZE(sketch), keep = nsk > cap ? cap : nsk;
        bound = Py_NewRef(nsk > cap ? PyTuple_GET_ITEM(sketch, cap) : doc_limit_o);
        if ((values = PyBytes_FromStringAndSize(NULL, 8 * keep)) != NULL) {
            unsigned char *p = (unsigned char *)PyBytes_AS_STRING(values);
            for (i = 0; i < keep; i++) {
                sketch_value(PyTuple_GET_ITEM(sketch, i), &v); /* checked ascending above */
                store_le64(p + 8 * i, v);
            }
        }
        if (!values || PyDict_SetItem(sketches, root, values) < 0)
            goto done;
        PyObject *zero = PyLong_FromLong(0);
        rc = zero ? PyDict_SetItem(size, root, zero) : -1;
        Py_XDECREF(zero);
        if (rc < 0)
            goto done;
    }
    /* _set_sketch: a limit is kept only where the sketch was cut. */
    uint64_t b = no_limit;
    sketch_value(bound, &b);
    if (b < no_limit) {
        if (PyDict_SetItem(limits, root, bound) < 0)
            goto done;
    } else if (PyDict_Contains(limits, root) == 1 && PyDict_DelItem(limits, root) < 0) {
        goto done;
    }
    /* The refused candidates' hashes get their votes, in candidate order. */
    for (k = 0; k < nc; k++) {
        if (accepted[k])
            continue;
        PyObject *hs = PySet_New(hits[k]), *ordered = NULL, *pair = NULL;
        rc = hs && _PySet_Update(hs, shared[k]) == 0 ? 0 : -1;
        if (rc == 0 && (ordered = PySequence_List(hs)) != NULL && PyList_Sort(ordered) == 0
            && (pair = PyTuple_Pack(2, cand[k], root)) != NULL)
            rc = vote_on(ordered, pair, votes, vote_table, common, ci, parent);
        else
            rc = -1;
        Py_XDECREF(hs);
        Py_XDECREF(ordered);
        Py_XDECREF(pair);
        if (rc < 0)
            goto done;
    }
    if (PyDict_SetItem(exact, exact_h, root) < 0)
        goto done;
write:
    (void)fresh;
    for (i = 0; i < np; i++)
        if (!known[i] && PyDict_SetItem(fp, PyTuple_GET_ITEM(anchors, i), root) < 0)
            goto done;
    /* add_member */
    if (bump_item(size, root) < 0 || bump_attr(t, T_DOCUMENTS) < 0)
        goto done;
    if (doc_id != Py_None) {
        PyObject *members = table(t, T_MEMBERS, &PyDict_Type), *list;
        if (!members)
            goto done;
        list = PyDict_GetItemWithError(members, root);
        if (!list && !PyErr_Occurred()) {
            list = PyList_New(0);
            if (list && PyDict_SetItem(members, root, list) < 0)
                Py_CLEAR(list);
            Py_XDECREF(list); /* the dict holds it now */
        }
        Py_DECREF(members);
        if (!list || PyList_Append(list, doc_id) < 0)
            goto done;
        PyObject *none_merged = PyTuple_New(0), *record = NULL;
        if (none_merged)
            record = Py_BuildValue("(OOOOO)", root, duplicate ? Py_True : Py_False, none_merged,
                                   title, anchors);
        Py_XDECREF(none_merged);
        if (!record)
            goto done;
        rc = PyDict_SetItem(docs, doc_id, record);
        Py_DECREF(record);
        if (rc < 0)
            goto done;
    }
    result = Py_BuildValue("(OOO)", root, duplicate ? Py_True : Py_False, anchors);
    goto done;
fail_or_fallback:
    if (rc < 0)
        goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    for (k = 0; k < nc; k++) {
        Py_XDECREF(cand[k]);
        Py_XDECREF(hits[k]);
        Py_XDECREF(shared[k]);
    }
    Py_XDECREF(anchors);
    Py_XDECREF(root);
    Py_XDECREF(values);
    Py_XDECREF(bound);
    Py_XDECREF(fp);
    Py_XDECREF(exact);
    Py_XDECREF(common);
    Py_XDECREF(parent);
    Py_XDECREF(sketches);
    Py_XDECREF(limits);
    Py_XDECREF(size);
    Py_XDECREF(docs);
    Py_XDECREF(log);
    Py_XDECREF(undo);
    Py_XDECREF(vote_table);
    Py_XDECREF(empty);
    Py_XDECREF(ci);
    return result;
}

/* make_record(cls, names, *values): an instance of the slotted class *cls* with each slot of
 * *names* (a tuple of str) set to the value in the same place, without calling its __init__:
 * what a frozen dataclass's generated __init__ does for a class without defaults to fill or a
 * __post_init__, at a fraction of the cost (the results of every add are made this way). */
static PyObject *make_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || !PyType_Check(args[0]) || !PyTuple_CheckExact(args[1])
        || PyTuple_GET_SIZE(args[1]) != nargs - 2) {
        PyErr_SetString(PyExc_TypeError, "make_record(cls, names, *values): one value a name");
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)args[0];
    PyObject *obj = tp->tp_alloc(tp, 0);
    if (!obj)
        return NULL;
    for (Py_ssize_t i = 2; i < nargs; i++)
        if (PyObject_GenericSetAttr(obj, PyTuple_GET_ITEM(args[1], i - 2), args[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    return obj;
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

static PyMethodDef module_methods[] = {
    {"set_tables", set_tables, METH_VARARGS,
     "set_tables(dp_map, fold_class): the character tables (native uint32 and uint8, BMP)."},
    {"cut_sketch", cut_sketch, METH_VARARGS,
     "cut_sketch(values, cap) -> the new limit; values (a set of ints) keeps its cap smallest."},
    {"surrogate_at", surrogate_at, METH_O,
     "surrogate_at(text) -> the index of the first lone surrogate, or -1."},
    {"fast_assign", (PyCFunction)(void (*)(void))fast_assign, METH_FASTCALL,
     "fast_assign(t, sentences, sketch, exact, doc_limit, n, theta, min_overlap, cap, no_limit,"
     " votes, doc_id, title) -> (similar_id, duplicate, anchors) or None."},
    {"make_record", (PyCFunction)(void (*)(void))make_record, METH_FASTCALL,
     "make_record(cls, names, *values) -> an instance of the slotted class cls, slots set."},
    {"sketch_guard", sketch_guard, METH_VARARGS,
     "sketch_guard(sketch, doc_limit, values, group_limit, common, more) -> (shared, mine,"
     " theirs) or None."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef kernel_module = {
    PyModuleDef_HEAD_INIT, "nshash.text._kernel",
    "The compiled text path of nshash.Fingerprinter (see nshash/kernel.py).", -1,
    module_methods};

PyMODINIT_FUNC PyInit__kernel(void)
{
    if (PyType_Ready(&KernelType) < 0 || PyType_Ready(&CommonIndexType) < 0)
        return NULL;
    if ((!ONE && !(ONE = PyLong_FromLong(1))) || intern_table_names() < 0)
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
