/* The compiled half of the nshash method's assignment (nshash/methods/nshash/assign.py).
 *
 *   - sketch_guard and cut_sketch: the guard's comparison of a document's sketch with a
 *     group's, and the cut of a sketch to its cap, for every store (assign.py calls them and
 *     keeps their Python versions, which the tests compare);
 *   - fast_assign: assign itself, on a memory store's tables (memory.py), journaled or not,
 *     for every case but a merge and a retried id; it returns None, having written nothing,
 *     for the others, which the Python assign then takes (tests/test_fast_assign.py runs
 *     both on the same streams, journal lines included);
 *   - make_record: a result of every add made without its frozen dataclass's __init__;
 *   - journal_line: a whole journal line (the bytes json.dumps makes of its ops, packed
 *     values as the str of their base64, their CRC32, the line break);
 *   - AnchorMap and VoteMap: the memory store's anchor, exact-text, common and vote tables,
 *     12 and 20 bytes an entry; GroupTable: its tables keyed by group id, a slot of 8 bytes an id;
 *     DocTable: its doc id -> record table, 16 bytes a slot and each record in a raw block;
 *   - KeyFilter: a Bloom filter of the anchors the LevelDB and SQLite stores hold.
 *
 * Built as an optional extension, like the text kernel: without it the Python versions run,
 * with the same answers. NSHASH_PURE=1 turns it off too.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../../text/_u64sort.h"

#define ASSIGN_ABI 33 /* bump with every change of a function's arguments or answers */

/* A sketch value as a uint64: 0 on success, 1 when it is not an int in [0, 2**64) (the
 * caller then answers None: the Python version runs), -1 on another error. */
static int sketch_value(PyObject *o, uint64_t *v)
{
    if (!PyLong_CheckExact(o))
        return 1;
    if (small_u64(o, v))
        return 0;
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

/* The memory store's anchor tables (defined below), which also hold its common hashes. */
static PyTypeObject AnchorMapType;

/* The first place in the sorted array v[0..n) whose value is not below x (n: none). */
static Py_ssize_t sorted_from(const uint64_t *v, Py_ssize_t n, uint64_t x)
{
    Py_ssize_t lo = 0, hi = n;
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (v[mid] < x)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

/* Where the sorted array v[0..n) holds x, or -1. */
static Py_ssize_t sorted_at(const uint64_t *v, Py_ssize_t n, uint64_t x)
{
    Py_ssize_t lo = sorted_from(v, n, x);
    return lo < n && v[lo] == x ? lo : -1;
}

/* An unsigned little-endian integer of *bytes* bytes read and written: a packed sketch value
 * (8 bytes, or 4 in a store of narrow sketches: how the memory store keeps a group's sketch),
 * and the maps' and records' fields. */
static inline uint64_t load_le(const unsigned char *p, int bytes)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (bytes == 8) { /* one load, where the machine's order is the packing's */
        uint64_t x;
        memcpy(&x, p, 8);
        return x;
    }
    if (bytes == 4) {
        uint32_t x;
        memcpy(&x, p, 4);
        return x;
    }
#endif
    uint64_t v = 0;
    for (int b = bytes - 1; b >= 0; b--)
        v = (v << 8) | p[b];
    return v;
}

static inline void store_le(unsigned char *p, uint64_t v, int bytes)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    if (bytes == 8) {
        memcpy(p, &v, 8);
        return;
    }
    if (bytes == 4) {
        uint32_t x = (uint32_t)v;
        memcpy(p, &x, 4);
        return;
    }
#endif
    for (int b = 0; b < bytes; b++)
        p[b] = (unsigned char)(v >> (8 * b));
}

/* The guard's score of a candidate, the compiled core's one scoring rule (fast_assign and
 * score() call it; judged() in nshash/methods/nshash/assign.py is its reference): the values
 * shared over the smaller of the two sketches compared, 0 when fewer than min_overlap are
 * shared (unless a sketch is smaller than that). */
static double judge_score(Py_ssize_t same, Py_ssize_t mine, Py_ssize_t theirs,
                          Py_ssize_t min_overlap)
{
    Py_ssize_t smaller = mine < theirs ? mine : theirs;
    if (smaller && same >= (min_overlap < smaller ? min_overlap : smaller))
        return (double)same / (double)smaller;
    return 0.0;
}

/* score(shared, mine, theirs, min_overlap): judge_score for Python (judged(), and through it
 * the Spark job's pairs). */
static PyObject *score_py(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    (void)self;
    Py_ssize_t v[4];
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "score(shared, mine, theirs, min_overlap)");
        return NULL;
    }
    for (int i = 0; i < 4; i++) {
        v[i] = PyLong_AsSsize_t(args[i]);
        if (v[i] == -1 && PyErr_Occurred())
            return NULL;
        if (v[i] < 0) {
            PyErr_SetString(PyExc_ValueError, "score takes counts (integers >= 0)");
            return NULL;
        }
    }
    return PyFloat_FromDouble(judge_score(v[0], v[1], v[2], v[3]));
}

/* The guard's comparison (see sketch_guard): counts into *mine*, *theirs* and *shared_n*,
 * and appends the shared values to *shared* unless it is NULL. 0 on success, 1 when a value
 * is not a plain int below 2**63 (the Python version then answers), -1 on an error. */
static int guard_common(PyObject *common, PyObject *more, PyObject *item, uint64_t v);

