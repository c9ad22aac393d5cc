/* sort_u64: shared by the two extensions of nshash (nshash/text/_kernel.c and
 * nshash/methods/nshash/_assign.c), each of which includes it once. */
#ifndef NSHASH_U64SORT_H
#define NSHASH_U64SORT_H

#include <stdint.h>

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

#endif
