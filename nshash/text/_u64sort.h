/* The 64-bit helpers shared by the two extensions of nshash (nshash/text/_kernel.c and
 * nshash/methods/nshash/_assign.c), each of which includes it once after Python.h:
 * sort_u64, small_u64 (an int's value read straight from its digits) and narrow_values (the
 * narrow sketch's rule); and slot_offsets, with which both fill the slots of the records they
 * make (a DocPrint, an Assignment, an AddResult) as PyObject_GenericSetAttr would, without
 * its lookup of each name. */
#ifndef NSHASH_U64SORT_H
#define NSHASH_U64SORT_H

#include <stdint.h>
#include <structmember.h>

/* Where each of the *n* attributes *names* of *tp* is stored, into off (1), when each is a
 * plain writable object slot of the class (a member descriptor of type T_OBJECT_EX, as
 * __slots__ makes them): what PyObject_GenericSetAttr writes for it then is that one pointer.
 * 0 when one is not (the caller then sets them by PyObject_GenericSetAttr). The answer holds
 * while tp_version_tag is unchanged: see slots_valid. */
static int slot_offsets(PyTypeObject *tp, PyObject *const *names, Py_ssize_t n, Py_ssize_t *off,
                        unsigned int *version)
{
    for (Py_ssize_t i = 0; i < n; i++) {
        if (!PyUnicode_CheckExact(names[i]))
            return 0;
        PyObject *d = _PyType_Lookup(tp, names[i]); /* borrowed; no error set */
        if (!d || !Py_IS_TYPE(d, &PyMemberDescr_Type))
            return 0;
        PyMemberDescrObject *md = (PyMemberDescrObject *)d;
        if (md->d_member->type != T_OBJECT_EX || (md->d_member->flags & READONLY)
            || !PyType_IsSubtype(tp, PyDescr_TYPE(md)))
            return 0;
        off[i] = md->d_member->offset;
    }
    /* (read after the lookups, which give the type its tag; they run no Python code) */
    *version = tp->tp_version_tag;
    return PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG) && *version != 0;
}

/* Whether offsets that slot_offsets found for *tp* at *version* still hold (nothing was set
 * on the class or its bases since). */
static inline int slots_valid(PyTypeObject *tp, unsigned int version)
{
    return PyType_HasFeature(tp, Py_TPFLAGS_VALID_VERSION_TAG) && tp->tp_version_tag == version;
}

/* Set slot *off* of a new object *obj* (every slot still NULL) to *value*, as
 * PyObject_GenericSetAttr sets a member slot. */
static inline void slot_set_new(PyObject *obj, Py_ssize_t off, PyObject *value)
{
    PyObject **at = (PyObject **)((char *)obj + off);
    PyObject *old = *at;
    *at = Py_XNewRef(value);
    Py_XDECREF(old);
}

/* Read the exact int *o* straight from its digits when it has at most 2 (60 bits: every
 * sketch value): 1 when *v is set, 0 when the caller must convert it another way. The
 * converting calls cost the most where a guard or narrow() reads a few hundred values. */
static inline int small_u64(PyObject *o, uint64_t *v)
{
#if PY_VERSION_HEX < 0x030C0000 && PYLONG_BITS_IN_DIGIT == 30
    Py_ssize_t size = Py_SIZE(o);
    if (size >= 0 && size <= 2) {
        const digit *d = ((PyLongObject *)o)->ob_digit;
        *v = size == 0 ? 0 : size == 1 ? d[0] : (uint64_t)d[0] | ((uint64_t)d[1] << 30);
        return 1;
    }
#else
    (void)o;
    (void)v;
#endif
    return 0;
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

/* nshash.text.fingerprint.narrow's rule on a sketch's values, in place: the *n* ascending
 * values at *buf* each shifted right by *shift*, repeats dropped, and the limit *limit*
 * likewise unless *keep_limit* (it is at least NO_LIMIT: it stays as it is); a value that
 * becomes the limit is dropped, and a sketch that would be left empty so keeps its values
 * with the limit moved past them (*keep_limit* then 0). 0, with the new count in *n*, or 1
 * where the Python version answers (a value that is not ascending once shifted, a limit that
 * would reach 2**64). *pos* (NULL for none) holds each value's place in the page and is
 * narrowed alongside: a value that two became keeps the first (least) place of the two.
 * Both extensions narrow with this: the text kernel's narrow() and the compiled assignment,
 * which narrows a document's values itself. */
static int narrow_values(uint64_t *buf, uint32_t *pos, Py_ssize_t *n, int shift,
                         uint64_t *limit, int *keep_limit)
{
    Py_ssize_t u = 0, i, count = *n;
    uint64_t limit_v = *keep_limit ? *limit : *limit >> shift;
    for (i = 0; i < count; i++) {
        uint64_t v = buf[i] >> shift;
        if (u && v < buf[u - 1])
            return 1;
        if (!u || v != buf[u - 1]) {
            if (pos)
                pos[u] = pos[i];
            buf[u++] = v;
        } else if (pos && pos[i] < pos[u - 1]) { /* one value for two: the first place */
            pos[u - 1] = pos[i];
        }
    }
    if (u && buf[u - 1] >= limit_v) {
        Py_ssize_t kept;
        for (kept = 0; kept < u && buf[kept] < limit_v; kept++)
            ;
        if (kept) {
            u = kept;
        } else { /* every value at the limit: the sketch stays whole, the limit moves past it */
            *keep_limit = 0;
            limit_v = buf[u - 1] + 1;
            if (!limit_v) /* the values reach 2**64 - 1: the Python version's int answers */
                return 1;
        }
    }
    *n = u;
    *limit = limit_v;
    return 0;
}

#endif