static int guard_core(PyObject *sketch, uint64_t doc_limit, PyObject *values,
                      uint64_t group_limit, PyObject *common, PyObject *more, PyObject *shared,
                      Py_ssize_t *shared_n, Py_ssize_t *mine, Py_ssize_t *theirs, int width)
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
        int in = guard_common(common, more, items[i], v);
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
        Py_ssize_t nv = PyBytes_GET_SIZE(values) / width, j = 0;
        uint64_t prev = 0;
        for (i = 0; i < nv; i++) {
            v = load_le(p + width * i, width);
            if (v >= limit)
                continue;
            int in = guard_common(common, more, NULL, v);
            if (in < 0) {
                rc = -1;
                goto done;
            }
            if (in)
                continue;
            (*theirs)++;
            if (v < prev) /* (ascending, as packed: merged with the document's values) */
                j = sorted_from(live, kept, v);
            while (j < kept && live[j] < v)
                j++;
            prev = v;
            if (j < kept && live[j] == v) {
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
    /* A group's values in ascending order (a one-document group's sketch tuple) are merged
     * with the document's; a value below the one before (a set's order) is looked up. */
    Py_ssize_t j = 0;
    uint64_t prev = 0;
    while ((item = PyIter_Next(it)) != NULL) {
        rc = sketch_value(item, &v);
        if (rc == 0 && v < limit) {
            int in = guard_common(common, more, item, v);
            if (in < 0)
                rc = -1;
            else if (!in) {
                (*theirs)++;
                if (v < prev)
                    j = sorted_from(live, kept, v);
                while (j < kept && live[j] < v)
                    j++;
                prev = v;
                if (j < kept && live[j] == v) {
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

/* Whether *common* is what the guard reads common hashes from (a set, or the memory store's
 * AnchorMap); else 0 with a TypeError naming *who*. */
static int common_ok(const char *who, PyObject *common)
{
    if (PySet_CheckExact(common) || Py_TYPE(common) == &AnchorMapType)
        return 1;
    PyErr_Format(PyExc_TypeError, "%s: common is a set or an AnchorMap, not %s", who,
                 Py_TYPE(common)->tp_name);
    return 0;
}

/* sketch_guard(sketch, doc_limit, values, group_limit, common, more): the guard's comparison
 * of a document's sketch (a sequence of ints) with a group's (a set, tuple or list), each
 * complete below its own limit, leaving out values at or past the smaller limit and values in
 * *common* (a set, or the memory store's AnchorMap) or the set *more* (boilerplate): (the
 * values both hold (a list), how many of the document's are compared, how many of the
 * group's). No set is built: the document's values are sorted into an array once, and each
 * group value is looked up in it. None when a value is not a plain int below 2**63 (the
 * Python version then answers). */
static PyObject *sketch_guard(PyObject *self, PyObject *args)
{
    PyObject *sketch, *doc_limit_o, *values, *group_limit_o, *common, *more;
    if (!PyArg_ParseTuple(args, "OOOOOO!", &sketch, &doc_limit_o, &values, &group_limit_o,
                          &common, &PySet_Type, &more))
        return NULL;
    if (!common_ok("sketch_guard", common))
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
                    &mine, &theirs, 8);
    PyObject *result = rc == 0   ? Py_BuildValue("Onn", shared, mine, theirs)
                       : rc > 0 ? Py_NewRef(Py_None)
                                : NULL;
    Py_DECREF(shared);
    return result;
}

/* -- the page's frame (assign.py's frame_of and set_aside) --------------------------------- */

#define END_LEAST 6     /* assign.END_LEAST: fewer compared values, no shared end */
#define FRAME_LEAST 12  /* assign.FRAME_LEAST: fewer compared values, no two-edge frame */
#define FRAME_GAP 3     /* assign.FRAME_GAP: the shortest unshared run a frame surrounds */
#define FRAME_SHARE 4   /* assign.FRAME_SHARE: ... and at least 1 in this many values */
#define END_SHARE 4     /* assign.END_SHARE: the page's own head above its end matter */
#define END_PART 4      /* assign.END_PART: an end matter this small is set aside at once */
#define END_RUN 2       /* assign.END_RUN: ... and one unbroken run this small too */
#define TAIL_VOTES 4    /* assign.TAIL_VOTES: a placed page's last values voted for its group */
#define LONGER 4        /* assign.LONGER: a page holding more times its group's values */
#define LONGER_FROM 128 /* assign.LONGER_FROM: ... of a group of at least this many values */
#define EDIT_LOW 0.3      /* assign.EDIT_LOW: a score short of theta read for scattered edits */
#define EDIT_LEAST 24     /* assign.EDIT_LEAST: ... over a shared span of this many values */
#define EDIT_COVER 0.6    /* assign.EDIT_COVER: ... covering this share of those compared */
#define EDIT_DENSITY 0.25 /* assign.EDIT_DENSITY: ... this share of it shared */
#define EDIT_GAP 9        /* assign.EDIT_GAP: ... no unshared run over 1 in this many of it */
#define EDIT_TRIMS 2      /* assign.EDIT_TRIMS: ... after cutting this many stray ends off */
#define EDIT_RUN 6        /* assign.EDIT_RUN: ... its unshared runs this long on average */
#define LONG_PAGE 8000    /* fingerprint.LONG_PAGE: a page whose values reach this far ... */
#define TOP_SHARE 8       /* assign.TOP_SHARE: ... sharing in its first 1/8 ... */
#define TOP_LOW 0.2       /* assign.TOP_LOW: a long page scoring this judged on its top ... */
#define TOP_LEAST 6       /* assign.TOP_LEAST: ... where its top holds this many values */
#define TOP_FEW 8         /* assign.TOP_FEW: ... at most 1 value in 8 ... */
#define GROUP_OWN 8       /* assign.GROUP_OWN: ... with a group 1/8 its own is refused */

/* frame_of: how many of a page's shared values are its frame, given *flags* (1 when shared)
 * for its *n* compared values in page order and the count of the group's values compared
 * (*theirs*). assign.frame_of is the reference. */
static Py_ssize_t frame_of(const unsigned char *flags, Py_ssize_t n, Py_ssize_t theirs)
{
    if (n < END_LEAST || !flags[n - 1])
        return 0;
    Py_ssize_t lead = 0, trail = 0, gap = 0, run = 0, i;
    while (lead < n && flags[lead])
        lead++;
    if (lead == n)
        return 0; /* all shared: the whole page is the match */
    if (lead == 0) { /* the page's end matter: every shared value below its own head */
        Py_ssize_t head = 0, held = 0;
        while (!flags[head])
            head++;
        for (i = head; i < n; i++)
            held += flags[i];
        return head >= FRAME_GAP && head * END_SHARE >= n
                       && (held * 2 <= theirs || held * END_PART <= n
                           || (held * END_RUN < n && held == n - head))
                   ? held
                   : 0;
    }
    if (n < FRAME_LEAST)
        return 0;
    while (flags[n - 1 - trail])
        trail++;
    for (i = lead; i < n - trail; i++) {
        run = flags[i] ? 0 : run + 1;
        if (run > gap)
            gap = run;
    }
    if (gap < FRAME_GAP || gap * FRAME_SHARE < n || gap < lead || gap * 2 < n - lead - trail)
        return 0;
    return (lead + trail) * 4 <= theirs * 3 ? lead + trail : 0;
}

/* edits_of: how many of a page's values not shared are scattered edits, given *flags* (1 when
 * shared) for its *n* compared values in page order; the side of a too long unshared run
 * holding fewer shared values is cut off, EDIT_TRIMS times at most, and the unshared runs
 * left are EDIT_RUN long at most on average. assign.edits_of is the reference. */
static Py_ssize_t edits_of(const unsigned char *flags, Py_ssize_t n)
{
    Py_ssize_t first = 0, last = n - 1, span = 0, held = 0, runs = 0, i;
    while (first < n && !flags[first])
        first++;
    if (first == n)
        return 0;
    while (!flags[last])
        last--;
    for (int trim = 0;; trim++) {
        Py_ssize_t run = 0, gap = 0, gap_end = first;
        span = last - first + 1;
        held = runs = 0;
        for (i = first; i <= last; i++) {
            if (flags[i]) {
                held++;
                run = 0;
            } else {
                if (++run == 1)
                    runs++;
                if (run > gap) {
                    gap = run;
                    gap_end = i;
                }
            }
        }
        if (gap * EDIT_GAP <= span)
            break;
        if (trim == EDIT_TRIMS)
            return 0;
        Py_ssize_t before = 0;
        for (i = first; i <= gap_end - gap; i++)
            before += flags[i];
        if (before * 2 >= held)
            last = gap_end - gap;
        else
            first = gap_end + 1;
    }
    if (span < EDIT_LEAST || (double)span < EDIT_COVER * (double)n
        || (double)held < EDIT_DENSITY * (double)span)
        return 0;
    return span - held <= EDIT_RUN * runs ? span - held : 0;
}

/* The page order of *n* values given their places (*pos*): *order* gets their indices, by
 * place, ties by index (keys packs the two into one word to sort; room for n). */
static void page_order(const uint32_t *pos, Py_ssize_t n, uint64_t *keys, uint32_t *order)
{
    for (Py_ssize_t i = 0; i < n; i++)
        keys[i] = (uint64_t)pos[i] << 32 | (uint64_t)i;
    sort_u64(keys, n);
    for (Py_ssize_t i = 0; i < n; i++)
        order[i] = (uint32_t)keys[i];
}

/* The flags (1: shared) of the first *m* of *live* (ascending), of which the *same* values at
 * *shared* are shared, in the page order *order* of all *nlive* (indices past m skipped),
 * written to *flags* (room for 2 * nlive); returns their count (m). */
static Py_ssize_t flags_in(const uint64_t *live, Py_ssize_t m, const uint32_t *order,
                           Py_ssize_t nlive, const uint64_t *shared, Py_ssize_t same,
                           unsigned char *flags)
{
    unsigned char *mark = flags + nlive; /* (room for 2 * nlive) */
    memset(mark, 0, (size_t)m);
    for (Py_ssize_t i = 0; i < same; i++) {
        Py_ssize_t at = sorted_at(live, m, shared[i]);
        if (at >= 0)
            mark[at] = 1;
    }
    Py_ssize_t n = 0;
    for (Py_ssize_t i = 0; i < nlive; i++)
        if (order[i] < (uint32_t)m)
            flags[n++] = mark[order[i]];
    return n;
}

/* frame_of for the first *m* of *live*, read as flags_in reads them, against *theirs* values
 * of the group's. */
static Py_ssize_t frame_in(const uint64_t *live, Py_ssize_t m, const uint32_t *order,
                           Py_ssize_t nlive, const uint64_t *shared, Py_ssize_t same,
                           Py_ssize_t theirs, unsigned char *flags)
{
    if (m < END_LEAST || !same)
        return 0;
    return frame_of(flags, flags_in(live, m, order, nlive, shared, same, flags), theirs);
}

/* edits_of for the first *m* of *live*, read as flags_in reads them. */
static Py_ssize_t edits_in(const uint64_t *live, Py_ssize_t m, const uint32_t *order,
                           Py_ssize_t nlive, const uint64_t *shared, Py_ssize_t same,
                           unsigned char *flags)
{
    if (m < EDIT_LEAST || !same)
        return 0;
    return edits_of(flags, flags_in(live, m, order, nlive, shared, same, flags));
}

/* The page order of the *nlive* values at *pos* made for fast_assign's guard: *keys*, *order*
 * and *flags* (room for 2 * nlive) allocated; -1 (MemoryError set) when they cannot be. */
static int page_order_for(const uint32_t *pos, Py_ssize_t nlive, uint64_t **keys,
                          uint32_t **order, unsigned char **flags)
{
    if (!(*keys = PyMem_Malloc((size_t)(nlive ? nlive : 1) * sizeof **keys))
        || !(*order = PyMem_Malloc((size_t)(nlive ? nlive : 1) * sizeof **order))
        || !(*flags = PyMem_Malloc((size_t)(nlive ? nlive : 1) * 2))) {
        PyErr_NoMemory();
        return -1;
    }
    page_order(pos, nlive, *keys, *order);
    return 0;
}

/* Whether the last in page order (*pos*) of the first *m* values of *live* (ascending) is
 * among the *same* values at *shared*: what a frame needs first (a page's frame ends it),
 * found with no sort. */
static int end_shared(const uint64_t *live, const uint32_t *pos, Py_ssize_t m,
                      const uint64_t *shared, Py_ssize_t same)
{
    Py_ssize_t last = -1;
    for (Py_ssize_t i = 0; i < m; i++)
        if (last < 0 || pos[i] > pos[last] || (pos[i] == pos[last] && i > last))
            last = i;
    if (last < 0)
        return 0;
    for (Py_ssize_t i = 0; i < same; i++)
        if (shared[i] == live[last])
            return 1;
    return 0;
}

/* set_aside's rule (with_theirs: its arguments end with the group's count) or edits_in's,
 * read from the page's flags; defined below. */
static PyObject *page_rule(PyObject *args, const char *name, int with_theirs);

/* set_aside(sketch, places, limit, common, more, shared, theirs): assign.set_aside: how many
 * of the values *shared* are the document's frame, its sketch values below *limit* and not in
 * *common* (a set or an AnchorMap) or *more* (a set) read in the order of *places* (native
 * uint32 words, one a value), against *theirs* values of the group's. 0 without places; None
 * for a value that is not a plain int below 2**64 (the Python version then answers). */
static PyObject *set_aside(PyObject *self, PyObject *args)
{
    (void)self;
    return page_rule(args, "set_aside", 1);
}

/* edits_in(sketch, places, limit, common, more, shared): assign.edits_in: how many of the
 * document's values not *shared* are scattered edits, read as set_aside reads the frame. */
static PyObject *edits_in_py(PyObject *self, PyObject *args)
{
    (void)self;
    return page_rule(args, "edits_in", 0);
}

static PyObject *page_rule(PyObject *args, const char *name, int with_theirs)
{
    PyObject *sketch, *places, *limit_o, *common, *more, *shared;
    Py_ssize_t theirs = 0;
    if (with_theirs ? !PyArg_ParseTuple(args, "OOOOO!On", &sketch, &places, &limit_o, &common,
                                        &PySet_Type, &more, &shared, &theirs)
                    : !PyArg_ParseTuple(args, "OOOOO!O", &sketch, &places, &limit_o, &common,
                                        &PySet_Type, &more, &shared))
        return NULL;
    if (!common_ok(name, common))
        return NULL;
    PyObject *fast = PySequence_Fast(sketch, "the sketch must be a sequence");
    if (!fast)
        return NULL;
    PyObject *sh = PySequence_Fast(shared, "shared must be a sequence");
    if (!sh) {
        Py_DECREF(fast);
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(fast), ns = PySequence_Fast_GET_SIZE(sh), i, m = 0;
    PyObject *result = NULL;
    uint64_t limit, *live = NULL, *keys = NULL, *sv = NULL;
    uint32_t *pos = NULL, *order = NULL;
    unsigned char *flags = NULL;
    int rc = sketch_value(limit_o, &limit);
    if (rc)
        goto odd;
    if (!PyBytes_CheckExact(places) || !n
        || PyBytes_GET_SIZE(places) != n * (Py_ssize_t)sizeof(uint32_t)) {
        result = PyLong_FromLong(0);
        goto done;
    }
    const char *pl = PyBytes_AS_STRING(places);
    live = PyMem_Malloc((size_t)n * sizeof *live);
    keys = PyMem_Malloc((size_t)n * sizeof *keys);
    sv = PyMem_Malloc((size_t)(ns ? ns : 1) * sizeof *sv);
    pos = PyMem_Malloc((size_t)n * sizeof *pos);
    order = PyMem_Malloc((size_t)n * sizeof *order);
    flags = PyMem_Malloc((size_t)n * 2);
    if (!live || !keys || !sv || !pos || !order || !flags) {
        PyErr_NoMemory();
        goto done;
    }
    PyObject **items = PySequence_Fast_ITEMS(fast);
    for (i = 0; i < n; i++) { /* the values compared, with their places, by value */
        uint64_t v;
        if ((rc = sketch_value(items[i], &v)) != 0)
            goto odd;
        if (v >= limit)
            continue;
        int in = guard_common(common, more, items[i], v);
        if (in < 0)
            goto done;
        if (in)
            continue;
        live[m] = v;
        memcpy(&pos[m++], pl + i * sizeof(uint32_t), sizeof(uint32_t));
    }
    for (i = 1; i < m; i++)
        if (live[i - 1] >= live[i]) { /* not ascending: the Python way */
            rc = 1;
            goto odd;
        }
    PyObject **sitems = PySequence_Fast_ITEMS(sh);
    for (i = 0; i < ns; i++)
        if ((rc = sketch_value(sitems[i], &sv[i])) != 0)
            goto odd;
    page_order(pos, m, keys, order);
    result = PyLong_FromSsize_t(with_theirs ? frame_in(live, m, order, m, sv, ns, theirs, flags)
                                            : edits_in(live, m, order, m, sv, ns, flags));
    goto done;
odd:
    if (rc > 0)
        result = Py_NewRef(Py_None);
done:
    Py_DECREF(fast);
    Py_DECREF(sh);
    PyMem_Free(live);
    PyMem_Free(keys);
    PyMem_Free(sv);
    PyMem_Free(pos);
    PyMem_Free(order);
    PyMem_Free(flags);
    return result;
}

/* -- a hash as a uint64 ------------------------------------------------------------------- */

/* A Python int as a uint64: 0, or 1 when it is not an int in [0, 2**64), -1 on an error. */
static int u64_value(PyObject *o, uint64_t *v)
{
#if PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
    if (PyLong_CheckExact(o) && small_u64(o, v))
        return 0;
    if (PyLong_CheckExact(o) && Py_SIZE(o) == 3) { /* 61 to 90 bits: an anchor's fingerprint */
        const digit *d = ((PyLongObject *)o)->ob_digit;
        if (d[2] >= 16) /* past 64 bits */
            return 1;
        *v = (uint64_t)d[0] | ((uint64_t)d[1] << 30) | ((uint64_t)d[2] << 60);
        return 0;
    }
#endif
    if (sketch_value(o, v) == 0)
        return 0;
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

/* -- AnchorMap and VoteMap: the memory store's anchor, exact-text, common and vote tables ----
 *
 * Hash tables from unsigned 64-bit fingerprints to group ids (1 .. 2**32 - 2), with the
 * mapping protocol of a dict (get, [], in, del, pop, len, keys, values, items) and nothing the
 * garbage collector walks. An AnchorMap holds one id a key: 12 bytes an entry, where a dict
 * holds an entry, a key int and a value int (~85 bytes). A VoteMap holds a tuple of ids a key
 * (the groups kept apart on a hash), in the order given, in slots of w ids: 3 to begin with,
 * the most the default policy keeps (20 bytes an entry, where a dict with its tuple holds
 * ~200); storing a longer tuple widens every slot.
 *
 * Open addressing with linear probing, in 256 shards that each grow on their own (so an add
 * never pauses to rehash more than 1/256 of the table) to 1.6 times their entries once 3/4
 * full, so a table stays about 70 % full. A slot's first id 0 marks it empty, TOMB deleted.
 * The keys are farmhash values, mixed once more so that crafted ones cannot pile up in one run
 * of slots. pack() writes the entries sorted by key, little-endian, so equal maps pack
 * equally: an AnchorMap's as 8 bytes of key and 4 of id; a VoteMap's as its width w (4
 * bytes), then 8 bytes of key and w ids of 4 bytes (0 past the tuple's end) an entry. Each
 * type's constructor reads its packing back. */

#define TOMB UINT32_MAX
#define SHARDS 256
#define VOTE_WIDTH 3
/* The most ids a VoteMap keeps a hash (its packing's widest slot; MatchPolicy.votes keeps
 * its tuples shorter). */
#define VOTE_MOST (1 << 16)

typedef struct {
    uint64_t *keys;
    uint32_t *vals;  /* w ids a slot */
    Py_ssize_t cap;  /* slots, or 0 */
    Py_ssize_t used; /* live and deleted slots */
} Shard;

typedef struct {
    PyObject_HEAD
    Shard sh[SHARDS];
    Py_ssize_t n; /* live entries */
    Py_ssize_t w; /* ids a slot: 1 in an AnchorMap */
    /* A Bloom filter of the keys (see am_has: made for a map that is asked that, the common
     * hashes), or NULL: 2 bits a key in one word; never says "absent" of a key held. */
    uint64_t *filter;
    uint64_t fmask;    /* its words - 1 (a power of two) */
    Py_ssize_t fkeys;  /* the most keys it stays sharp for: made anew, larger, past that */
} AnchorMap;

static PyTypeObject AnchorMapType, VoteMapType;
#define IS_MAP(o) (Py_TYPE(o) == &AnchorMapType || Py_TYPE(o) == &VoteMapType)
#define IS_VOTES(m) (Py_TYPE(m) == &VoteMapType)

static inline uint64_t am_mix(uint64_t k)
{
    k ^= k >> 33;
    k *= 0xff51afd7ed558ccdULL;
    k ^= k >> 33;
    return k;
}

/* The first slot to probe for the mixed key *h* in a shard of *cap* slots: the 56 bits below
 * the shard's, scaled to cap. */
static inline Py_ssize_t am_home(uint64_t h, Py_ssize_t cap)
{
    return (Py_ssize_t)(((unsigned __int128)(h << 8) * (uint64_t)cap) >> 64);
}

static inline Py_ssize_t am_next(Py_ssize_t i, Py_ssize_t cap) { return i + 1 == cap ? 0 : i + 1; }

static inline int am_live_slot(uint32_t first) { return first != 0 && first != TOMB; }

/* The shard of *k* and, through *slot*, its slot there, or -1; and through *free* (when not
 * NULL) the first slot of its probe that is not live, where it would be put (-1: none yet). */
static inline Shard *am_probe(AnchorMap *m, uint64_t k, Py_ssize_t *slot, Py_ssize_t *free)
{
    uint64_t h = am_mix(k);
    Shard *s = &m->sh[h >> 56];
    *slot = -1;
    if (free)
        *free = -1;
    if (!s->cap)
        return s;
    for (Py_ssize_t i = am_home(h, s->cap);; i = am_next(i, s->cap)) {
        uint32_t v = s->vals[i * m->w];
        if (v == 0) {
            if (free && *free < 0)
                *free = i;
            return s;
        }
        if (v == TOMB) {
            if (free && *free < 0)
                *free = i;
        } else if (s->keys[i] == k) {
            *slot = i;
            return s;
        }
    }
}

/* The shard of *k* and, through *slot*, its slot there, or -1. */
static Shard *am_find(AnchorMap *m, uint64_t k, Py_ssize_t *slot)
{
    return am_probe(m, k, slot, NULL);
}

/* The filter's word (through *word*) and its two bits for key *k*. */
static inline uint64_t am_filter_bits(uint64_t k, uint64_t *word)
{
    uint64_t g = am_mix(k) * 0x9E3779B97F4A7C15ULL;
    *word = g >> 32;
    return ((uint64_t)1 << (g & 63)) | ((uint64_t)1 << ((g >> 6) & 63));
}

static inline void am_filter_add(AnchorMap *m, uint64_t k)
{
    uint64_t w, bits = am_filter_bits(k, &w);
    m->filter[w & m->fmask] |= bits;
}

/* (Re)make the filter for the keys held: 16 bits a key (2 % false hits), rounded up; sharp to
 * 8 bits a key (5 %). On no memory: no filter (a filter only saves time). */
static void am_filter_make(AnchorMap *m)
{
    uint64_t words = 64;
    while (words * 64 < (uint64_t)m->n * 16 && words < ((uint64_t)1 << 32))
        words *= 2;
    PyMem_Free(m->filter);
    m->filter = PyMem_Calloc((size_t)words, sizeof(uint64_t));
    if (!m->filter)
        return;
    m->fmask = words - 1;
    m->fkeys = (Py_ssize_t)(words * 64 / 8);
    for (int j = 0; j < SHARDS; j++) {
        const Shard *s = &m->sh[j];
        for (Py_ssize_t i = 0; i < s->cap; i++)
            if (s->vals[i * m->w] != 0 && s->vals[i * m->w] != TOMB)
                am_filter_add(m, s->keys[i]);
    }
}

/* Whether *m* holds the key *k*. A map asked this (the common hashes, for every sketch value
 * a placement compares: most are not common) keeps a filter from its first few hundred keys
 * on, which answers most misses without a probe. */
static inline int am_has(AnchorMap *m, uint64_t k)
{
    if (!m->n)
        return 0;
    if (!m->filter && m->n >= 256)
        am_filter_make(m);
    if (m->filter) {
        uint64_t w, bits = am_filter_bits(k, &w);
        if ((m->filter[w & m->fmask] & bits) != bits)
            return 0;
    }
    Py_ssize_t at;
    am_find(m, k, &at);
    return at >= 0;
}

/* The live entries of shard *s* (a count: the map keeps only the total). */
static Py_ssize_t am_live(const AnchorMap *m, const Shard *s)
{
    Py_ssize_t live = 0;
    for (Py_ssize_t i = 0; i < s->cap; i++)
        live += am_live_slot(s->vals[i * m->w]);
    return live;
}

/* Rehash shard *s* of *m* into room for *want* live entries. */
static int am_resize(AnchorMap *m, Shard *s, Py_ssize_t want)
{
    Py_ssize_t w = m->w, cap = want * 8 / 5 + 1;
    cap = cap < 16 ? 16 : cap;
    uint64_t *keys = PyMem_Calloc((size_t)cap, sizeof(uint64_t));
    uint32_t *vals = PyMem_Calloc((size_t)(cap * w), sizeof(uint32_t));
    if (!keys || !vals) {
        PyMem_Free(keys);
        PyMem_Free(vals);
        PyErr_NoMemory();
        return -1;
    }
    Py_ssize_t live = 0;
    for (Py_ssize_t i = 0; i < s->cap; i++) {
        if (!am_live_slot(s->vals[i * w]))
            continue;
        Py_ssize_t j = am_home(am_mix(s->keys[i]), cap);
        while (vals[j * w])
            j = am_next(j, cap);
        keys[j] = s->keys[i];
        if (w == 1) /* an AnchorMap's one id: no call to copy it */
            vals[j] = s->vals[i];
        else
            memcpy(&vals[j * w], &s->vals[i * w], (size_t)w * sizeof(uint32_t));
        live++;
    }
    PyMem_Free(s->keys);
    PyMem_Free(s->vals);
    s->keys = keys;
    s->vals = vals;
    s->cap = cap;
    s->used = live;
    return 0;
}

/* Make every slot of *m* hold *w* ids (more than now): all shards or, on an error, none. */
static int am_widen(AnchorMap *m, Py_ssize_t w)
{
    uint32_t *wide[SHARDS] = {NULL};
    for (int j = 0; j < SHARDS; j++) {
        const Shard *s = &m->sh[j];
        if (!s->cap)
            continue;
        if (!(wide[j] = PyMem_Calloc((size_t)(s->cap * w), sizeof(uint32_t)))) {
            for (int i = 0; i < j; i++)
                PyMem_Free(wide[i]);
            PyErr_NoMemory();
            return -1;
        }
        for (Py_ssize_t i = 0; i < s->cap; i++)
            memcpy(&wide[j][i * w], &s->vals[i * m->w], (size_t)m->w * sizeof(uint32_t));
    }
    for (int j = 0; j < SHARDS; j++)
        if (m->sh[j].cap) {
            PyMem_Free(m->sh[j].vals);
            m->sh[j].vals = wide[j];
        }
    m->w = w;
    return 0;
}

/* Set *k* to the *len* ids at *ids* (len from 1 to m->w). */
static int am_put(AnchorMap *m, uint64_t k, const uint32_t *ids, Py_ssize_t len)
{
    Py_ssize_t at, free, w = m->w;
    Shard *s = am_probe(m, k, &at, &free);
    if (at < 0) {
        if ((s->used + 1) * 4 > s->cap * 3) {
            if (am_resize(m, s, am_live(m, s) + 1) < 0)
                return -1;
            free = -1;
        }
        at = free; /* the first slot not live from its home: found by the probe */
        if (at < 0) {
            at = am_home(am_mix(k), s->cap);
            while (am_live_slot(s->vals[at * w]))
                at = am_next(at, s->cap);
        }
        if (s->vals[at * w] == 0)
            s->used++;
        s->keys[at] = k;
        m->n++;
    }
    if (w == 1) { /* an AnchorMap's one id (len is 1): no calls to copy and clear */
        s->vals[at] = ids[0];
    } else {
        memcpy(&s->vals[at * w], ids, (size_t)len * sizeof(uint32_t));
        memset(&s->vals[at * w + len], 0, (size_t)(w - len) * sizeof(uint32_t));
    }
    if (m->filter) { /* the slot is live now: a filter made anew holds its key too */
        if (m->n > m->fkeys)
            am_filter_make(m);
        else
            am_filter_add(m, k);
    }
    return 0;
}

/* A key as a uint64: 0, 1 when it is not an int in [0, 2**64) (no such key), -1 on error. */
static int am_key(PyObject *o, uint64_t *k)
{
    if (PyLong_CheckExact(o)) /* read from its digits where it can be */
        return u64_value(o, k);
    if (!PyLong_Check(o) || PyBool_Check(o))
        return 1;
    uint64_t x = PyLong_AsUnsignedLongLong(o);
    if (x == (uint64_t)-1 && PyErr_Occurred()) {
        if (!PyErr_ExceptionMatches(PyExc_OverflowError))
            return -1;
        PyErr_Clear();
        return 1;
    }
    *k = x;
    return 0;
}

/* A group id as a uint32 (0, or -1 with ValueError when *o* is none). */
static int am_id(PyObject *o, uint32_t *v)
{
    if (PyLong_Check(o) && !PyBool_Check(o)) {
        unsigned long long x = PyLong_AsUnsignedLongLong(o);
        if (!(x == (unsigned long long)-1 && PyErr_Occurred()) && x >= 1 && x < TOMB) {
            *v = (uint32_t)x;
            return 0;
        }
        PyErr_Clear();
    }
    PyErr_Format(PyExc_ValueError, "an anchor or vote table holds group ids from 1 to %u, not %R",
                 TOMB - 1, o);
    return -1;
}

/* The value of the *w* ids at *ids* (a slot's, or a copy of one) as a new object: an
 * AnchorMap's id, a VoteMap's tuple. The ids are copied before the tuple is made: making it
 * may start a collection whose finalizers change the map (widening it frees every slot). */
static PyObject *am_value_of_ids(const AnchorMap *m, const uint32_t *ids, Py_ssize_t w)
{
    if (!IS_VOTES(m))
        return PyLong_FromUnsignedLong(ids[0]);
    Py_ssize_t len = 0;
    while (len < w && ids[len])
        len++;
    uint32_t few[VOTE_WIDTH], *copy = len <= VOTE_WIDTH ? few : PyMem_Malloc(len * sizeof *copy);
    if (!copy)
        return PyErr_NoMemory();
    memcpy(copy, ids, (size_t)len * sizeof *copy);
    PyObject *out = PyTuple_New(len);
    for (Py_ssize_t i = 0; out && i < len; i++) {
        PyObject *g = PyLong_FromUnsignedLong(copy[i]);
        if (!g)
            Py_CLEAR(out);
        else
            PyTuple_SET_ITEM(out, i, g);
    }
    if (copy != few)
        PyMem_Free(copy);
    return out;
}

/* The value in slot *at* of shard *s* as a new object. */
static PyObject *am_value_at(AnchorMap *m, const Shard *s, Py_ssize_t at)
{
    return am_value_of_ids(m, &s->vals[at * m->w], m->w);
}

/* The shard and slot of *key* (through *s* and *at*; at -1 when absent, or when *key* is not
 * an int in [0, 2**64)): 0, or -1 on an error. */
static int am_locate(AnchorMap *m, PyObject *key, Shard **s, Py_ssize_t *at)
{
    uint64_t k;
    int rc = am_key(key, &k);
    *at = -1;
    if (rc)
        return rc < 0 ? -1 : 0;
    *s = am_find(m, k, at);
    return 0;
}

/* The value of *key* as a new object, NULL with no error when absent, NULL with one on error. */
static PyObject *am_lookup(AnchorMap *m, PyObject *key)
{
    Shard *s;
    Py_ssize_t at;
    if (am_locate(m, key, &s, &at) < 0 || at < 0)
        return NULL;
    return am_value_at(m, s, at);
}

static int am_store(AnchorMap *m, PyObject *key, PyObject *value)
{
    uint64_t k;
    int rc = am_key(key, &k);
    if (rc > 0)
        PyErr_Format(PyExc_ValueError, "an anchor or vote table's keys are ints in [0, 2**64), "
                     "not %R", key);
    if (rc)
        return -1;
    if (!IS_VOTES(m)) {
        uint32_t v;
        return am_id(value, &v) < 0 ? -1 : am_put(m, k, &v, 1);
    }
    if (!PyTuple_Check(value) || PyTuple_GET_SIZE(value) == 0) {
        PyErr_Format(PyExc_ValueError, "a VoteMap holds tuples of one or more group ids, not %R",
                     value);
        return -1;
    }
    Py_ssize_t len = PyTuple_GET_SIZE(value);
    if (len > VOTE_MOST) {
        PyErr_Format(PyExc_ValueError, "a VoteMap holds at most %d group ids a hash, not %zd",
                     VOTE_MOST, len);
        return -1;
    }
    uint32_t few[VOTE_WIDTH], *ids = len <= VOTE_WIDTH ? few : PyMem_Malloc(len * sizeof(uint32_t));
    if (!ids) {
        PyErr_NoMemory();
        return -1;
    }
    rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < len; i++)
        rc = am_id(PyTuple_GET_ITEM(value, i), &ids[i]);
    if (rc == 0 && len > m->w)
        rc = am_widen(m, len);
    if (rc == 0)
        rc = am_put(m, k, ids, len);
    if (ids != few)
        PyMem_Free(ids);
    return rc;
}

/* Delete *key* if present: 1 when it was, 0 when not, -1 on error. */
static int am_discard(AnchorMap *m, PyObject *key)
{
    Shard *s;
    Py_ssize_t at;
    if (am_locate(m, key, &s, &at) < 0)
        return -1;
    if (at < 0)
        return 0;
    s->vals[at * m->w] = TOMB;
    m->n--;
    return 1;
}

/* Fill the new map *m* from *packed* (see pack()). */
static int am_unpack(AnchorMap *m, PyObject *packed)
{
    Py_ssize_t size = PyBytes_GET_SIZE(packed), w = 1;
    const unsigned char *p = (const unsigned char *)PyBytes_AS_STRING(packed);
    const char *what = IS_VOTES(m) ? "packed votes" : "packed anchors";
    if (IS_VOTES(m)) {
        w = size >= 4 ? (Py_ssize_t)load_le(p, 4) : 0;
        if (w < 1 || w > VOTE_MOST) {
            PyErr_Format(PyExc_ValueError, "%s begin with their width, from 1 to %d", what,
                         VOTE_MOST);
            return -1;
        }
        p += 4;
        size -= 4;
        if (w > m->w)
            m->w = w;
    }
    Py_ssize_t entry = 8 + 4 * w;
    if (size % entry) {
        PyErr_Format(PyExc_ValueError, "%s are %zd bytes each", what, entry);
        return -1;
    }
    for (int i = 0; size && i < SHARDS; i++)
        if (am_resize(m, &m->sh[i], size / entry / SHARDS + 1) < 0)
            return -1;
    uint32_t *ids = PyMem_Malloc((size_t)w * sizeof(uint32_t));
    if (!ids) {
        PyErr_NoMemory();
        return -1;
    }
    int rc = 0;
    for (Py_ssize_t at = 0; rc == 0 && at < size; at += entry) {
        uint64_t k = load_le(p + at, 8);
        Py_ssize_t len = 0, slot;
        int bad = 0;
        for (Py_ssize_t j = 0; j < w; j++) {
            ids[j] = (uint32_t)load_le(p + at + 8 + 4 * j, 4);
            bad |= ids[j] == TOMB || (ids[j] != 0 && len < j); /* an id after a 0 */
            len += ids[j] != 0 && len == j;
        }
        am_find(m, k, &slot);
        if (bad || len == 0 || slot >= 0) {
            PyErr_Format(PyExc_ValueError, "%s hold a repeated key or a bad id", what);
            rc = -1;
        } else {
            rc = am_put(m, k, ids, len);
        }
    }
    PyMem_Free(ids);
    return rc;
}

static PyObject *AnchorMap_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *packed = NULL;
    int filtered = 0;
    static char *kwlist[] = {"packed", "filtered", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|Sp", kwlist, &packed, &filtered))
        return NULL;
    AnchorMap *m = (AnchorMap *)type->tp_alloc(type, 0);
    if (!m)
        return NULL;
    m->w = type == &VoteMapType ? VOTE_WIDTH : 1;
    if (packed && am_unpack(m, packed) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    if (filtered) /* kept from the start (else made when first asked: see am_has) */
        am_filter_make(m);
    return (PyObject *)m;
}

static void AnchorMap_dealloc(AnchorMap *m)
{
    PyMem_Free(m->filter);
    for (int i = 0; i < SHARDS; i++) {
        PyMem_Free(m->sh[i].keys);
        PyMem_Free(m->sh[i].vals);
    }
    Py_TYPE(m)->tp_free((PyObject *)m);
}

static Py_ssize_t AnchorMap_len(AnchorMap *m) { return m->n; }

/* A table's answer for *key* (a new reference, or NULL: absent, or an error when one is set),
 * as a table's [] gives it: KeyError when absent. */
static PyObject *found_or_keyerror(PyObject *v, PyObject *key)
{
    if (!v && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, key);
    return v;
}

/* get(key, default=None), or pop(key[, default]) when *pop*, of a table: *find* gives its
 * value of a key (a new reference; for pop, taken out of the table), or NULL (absent, or an
 * error when one is set). */
static PyObject *get_or_pop(PyObject *(*find)(PyObject *, PyObject *), PyObject *table,
                            PyObject *const *args, Py_ssize_t nargs, int pop)
{
    if (nargs < 1 || nargs > 2) {
        PyErr_SetString(PyExc_TypeError, pop ? "pop(key[, default])" : "get(key, default=None)");
        return NULL;
    }
    PyObject *v = find(table, args[0]);
    if (v || PyErr_Occurred() || (pop && nargs == 1))
        return found_or_keyerror(v, args[0]);
    return Py_NewRef(nargs == 2 ? args[1] : Py_None);
}

static PyObject *AnchorMap_subscript(AnchorMap *m, PyObject *key)
{
    return found_or_keyerror(am_lookup(m, key), key);
}

static int AnchorMap_ass(AnchorMap *m, PyObject *key, PyObject *value)
{
    if (value)
        return am_store(m, key, value);
    int rc = am_discard(m, key);
    if (rc == 0)
        PyErr_SetObject(PyExc_KeyError, key);
    return rc > 0 ? 0 : -1;
}

static int AnchorMap_contains(AnchorMap *m, PyObject *key)
{
    Shard *s;
    Py_ssize_t at;
    if (am_locate(m, key, &s, &at) < 0)
        return -1;
    return at >= 0;
}

static PyObject *am_value_of(PyObject *m, PyObject *key) { return am_lookup((AnchorMap *)m, key); }

static PyObject *am_take(PyObject *m, PyObject *key)
{
    PyObject *v = am_lookup((AnchorMap *)m, key);
    if (v && am_discard((AnchorMap *)m, key) < 0)
        Py_CLEAR(v);
    return v;
}

static PyObject *AnchorMap_get(AnchorMap *m, PyObject *const *args, Py_ssize_t nargs)
{
    return get_or_pop(am_value_of, (PyObject *)m, args, nargs, 0);
}

static PyObject *AnchorMap_pop(AnchorMap *m, PyObject *const *args, Py_ssize_t nargs)
{
    return get_or_pop(am_take, (PyObject *)m, args, nargs, 1);
}

/* The live keys, sorted (what pack, keys, values and items walk: equal maps walk alike). */
static uint64_t *am_sorted_keys(AnchorMap *m)
{
    uint64_t *out = PyMem_Malloc((size_t)(m->n ? m->n : 1) * sizeof(uint64_t));
    if (!out) {
        PyErr_NoMemory();
        return NULL;
    }
    Py_ssize_t n = 0;
    for (int j = 0; j < SHARDS; j++) {
        const Shard *s = &m->sh[j];
        for (Py_ssize_t i = 0; i < s->cap; i++)
            if (am_live_slot(s->vals[i * m->w]))
                out[n++] = s->keys[i];
    }
    sort_u64(out, n);
    return out;
}

/* keys(), values() or items() (what = 0, 1, 2) as a list, in key order. The keys and their
 * ids are copied first: making the list and its items may start a collection, whose
 * finalizers may change the map, and what is built then reads only the copies. */
static PyObject *am_list(AnchorMap *m, int what)
{
    Py_ssize_t n = m->n, w = m->w;
    uint64_t *keys = am_sorted_keys(m);
    uint32_t *ids = keys ? PyMem_Malloc((size_t)(n ? n * w : 1) * sizeof *ids) : NULL;
    if (!ids) {
        PyMem_Free(keys);
        return keys ? PyErr_NoMemory() : NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        Py_ssize_t at;
        Shard *s = am_find(m, keys[i], &at);
        memcpy(&ids[i * w], &s->vals[at * w], (size_t)w * sizeof *ids);
    }
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *k = what != 1 ? PyLong_FromUnsignedLongLong(keys[i]) : NULL;
        PyObject *v = what != 0 ? am_value_of_ids(m, &ids[i * w], w) : NULL;
        PyObject *item = what == 0 ? k : what == 1 ? v : (k && v ? PyTuple_Pack(2, k, v) : NULL);
        if (what == 2) {
            Py_XDECREF(k);
            Py_XDECREF(v);
        }
        if (!item) {
            Py_CLEAR(out);
            break;
        }
        PyList_SET_ITEM(out, i, item);
    }
    PyMem_Free(keys);
    PyMem_Free(ids);
    return out;
}

static PyObject *AnchorMap_keys(AnchorMap *m, PyObject *unused) { return am_list(m, 0); }
static PyObject *AnchorMap_values(AnchorMap *m, PyObject *unused) { return am_list(m, 1); }
static PyObject *AnchorMap_items(AnchorMap *m, PyObject *unused) { return am_list(m, 2); }

/* An iterator over *keys* (a new reference to a list, or NULL on an error): a table's
 * __iter__. */
static PyObject *iter_over(PyObject *keys)
{
    if (!keys)
        return NULL;
    PyObject *it = PyObject_GetIter(keys);
    Py_DECREF(keys);
    return it;
}

static PyObject *AnchorMap_iter(AnchorMap *m) { return iter_over(am_list(m, 0)); }

static PyObject *AnchorMap_pack(AnchorMap *m, PyObject *unused)
{
    uint64_t *keys = am_sorted_keys(m);
    if (!keys)
        return NULL;
    Py_ssize_t head = IS_VOTES(m) ? 4 : 0, entry = 8 + 4 * m->w;
    PyObject *out = PyBytes_FromStringAndSize(NULL, head + m->n * entry);
    if (out) {
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
        if (head)
            store_le(p, (uint64_t)m->w, 4);
        p += head;
        for (Py_ssize_t i = 0; i < m->n; i++, p += entry) {
            Py_ssize_t at;
            Shard *s = am_find(m, keys[i], &at);
            store_le(p, keys[i], 8);
            for (Py_ssize_t j = 0; j < m->w; j++)
                store_le(p + 8 + 4 * j, s->vals[at * m->w + j], 4);
        }
    }
    PyMem_Free(keys);
    return out;
}

/* (least, greatest) id, or None when empty: how a snapshot's ids are checked at once. */
static PyObject *AnchorMap_bounds(AnchorMap *m, PyObject *unused)
{
    uint32_t lo = TOMB, hi = 0;
    for (int j = 0; j < SHARDS; j++)
        for (Py_ssize_t i = 0; i < m->sh[j].cap; i++) {
            const uint32_t *ids = &m->sh[j].vals[i * m->w];
            if (!am_live_slot(ids[0]))
                continue;
            for (Py_ssize_t k = 0; k < m->w && ids[k]; k++) {
                lo = ids[k] < lo ? ids[k] : lo;
                hi = ids[k] > hi ? ids[k] : hi;
            }
        }
    if (!m->n)
        Py_RETURN_NONE;
    return Py_BuildValue("(kk)", (unsigned long)lo, (unsigned long)hi);
}

static PyObject *AnchorMap_sizeof(AnchorMap *m, PyObject *unused)
{
    Py_ssize_t held = (Py_ssize_t)sizeof(AnchorMap);
    if (m->filter)
        held += (Py_ssize_t)(m->fmask + 1) * 8;
    for (int j = 0; j < SHARDS; j++)
        held += m->sh[j].cap * (8 + 4 * m->w);
    return PyLong_FromSsize_t(held);
}

/* Equal when both hold the same keys with the same values (whatever their slots' widths). */
static PyObject *AnchorMap_richcompare(PyObject *a, PyObject *b, int op)
{
    if ((op != Py_EQ && op != Py_NE) || Py_TYPE(b) != Py_TYPE(a))
        Py_RETURN_NOTIMPLEMENTED;
    AnchorMap *x = (AnchorMap *)a, *y = (AnchorMap *)b;
    int same = x->n == y->n;
    for (int j = 0; same && j < SHARDS; j++) {
        const Shard *s = &x->sh[j];
        for (Py_ssize_t i = 0; same && i < s->cap; i++) {
            const uint32_t *ids = &s->vals[i * x->w];
            if (!am_live_slot(ids[0]))
                continue;
            Py_ssize_t at, wide = x->w > y->w ? x->w : y->w;
            const Shard *t = am_find(y, s->keys[i], &at);
            same = at >= 0;
            for (Py_ssize_t k = 0; same && k < wide; k++)
                same = (k < x->w ? ids[k] : 0) == (k < y->w ? t->vals[at * y->w + k] : 0);
        }
    }
    return PyBool_FromLong(op == Py_EQ ? same : !same);
}

static PyMappingMethods AnchorMap_mapping = {
    (lenfunc)AnchorMap_len, (binaryfunc)AnchorMap_subscript, (objobjargproc)AnchorMap_ass};
static PySequenceMethods AnchorMap_sequence = {.sq_contains = (objobjproc)AnchorMap_contains};

static PyMethodDef AnchorMap_methods[] = {
    {"get", (PyCFunction)(void (*)(void))AnchorMap_get, METH_FASTCALL,
     "get(key, default=None): the value of key, or default."},
    {"pop", (PyCFunction)(void (*)(void))AnchorMap_pop, METH_FASTCALL,
     "pop(key[, default]): remove key and return its value."},
    {"keys", (PyCFunction)AnchorMap_keys, METH_NOARGS, "The keys, as a list in key order."},
    {"values", (PyCFunction)AnchorMap_values, METH_NOARGS, "The values, in key order."},
    {"items", (PyCFunction)AnchorMap_items, METH_NOARGS, "(key, value) pairs, in key order."},
    {"pack", (PyCFunction)AnchorMap_pack, METH_NOARGS,
     "The entries as bytes, sorted by key, little-endian (see the type's doc)."},
    {"bounds", (PyCFunction)AnchorMap_bounds, METH_NOARGS,
     "(least id, greatest id), or None when empty."},
    {"__sizeof__", (PyCFunction)AnchorMap_sizeof, METH_NOARGS, "Bytes held."},
    {NULL, NULL, 0, NULL}};

/* The two map types differ only in name and doc (AnchorMap_new sets a VoteMap's width). */
#define MAP_TYPE(NAME, DOC)                                                                     \
    {                                                                                           \
        PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nshash.methods.nshash._assign." NAME,         \
        .tp_doc = DOC, .tp_basicsize = sizeof(AnchorMap), .tp_flags = Py_TPFLAGS_DEFAULT,       \
        .tp_new = AnchorMap_new, .tp_dealloc = (destructor)AnchorMap_dealloc,                   \
        .tp_as_mapping = &AnchorMap_mapping, .tp_as_sequence = &AnchorMap_sequence,             \
        .tp_iter = (getiterfunc)AnchorMap_iter, .tp_methods = AnchorMap_methods,                \
        .tp_richcompare = AnchorMap_richcompare, .tp_hash = PyObject_HashNotImplemented,        \
    }

static PyTypeObject AnchorMapType = MAP_TYPE(
    "AnchorMap", "AnchorMap(packed=b'', filtered=False): fingerprint -> group id, 12 bytes an "
                 "entry; packed: 8 bytes of key, 4 of id an entry, little-endian. filtered: keep "
                 "a Bloom filter of the keys from the start (~2 bytes a key; a map asked for "
                 "values it mostly does not hold, the common hashes, makes one anyway).");

static PyTypeObject VoteMapType = MAP_TYPE(
    "VoteMap", "VoteMap(packed=b'', filtered=False): fingerprint -> tuple of group ids, 8 + 4 * width bytes an "
               "entry (width 3, or the longest tuple stored); packed: the width (4 bytes), then "
               "8 bytes of key and width ids of 4 bytes (0 past the tuple) an entry, "
               "little-endian.");

/* -- the common hashes: a set, or the memory store's AnchorMap of hash -> 1 ------------------ */

/* Whether *item* (an int; its value *v* when have_v, as a packed value has no object) is in
 * *common*: 1, 0 or -1. An AnchorMap is looked up by the value, with no object made. */
static int in_common(PyObject *common, PyObject *item, int have_v, uint64_t v)
{
    if (Py_TYPE(common) == &AnchorMapType) {
        if (!((AnchorMap *)common)->n)
            return 0;
        if (!have_v) {
            int rc = u64_value(item, &v);
            if (rc)
                return rc < 0 ? -1 : 0; /* not an int in [0, 2**64): no such hash */
        }
        return am_has((AnchorMap *)common, v);
    }
    if (!PySet_GET_SIZE(common))
        return 0;
    if (item)
        return PySet_Contains(common, item);
    PyObject *o = PyLong_FromUnsignedLongLong(v);
    int in = o ? PySet_Contains(common, o) : -1;
    Py_XDECREF(o);
    return in;
}

/* guard_core's test of a sketch value *v* (its object *item*, or NULL for a packed value):
 * whether *common* or the set *more* holds it. */
static int guard_common(PyObject *common, PyObject *more, PyObject *item, uint64_t v)
{
    int in = in_common(common, item, 1, v);
    return in == 0 && PySet_GET_SIZE(more) ? in_common(more, item, 1, v) : in;
}

/* -- blocks: a bytes value kept raw ---------------------------------------------------------
 *
 * A record or a packed sketch held by a table as a block of its own: its length in 4 bytes
 * (little-endian), then its bytes; ~30 bytes less than a bytes object, and allocated outside
 * the object allocator's pools (which the text pipeline's short-lived objects churn, and which
 * a long-lived object then keeps from being given back). */

/* A block holding the bytes object *value* (NULL with an error when it is not one). */
static unsigned char *block_of(PyObject *value)
{
    if (!PyBytes_CheckExact(value)) {
        PyErr_Format(PyExc_TypeError, "this table holds bytes, not %.50s", Py_TYPE(value)->tp_name);
        return NULL;
    }
    Py_ssize_t len = PyBytes_GET_SIZE(value);
    if (len > (Py_ssize_t)UINT32_MAX - 4) {
        PyErr_SetString(PyExc_OverflowError, "a table's values are under 4 GiB");
        return NULL;
    }
    unsigned char *block = PyMem_RawMalloc((size_t)len + 4);
    if (!block) {
        PyErr_NoMemory();
        return NULL;
    }
    store_le(block, (uint64_t)len, 4);
    memcpy(block + 4, PyBytes_AS_STRING(value), (size_t)len);
    return block;
}

static inline Py_ssize_t block_len(const unsigned char *block)
{
    return (Py_ssize_t)load_le(block, 4);
}

/* The bytes of *block*, as a new bytes object. */
static PyObject *block_bytes(const unsigned char *block)
{
    return PyBytes_FromStringAndSize((const char *)block + 4, block_len(block));
}

/* -- a table's entries, copied out --------------------------------------------------------
 *
 * keys(), values(), items(), to_dict() and == of a GroupTable or a DocTable first copy every
 * key and value (new references) into arrays, making only int, str and bytes objects, which
 * start no collection: so no finalizer changes the table while it is walked. What is built
 * from the copies (lists, tuples, a dict) then may start one. */
typedef struct {
    PyObject **keys, **values;
    Py_ssize_t n, cap;
} Entries;

static int entries_begin(Entries *e, Py_ssize_t cap)
{
    e->n = 0;
    e->cap = cap ? cap : 1;
    e->keys = PyMem_Malloc((size_t)e->cap * sizeof *e->keys);
    e->values = PyMem_Malloc((size_t)e->cap * sizeof *e->values);
    if (e->keys && e->values)
        return 0;
    PyMem_Free(e->keys);
    PyMem_Free(e->values);
    PyErr_NoMemory();
    return -1;
}

static void entries_end(Entries *e)
{
    for (Py_ssize_t i = 0; i < e->n; i++) {
        Py_DECREF(e->keys[i]);
        Py_DECREF(e->values[i]);
    }
    PyMem_Free(e->keys);
    PyMem_Free(e->values);
}

/* Append *key* and *value* (new references; either NULL on an error, when the other is
 * dropped and everything copied so far released): 0 or -1. */
static int entries_add(Entries *e, PyObject *key, PyObject *value)
{
    if (key && value) {
        e->keys[e->n] = key;
        e->values[e->n++] = value;
        return 0;
    }
    Py_XDECREF(key);
    Py_XDECREF(value);
    entries_end(e);
    return -1;
}

/* keys (what = 0), values (1), (key, value) pairs (2) or a dict (3) of a table, copied out by
 * *copy* (which fills an Entries, or returns -1 with it released). */
static PyObject *entries_as(PyObject *table, int (*copy)(PyObject *, Entries *), int what)
{
    Entries e;
    if (copy(table, &e) < 0)
        return NULL;
    PyObject *out = what == 3 ? PyDict_New() : PyList_New(e.n);
    for (Py_ssize_t i = 0; out && i < e.n; i++) {
        PyObject *k = e.keys[i], *v = e.values[i], *item;
        if (what == 3) {
            if (PyDict_SetItem(out, k, v) < 0)
                Py_CLEAR(out);
            continue;
        }
        item = what == 0 ? Py_NewRef(k) : what == 1 ? Py_NewRef(v) : PyTuple_Pack(2, k, v);
        if (!item)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, item);
    }
    entries_end(&e);
    return out;
}

static PyObject *dict_value_of(PyObject *d, PyObject *key)
{
    return Py_XNewRef(PyDict_GetItemWithError(d, key));
}

/* a == b (op Py_EQ) or a != b (Py_NE) for table *a* of *ours* entries, copied out by *copy*,
 * and table *b* of *theirs*, read by *lookup* (a value as a new reference, NULL when absent
 * or on an error; a dict is read as a dict reads itself: no __missing__ of a subclass runs). */
static PyObject *entries_compare(PyObject *a, int (*copy)(PyObject *, Entries *), Py_ssize_t ours,
                                 PyObject *b, PyObject *(*lookup)(PyObject *, PyObject *),
                                 Py_ssize_t theirs, int op)
{
    int same = ours == theirs;
    Entries e;
    if (same) {
        if (copy(a, &e) < 0)
            return NULL;
        for (Py_ssize_t i = 0; same > 0 && i < e.n; i++) {
            PyObject *other = lookup(b, e.keys[i]);
            if (!other)
                same = PyErr_Occurred() ? -1 : 0;
            else
                same = PyObject_RichCompareBool(e.values[i], other, Py_EQ);
            Py_XDECREF(other);
        }
        entries_end(&e);
        if (same < 0)
            return NULL;
    }
    return PyBool_FromLong(op == Py_EQ ? same : !same);
}

/* -- GroupTable: group id -> object, a slot per id ------------------------------------------
 *
 * The memory store's per-group tables (sketch, size, members) are keyed by group ids, which a
 * counter hands out from 1 and never reuses: so they are slots indexed by id, 8 bytes an
 * entry, where a dict entry with its int key takes about 70. The slots lie in pages of
 * GT_PAGE ids (8 KB), made when an id in them is first set and freed when their last entry
 * goes (a retention window's forgotten groups give their pages back), so a table grows
 * without a rehash (no pause as a dict's resize makes) and sparse ids cost a page each. Keys,
 * values and items come in id order. A table made with blobs (the sketches) holds bytes only,
 * each kept in its slot as a block (see block_of) and made a bytes object again when read. */
#define GT_SHIFT 10
#define GT_PAGE (1 << GT_SHIFT)

typedef struct {
    PyObject_HEAD
    PyObject ***pages; /* pages[i]: the slots of ids i * GT_PAGE on (GT_PAGE of them), or NULL */
    uint16_t *live;    /* entries in each page (GT_PAGE fits: a page is freed at 0) */
    Py_ssize_t npages; /* pages[] allocated */
    Py_ssize_t n;      /* entries */
    int blobs;         /* the values are bytes, each kept as a block (see block_of) */
} GroupTable;

static PyTypeObject GroupTableType;
#define IS_GROUPS(o) (Py_TYPE(o) == &GroupTableType)

/* *key* as an id: 0, 1 when it is not an int in [1, TOMB) (no such key), -1 on error. */
static int gt_id(PyObject *key, uint32_t *id)
{
    uint64_t k = 0;
    int rc = am_key(key, &k);
    if (rc == 0 && (k == 0 || k >= TOMB))
        rc = 1;
    *id = (uint32_t)k;
    return rc;
}

/* The slot of *id*, or NULL when its page is not made. */
static inline PyObject **gt_slot(const GroupTable *g, uint32_t id)
{
    Py_ssize_t p = id >> GT_SHIFT;
    return p < g->npages && g->pages[p] ? &g->pages[p][id & (GT_PAGE - 1)] : NULL;
}

/* The value of *key*, borrowed (in a table of blocks: the block, to test only): NULL with no
 * error when absent, NULL with one on error. */
static PyObject *gt_borrow(const GroupTable *g, PyObject *key)
{
    uint32_t id;
    int rc = gt_id(key, &id);
    PyObject **slot = rc == 0 ? gt_slot(g, id) : NULL;
    return slot ? *slot : NULL;
}

/* The value in a slot, *v* (not NULL), as a new reference. */
static inline PyObject *gt_value(const GroupTable *g, PyObject *v)
{
    return g->blobs ? block_bytes((const unsigned char *)v) : Py_NewRef(v);
}

/* The value of *key*, a new reference: NULL with no error when absent, NULL with one on error. */
static PyObject *gt_get(const GroupTable *g, PyObject *key)
{
    PyObject *v = gt_borrow(g, key);
    return v ? gt_value(g, v) : NULL;
}

static inline void gt_drop(const GroupTable *g, PyObject *v)
{
    if (g->blobs)
        PyMem_RawFree(v);
    else
        Py_DECREF(v);
}

static int gt_store(GroupTable *g, PyObject *key, PyObject *value)
{
    uint32_t id;
    int rc = gt_id(key, &id);
    if (rc > 0)
        PyErr_Format(PyExc_ValueError, "a group table's keys are group ids from 1 to %u, not %R",
                     TOMB - 1, key);
    if (rc)
        return -1;
    unsigned char *block = NULL;
    if (g->blobs && !(block = block_of(value)))
        return -1;
    Py_ssize_t p = id >> GT_SHIFT;
    if (p >= g->npages) {
        Py_ssize_t want = p + 1 > g->npages * 2 ? p + 1 : g->npages * 2;
        PyObject ***pages = PyMem_Realloc(g->pages, (size_t)want * sizeof *pages);
        uint16_t *live = pages ? PyMem_Realloc(g->live, (size_t)want * sizeof *live) : NULL;
        if (pages)
            g->pages = pages;
        if (!live) {
            PyMem_RawFree(block);
            PyErr_NoMemory();
            return -1;
        }
        g->live = live;
        memset(pages + g->npages, 0, (size_t)(want - g->npages) * sizeof *pages);
        memset(live + g->npages, 0, (size_t)(want - g->npages) * sizeof *live);
        g->npages = want;
    }
    if (!g->pages[p] && !(g->pages[p] = PyMem_Calloc(GT_PAGE, sizeof(PyObject *)))) {
        PyMem_RawFree(block);
        PyErr_NoMemory();
        return -1;
    }
    PyObject **slot = &g->pages[p][id & (GT_PAGE - 1)], *old = *slot;
    *slot = block ? (PyObject *)block : Py_NewRef(value);
    if (old)
        gt_drop(g, old);
    else
        g->live[p]++, g->n++;
    return 0;
}

/* Take *key* out: its value (a new reference), NULL with no error when absent, NULL with one
 * on error. */
static PyObject *gt_take(GroupTable *g, PyObject *key)
{
    uint32_t id;
    PyObject **slot = gt_id(key, &id) == 0 ? gt_slot(g, id) : NULL, *old = slot ? *slot : NULL;
    if (!old)
        return NULL;
    if (g->blobs) { /* the value as bytes first: on an error the entry stays */
        PyObject *value = block_bytes((const unsigned char *)old);
        if (!value)
            return NULL;
        PyMem_RawFree(old);
        old = value;
    }
    *slot = NULL;
    g->n--;
    Py_ssize_t p = id >> GT_SHIFT;
    if (--g->live[p] == 0)
        PyMem_Free(g->pages[p]), g->pages[p] = NULL;
    return old;
}

/* Empty the table: detached first, so a value's destructor that reaches it finds it empty. */
static int gt_clear(GroupTable *g)
{
    PyObject ***pages = g->pages;
    Py_ssize_t npages = g->npages;
    int blobs = g->blobs;
    PyMem_Free(g->live);
    g->pages = NULL;
    g->live = NULL;
    g->npages = g->n = 0;
    for (Py_ssize_t p = 0; p < npages; p++) {
        PyObject **page = pages[p];
        for (Py_ssize_t i = 0; page && i < GT_PAGE; i++)
            if (blobs)
                PyMem_RawFree(page[i]);
            else
                Py_XDECREF(page[i]);
        PyMem_Free(page);
    }
    PyMem_Free(pages);
    return 0;
}

static int gt_traverse(GroupTable *g, visitproc visit, void *arg)
{
    if (g->blobs)
        return 0;
    for (Py_ssize_t p = 0; p < g->npages; p++)
        for (Py_ssize_t i = 0; g->pages[p] && i < GT_PAGE; i++)
            Py_VISIT(g->pages[p][i]);
    return 0;
}

static void GroupTable_dealloc(GroupTable *g)
{
    PyObject_GC_UnTrack(g);
    Py_TRASHCAN_BEGIN(g, GroupTable_dealloc)
    gt_clear(g);
    Py_TYPE(g)->tp_free((PyObject *)g);
    Py_TRASHCAN_END
}

static PyObject *GroupTable_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *entries = NULL;
    int blobs = 0;
    static char *kwlist[] = {"entries", "blobs", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O!p", kwlist, &PyDict_Type, &entries, &blobs))
        return NULL;
    GroupTable *g = (GroupTable *)type->tp_alloc(type, 0);
    if (g)
        g->blobs = blobs;
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (g && entries && PyDict_Next(entries, &pos, &key, &value))
        if (gt_store(g, key, value) < 0)
            Py_CLEAR(g);
    return (PyObject *)g;
}

static Py_ssize_t GroupTable_len(GroupTable *g) { return g->n; }

static PyObject *GroupTable_subscript(GroupTable *g, PyObject *key)
{
    return found_or_keyerror(gt_get(g, key), key);
}

static int GroupTable_ass(GroupTable *g, PyObject *key, PyObject *value)
{
    if (value)
        return gt_store(g, key, value);
    PyObject *old = gt_take(g, key);
    if (!old && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, key);
    Py_XDECREF(old);
    return old ? 0 : -1;
}

static int GroupTable_contains(GroupTable *g, PyObject *key)
{
    return gt_borrow(g, key) ? 1 : PyErr_Occurred() ? -1 : 0;
}

static PyObject *gt_value_of(PyObject *g, PyObject *key)
{
    return gt_get((GroupTable *)g, key);
}

static PyObject *gt_take_of(PyObject *g, PyObject *key) { return gt_take((GroupTable *)g, key); }

static PyObject *GroupTable_get(GroupTable *g, PyObject *const *args, Py_ssize_t nargs)
{
    return get_or_pop(gt_value_of, (PyObject *)g, args, nargs, 0);
}

static PyObject *GroupTable_pop(GroupTable *g, PyObject *const *args, Py_ssize_t nargs)
{
    return get_or_pop(gt_take_of, (PyObject *)g, args, nargs, 1);
}

/* The entries, in id order, copied out (see Entries). */
static int gt_entries(PyObject *table, Entries *e)
{
    GroupTable *g = (GroupTable *)table;
    if (entries_begin(e, g->n) < 0)
        return -1;
    for (Py_ssize_t p = 0; p < g->npages; p++)
        for (Py_ssize_t i = 0; g->pages[p] && i < GT_PAGE && e->n < e->cap; i++)
            if (g->pages[p][i]) {
                PyObject *k = PyLong_FromSize_t(((size_t)p << GT_SHIFT) + (size_t)i);
                if (entries_add(e, k, gt_value(g, g->pages[p][i])) < 0)
                    return -1;
            }
    return 0;
}

/* keys(), values(), items() or a dict of the entries (what = 0, 1, 2, 3), in id order. */
static PyObject *gt_list(GroupTable *g, int what)
{
    return entries_as((PyObject *)g, gt_entries, what);
}

static PyObject *GroupTable_keys(GroupTable *g, PyObject *unused) { return gt_list(g, 0); }
static PyObject *GroupTable_values(GroupTable *g, PyObject *unused) { return gt_list(g, 1); }
static PyObject *GroupTable_items(GroupTable *g, PyObject *unused) { return gt_list(g, 2); }
static PyObject *GroupTable_to_dict(GroupTable *g, PyObject *unused) { return gt_list(g, 3); }

/* at_least(n): the ids whose value is an int of at least n, in id order (a store's groups of
 * n or more documents, without a key object made for every group). No Python code runs
 * while it walks: the values are only read. */
static PyObject *GroupTable_at_least(GroupTable *g, PyObject *arg)
{
    long low = PyLong_AsLong(arg);
    if (low == -1 && PyErr_Occurred())
        return NULL;
    PyObject *out = PyList_New(0);
    for (Py_ssize_t p = 0; out && !g->blobs && p < g->npages; p++)
        for (Py_ssize_t i = 0; out && g->pages[p] && i < GT_PAGE; i++) {
            PyObject *v = g->pages[p][i], *k;
            int over = 0;
            long x = v && PyLong_CheckExact(v) ? PyLong_AsLongAndOverflow(v, &over) : 0;
            if (!v || !PyLong_CheckExact(v) || !(over > 0 || (over == 0 && x >= low)))
                continue;
            k = PyLong_FromUnsignedLong((unsigned long)(((size_t)p << GT_SHIFT) + (size_t)i));
            if (!k || PyList_Append(out, k) < 0)
                Py_CLEAR(out);
            Py_XDECREF(k);
        }
    return out;
}

static PyObject *GroupTable_iter(GroupTable *g) { return iter_over(gt_list(g, 0)); }

static PyObject *GroupTable_sizeof(GroupTable *g, PyObject *unused)
{
    Py_ssize_t held = (Py_ssize_t)sizeof(GroupTable) + g->npages * (Py_ssize_t)(sizeof(void *) + 2);
    for (Py_ssize_t p = 0; p < g->npages; p++) {
        held += g->pages[p] ? GT_PAGE * (Py_ssize_t)sizeof(PyObject *) : 0;
        for (Py_ssize_t i = 0; g->blobs && g->pages[p] && i < GT_PAGE; i++)
            if (g->pages[p][i])
                held += 4 + block_len((const unsigned char *)g->pages[p][i]);
    }
    return PyLong_FromSsize_t(held);
}

/* Equal to a GroupTable or a dict holding the same keys with equal values (read as a dict
 * reads them: no __getitem__ or __missing__ of a subclass runs). */
static PyObject *GroupTable_richcompare(PyObject *a, PyObject *b, int op)
{
    if ((op != Py_EQ && op != Py_NE) || !(IS_GROUPS(b) || PyDict_Check(b)))
        Py_RETURN_NOTIMPLEMENTED;
    int groups = IS_GROUPS(b);
    return entries_compare(a, gt_entries, ((GroupTable *)a)->n, b,
                           groups ? gt_value_of : dict_value_of,
                           groups ? ((GroupTable *)b)->n : PyDict_GET_SIZE(b), op);
}

static PyMappingMethods GroupTable_mapping = {
    (lenfunc)GroupTable_len, (binaryfunc)GroupTable_subscript, (objobjargproc)GroupTable_ass};
static PySequenceMethods GroupTable_sequence = {.sq_contains = (objobjproc)GroupTable_contains};

static PyMethodDef GroupTable_methods[] = {
    {"get", (PyCFunction)(void (*)(void))GroupTable_get, METH_FASTCALL,
     "get(key, default=None): the value of key, or default."},
    {"pop", (PyCFunction)(void (*)(void))GroupTable_pop, METH_FASTCALL,
     "pop(key[, default]): remove key and return its value."},
    {"keys", (PyCFunction)GroupTable_keys, METH_NOARGS, "The keys, as a list in id order."},
    {"values", (PyCFunction)GroupTable_values, METH_NOARGS, "The values, in id order."},
    {"items", (PyCFunction)GroupTable_items, METH_NOARGS, "(key, value) pairs, in id order."},
    {"to_dict", (PyCFunction)GroupTable_to_dict, METH_NOARGS,
     "The entries as a dict, in id order (made without a list of them first)."},
    {"at_least", (PyCFunction)GroupTable_at_least, METH_O,
     "at_least(n): the ids whose value is an int of at least n, in id order."},
    {"__sizeof__", (PyCFunction)GroupTable_sizeof, METH_NOARGS, "Bytes held."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject GroupTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nshash.methods.nshash._assign.GroupTable",
    .tp_doc = "GroupTable(entries={}, blobs=False): group id (1 to 2**32 - 2) -> object, 8 "
              "bytes an entry, in pages of 1024 ids (with blobs, bytes kept as blocks of their "
              "own); keys, values and items in id order.",
    .tp_basicsize = sizeof(GroupTable), .tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC,
    .tp_new = GroupTable_new, .tp_dealloc = (destructor)GroupTable_dealloc,
    .tp_traverse = (traverseproc)gt_traverse, .tp_clear = (inquiry)gt_clear,
    .tp_as_mapping = &GroupTable_mapping, .tp_as_sequence = &GroupTable_sequence,
    .tp_iter = (getiterfunc)GroupTable_iter, .tp_methods = GroupTable_methods,
    .tp_richcompare = GroupTable_richcompare, .tp_hash = PyObject_HashNotImplemented,
};

/* -- DocTable: doc id -> packed record -------------------------------------------------------
 *
 * The memory store's ``docs``: doc ids (str, held as the objects given, which its members
 * table holds too) -> their packed records (bytes), each kept as a block (see block_of). A
 * slot is 16 bytes (the key, the block), where a dict entry takes about 40. Open addressing
 * with linear probing, in DT_SHARDS shards that each grow on their own to twice their slots
 * once 3/4 full (so an add never pauses to rehash more than a shard); a deletion moves the
 * later entries of its run back, so no slot is a tombstone. Keys, values and items come in no
 * set order. */
#define DT_SHARDS 256

typedef struct {
    PyObject *key;      /* NULL: an empty slot */
    unsigned char *rec; /* the record, a block */
} DocSlot;

typedef struct {
    DocSlot *slots;
    Py_ssize_t cap, n;
} DocShard;

typedef struct {
    PyObject_HEAD
    DocShard sh[DT_SHARDS];
    Py_ssize_t n;
} DocTable;

static PyTypeObject DocTableType;
#define IS_DOCS(o) (Py_TYPE(o) == &DocTableType)

/* The mixed hash of the str *key* (a str caches its hash: no cost after the first). */
static inline uint64_t dt_hash(PyObject *key) { return am_mix((uint64_t)PyObject_Hash(key)); }

/* The slot of *key* (an exact str whose mixed hash is *h*) in its shard *s*, or -1. */
static Py_ssize_t dt_slot(const DocShard *s, PyObject *key, uint64_t h)
{
    if (!s->cap)
        return -1;
    Py_hash_t want = PyObject_Hash(key);
    for (Py_ssize_t i = am_home(h, s->cap);; i = am_next(i, s->cap)) {
        PyObject *k = s->slots[i].key;
        if (!k)
            return -1;
        if (k == key || (PyObject_Hash(k) == want && PyUnicode_Compare(k, key) == 0))
            return i;
    }
}

/* The shard and slot of *key* (through *s* and *at*; at -1 when absent or when *key* is not
 * a str, which no entry has). */
static void dt_locate(DocTable *d, PyObject *key, DocShard **s, Py_ssize_t *at)
{
    *at = -1;
    *s = NULL;
    if (!PyUnicode_CheckExact(key))
        return;
    uint64_t h = dt_hash(key);
    *s = &d->sh[h >> 56];
    *at = dt_slot(*s, key, h);
}

/* The record at slot *at* of *s* as a new bytes object. */
static PyObject *dt_value_at(const DocShard *s, Py_ssize_t at)
{
    return block_bytes(s->slots[at].rec);
}

/* The record of *key*, a new reference: NULL with no error when absent, with one on error. */
static PyObject *dt_lookup(DocTable *d, PyObject *key)
{
    DocShard *s;
    Py_ssize_t at;
    dt_locate(d, key, &s, &at);
    return at < 0 ? NULL : dt_value_at(s, at);
}

/* Rehash shard *s* into *cap* slots (a power of two, past its entries). */
static int dt_resize(DocShard *s, Py_ssize_t cap)
{
    DocSlot *slots = PyMem_Calloc((size_t)cap, sizeof *slots);
    if (!slots) {
        PyErr_NoMemory();
        return -1;
    }
    for (Py_ssize_t i = 0; i < s->cap; i++) {
        if (!s->slots[i].key)
            continue;
        Py_ssize_t j = am_home(dt_hash(s->slots[i].key), cap);
        while (slots[j].key)
            j = am_next(j, cap);
        slots[j] = s->slots[i];
    }
    PyMem_Free(s->slots);
    s->slots = slots;
    s->cap = cap;
    return 0;
}

static int dt_store(DocTable *d, PyObject *key, PyObject *value)
{
    if (!PyUnicode_CheckExact(key) || !PyBytes_CheckExact(value)) {
        PyErr_Format(PyExc_TypeError, "a DocTable maps str to bytes, not %.50s to %.50s",
                     Py_TYPE(key)->tp_name, Py_TYPE(value)->tp_name);
        return -1;
    }
    uint64_t h = dt_hash(key);
    DocShard *s = &d->sh[h >> 56];
    Py_ssize_t at = dt_slot(s, key, h);
    if (at < 0 && (s->n + 1) * 4 > s->cap * 3 && dt_resize(s, s->cap ? 2 * s->cap : 8) < 0)
        return -1;
    unsigned char *rec = block_of(value);
    if (!rec)
        return -1;
    if (at >= 0) {
        PyMem_RawFree(s->slots[at].rec);
        s->slots[at].rec = rec;
        return 0;
    }
    at = am_home(h, s->cap);
    while (s->slots[at].key)
        at = am_next(at, s->cap);
    s->slots[at].key = Py_NewRef(key);
    s->slots[at].rec = rec;
    s->n++;
    d->n++;
    return 0;
}

/* Take *key* out: its record (a new reference), NULL with no error when absent, NULL with one
 * on error (the entry then stays). */
static PyObject *dt_take(DocTable *d, PyObject *key)
{
    DocShard *s;
    Py_ssize_t at;
    dt_locate(d, key, &s, &at);
    if (at < 0)
        return NULL;
    PyObject *value = dt_value_at(s, at);
    if (!value)
        return NULL;
    PyObject *gone = s->slots[at].key;
    PyMem_RawFree(s->slots[at].rec);
    /* Move back each later entry of the run that may live in the hole: one whose home is not
     * cyclically in (hole, its slot]. */
    Py_ssize_t hole = at;
    for (Py_ssize_t j = am_next(hole, s->cap); s->slots[j].key; j = am_next(j, s->cap)) {
        Py_ssize_t home = am_home(dt_hash(s->slots[j].key), s->cap);
        int stays = hole < j ? (hole < home && home <= j) : (hole < home || home <= j);
        if (!stays) {
            s->slots[hole] = s->slots[j];
            hole = j;
        }
    }
    s->slots[hole].key = NULL;
    s->slots[hole].rec = NULL;
    s->n--;
    d->n--;
    Py_DECREF(gone);
    return value;
}

/* The entries copied out (see Entries). */
static int dt_entries(PyObject *table, Entries *e)
{
    DocTable *d = (DocTable *)table;
    if (entries_begin(e, d->n) < 0)
        return -1;
    for (int j = 0; j < DT_SHARDS; j++) {
        const DocShard *s = &d->sh[j];
        for (Py_ssize_t i = 0; i < s->cap && e->n < e->cap; i++)
            if (s->slots[i].key
                && entries_add(e, Py_NewRef(s->slots[i].key), dt_value_at(s, i)) < 0)
                return -1;
    }
    return 0;
}

/* keys(), values(), items() or a dict of the entries (what = 0, 1, 2, 3). */
static PyObject *dt_list(DocTable *d, int what)
{
    return entries_as((PyObject *)d, dt_entries, what);
}

static void DocTable_dealloc(DocTable *d)
{
    for (int j = 0; j < DT_SHARDS; j++) {
        DocShard *s = &d->sh[j];
        for (Py_ssize_t i = 0; i < s->cap; i++)
            if (s->slots[i].key) {
                Py_DECREF(s->slots[i].key);
                PyMem_RawFree(s->slots[i].rec);
            }
        PyMem_Free(s->slots);
    }
    Py_TYPE(d)->tp_free((PyObject *)d);
}

static PyObject *DocTable_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    PyObject *entries = NULL;
    static char *kwlist[] = {"entries", NULL};
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "|O!", kwlist, &PyDict_Type, &entries))
        return NULL;
    DocTable *d = (DocTable *)type->tp_alloc(type, 0);
    PyObject *key, *value;
    Py_ssize_t pos = 0;
    while (d && entries && PyDict_Next(entries, &pos, &key, &value))
        if (dt_store(d, key, value) < 0)
            Py_CLEAR(d);
    return (PyObject *)d;
}

static Py_ssize_t DocTable_len(DocTable *d) { return d->n; }

static PyObject *DocTable_subscript(DocTable *d, PyObject *key)
{
    return found_or_keyerror(dt_lookup(d, key), key);
}

static int DocTable_ass(DocTable *d, PyObject *key, PyObject *value)
{
    if (value)
        return dt_store(d, key, value);
    PyObject *old = dt_take(d, key);
    if (!old && !PyErr_Occurred())
        PyErr_SetObject(PyExc_KeyError, key);
    Py_XDECREF(old);
    return old ? 0 : -1;
}

static int DocTable_contains(DocTable *d, PyObject *key)
{
    DocShard *s;
    Py_ssize_t at;
    dt_locate(d, key, &s, &at);
    return at >= 0;
}

static PyObject *dt_value_of(PyObject *d, PyObject *key) { return dt_lookup((DocTable *)d, key); }
static PyObject *dt_take_of(PyObject *d, PyObject *key) { return dt_take((DocTable *)d, key); }

static PyObject *DocTable_get(DocTable *d, PyObject *const *args, Py_ssize_t nargs)
{
    return get_or_pop(dt_value_of, (PyObject *)d, args, nargs, 0);
}

static PyObject *DocTable_pop(DocTable *d, PyObject *const *args, Py_ssize_t nargs)
{
    return get_or_pop(dt_take_of, (PyObject *)d, args, nargs, 1);
}

static PyObject *DocTable_keys(DocTable *d, PyObject *unused) { return dt_list(d, 0); }
static PyObject *DocTable_values(DocTable *d, PyObject *unused) { return dt_list(d, 1); }
static PyObject *DocTable_items(DocTable *d, PyObject *unused) { return dt_list(d, 2); }
static PyObject *DocTable_to_dict(DocTable *d, PyObject *unused) { return dt_list(d, 3); }
static PyObject *DocTable_iter(DocTable *d) { return iter_over(dt_list(d, 0)); }

static PyObject *DocTable_sizeof(DocTable *d, PyObject *unused)
{
    Py_ssize_t held = (Py_ssize_t)sizeof(DocTable);
    for (int j = 0; j < DT_SHARDS; j++) {
        const DocShard *s = &d->sh[j];
        held += s->cap * (Py_ssize_t)sizeof(DocSlot);
        for (Py_ssize_t i = 0; i < s->cap; i++)
            if (s->slots[i].key)
                held += 4 + block_len(s->slots[i].rec);
    }
    return PyLong_FromSsize_t(held);
}

/* Equal to a DocTable or a dict holding the same keys with equal records. */
static PyObject *DocTable_richcompare(PyObject *a, PyObject *b, int op)
{
    if ((op != Py_EQ && op != Py_NE) || !(IS_DOCS(b) || PyDict_Check(b)))
        Py_RETURN_NOTIMPLEMENTED;
    int docs = IS_DOCS(b);
    return entries_compare(a, dt_entries, ((DocTable *)a)->n, b,
                           docs ? dt_value_of : dict_value_of,
                           docs ? ((DocTable *)b)->n : PyDict_GET_SIZE(b), op);
}

static PyMappingMethods DocTable_mapping = {
    (lenfunc)DocTable_len, (binaryfunc)DocTable_subscript, (objobjargproc)DocTable_ass};
static PySequenceMethods DocTable_sequence = {.sq_contains = (objobjproc)DocTable_contains};

static PyMethodDef DocTable_methods[] = {
    {"get", (PyCFunction)(void (*)(void))DocTable_get, METH_FASTCALL,
     "get(key, default=None): the record of key, or default."},
    {"pop", (PyCFunction)(void (*)(void))DocTable_pop, METH_FASTCALL,
     "pop(key[, default]): remove key and return its record."},
    {"keys", (PyCFunction)DocTable_keys, METH_NOARGS, "The doc ids, as a list."},
    {"values", (PyCFunction)DocTable_values, METH_NOARGS, "The records, in the keys' order."},
    {"items", (PyCFunction)DocTable_items, METH_NOARGS, "(doc id, record) pairs."},
    {"to_dict", (PyCFunction)DocTable_to_dict, METH_NOARGS,
     "The entries as a dict (made without a list of them first)."},
    {"__sizeof__", (PyCFunction)DocTable_sizeof, METH_NOARGS, "Bytes held."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject DocTableType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nshash.methods.nshash._assign.DocTable",
    .tp_doc = "DocTable(entries={}): str -> bytes (a doc id -> its packed record), a slot of "
              "16 bytes an entry and each record in a block of its own; no set order.",
    .tp_basicsize = sizeof(DocTable), .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = DocTable_new, .tp_dealloc = (destructor)DocTable_dealloc,
    .tp_as_mapping = &DocTable_mapping, .tp_as_sequence = &DocTable_sequence,
    .tp_iter = (getiterfunc)DocTable_iter, .tp_methods = DocTable_methods,
    .tp_richcompare = DocTable_richcompare, .tp_hash = PyObject_HashNotImplemented,
};

/* -- KeyFilter: which 64-bit keys a table may hold ------------------------------------------
 *
 * A Bloom filter over unsigned 64-bit keys (the LevelDB and SQLite stores' anchor
 * fingerprints), so that a key it has never been given is known absent without a read of
 * the store. It answers "may hold" for every key added (never a false "no") and, for a key
 * never added, "may hold" at about each segment's own rate summed: 1 time in ~240 with one
 * segment, in ~56 at 500,000 keys, in ~38 at 2,000,000 (200,000 random keys asked). It
 * grows as keys come: segments of twice the keys of the one before, each of 16 bits
 * a key, a key's 8 bits in one 64-bit word of a segment (one cache line read a segment). */
#define KF_SEGMENTS 48
#define KF_FIRST_WORDS 8192 /* 64 KB: the first segment's 32,768 keys */
#define KF_BITS 8 /* bits a key, in its word */
#define KF_WIDTH 16 /* bits of a segment a key */

typedef struct {
    uint64_t *words;
    uint64_t mask; /* words - 1 (a power of two) */
    Py_ssize_t cap, n;
} KFSegment;

typedef struct {
    PyObject_HEAD
    KFSegment seg[KF_SEGMENTS];
    int nseg;
    Py_ssize_t n; /* keys added (repeats counted) */
} KeyFilter;

static PyTypeObject KeyFilterType;

/* The word of a segment and the KF_BITS bits in it that stand for key *k*. */
static inline uint64_t kf_bits(uint64_t k, uint64_t *word_hash)
{
    uint64_t x = am_mix(k ^ 0x9E3779B97F4A7C15ULL), y = am_mix(x + 0xD1B54A32D192ED03ULL), m = 0;
    *word_hash = x;
    for (int i = 0; i < KF_BITS; i++, y >>= 6)
        m |= (uint64_t)1 << (y & 63);
    return m;
}

static int kf_has(const KeyFilter *f, uint64_t k)
{
    uint64_t w, m = kf_bits(k, &w);
    for (int i = f->nseg - 1; i >= 0; i--)
        if ((f->seg[i].words[w & f->seg[i].mask] & m) == m)
            return 1;
    return 0;
}

static int kf_add(KeyFilter *f, uint64_t k)
{
    KFSegment *s = f->nseg ? &f->seg[f->nseg - 1] : NULL;
    if (!s || s->n >= s->cap) {
        if (f->nseg == KF_SEGMENTS) {
            PyErr_SetString(PyExc_OverflowError, "a KeyFilter holds at most 2**63 keys");
            return -1;
        }
        uint64_t words = s ? 2 * (s->mask + 1) : KF_FIRST_WORDS;
        KFSegment *next = &f->seg[f->nseg];
        if (!(next->words = PyMem_Calloc((size_t)words, sizeof(uint64_t)))) {
            PyErr_NoMemory();
            return -1;
        }
        next->mask = words - 1;
        next->cap = (Py_ssize_t)(words * 64 / KF_WIDTH);
        next->n = 0;
        s = next;
        f->nseg++;
    }
    uint64_t w, m = kf_bits(k, &w);
    s->words[w & s->mask] |= m;
    s->n++;
    f->n++;
    return 0;
}

static void KeyFilter_dealloc(KeyFilter *f)
{
    for (int i = 0; i < f->nseg; i++)
        PyMem_Free(f->seg[i].words);
    Py_TYPE(f)->tp_free((PyObject *)f);
}

static PyObject *KeyFilter_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
    if (!PyArg_ParseTuple(args, ":KeyFilter") || (kwds && PyDict_GET_SIZE(kwds))) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_TypeError, "KeyFilter() takes no arguments");
        return NULL;
    }
    return type->tp_alloc(type, 0);
}

/* add(key): note *key* (an int in [0, 2**64)). */
static PyObject *KeyFilter_add(KeyFilter *f, PyObject *key)
{
    uint64_t k;
    int rc = am_key(key, &k);
    if (rc > 0)
        PyErr_Format(PyExc_ValueError, "a KeyFilter's keys are ints in [0, 2**64), not %R", key);
    if (rc || kf_add(f, k) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* "key in filter": whether it may hold *key* (False for anything but an int in [0, 2**64)). */
static int KeyFilter_contains(KeyFilter *f, PyObject *key)
{
    uint64_t k;
    int rc = am_key(key, &k);
    if (rc)
        return rc < 0 ? -1 : 0;
    return kf_has(f, k);
}

static Py_ssize_t KeyFilter_len(KeyFilter *f) { return f->n; }

static PyObject *KeyFilter_sizeof(KeyFilter *f, PyObject *unused)
{
    Py_ssize_t held = (Py_ssize_t)sizeof(KeyFilter);
    for (int i = 0; i < f->nseg; i++)
        held += (Py_ssize_t)((f->seg[i].mask + 1) * sizeof(uint64_t));
    return PyLong_FromSsize_t(held);
}

static PySequenceMethods KeyFilter_sequence = {
    .sq_length = (lenfunc)KeyFilter_len, .sq_contains = (objobjproc)KeyFilter_contains};

static PyMethodDef KeyFilter_methods[] = {
    {"add", (PyCFunction)KeyFilter_add, METH_O, "add(key): note key (an int in [0, 2**64))."},
    {"__sizeof__", (PyCFunction)KeyFilter_sizeof, METH_NOARGS, "Bytes held."},
    {NULL, NULL, 0, NULL}};

static PyTypeObject KeyFilterType = {
    PyVarObject_HEAD_INIT(NULL, 0).tp_name = "nshash.methods.nshash._assign.KeyFilter",
    .tp_doc = "KeyFilter(): the 64-bit keys a table may hold (a Bloom filter: a key added is "
              "always 'in'; one never added is 'in' about 1 time in 240 to 40, more often as it "
              "grows); len() is the "
              "keys added.",
    .tp_basicsize = sizeof(KeyFilter), .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_new = KeyFilter_new, .tp_dealloc = (destructor)KeyFilter_dealloc,
    .tp_as_sequence = &KeyFilter_sequence, .tp_methods = KeyFilter_methods,
    .tp_hash = PyObject_HashNotImplemented,
};

/* fast_assign's reads and writes of the tables: a dict, a map, a GroupTable or a DocTable. */

/* A dict's or a GroupTable's value, borrowed (NULL: absent, or an error when one is set); not
 * for a table of blocks, whose values are made when read (see table_get). */
static PyObject *table_borrow(PyObject *table, PyObject *key)
{
    if (IS_GROUPS(table) && ((GroupTable *)table)->blobs) {
        PyErr_SetString(PyExc_SystemError, "table_borrow: a table of blocks");
        return NULL;
    }
    return IS_GROUPS(table) ? gt_borrow((GroupTable *)table, key)
                            : PyDict_GetItemWithError(table, key);
}

/* Any table's value, a new reference (NULL: absent, or an error when one is set). */
static PyObject *table_get(PyObject *table, PyObject *key)
{
    if (IS_MAP(table))
        return am_lookup((AnchorMap *)table, key);
    if (IS_DOCS(table))
        return dt_lookup((DocTable *)table, key);
    if (IS_GROUPS(table))
        return gt_get((GroupTable *)table, key);
    return Py_XNewRef(PyDict_GetItemWithError(table, key));
}

static int table_set(PyObject *table, PyObject *key, PyObject *value)
{
    if (IS_MAP(table))
        return am_store((AnchorMap *)table, key, value);
    if (IS_DOCS(table))
        return dt_store((DocTable *)table, key, value);
    if (IS_GROUPS(table))
        return gt_store((GroupTable *)table, key, value);
    return PyDict_SetItem(table, key, value);
}

/* Delete *key* if present (0, or -1 on an error). */
static int table_discard(PyObject *table, PyObject *key)
{
    if (IS_MAP(table))
        return am_discard((AnchorMap *)table, key) < 0 ? -1 : 0;
    if (IS_GROUPS(table) || IS_DOCS(table)) {
        PyObject *old = IS_DOCS(table) ? dt_take((DocTable *)table, key)
                                       : gt_take((GroupTable *)table, key);
        Py_XDECREF(old);
        return old || !PyErr_Occurred() ? 0 : -1;
    }
    int has = PyDict_Contains(table, key);
    return has < 0 || (has && PyDict_DelItem(table, key) < 0) ? -1 : 0;
}

/* -- the memory store's common cases ------------------------------------------------------- */

/* The names of the _Tables attributes fast_assign reads, interned once (a lookup by a C
 * string would make a str each time). */
enum { T_DOCS, T_FP, T_EXACT, T_COMMON, T_PARENT, T_SKETCH, T_LIMIT, T_SIZE, T_VOTES, T_MEMBERS,
       T_LOG, T_UNDO, T_COUNTER, T_DOCUMENTS, T_NARROW, T_MISSING, T_MISSING_EACH, T_NAMES };
static const char *const table_names[T_NAMES] = {
    "docs", "fp", "exact", "common", "parent", "sketch", "limit", "size", "votes", "members",
    "log", "undo", "counter", "documents", "narrow", "MISSING", "MISSING_EACH"};
static PyObject *table_keys[T_NAMES];

static int intern_table_names(void)
{
    for (int i = 0; i < T_NAMES; i++)
        if (!table_keys[i] && !(table_keys[i] = PyUnicode_InternFromString(table_names[i])))
            return -1;
    return 0;
}

/* A new reference to table *which* of *t*, which must be of *type* (dict or set; for fp,
 * exact and votes, an AnchorMap or a VoteMap will do too). */
static PyObject *table(PyObject *t, int which, PyTypeObject *type)
{
    PyObject *o = PyObject_GetAttr(t, table_keys[which]);
    int mapped = which == T_FP || which == T_EXACT || which == T_VOTES;
    int grouped = which == T_SKETCH || which == T_LIMIT || which == T_SIZE || which == T_MEMBERS;
    if (o && Py_TYPE(o) != type && !(mapped && IS_MAP(o)) && !(grouped && IS_GROUPS(o))
        && !(which == T_DOCS && IS_DOCS(o))) {
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

/* -- the journal's ops and the undo of a change ----------------------------------------------
 *
 * A journaled store (memory.py's _Tables inside JournaledFile.change) keeps two lists while a
 * document is placed: ``log``, the ops the journal line will hold, each what the Python method
 * of the write appends (["x", h, gid], ["n", gid, packed values, limit], ["F", gid, packed
 * anchors], ...: replay feeds them back through those methods), as a tuple (a tuple's JSON is
 * the list's, and it is made whole in one allocation), and ``undo``, how to take each write back if the journal
 * refuses the line: table, key, old value for an entry, three items in a row (old: the tables'
 * MISSING when there was none; table t: an attribute), as _Tables.rollback reads them. fast_assign appends what the
 * Python methods append, in their order, so a journal reads the same whichever path wrote it. */
typedef struct {
    PyObject *log, *undo, *missing, *missing_each; /* log and undo NULL when off; the rest
                                                    * borrowed */
} Ops;

/* The names of the most frequent ops, interned at import (Py_BuildValue would parse a format
 * and make the name each time: most of an op's cost). */
enum { OP_FP, OP_X, OP_V, OP_M, OP_N, OP_S, OP_NAMES };
static PyObject *op_names[OP_NAMES];

/* A new op (name, a) (b NULL) or (name, a, b), of borrowed items: a new tuple, or NULL. */
static PyObject *op_of(int name, PyObject *a, PyObject *b)
{
    return b ? PyTuple_Pack(3, op_names[name], a, b) : PyTuple_Pack(2, op_names[name], a);
}

/* Append the op *op* (a new reference, or NULL on an error) to the log: 0 or -1. */
static int op_log(const Ops *o, PyObject *op)
{
    if (!op)
        return -1;
    int rc = o->log ? PyList_Append(o->log, op) : 0;
    Py_DECREF(op);
    return rc;
}

/* Note that ``table[key]`` was *old* (borrowed; NULL: absent) before a write: 0 or -1.
 * The step is three items in a row (table, key, old), no tuple of them: _Tables.rollback
 * reads both forms. */
static int undo_push(const Ops *o, PyObject *table, PyObject *key, PyObject *old)
{
    if (!o->undo)
        return 0;
    if (PyList_Append(o->undo, table) < 0 || PyList_Append(o->undo, key) < 0
        || PyList_Append(o->undo, old ? old : o->missing) < 0)
        return -1;
    return 0;
}

static PyObject *table_get(PyObject *table, PyObject *key);

/* Note what ``table[key]`` is now, before a write: 0 or -1. */
static int undo_entry(const Ops *o, PyObject *table, PyObject *key)
{
    if (!o->undo)
        return 0;
    PyObject *old = table_get(table, key);
    if (!old && PyErr_Occurred())
        return -1;
    int rc = undo_push(o, table, key, old);
    Py_XDECREF(old);
    return rc;
}

/* A new list of the *n* values at *v*, as ints. */
static PyObject *u64_list(const uint64_t *v, Py_ssize_t n)
{
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *o = PyLong_FromUnsignedLongLong(v[i]);
        if (!o)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, o);
    }
    return out;
}

/* A new bytes object of the *n* values at *v*, *width* bytes each, little-endian (the
 * packed form of a sketch, pack_sketch's, or of anchors: width 8), or NULL. A journal op
 * holds runs of values so (journal_line writes them in base64, json.dumps through
 * durable.py's default: see memory.py's _Tables.apply). */
static PyObject *packed_of(const uint64_t *v, Py_ssize_t n, int width)
{
    PyObject *out = PyBytes_FromStringAndSize(NULL, width * n);
    if (out) {
        unsigned char *p = (unsigned char *)PyBytes_AS_STRING(out);
        for (Py_ssize_t i = 0; i < n; i++)
            store_le(p + width * i, v[i], width);
    }
    return out;
}

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
    PyObject *o = table_borrow(d, key), *more;
    if (!o) {
        if (!PyErr_Occurred())
            PyErr_SetObject(PyExc_KeyError, key);
        return -1;
    }
    more = PyNumber_Add(o, ONE);
    int rc = more ? table_set(d, key, more) : -1;
    Py_XDECREF(more);
    return rc;
}

/* The ids of *ids* (n of them) sorted ascending and without repeats, in place: the new count
 * (what tuple(sorted(set(ids))) keeps). */
static Py_ssize_t ids_sorted(uint32_t *ids, Py_ssize_t n)
{
    for (Py_ssize_t i = 1; i < n; i++) { /* a few ids: an insertion sort */
        uint32_t x = ids[i];
        Py_ssize_t j = i;
        for (; j > 0 && ids[j - 1] > x; j--)
            ids[j] = ids[j - 1];
        ids[j] = x;
    }
    Py_ssize_t w = 0;
    for (Py_ssize_t i = 0; i < n; i++)
        if (w == 0 || ids[w - 1] != ids[i])
            ids[w++] = ids[i];
    return w;
}

/* The list of the *n* ids at *ids* as ints (a journal op's), a new reference. */
static PyObject *ids_list(const uint32_t *ids, Py_ssize_t n)
{
    PyObject *out = PyList_New(n);
    for (Py_ssize_t i = 0; out && i < n; i++) {
        PyObject *g = PyLong_FromUnsignedLong(ids[i]);
        if (!g)
            Py_CLEAR(out);
        else
            PyList_SET_ITEM(out, i, g);
    }
    return out;
}

/* Resolve the *n* ids at *ids* through the dict *parent* in place (resolve_in): 0, or -1 on
 * an error (ValueError for a canonical id a vote table cannot hold, as storing it would). */
static int ids_resolved(uint32_t *ids, Py_ssize_t n, PyObject *parent)
{
    if (!PyDict_GET_SIZE(parent))
        return 0;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *g = PyLong_FromUnsignedLong(ids[i]), *r = g ? resolve_in(parent, g) : NULL;
        Py_XDECREF(g);
        if (!r)
            return -1;
        int rc = am_id(r, &ids[i]);
        Py_DECREF(r);
        if (rc < 0)
            return -1;
    }
    return 0;
}

/* vote of nshash.methods.nshash.assign on the VoteMap *table*: record that the groups *a*
 * and *b* were kept apart on each hash of *hs* (n of them, ascending, no repeats); a hash
 * becomes common once *votes* distinct groups (after merges) have been. Read and written by
 * value: objects are made only for a journal's ops and undo steps. */
static int vote_on(const uint64_t *hs, Py_ssize_t n, uint32_t a, uint32_t b, Py_ssize_t votes,
                   AnchorMap *table, AnchorMap *common, PyObject *parent, const Ops *ops)
{
    uint32_t few[VOTE_WIDTH + 2], *seen = few;
    Py_ssize_t room = VOTE_WIDTH + 2;
    int rc = 0;
    for (Py_ssize_t i = 0; rc == 0 && i < n; i++) {
        uint64_t h = hs[i];
        PyObject *h_obj = NULL; /* made for a journal only */
        if ((ops->log || ops->undo) && !(h_obj = PyLong_FromUnsignedLongLong(h))) {
            rc = -1;
            break;
        }
        Py_ssize_t at, len = 0;
        Shard *s = am_find(table, h, &at);
        if (table->w + 2 > room) {
            uint32_t *more = PyMem_Malloc((size_t)(table->w + 2) * sizeof *more);
            if (!more) {
                PyErr_NoMemory();
                Py_XDECREF(h_obj);
                rc = -1;
                break;
            }
            if (seen != few)
                PyMem_Free(seen);
            seen = more;
            room = table->w + 2;
        }
        if (at >= 0) /* set(get_votes(h)) */
            for (const uint32_t *ids = &s->vals[at * table->w]; len < table->w && ids[len]; len++)
                seen[len] = ids[len];
        seen[len++] = a; /* seen.update(groups) */
        seen[len++] = b;
        len = ids_sorted(seen, len);
        if (len >= votes) {
            uint32_t *roots = PyMem_Malloc((size_t)len * sizeof *roots);
            if (!roots) {
                PyErr_NoMemory();
                Py_XDECREF(h_obj);
                rc = -1;
                break;
            }
            memcpy(roots, seen, (size_t)len * sizeof *roots);
            Py_ssize_t nr = len;
            rc = ids_resolved(roots, nr, parent);
            if (rc == 0)
                nr = ids_sorted(roots, nr);
            if (rc == 0 && nr >= votes) { /* add_common((h,)), then set_votes(h, ()) */
                PyMem_Free(roots);
                Py_ssize_t slot;
                am_find(common, h, &slot);
                if (slot < 0 && undo_push(ops, (PyObject *)common, h_obj, NULL) < 0)
                    rc = -1;
                uint32_t one = 1;
                if (rc == 0)
                    rc = am_put(common, h, &one, 1);
                if (rc == 0 && ops->log)
                    rc = op_log(ops, Py_BuildValue("(s[O])", "c", h_obj));
                if (rc == 0 && ops->undo)
                    rc = undo_entry(ops, (PyObject *)table, h_obj);
                if (rc == 0) {
                    Shard *vs = am_find(table, h, &slot);
                    if (slot >= 0) { /* am_discard */
                        vs->vals[slot * table->w] = TOMB;
                        table->n--;
                    }
                }
                if (rc == 0 && ops->log)
                    rc = op_log(ops, Py_BuildValue("(sO[])", "v", h_obj));
                Py_XDECREF(h_obj);
                continue;
            }
            if (rc == 0) { /* kept as resolved, as the Python version keeps them */
                memcpy(seen, roots, (size_t)nr * sizeof *roots);
                len = nr;
            }
            PyMem_Free(roots);
        }
        if (rc == 0 && ops->undo)
            rc = undo_entry(ops, (PyObject *)table, h_obj);
        if (rc == 0 && len > table->w)
            rc = am_widen(table, len);
        if (rc == 0)
            rc = am_put(table, h, seen, len);
        if (rc == 0 && ops->log) {
            PyObject *ordered = ids_list(seen, len);
            rc = op_log(ops, ordered ? op_of(OP_V, h_obj, ordered) : NULL);
            Py_XDECREF(ordered);
        }
        Py_XDECREF(h_obj);
    }
    if (seen != few)
        PyMem_Free(seen);
    return rc;
}

/* guard_core for a group's packed values (*ng* of them at *gp*, *width* bytes each) against
 * the document's live values (*live*: its sketch values below its limit that are not common,
 * ascending, *nlive* of them), below *limit*: the same counts, with the values shared
 * written to *shared* (room for ng) in the group's order. A shared value is in *live*, so not
 * common: only the group's other values are looked up in *common*. */
static void guard_packed(const uint64_t *live, Py_ssize_t nlive, uint64_t limit,
                         const unsigned char *gp, Py_ssize_t ng, int width, AnchorMap *common,
                         uint64_t *shared, Py_ssize_t *shared_n, Py_ssize_t *mine,
                         Py_ssize_t *theirs)
{
    Py_ssize_t m = 0, hi = nlive, j = 0, same = 0, their = 0;
    while (m < hi) { /* the live values below the limit: a prefix */
        Py_ssize_t mid = m + (hi - m) / 2;
        if (live[mid] < limit)
            m = mid + 1;
        else
            hi = mid;
    }
    uint64_t prev = 0;
    for (Py_ssize_t i = 0; i < ng; i++) {
        uint64_t v = load_le(gp + width * i, width);
        if (v >= limit)
            continue;
        if (v < prev) { /* not ascending: look it up from the start */
            Py_ssize_t lo = 0, up = m;
            while (lo < up) {
                Py_ssize_t mid = lo + (up - lo) / 2;
                if (live[mid] < v)
                    lo = mid + 1;
                else
                    up = mid;
            }
            j = lo;
        }
        while (j < m && live[j] < v) /* ascending: a merge */
            j++;
        prev = v;
        if (j < m && live[j] == v) {
            their++;
            shared[same++] = v;
        } else if (!am_has(common, v)) {
            their++;
        }
    }
    *shared_n = same;
    *mine = m;
    *theirs = their;
}

/* A group id as a uint32 in [1, TOMB): 0, or 1 (no error set) when *o* is none. */
static int gid_of(PyObject *o, uint32_t *v)
{
    uint64_t x;
    if (u64_value(o, &x) != 0 || x == 0 || x >= TOMB) {
        PyErr_Clear();
        return 1;
    }
    *v = (uint32_t)x;
    return 0;
}

/* fast_assign(t, sentences, sketch, exact, doc_limit, n, theta, min_overlap, cap, no_limit,
 * votes, doc_id, title, shift, places): nshash.methods.nshash.assign.assign on the dicts of a memory
 * store's _Tables *t* (journaled or not: see Ops), for every case but a merge: an exact
 * repeat, a new story, and a document whose candidates the guard refuses (their hashes get
 * votes) but for at most one it accepts (the document joins it). With *shift* (the narrow
 * sketch's, or 0), the document's sketch and limit are narrowed first, as
 * nshash.text.fingerprint.narrow narrows them (narrow_values: the same C), with no DocPrint
 * made. Returns (similar_id, duplicate, anchors), having made the writes assign makes; None,
 * having written nothing, for the other cases (a doc_id seen before, two accepted groups, an
 * odd value): the caller then runs assign (on the narrowed document). *sentences* may be
 * the text kernel's packed words instead (DocPrint._packed: the count of the anchors, the
 * anchors, the sketch values, native 64-bit words; *sketch* is then None), read with no int
 * made but for the anchors picked. *places* is the document's DocPrint.places (bytes, one
 * native uint32 a sketch value; anything else: none), which the guard reads for the page's
 * frame (frame_of). */
static PyObject *fast_assign(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 15) {
        PyErr_SetString(PyExc_TypeError, "fast_assign takes 15 arguments (see its docstring)");
        return NULL;
    }
    /* The kernel's packed words, checked for their count (an odd length: the Python way). */
    const unsigned char *pk = NULL;
    Py_ssize_t pk_n = 0, pk_words = 0;
    if (PyBytes_CheckExact(args[1]) && args[2] == Py_None) {
        pk = (const unsigned char *)PyBytes_AS_STRING(args[1]);
        pk_words = PyBytes_GET_SIZE(args[1]) / (Py_ssize_t)sizeof(uint64_t);
        uint64_t count = 0;
        if (pk_words)
            memcpy(&count, pk, sizeof count);
        if (!pk_words || PyBytes_GET_SIZE(args[1]) % (Py_ssize_t)sizeof(uint64_t)
            || count > (uint64_t)(pk_words - 1))
            Py_RETURN_NONE;
        pk_n = (Py_ssize_t)count;
        pk += sizeof count;
    } else if (!PyTuple_CheckExact(args[1]) || !PyTuple_CheckExact(args[2])) {
        Py_RETURN_NONE; /* anchors or a sketch not as the text pipeline makes them: the Python way */
    }
    PyObject *t = args[0], *sentences = pk ? NULL : args[1], *sketch = pk ? NULL : args[2];
    PyObject *exact_h = args[3];
    PyObject *doc_limit_o = args[4], *no_limit_o = args[9], *doc_id = args[11];
    PyObject *title = args[12];
    Py_ssize_t n = PyLong_AsSsize_t(args[5]), min_overlap = PyLong_AsSsize_t(args[7]);
    Py_ssize_t cap = PyLong_AsSsize_t(args[8]), votes = PyLong_AsSsize_t(args[10]);
    Py_ssize_t shift = PyLong_AsSsize_t(args[13]);
    double theta = PyFloat_AsDouble(args[6]);
    if (PyErr_Occurred())
        return NULL;
    PyObject *result = NULL, *anchors = NULL, *root = NULL, *values = NULL, *bound = NULL;
    PyObject *fp = NULL, *exact = NULL, *common = NULL, *parent = NULL, *sketches = NULL;
    PyObject *limits = NULL, *size = NULL, *docs = NULL, *log = NULL, *undo = NULL;
    PyObject *vote_table = NULL, *empty = NULL, *missing = NULL, *missing_each = NULL;
    PyObject *sketch_seq = NULL; /* the packed sketch as ints, if the general guard needs it */
    PyObject *vals = NULL; /* the sketch of the candidate compared, then of the one joined */
    PyObject *known[FAST_ANCHORS] = {NULL}, *picked[FAST_ANCHORS], *hit = NULL;
    /* Each anchor's value (as a uint64: a hash not one goes the Python way) and the
     * candidate it hits (-1: none). */
    uint64_t pv[FAST_ANCHORS];
    int hit_of[FAST_ANCHORS];
    /* The candidates: canonical id (and as a uint32), the values shared, accepted. */
    PyObject *cand[FAST_ANCHORS];
    uint32_t cand_id[FAST_ANCHORS];
    uint64_t *shared[FAST_ANCHORS] = {NULL};
    Py_ssize_t shared_n[FAST_ANCHORS];
    int accepted[FAST_ANCHORS];
    /* The document's sketch values, and those of them below its limit that are not common. */
    uint64_t *dv = NULL, *live = NULL, *hs = NULL;
    Py_ssize_t nlive = 0;
    /* The document's values and places as narrowed, for tail_of (see below). */
    uint64_t *tail_v = NULL;
    uint32_t *tail_p = NULL;
    Py_ssize_t tail_n = 0;
    /* Their places (when the document has them), the live ones' page order, and room for
     * the flags frame_in reads. */
    uint32_t *dpos = NULL, *lpos = NULL, *order = NULL;
    uint64_t *okeys = NULL;
    unsigned char *flags = NULL;
    PyObject *dlim = NULL; /* the document's limit as an int (narrowed), once needed */
    Py_ssize_t i, k, nc = 0, np = 0, joined = -1;
    int64_t reach = -1; /* how far the document's sketch values reach into its stream */
    int duplicate = 1, fresh = 0, width = 8, grows = 1;
    /* The evidence kept with the record (assign.py's evidence()): the score against the
     * group joined, else the best refused one; the verdict's code in records.py's VERDICTS. */
    double ev_score = 0.0, best = 0.0, joined_score = 0.0;
    int ev_verdict = 1; /* new story */
    uint64_t doc_limit, no_limit;
    int rc = sketch_value(doc_limit_o, &doc_limit);
    if (rc == 0)
        rc = sketch_value(no_limit_o, &no_limit);
    if (rc || n > FAST_ANCHORS || n < 0 || shift < 0 || shift > 63)
        goto fallback;
    /* Journaled tables log each write as an op, and undoable ones note how to take it back
     * (see Ops): both are lists then, None when off. */
    if (!(log = PyObject_GetAttr(t, table_keys[T_LOG])) || !(undo = PyObject_GetAttr(t, table_keys[T_UNDO])))
        goto done;
    if ((log != Py_None && !PyList_CheckExact(log)) || (undo != Py_None && !PyList_CheckExact(undo)))
        goto fallback;
    if (undo != Py_None && (!(missing = PyObject_GetAttr(t, table_keys[T_MISSING]))
                            || !(missing_each = PyObject_GetAttr(t, table_keys[T_MISSING_EACH]))))
        goto done;
    const Ops ops = {log == Py_None ? NULL : log, undo == Py_None ? NULL : undo, missing,
                     missing_each};
    /* Sketch values are packed 8 bytes each, or 4 in a store of narrow sketches. */
    {
        PyObject *nw = PyObject_GetAttr(t, table_keys[T_NARROW]);
        int is = nw ? PyObject_IsTrue(nw) : -1;
        Py_XDECREF(nw);
        if (is < 0)
            goto done;
        width = is ? 4 : 8;
    }
    if (!(docs = table(t, T_DOCS, &PyDict_Type)) || !(fp = table(t, T_FP, &PyDict_Type))
        || !(exact = table(t, T_EXACT, &PyDict_Type))
        || !(common = table(t, T_COMMON, &AnchorMapType))
        || !(parent = table(t, T_PARENT, &PyDict_Type))
        || !(sketches = table(t, T_SKETCH, &PyDict_Type))
        || !(limits = table(t, T_LIMIT, &PyDict_Type)) || !(size = table(t, T_SIZE, &PyDict_Type))
        || !(vote_table = table(t, T_VOTES, &PyDict_Type)) || !(empty = PySet_New(NULL)))
        goto done;
    if (!IS_VOTES(vote_table))
        goto fallback; /* votes are read and written by value: a VoteMap's */
    if (doc_id != Py_None) {
        int seen = IS_DOCS(docs) ? DocTable_contains((DocTable *)docs, doc_id)
                                 : PyDict_Contains(docs, doc_id);
        if (seen < 0)
            goto done;
        if (seen)
            goto fallback; /* a retry: the Python path answers it */
    }
    /* The document's sketch is merged with a group's or kept packed as it is: it must be
     * ascending, as the text pipeline makes it (anything else goes the Python way). */
    Py_ssize_t nd = pk ? pk_words - 1 - pk_n : PyTuple_GET_SIZE(sketch);
    if (!(dv = PyMem_Malloc((size_t)(nd ? nd : 1) * sizeof *dv))
        || !(live = PyMem_Malloc((size_t)(nd ? nd : 1) * sizeof *live))) {
        PyErr_NoMemory();
        goto done;
    }
    {
        uint64_t prev = 0, v;
        for (i = 0; i < nd; i++) {
            if (pk)
                memcpy(&v, pk + (pk_n + i) * sizeof v, sizeof v);
            else if ((rc = sketch_value(PyTuple_GET_ITEM(sketch, i), &v)) != 0)
                goto fail_or_fallback;
            if (i && v <= prev)
                goto fallback;
            dv[i] = prev = v;
        }
    }
    if (nd && PyBytes_CheckExact(args[14])
        && PyBytes_GET_SIZE(args[14]) == nd * (Py_ssize_t)sizeof(uint32_t)) {
        if (!(dpos = PyMem_Malloc((size_t)nd * sizeof *dpos))
            || !(lpos = PyMem_Malloc((size_t)nd * sizeof *lpos))) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(dpos, PyBytes_AS_STRING(args[14]), (size_t)nd * sizeof *dpos);
    }
    if (shift) { /* narrow(doc): the values and the limit (kept as it is from no_limit on) */
        int keep_limit = doc_limit >= no_limit;
        if (narrow_values(dv, dpos, &nd, (int)shift, &doc_limit, &keep_limit))
            goto fallback;
        if (!keep_limit && !(dlim = PyLong_FromUnsignedLongLong(doc_limit)))
            goto done;
    }
    if (!dlim)
        dlim = Py_NewRef(doc_limit_o);
    /* The values and places tail_of reads once the document is placed (dv and nd change on
     * the way: a joining page keeps only its story's span there). */
    if (dpos && nd) {
        if (!(tail_v = PyMem_Malloc((size_t)nd * sizeof *tail_v))
            || !(tail_p = PyMem_Malloc((size_t)nd * sizeof *tail_p))) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(tail_v, dv, (size_t)nd * sizeof *tail_v);
        memcpy(tail_p, dpos, (size_t)nd * sizeof *tail_p);
        tail_n = nd;
    }
    /* The anchors: the first n candidates that are not common (all of them if none is), 2n
     * of a long page (fingerprint.anchors_wanted: its values reach LONG_PAGE). */
    if (dpos) {
        reach = 0;
        for (i = 0; i < nd; i++)
            if (dpos[i] > reach)
                reach = dpos[i];
        if (reach >= LONG_PAGE)
            n *= 2;
    }
    if (n > FAST_ANCHORS)
        goto fallback;
    if (pk) { /* packed: the values picked, made into ints (the only ones made) */
        uint64_t sv[FAST_ANCHORS];
        if (((AnchorMap *)common)->n) {
            for (i = 0; i < pk_n && np < n; i++) {
                uint64_t v;
                memcpy(&v, pk + i * sizeof v, sizeof v);
                int in = in_common(common, NULL, 1, v);
                if (in < 0)
                    goto done;
                if (!in)
                    sv[np++] = v;
            }
        }
        if (np == 0)
            for (i = 0; i < pk_n && np < n; i++)
                memcpy(&sv[np++], pk + i * sizeof *sv, sizeof *sv);
        if (!(anchors = PyTuple_New(np)))
            goto done;
        for (i = 0; i < np; i++) {
            if (!(picked[i] = PyLong_FromUnsignedLongLong(sv[i])))
                goto done;
            PyTuple_SET_ITEM(anchors, i, picked[i]);
        }
        memcpy(pv, sv, (size_t)np * sizeof *pv);
    } else {
        Py_ssize_t ns = PyTuple_GET_SIZE(sentences);
        if (((AnchorMap *)common)->n) {
            for (i = 0; i < ns && np < n; i++) {
                int in = in_common(common, PyTuple_GET_ITEM(sentences, i), 0, 0);
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
            if ((rc = u64_value(picked[i], &pv[i])) != 0)
                goto fail_or_fallback; /* not a hash the tables hold: the Python way */
        }
    }
    for (i = 0; i < np; i++) {
        if (Py_IS_TYPE(fp, &AnchorMapType)) { /* by the value read above: table_get's own */
            Py_ssize_t at;
            Shard *sh = am_find((AnchorMap *)fp, pv[i], &at);
            known[i] = at < 0 ? NULL : am_value_at((AnchorMap *)fp, sh, at);
        } else {
            known[i] = table_get(fp, picked[i]);
        }
        if (!known[i] && PyErr_Occurred())
            goto done;
    }
    if (width == 4)
        for (i = 0; i < nd; i++)
            if (dv[i] >> 32)
                goto fallback;
    hit = table_get(exact, exact_h);
    if (!hit && PyErr_Occurred())
        goto done;
    if (hit) {
        if (!(root = resolve_in(parent, hit)))
            goto done;
        ev_score = 1.0;
        ev_verdict = 3; /* identical */
        goto write;
    }
    /* Each group an anchor hits, in order of first hit, with the anchors that hit it. */
    for (i = 0; i < np; i++) {
        hit_of[i] = -1;
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
            cand[nc++] = r;
            if (gid_of(r, &cand_id[k]))
                goto fallback; /* an id no vote table holds: the Python way */
        } else {
            Py_DECREF(r);
        }
        hit_of[i] = (int)k;
    }
    /* The document's values the guard compares, once for every candidate: below its limit
     * (ascending: a prefix) and not common. */
    if (nc) {
        for (i = 0; i < nd && dv[i] < doc_limit; i++)
            if (!am_has((AnchorMap *)common, dv[i])) {
                if (dpos)
                    lpos[nlive] = dpos[i];
                live[nlive++] = dv[i];
            }
    }
    /* The guard, for each candidate. */
    for (k = 0; k < nc; k++) {
        const unsigned char *gp = NULL; /* the group's packed values, if packed */
        Py_ssize_t ng = 0;
        Py_CLEAR(vals);
        if (IS_GROUPS(sketches) && ((GroupTable *)sketches)->blobs) { /* read in place */
            const unsigned char *block = (const unsigned char *)gt_borrow((GroupTable *)sketches, cand[k]);
            if (!block && PyErr_Occurred())
                goto done;
            gp = block ? block + 4 : (const unsigned char *)"";
            ng = block ? block_len(block) / width : 0;
        } else {
            vals = table_get(sketches, cand[k]);
            if (!vals && PyErr_Occurred())
                goto done;
            if (vals && PyBytes_CheckExact(vals)) {
                gp = (const unsigned char *)PyBytes_AS_STRING(vals);
                ng = PyBytes_GET_SIZE(vals) / width;
            }
        }
        PyObject *gl = table_borrow(limits, cand[k]);
        if (!gl && PyErr_Occurred())
            goto done;
        uint64_t group_limit = no_limit;
        if (gl && (rc = sketch_value(gl, &group_limit)) != 0)
            goto fail_or_fallback;
        Py_ssize_t same, mine, theirs;
        if (gp) {
            if (!(shared[k] = PyMem_Malloc((size_t)(ng ? ng : 1) * sizeof(uint64_t)))) {
                PyErr_NoMemory();
                goto done;
            }
            guard_packed(live, nlive, doc_limit < group_limit ? doc_limit : group_limit, gp, ng,
                         width, (AnchorMap *)common, shared[k], &same, &mine, &theirs);
        } else { /* a group's values as objects (a set, a tuple): the general comparison */
            if (shift)
                goto fallback; /* (of the document's values as objects: the Python way) */
            if (!sketch && !(sketch = sketch_seq = u64_list(dv, nd))) /* (unnarrowed) */
                goto done;
            PyObject *found = PyList_New(0);
            if (!found)
                goto done;
            rc = guard_core(sketch, doc_limit, vals ? vals : empty, group_limit, common, empty,
                            found, &same, &mine, &theirs, width);
            Py_ssize_t nf = PyList_GET_SIZE(found);
            if (rc == 0 && !(shared[k] = PyMem_Malloc((size_t)(nf ? nf : 1) * sizeof(uint64_t)))) {
                PyErr_NoMemory();
                rc = -1;
            }
            for (i = 0; rc == 0 && i < nf; i++) /* values guard_core read */
                rc = sketch_value(PyList_GET_ITEM(found, i), &shared[k][i]);
            Py_DECREF(found);
            if (rc)
                goto fail_or_fallback;
        }
        shared_n[k] = same;
        double score = judge_score(same, mine, theirs, min_overlap);
        Py_ssize_t judged_same = same, judged_theirs = theirs; /* after a frame or edits */
        /* The page's frame, set aside (assign._verify): it only lowers a score, so it is
         * looked for where it can decide; the page order is made once, when first needed. */
        if (score >= theta && lpos && mine >= END_LEAST && mine - same >= FRAME_GAP
            && (mine - same) * FRAME_SHARE >= mine /* room for a frame's unshared run */
            && end_shared(live, lpos, mine, shared[k], same)) {
            if (!order && page_order_for(lpos, nlive, &okeys, &order, &flags) < 0)
                goto done;
            /* mine: the guard's count of the document's values compared, the live ones below
             * the smaller limit (a prefix of live) */
            Py_ssize_t frame = frame_in(live, mine, order, nlive, shared[k], same, theirs, flags);
            if (frame) {
                score = judge_score(same - frame, mine - frame, theirs - frame, min_overlap);
                judged_same = same - frame;
                judged_theirs = theirs - frame;
            }
        } else if (score >= EDIT_LOW && score < theta && lpos && mine >= EDIT_LEAST) {
            /* A copy with scattered edits (assign.unframed, edits_of) */
            if (!order && page_order_for(lpos, nlive, &okeys, &order, &flags) < 0)
                goto done;
            Py_ssize_t edits = edits_in(live, mine, order, nlive, shared[k], same, flags);
            if (edits) {
                Py_ssize_t gone = edits < theirs - same ? edits : theirs - same;
                score = judge_score(same, mine - edits, theirs - gone, min_overlap);
                judged_theirs = theirs - gone;
            }
        }
        /* A long page is judged on its top: refused where its top shares nothing with the
         * group (assign.misses_top), scored by its top where a little short (top_share). */
        const int refuses = score >= theta
                            && (judged_theirs - judged_same) * GROUP_OWN >= judged_theirs;
        if ((refuses || (score < theta && score >= TOP_LOW)) && dpos) {
            if (reach >= LONG_PAGE) { /* (reach: read with the anchors, from dpos) */
                if (!order && page_order_for(lpos, nlive, &okeys, &order, &flags) < 0)
                    goto done;
                Py_ssize_t nf = flags_in(live, mine, order, nlive, shared[k], same, flags);
                Py_ssize_t top = nf / TOP_SHARE > 1 ? nf / TOP_SHARE : 1, few = 0;
                if (top > nf)
                    top = nf;
                for (Py_ssize_t t = 0; t < top; t++)
                    few += flags[t];
                if (refuses) {
                    if (nf && few * TOP_FEW <= top)
                        score = 0.0;
                } else if (nf && top >= TOP_LEAST && (double)few >= theta * (double)top) {
                    score = (double)few / (double)top;
                }
            }
        }
        accepted[k] = score >= theta;
        if (score > best)
            best = score;
        if (accepted[k]) {
            joined_score = score;
            if (joined >= 0)
                goto fallback; /* two accepted groups: a merge may follow */
            if (!gp || !ng) /* (none: never accepted) */
                goto fallback; /* a group without a packed sketch of its own: the Python way */
            for (i = 1; i < ng; i++)
                if (load_le(gp + width * (i - 1), width) >= load_le(gp + width * i, width))
                    goto fallback; /* packed, but not ascending: the Python way */
            joined = k;
        }
    }
    if (joined >= 0) {
        ev_score = joined_score;
        ev_verdict = 4; /* joined */
    } else if (nc) {
        ev_score = best;
        ev_verdict = 2; /* refused */
    }
    if (joined >= 0) { /* the document's values and the group's, joined (combine_sketch) */
        root = Py_NewRef(cand[joined]);
        Py_XSETREF(vals, table_get(sketches, root)); /* packed and ascending (checked) */
        if (!vals) {
            if (!PyErr_Occurred())
                goto fallback; /* gone since the guard read it (a finalizer): the Python way */
            goto done;
        }
        const unsigned char *gp = (const unsigned char *)PyBytes_AS_STRING(vals);
        Py_ssize_t ng = PyBytes_GET_SIZE(vals) / width, a = 0;
        Py_ssize_t d = 0;
        PyObject *gl = table_borrow(limits, root);
        uint64_t old_limit = no_limit, cut;
        if (gl)
            sketch_value(gl, &old_limit); /* checked by the guard */
        if (doc_limit < old_limit && ng >= LONGER_FROM) { /* assign.extends: a page far
                                                              * longer than its group */
            Py_ssize_t below = 0;
            while (below < ng && load_le(gp + width * below, width) < doc_limit)
                below++;
            if (nd > LONGER * below) {
                grows = 0; /* the group keeps its sketch; the page adds its anchors only */
                goto placed;
            }
        }
        /* assign.story_span: a group of LONGER_FROM values or more takes the page's values
         * between the first and the last it shares (in page order), not its site's wrapper. */
        if (ng >= LONGER_FROM && lpos && shared_n[joined] > 0) {
            uint32_t first = UINT32_MAX, last = 0;
            const uint64_t *sv = shared[joined];
            Py_ssize_t at = 0;
            for (i = 0; i < shared_n[joined]; i++) {
                /* (in the group's order, ascending where packed: a merge with live) */
                if (i && sv[i] < sv[i - 1])
                    at = sorted_from(live, nlive, sv[i]);
                while (at < nlive && live[at] < sv[i])
                    at++;
                if (at < nlive && live[at] == sv[i]) {
                    if (lpos[at] < first)
                        first = lpos[at];
                    if (lpos[at] > last)
                        last = lpos[at];
                }
            }
            if (first <= last) { /* the document's values outside the span dropped, in place */
                Py_ssize_t kept_d = 0;
                for (i = 0; i < nd; i++)
                    if (dpos[i] >= first && dpos[i] <= last) {
                        dv[kept_d] = dv[i];
                        dpos[kept_d++] = dpos[i];
                    }
                nd = kept_d;
            }
        }
        cut = doc_limit < old_limit ? doc_limit : old_limit;
        if (!(values = PyBytes_FromStringAndSize(NULL, width * (ng + nd > cap ? cap : ng + nd))))
            goto done;
        unsigned char *out = (unsigned char *)PyBytes_AS_STRING(values);
        Py_ssize_t kept = 0;
        uint64_t gv = 0, dval = 0;
        /* A merge of the two ascending runs below the bound, without repeats, stopping at the
         * cap: the value that would come next is the new limit. */
        for (;;) {
            int has_g = a < ng && (gv = load_le(gp + width * a, width)) < cut;
            int has_d = 0;
            if (d < nd) {
                dval = dv[d];
                has_d = dval < cut;
            }
            if (!has_g && !has_d)
                break;
            uint64_t next = !has_d || (has_g && gv <= dval) ? gv : dval;
            if (has_g && gv == next)
                a++;
            if (has_d && dval == next)
                d++;
            if (kept == cap) {
                cut = next; /* the smallest value dropped */
                break;
            }
            store_le(out + width * kept++, next, width);
        }
        if (kept < PyBytes_GET_SIZE(values) / width && _PyBytes_Resize(&values, width * kept) < 0)
            goto done;
        if (undo_entry(&ops, sketches, root) < 0 || undo_entry(&ops, limits, root) < 0)
            goto done;
        if (table_set(sketches, root, values) < 0 || !(bound = PyLong_FromUnsignedLongLong(cut)))
            goto done;
    } else { /* a new story */
        duplicate = 0;
        fresh = 1;
        PyObject *counter = PyObject_GetAttr(t, table_keys[T_COUNTER]);
        if (!counter)
            goto done;
        root = PyNumber_Add(counter, ONE);
        rc = root ? undo_push(&ops, t, table_keys[T_COUNTER], counter) : -1;
        Py_DECREF(counter);
        if (rc < 0 || PyObject_SetAttr(t, table_keys[T_COUNTER], root) < 0)
            goto done;
        /* A new id: nothing of it is in any table (no lookup needed to say so). */
        if (undo_push(&ops, size, root, NULL) < 0 || undo_push(&ops, sketches, root, NULL) < 0
            || undo_push(&ops, limits, root, NULL) < 0)
            goto done;
        /* The document's sketch is kept packed (cut to its cap smallest: the limit is then
         * the first value dropped, as combine_sketch makes it). */
        Py_ssize_t keep = nd > cap ? cap : nd;
        bound = nd > cap ? PyLong_FromUnsignedLongLong(dv[cap]) : Py_NewRef(dlim);
        if (!bound)
            goto done;
        if ((values = PyBytes_FromStringAndSize(NULL, width * keep)) != NULL) {
            unsigned char *p = (unsigned char *)PyBytes_AS_STRING(values);
            for (i = 0; i < keep; i++)
                store_le(p + width * i, dv[i], width);
        }
        if (!values || table_set(sketches, root, values) < 0)
            goto done;
        PyObject *zero = PyLong_FromLong(0);
        rc = zero ? table_set(size, root, zero) : -1;
        Py_XDECREF(zero);
        if (rc < 0)
            goto done;
    }
placed:
    if (grows) {
        /* _set_sketch: a limit is kept only where the sketch was cut. */
        uint64_t b = no_limit;
        sketch_value(bound, &b);
        if (b < no_limit) {
            if (table_set(limits, root, bound) < 0)
                goto done;
        } else if (table_discard(limits, root) < 0) {
            goto done;
        }
    }
    if (ops.log && grows) { /* new_group's op (the sketch as stored), or extend_sketch's */
        PyObject *op = NULL;
        if (fresh) {
            op = PyTuple_Pack(4, op_names[OP_N], root, values, bound);
        } else {
            PyObject *all = packed_of(dv, nd, width);
            if (all)
                op = PyTuple_Pack(5, op_names[OP_S], root, all, dlim, args[8]);
            Py_XDECREF(all);
        }
        if (op_log(&ops, op) < 0)
            goto done;
    }
    /* The refused candidates' hashes get their votes, in candidate order: the anchors that
     * hit one and the values it shared, sorted, without repeats. */
    if (nc) {
        uint32_t root_id;
        if (gid_of(root, &root_id)) { /* as storing it would */
            am_id(root, &root_id);
            goto done;
        }
        for (k = 0; k < nc; k++) {
            if (accepted[k])
                continue;
            Py_ssize_t nh = 0;
            PyMem_Free(hs);
            if (!(hs = PyMem_Malloc((size_t)(np + shared_n[k] + 1) * sizeof *hs))) {
                PyErr_NoMemory();
                goto done;
            }
            for (i = 0; i < np; i++)
                if (hit_of[i] == k)
                    hs[nh++] = pv[i];
            memcpy(hs + nh, shared[k], (size_t)shared_n[k] * sizeof *hs);
            nh += shared_n[k];
            sort_u64(hs, nh);
            Py_ssize_t w = 0;
            for (i = 0; i < nh; i++)
                if (w == 0 || hs[w - 1] != hs[i])
                    hs[w++] = hs[i];
            if (vote_on(hs, w, cand_id[k], root_id, votes, (AnchorMap *)vote_table,
                        (AnchorMap *)common, parent, &ops) < 0)
                goto done;
        }
    }
    /* assign.tail_of: the page's last TAIL_VOTES values in page order (ties by value) below
     * its limit that are not common now (the votes above may have made some common) vote for
     * the group it joins, that group twice. */
    if (tail_n) {
        uint32_t root_id;
        if (gid_of(root, &root_id)) { /* as storing it would */
            am_id(root, &root_id);
            goto done;
        }
        /* The largest keys (place, then index: the values ascend, so the index orders ties
         * by value), ascending; a value is looked up in common only when its key would
         * enter them. */
        uint64_t top[TAIL_VOTES], tv[TAIL_VOTES];
        Py_ssize_t m = 0, j;
        for (i = 0; i < tail_n && tail_v[i] < doc_limit; i++) {
            uint64_t key = (uint64_t)tail_p[i] << 32 | (uint64_t)i;
            if (m == TAIL_VOTES && key < top[0])
                continue;
            int in = in_common(common, NULL, 1, tail_v[i]);
            if (in < 0)
                goto done;
            if (in)
                continue;
            if (m < TAIL_VOTES) {
                for (j = m++; j > 0 && top[j - 1] > key; j--)
                    top[j] = top[j - 1];
            } else { /* the smallest leaves */
                for (j = 0; j + 1 < TAIL_VOTES && top[j + 1] < key; j++)
                    top[j] = top[j + 1];
            }
            top[j] = key;
        }
        for (i = 0; i < m; i++) { /* their values, ascending (an insertion sort of a few) */
            uint64_t v = tail_v[top[i] & 0xFFFFFFFFu];
            for (j = i; j > 0 && tv[j - 1] > v; j--)
                tv[j] = tv[j - 1];
            tv[j] = v;
        }
        if (vote_on(tv, m, root_id, root_id, votes, (AnchorMap *)vote_table,
                    (AnchorMap *)common, parent, &ops) < 0)
            goto done;
    }
    /* The text was looked up above and is not in exact: its undo deletes it. */
    if (undo_push(&ops, exact, exact_h, NULL) < 0 || table_set(exact, exact_h, root) < 0)
        goto done;
    if (ops.log && op_log(&ops, op_of(OP_X, exact_h, root)) < 0)
        goto done;
write:
    {
        /* set_fp of each anchor not stored yet (absent: known), logged as one op of them
         * packed; one undo step takes them all back (key: a tuple of them, the anchors' own
         * when none was stored, old: MISSING_EACH). */
        uint64_t fresh_v[FAST_ANCHORS];
        PyObject *fresh_h[FAST_ANCHORS];
        Py_ssize_t nf = 0;
        for (i = 0; i < np; i++)
            if (!known[i]) {
                fresh_h[nf] = PyTuple_GET_ITEM(anchors, i);
                fresh_v[nf++] = pv[i];
            }
        if (nf && ops.undo) {
            PyObject *keys = nf == np ? Py_NewRef(anchors) : PyTuple_New(nf);
            if (keys && nf < np)
                for (i = 0; i < nf; i++)
                    PyTuple_SET_ITEM(keys, i, Py_NewRef(fresh_h[i]));
            rc = keys ? undo_push(&ops, fp, keys, ops.missing_each) : -1;
            Py_XDECREF(keys);
            if (rc < 0)
                goto done;
        }
        if (nf && Py_IS_TYPE(fp, &AnchorMapType)) { /* table_set's own steps, the id read once */
            uint32_t id;
            if (am_id(root, &id) < 0)
                goto done;
            for (i = 0; i < nf; i++)
                if (am_put((AnchorMap *)fp, fresh_v[i], &id, 1) < 0)
                    goto done;
        } else {
            for (i = 0; i < nf; i++)
                if (table_set(fp, fresh_h[i], root) < 0)
                    goto done;
        }
        if (nf && ops.log) {
            PyObject *hs_packed = packed_of(fresh_v, nf, 8);
            PyObject *op = hs_packed ? op_of(OP_FP, root, hs_packed) : NULL;
            Py_XDECREF(hs_packed);
            if (op_log(&ops, op) < 0)
                goto done;
        }
    }
    /* add_member */
    if (ops.undo) {
        PyObject *count = PyObject_GetAttr(t, table_keys[T_DOCUMENTS]);
        rc = count ? undo_entry(&ops, size, root) : -1;
        if (rc == 0)
            rc = undo_push(&ops, t, table_keys[T_DOCUMENTS], count);
        if (rc == 0 && doc_id != Py_None)
            rc = undo_push(&ops, docs, doc_id, NULL); /* not there: checked above */
        Py_XDECREF(count);
        if (rc < 0)
            goto done;
    }
    if (bump_item(size, root) < 0 || bump_attr(t, T_DOCUMENTS) < 0)
        goto done;
    if (doc_id == Py_None && ops.log && op_log(&ops, op_of(OP_M, root, NULL)) < 0)
        goto done;
    if (doc_id != Py_None) {
        PyObject *members = table(t, T_MEMBERS, &PyDict_Type), *list;
        if (!members)
            goto done;
        /* One member is kept as its id (a str), more as a list (memory.py: _Tables.members). */
        /* A reference of its own: the list made below may run a collection, and a finalizer
         * could change the table. */
        list = Py_XNewRef(table_borrow(members, root));
        if (ops.undo && (list || !PyErr_Occurred())) {
            /* A list grows in place: the undo cuts it back (list[kept:] = []); anything else
             * is replaced: the undo puts it back. */
            if (list && PyList_Check(list)) {
                PyObject *cut = PyLong_FromSsize_t(PyList_GET_SIZE(list));
                PyObject *tail = cut ? PySlice_New(cut, NULL, NULL) : NULL;
                PyObject *none = tail ? PyList_New(0) : NULL;
                rc = none ? undo_push(&ops, list, tail, none) : -1;
                Py_XDECREF(cut);
                Py_XDECREF(tail);
                Py_XDECREF(none);
            } else {
                rc = undo_push(&ops, members, root, list);
            }
            if (rc < 0) {
                Py_XDECREF(list);
                Py_DECREF(members);
                goto done;
            }
        }
        if (!list) {
            rc = PyErr_Occurred() ? -1 : table_set(members, root, doc_id);
        } else if (PyUnicode_Check(list)) {
            PyObject *pair = PyList_New(2);
            if (pair) {
                PyList_SET_ITEM(pair, 0, Py_NewRef(list));
                PyList_SET_ITEM(pair, 1, Py_NewRef(doc_id));
            }
            rc = pair ? table_set(members, root, pair) : -1;
            Py_XDECREF(pair);
        } else {
            rc = PyList_Append(list, doc_id);
        }
        Py_XDECREF(list);
        Py_DECREF(members);
        if (rc < 0)
            goto done;
        /* The record packed as records.py's pack_record packs it: the group (8 bytes), flags
         * (1: a duplicate, 2: titled, 4: with evidence), the anchors and merged ids counted
         * (4 bytes each; none merged here), the anchors (8 bytes each), the evidence (the
         * score, a double, and the verdict's code, a byte), the title in UTF-8;
         * little-endian. */
        PyObject *utf8 = title == Py_None ? NULL
                                          : PyUnicode_AsEncodedString(title, "utf-8", "surrogatepass");
        if (title != Py_None && !utf8)
            goto done;
        Py_ssize_t head = 17, tail = utf8 ? PyBytes_GET_SIZE(utf8) : 0;
        PyObject *record = PyBytes_FromStringAndSize(NULL, head + np * 8 + 9 + tail);
        uint64_t g = record ? PyLong_AsUnsignedLongLong(root) : 0;
        if (record && g == (uint64_t)-1 && PyErr_Occurred())
            Py_CLEAR(record);
        if (record) {
            unsigned char *p = (unsigned char *)PyBytes_AS_STRING(record);
            store_le(p, g, 8);
            p[8] = (unsigned char)((duplicate ? 1 : 0) | (utf8 ? 2 : 0) | 4);
            store_le(p + 9, (uint64_t)np, 4);
            store_le(p + 13, 0, 4);
            for (i = 0, p += head; i < np; i++, p += 8) {
                uint64_t v = PyLong_AsUnsignedLongLong(PyTuple_GET_ITEM(anchors, i));
                if (v == (uint64_t)-1 && PyErr_Occurred()) {
                    Py_CLEAR(record);
                    break;
                }
                store_le(p, v, 8);
            }
            if (record) {
                uint64_t bits;
                memcpy(&bits, &ev_score, 8);
                store_le(p, bits, 8);
                p[8] = (unsigned char)ev_verdict;
                p += 9;
            }
            if (record && utf8)
                memcpy(p, PyBytes_AS_STRING(utf8), (size_t)tail);
        }
        Py_XDECREF(utf8);
        if (!record)
            goto done;
        rc = table_set(docs, doc_id, record);
        Py_DECREF(record);
        if (rc < 0)
            goto done;
        /* The journal keeps the score as float.__repr__ writes it (its lines hold no floats:
         * the text reads back to the same double). */
        static const char *const verdicts[] = {"", "new story", "refused", "identical", "joined"};
        if (ops.log) {
            char *text = PyOS_double_to_string(ev_score, 'r', 0, Py_DTSF_ADD_DOT_0, NULL);
            if (!text)
                goto done;
            rc = op_log(&ops, Py_BuildValue("(sOOO()OOss)", "m", root, doc_id,
                                            duplicate ? Py_True : Py_False, title, anchors,
                                            text, verdicts[ev_verdict]));
            PyMem_Free(text);
            if (rc < 0)
                goto done;
        }
    }
    result = Py_BuildValue("(OOO)", root, duplicate ? Py_True : Py_False, anchors);
    goto done;
fail_or_fallback:
    if (rc < 0)
        goto done;
fallback:
    result = Py_NewRef(Py_None);
done:
    Py_XDECREF(sketch_seq);
    for (i = 0; i < FAST_ANCHORS; i++)
        Py_XDECREF(known[i]);
    Py_XDECREF(hit);
    for (k = 0; k < nc; k++) {
        Py_XDECREF(cand[k]);
        PyMem_Free(shared[k]);
    }
    PyMem_Free(dv);
    PyMem_Free(live);
    PyMem_Free(hs);
    PyMem_Free(dpos);
    PyMem_Free(lpos);
    PyMem_Free(tail_v);
    PyMem_Free(tail_p);
    PyMem_Free(okeys);
    PyMem_Free(order);
    PyMem_Free(flags);
    Py_XDECREF(dlim);
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
    Py_XDECREF(missing);
    Py_XDECREF(missing_each);
    Py_XDECREF(vals);
    return result;
}

/* make_record(cls, names, *values): an instance of the slotted class *cls* with each slot of
 * *names* (a tuple of str) set to the value in the same place, without calling its __init__:
 * what a frozen dataclass's generated __init__ does for a class without defaults to fill or a
 * __post_init__, at a fraction of the cost (the results of every add are made this way). */

/* The slots of the last few (class, names) make_record was given (see slot_offsets): the
 * two of every add. An entry holds its class and names; ok 0: they are not all slots. */
#define RECORD_CACHE 4
#define RECORD_MOST 16
static struct {
    PyObject *cls, *names;
    unsigned int version;
    int ok;
    Py_ssize_t off[RECORD_MOST];
} record_slots[RECORD_CACHE];

/* Where make_record stores each of *names* in a *tp*, or NULL: by PyObject_GenericSetAttr. */
static const Py_ssize_t *record_offsets(PyTypeObject *tp, PyObject *names)
{
    Py_ssize_t n = PyTuple_GET_SIZE(names);
    int i;
    if (n > RECORD_MOST)
        return NULL;
    for (i = 0; i < RECORD_CACHE && record_slots[i].cls; i++)
        if (record_slots[i].cls == (PyObject *)tp && record_slots[i].names == names)
            break;
    if (i == RECORD_CACHE)
        return NULL;
    if (record_slots[i].cls && slots_valid(tp, record_slots[i].version))
        return record_slots[i].ok ? record_slots[i].off : NULL;
    /* a new entry, or one the class has changed since: (re)read */
    record_slots[i].ok = slot_offsets(tp, ((PyTupleObject *)names)->ob_item, n,
                                      record_slots[i].off, &record_slots[i].version);
    if (!record_slots[i].cls) {
        record_slots[i].cls = Py_NewRef((PyObject *)tp);
        record_slots[i].names = Py_NewRef(names);
    }
    return record_slots[i].ok ? record_slots[i].off : NULL;
}

static PyObject *make_record(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs < 2 || !PyType_Check(args[0]) || !PyTuple_CheckExact(args[1])
        || PyTuple_GET_SIZE(args[1]) != nargs - 2) {
        PyErr_SetString(PyExc_TypeError, "make_record(cls, names, *values): one value a name");
        return NULL;
    }
    PyTypeObject *tp = (PyTypeObject *)args[0];
    const Py_ssize_t *off = record_offsets(tp, args[1]);
    unsigned int version = tp->tp_version_tag;
    PyObject *obj = tp->tp_alloc(tp, 0);
    if (!obj)
        return NULL;
    if (off && slots_valid(tp, version)) { /* (a collection in tp_alloc changed nothing) */
        for (Py_ssize_t i = 2; i < nargs; i++)
            slot_set_new(obj, off[i - 2], args[i]);
        return obj;
    }
    for (Py_ssize_t i = 2; i < nargs; i++)
        if (PyObject_GenericSetAttr(obj, PyTuple_GET_ITEM(args[1], i - 2), args[i]) < 0) {
            Py_DECREF(obj);
            return NULL;
        }
    return obj;
}

/* -- journal_line: a journal line's JSON, for the types the ops hold, and its checksum ------- */

typedef struct {
    char *buf;
    Py_ssize_t len, cap;
} Out;

/* Room for *n* more bytes in *o*: 0 or -1. */
static int out_grow(Out *o, Py_ssize_t n)
{
    if (o->len + n > o->cap) {
        Py_ssize_t cap = o->cap ? o->cap : 2048; /* a journal line of an add: ~1.3 KB */
        while (cap < o->len + n)
            cap *= 2;
        char *more = PyMem_Realloc(o->buf, (size_t)cap);
        if (!more) {
            PyErr_NoMemory();
            return -1;
        }
        o->buf = more;
        o->cap = cap;
    }
    return 0;
}

static inline int out_put(Out *o, const char *p, Py_ssize_t n)
{
    if (o->len + n > o->cap && out_grow(o, n) < 0)
        return -1;
    memcpy(o->buf + o->len, p, (size_t)n);
    o->len += n;
    return 0;
}

/* The decimal digits of 0..99, two by two. */
static const char DIGIT_PAIRS[] = "00010203040506070809101112131415161718192021222324252627282930313233343536373839"
                                  "40414243444546474849505152535455565758596061626364656667686970717273747576777879"
                                  "8081828384858687888990919293949596979899";

/* Powers of ten, 10**0 to 10**19. */
static const uint64_t TENS[20] = {1ULL, 10ULL, 100ULL, 1000ULL, 10000ULL, 100000ULL, 1000000ULL,
    10000000ULL, 100000000ULL, 1000000000ULL, 10000000000ULL, 100000000000ULL,
    1000000000000ULL, 10000000000000ULL, 100000000000000ULL, 1000000000000000ULL,
    10000000000000000ULL, 100000000000000000ULL, 1000000000000000000ULL,
    10000000000000000000ULL};

/* The number of decimal digits of *u*: from its bit length where the compiler counts
 * leading zeros (log10(2) ~ 1233 / 4096), else by comparisons. */
static inline int decimal_digits(uint64_t u)
{
    if (u < 10)
        return 1;
#if defined(__GNUC__) || defined(__clang__)
    int t = ((64 - __builtin_clzll(u)) * 1233) >> 12;
    return t + (u >= TENS[t]);
#else
    int n = 1;
    while (n < 20 && u >= TENS[n])
        n++;
    return n;
#endif
}

/* Write *u* in decimal (a minus first when *negative*) at the end of *o*, which has room
 * for 21 more bytes: the digits are counted, then filled in from the last, four and two at
 * a time (in 32-bit arithmetic once the rest fits: a sketch value, an id or a count all the
 * way). */
static inline void put_decimal(Out *o, uint64_t u, int negative)
{
    char *p = o->buf + o->len;
    if (negative)
        *p++ = '-';
    char *end = p + decimal_digits(u);
    o->len = end - o->buf;
    while (u > UINT32_MAX) {
        unsigned r = (unsigned)(u % 100);
        u /= 100;
        end -= 2;
        memcpy(end, DIGIT_PAIRS + 2 * r, 2);
    }
    uint32_t v = (uint32_t)u;
    while (v >= 10000) { /* four digits a step: one division by 10,000, two by 100 */
        uint32_t q = v / 10000, r = v - q * 10000;
        v = q;
        end -= 4;
        memcpy(end, DIGIT_PAIRS + 2 * (r / 100), 2);
        memcpy(end + 2, DIGIT_PAIRS + 2 * (r % 100), 2);
    }
    if (v >= 100) {
        unsigned r = v % 100;
        v /= 100;
        end -= 2;
        memcpy(end, DIGIT_PAIRS + 2 * r, 2);
    }
    if (v >= 10)
        memcpy(end - 2, DIGIT_PAIRS + 2 * v, 2);
    else
        end[-1] = (char)('0' + v);
}

/* Append *u* in decimal (a minus first when *negative*). */
static int out_decimal(Out *o, uint64_t u, int negative)
{
    if (o->len + 21 > o->cap && out_grow(o, 21) < 0)
        return -1;
    put_decimal(o, u, negative);
    return 0;
}

/* base64's alphabet (base64.b64encode's: the standard one), and each of the 4096 runs of 12
 * bits as its two letters (filled at import). */
static const char BASE64[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
static char base64_pairs[4096][2];

/* The eight bytes at *p* as a big-endian number. */
static inline uint64_t load_be64(const unsigned char *p)
{
#if (defined(__GNUC__) || defined(__clang__)) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t w;
    memcpy(&w, p, sizeof w);
    return __builtin_bswap64(w);
#else
    uint64_t w = 0;
    for (int i = 0; i < 8; i++)
        w = w << 8 | p[i];
    return w;
#endif
}

static void base64_init(void)
{
    for (int i = 0; i < 4096; i++) {
        base64_pairs[i][0] = BASE64[i >> 6];
        base64_pairs[i][1] = BASE64[i & 63];
    }
}

/* Append the JSON str of the base64 of the *n* bytes at *p* (base64.b64encode's, padded with
 * '='): six bytes a step while eight can be read (one load), then three; two letters at a
 * time. */
static int out_base64(Out *o, const unsigned char *p, Py_ssize_t n)
{
    Py_ssize_t chars = (n + 2) / 3 * 4;
    if (o->len + chars + 2 > o->cap && out_grow(o, chars + 2) < 0)
        return -1;
    char *q = o->buf + o->len;
    *q++ = '"';
    for (; n >= 8; n -= 6, p += 6) {
        uint64_t w = load_be64(p); /* the first 48 bits: four runs of 12 */
        memcpy(q, base64_pairs[w >> 52], 2);
        memcpy(q + 2, base64_pairs[(w >> 40) & 0xfff], 2);
        memcpy(q + 4, base64_pairs[(w >> 28) & 0xfff], 2);
        memcpy(q + 6, base64_pairs[(w >> 16) & 0xfff], 2);
        q += 8;
    }
    for (; n >= 3; n -= 3, p += 3) {
        uint32_t w = (uint32_t)p[0] << 16 | (uint32_t)p[1] << 8 | p[2];
        memcpy(q, base64_pairs[w >> 12], 2);
        memcpy(q + 2, base64_pairs[w & 0xfff], 2);
        q += 4;
    }
    if (n) {
        uint32_t w = (uint32_t)p[0] << 16 | (n == 2 ? (uint32_t)p[1] << 8 : 0);
        memcpy(q, base64_pairs[w >> 12], 2);
        q[2] = n == 2 ? BASE64[(w >> 6) & 63] : '=';
        q[3] = '=';
        q += 4;
    }
    *q++ = '"';
    o->len = q - o->buf;
    return 0;
}

/* An int of up to 64 bits either way (every hash, id and count) as its magnitude and sign,
 * its digits read directly: 1, or 0 for any other int (or where the digits cannot be read
 * so: the caller then converts it the general way). */
static inline int small_int(PyObject *v, uint64_t *u, int *negative)
{
#if PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
    Py_ssize_t size = Py_SIZE(v), n = size < 0 ? -size : size;
    const digit *d = ((PyLongObject *)v)->ob_digit;
    if (n <= 2 || (n == 3 && d[2] < 16)) {
        uint64_t x = n == 0 ? 0 : d[0];
        if (n >= 2)
            x |= (uint64_t)d[1] << 30;
        if (n == 3)
            x |= (uint64_t)d[2] << 60;
        *u = x;
        *negative = size < 0;
        return 1;
    }
#else
    (void)v, (void)u, (void)negative;
#endif
    return 0;
}

/* Append the JSON of the str *v* when json.dumps writes it as it is (printable ASCII without
 * a quote or a backslash, every op name and most ids): 0, or 1 when it needs escapes (the
 * caller then has json quote it), -1 on an error. */
static int out_plain_str(Out *o, PyObject *v)
{
    if (!PyUnicode_IS_ASCII(v))
        return 1;
    Py_ssize_t n = PyUnicode_GET_LENGTH(v);
    const unsigned char *s = PyUnicode_1BYTE_DATA(v);
    for (Py_ssize_t i = 0; i < n; i++)
        if (s[i] < 0x20 || s[i] > 0x7e || s[i] == '"' || s[i] == '\\')
            return 1;
    if (o->len + n + 2 > o->cap && out_grow(o, n + 2) < 0)
        return -1;
    char *p = o->buf + o->len;
    p[0] = '"';
    memcpy(p + 1, s, (size_t)n);
    p[n + 1] = '"';
    o->len += n + 2;
    return 0;
}

/* Append *v*'s JSON to *o*: 0, 1 when *v* holds a type handled by json.dumps alone, -1 on an
 * error. *quote* is json's encode_basestring_ascii (what json.dumps calls for a str). */
static int encode_value(Out *o, PyObject *v, PyObject *quote, int depth)
{
    if (v == Py_None)
        return out_put(o, "null", 4);
    if (v == Py_True)
        return out_put(o, "true", 4);
    if (v == Py_False)
        return out_put(o, "false", 5);
    if (PyLong_CheckExact(v)) {
        uint64_t u;
        int negative;
        if (small_int(v, &u, &negative))
            return out_decimal(o, u, negative);
        int overflow;
        long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
        if (x == -1 && PyErr_Occurred())
            return -1;
        if (!overflow)
            return out_decimal(o, x < 0 ? 0ULL - (unsigned long long)x : (unsigned long long)x,
                               x < 0);
        PyObject *text = PyObject_Str(v); /* what json.dumps writes: int.__repr__ */
        if (!text)
            return -1;
        Py_ssize_t chars;
        const char *t = PyUnicode_AsUTF8AndSize(text, &chars);
        int rc = t ? out_put(o, t, chars) : -1;
        Py_DECREF(text);
        return rc;
    }
    if (PyUnicode_CheckExact(v)) {
        int plain = out_plain_str(o, v);
        if (plain <= 0)
            return plain;
        PyObject *text = PyObject_CallOneArg(quote, v);
        if (!text)
            return -1;
        Py_ssize_t n;
        const char *t = PyUnicode_Check(text) ? PyUnicode_AsUTF8AndSize(text, &n) : NULL;
        int rc = t ? out_put(o, t, n) : PyErr_Occurred() ? -1 : 1;
        Py_DECREF(text);
        return rc;
    }
    if (PyBytes_CheckExact(v)) /* packed values: a str of their base64 */
        return out_base64(o, (const unsigned char *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
    if (PyByteArray_CheckExact(v)) /* the same, as the Python methods gather them */
        return out_base64(o, (const unsigned char *)PyByteArray_AS_STRING(v),
                          PyByteArray_GET_SIZE(v));
    if ((PyList_CheckExact(v) || PyTuple_CheckExact(v)) && depth < 32) {
        if (out_put(o, "[", 1) < 0)
            return -1;
        /* A list's items are read by index each time: the encoder runs no Python code but
         * json's quoting of a str, which cannot change the list. */
        for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(v); i++) {
            PyObject *item = PySequence_Fast_GET_ITEM(v, i);
            uint64_t u;
            int negative;
            if (PyLong_CheckExact(item) && small_int(item, &u, &negative)) {
                /* Most items (a sketch's values, hashes, ids): comma and digits in place. */
                if (o->len + 22 > o->cap && out_grow(o, 22) < 0)
                    return -1;
                if (i)
                    o->buf[o->len++] = ',';
                put_decimal(o, u, negative);
                continue;
            }
            if (i && out_put(o, ",", 1) < 0)
                return -1;
            Py_INCREF(item);
            int rc = encode_value(o, item, quote, depth + 1);
            Py_DECREF(item);
            if (rc)
                return rc;
        }
        return out_put(o, "]", 1);
    }
    return 1;
}

/* zlib's crc32 (CRC-32, reflected polynomial 0xEDB88320), eight bytes a step. */
static uint32_t crc_tables[8][256];

static void crc_init(void)
{
    for (uint32_t i = 0; i < 256; i++) {
        uint32_t c = i;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? 0xEDB88320U ^ (c >> 1) : c >> 1;
        crc_tables[0][i] = c;
    }
    for (uint32_t i = 0; i < 256; i++)
        for (int t = 1; t < 8; t++)
            crc_tables[t][i] = (crc_tables[t - 1][i] >> 8) ^ crc_tables[0][crc_tables[t - 1][i] & 0xff];
}

static uint32_t crc32_of(const unsigned char *p, size_t n)
{
    uint32_t c = 0xFFFFFFFFU;
    for (; n >= 8; n -= 8, p += 8) {
        uint32_t a = c ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16
                          | (uint32_t)p[3] << 24);
        c = crc_tables[7][a & 0xff] ^ crc_tables[6][(a >> 8) & 0xff]
            ^ crc_tables[5][(a >> 16) & 0xff] ^ crc_tables[4][a >> 24]
            ^ crc_tables[3][p[4]] ^ crc_tables[2][p[5]] ^ crc_tables[1][p[6]]
            ^ crc_tables[0][p[7]];
    }
    while (n--)
        c = crc_tables[0][(c ^ *p++) & 0xff] ^ (c >> 8);
    return c ^ 0xFFFFFFFFU;
}

/* journal_line(quote, seq, ops): the whole journal line of change *seq* as
 * nshash.stores.durable.journal_line makes it with json.dumps (``[seq,ops]``, a tab, the
 * CRC32 of those bytes in eight lowercase hex digits, a line break), or None when *ops* hold
 * a type json.dumps alone handles. *quote* comes first, so that a functools.partial binds
 * it. One call an add: no JSON bytes object, no concatenation. */
static PyObject *journal_line(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    /* The buffer of the last line, kept for the next (no allocation a line), unless a
     * call is already using it (quote, a Python callable, could start another). */
    static Out kept = {NULL, 0, 0};
    static int kept_busy = 0;
    if (nargs != 3 || !PyCallable_Check(args[0]) || !PyLong_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "journal_line(quote, seq, ops) takes 3 arguments");
        return NULL;
    }
    int mine = !kept_busy;
    Out o = {NULL, 0, 0};
    if (mine) {
        o = kept;
        o.len = 0;
        kept_busy = 1;
    }
    int rc = out_put(&o, "[", 1);
    if (rc == 0)
        rc = encode_value(&o, args[1], args[0], 1);
    if (rc == 0)
        rc = out_put(&o, ",", 1);
    if (rc == 0)
        rc = encode_value(&o, args[2], args[0], 1);
    if (rc == 0)
        rc = out_put(&o, "]", 1);
    if (rc == 0 && o.len + 10 > o.cap)
        rc = out_grow(&o, 10);
    PyObject *result = NULL;
    if (rc == 0) {
        static const char hex[] = "0123456789abcdef";
        uint32_t crc = crc32_of((const unsigned char *)o.buf, (size_t)o.len);
        char *p = o.buf + o.len;
        p[0] = '\t';
        for (int i = 0; i < 8; i++)
            p[1 + i] = hex[(crc >> (28 - 4 * i)) & 0xf];
        p[9] = '\n';
        result = PyBytes_FromStringAndSize(o.buf, o.len + 10);
    } else if (rc > 0) {
        result = Py_NewRef(Py_None);
    }
    if (mine && o.cap <= 1 << 16) { /* kept, but not the room of an unusually long line */
        kept = o;
        kept_busy = 0;
        return result;
    }
    if (mine) {
        kept = (Out){NULL, 0, 0};
        kept_busy = 0;
    }
    PyMem_Free(o.buf);
    return result;
}

static PyMethodDef module_methods[] = {
    {"journal_line", (PyCFunction)(void (*)(void))journal_line, METH_FASTCALL,
     "journal_line(quote, seq, ops) -> the journal line of change seq (checksum and line"
     " break included) as bytes, or None."},
    {"cut_sketch", cut_sketch, METH_VARARGS,
     "cut_sketch(values, cap) -> the new limit; values (a set of ints) keeps its cap smallest."},
    {"sketch_guard", sketch_guard, METH_VARARGS,
     "sketch_guard(sketch, doc_limit, values, group_limit, common, more) -> (shared, mine,"
     " theirs) or None."},
    {"set_aside", set_aside, METH_VARARGS,
     "set_aside(sketch, places, limit, common, more, shared, theirs) -> the frame's count,"
     " or None."},
    {"edits_in", edits_in_py, METH_VARARGS,
     "edits_in(sketch, places, limit, common, more, shared) -> the count of scattered edits,"
     " or None."},
    {"fast_assign", (PyCFunction)(void (*)(void))fast_assign, METH_FASTCALL,
     "fast_assign(t, sentences, sketch, exact, doc_limit, n, theta, min_overlap, cap, no_limit,"
     " votes, doc_id, title) -> (similar_id, duplicate, anchors) or None."},
    {"score", (PyCFunction)(void (*)(void))score_py, METH_FASTCALL,
     "score(shared, mine, theirs, min_overlap) -> the guard's score of a candidate."},
    {"make_record", (PyCFunction)(void (*)(void))make_record, METH_FASTCALL,
     "make_record(cls, names, *values) -> an instance of the slotted class cls, slots set."},
    {NULL, NULL, 0, NULL}};

static struct PyModuleDef assign_module = {
    PyModuleDef_HEAD_INIT, "nshash.methods.nshash._assign",
    "The compiled half of the nshash assignment (see nshash/methods/nshash/compiled.py).", -1,
    module_methods};

PyMODINIT_FUNC PyInit__assign(void)
{
    if (PyType_Ready(&AnchorMapType) < 0
        || PyType_Ready(&VoteMapType) < 0 || PyType_Ready(&GroupTableType) < 0
        || PyType_Ready(&DocTableType) < 0 || PyType_Ready(&KeyFilterType) < 0)
        return NULL;
    if ((!ONE && !(ONE = PyLong_FromLong(1))) || intern_table_names() < 0)
        return NULL;
    static const char *const op_strings[OP_NAMES] = {"F", "x", "v", "m", "n", "s"};
    for (int i = 0; i < OP_NAMES; i++)
        if (!op_names[i] && !(op_names[i] = PyUnicode_InternFromString(op_strings[i])))
            return NULL;
    crc_init();
    base64_init();
    PyObject *m = PyModule_Create(&assign_module);
    if (!m)
        return NULL;
    /* What compiled.py checks before it uses the module: a stale build is refused. */
    if (PyModule_AddIntConstant(m, "ABI", ASSIGN_ABI) < 0
        || PyModule_AddObjectRef(m, "AnchorMap", (PyObject *)&AnchorMapType) < 0
        || PyModule_AddObjectRef(m, "VoteMap", (PyObject *)&VoteMapType) < 0
        || PyModule_AddObjectRef(m, "GroupTable", (PyObject *)&GroupTableType) < 0
        || PyModule_AddObjectRef(m, "DocTable", (PyObject *)&DocTableType) < 0
        || PyModule_AddObjectRef(m, "KeyFilter", (PyObject *)&KeyFilterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
