/* Native kernels of a training step's non-compute CPU (issue 17): plain C against the
 * Python C API, arrays through the buffer protocol (no NumPy headers). Optional: built
 * by setup.py when a compiler is there; distgnn/native.py selects them or the NumPy
 * reference implementations (DISTGNN_NATIVE=0 forces those).
 *
 * Every kernel validates its input (dtype, shape, ranges) and raises ValueError or
 * TypeError; the callers validate first too, so a malformed request is refused before
 * it gets here. Results are bytearrays (writable, wrapped by np.frombuffer). The GIL is
 * released while a kernel computes.
 *
 * sample_uniform(indptr, seeds, fanout, replace, seed[, values[, max_edges[, out_pos,
 *                out_values]]]) -> (pos, run_seed, run_len[, picked])
 *     uniform in-edge sampling of a CSC (the server's SAMPLE_NEIGHBORS), int64 outputs;
 *     with values (int64, one per position), picked[e] = values[pos[e]], gathered in the
 *     same pass (prefetched behind the draw); with max_edges >= 0, a sample of more
 *     edges returns its edge count (an int) instead, nothing drawn. With out_pos and
 *     out_values (writable int64, long enough, with values), pos and picked are written
 *     to their first edges instead: (out_pos, run_seed, run_len, out_values, edges).
 * mean_csr(keys, other, nkeys, nother, inv, wide) -> (crow, col, val, inv_deg)
 *     a CSR with one row per key, entries in edge order (a stable counting sort).
 * relabel(dst_nid, src, dst, n[, swar]) -> (src_nid, edge_src, edge_dst)
 *     to_block's compaction over the ID range [0, n): bit maps and their ranks; the
 *     ranks' popcount is the CPU's (HW_POPCNT: 1) unless swar (tests compare the two).
 * gather_rows(table, ids, out, stream) -> None
 *     out[i] = table[ids[i]] (rows of any dtype, int64 or int32 IDs), the rows prefetched
 *     ahead; with stream, written with non-temporal stores (a large output).
 * place_rows(out, codes, rows, pulled, stream) -> None
 *     out[i] = rows[codes[i]] where codes[i] >= 0 (int32 codes); the positions with
 *     codes[i] < 0 take the rows of pulled in order (None: they are left as they are).
 *     pulled may be out's own first rows (expanded in place, from the end).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* --- buffers ------------------------------------------------------------------------- */

/* A 1-D C-contiguous buffer of 8-byte signed integers ('q'/'l'), 4-byte ('i', or 'l'
 * where long has 4 bytes) or float32 ('f'); ``writable``: a kernel's output given by the
 * caller. */
static int get_buf_as(PyObject *obj, Py_buffer *v, char kind, int writable, const char *what) {
    int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, v, flags) < 0) {
        PyErr_Format(PyExc_TypeError, "%s: expected a %scontiguous array", what,
                     writable ? "writable " : "");
        return -1;
    }
    const char *f = v->format ? v->format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    int ok;
    if (kind == 'q')
        ok = v->itemsize == 8 && (f[0] == 'q' || f[0] == 'l') && f[1] == 0;
    else if (kind == 'i')
        ok = v->itemsize == 4 && (f[0] == 'i' || f[0] == 'l') && f[1] == 0;
    else
        ok = v->itemsize == 4 && f[0] == 'f' && f[1] == 0;
    if (!ok || v->ndim != 1) {
        PyErr_Format(PyExc_TypeError, "%s: expected a 1-D %s array", what,
                     kind == 'q' ? "int64" : kind == 'i' ? "int32" : "float32");
        PyBuffer_Release(v);
        return -1;
    }
    return 0;
}

static int get_buf(PyObject *obj, Py_buffer *v, char kind, const char *what) {
    return get_buf_as(obj, v, kind, 0, what);
}

/* A writable 1-D C-contiguous int64 buffer (a kernel's output given by the caller). */
static int out_buf(PyObject *obj, Py_buffer *v, const char *what) {
    return get_buf_as(obj, v, 'q', 1, what);
}

static PyObject *new_bytes(Py_ssize_t n, Py_ssize_t itemsize, char **data) {
    if (n < 0 || n > PY_SSIZE_T_MAX / itemsize) {
        PyErr_SetString(PyExc_MemoryError, "result too large");
        return NULL;
    }
    PyObject *b = PyByteArray_FromStringAndSize(NULL, n * itemsize);
    if (b) *data = PyByteArray_AS_STRING(b);
    return b;
}

/* --- random numbers: xoshiro256** seeded by splitmix64 ------------------------------- */

typedef struct {
    uint64_t s[4];
} Rng;

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

static void rng_seed(Rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t rng_next(Rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

/* Uniform in [0, n), n > 0, unbiased (Lemire's multiply-and-reject). */
static inline uint64_t rng_below(Rng *r, uint64_t n) {
    __uint128_t m = (__uint128_t)rng_next(r) * n;
    uint64_t lo = (uint64_t)m;
    if (lo < n) {
        uint64_t t = (0 - n) % n;
        while (lo < t) {
            m = (__uint128_t)rng_next(r) * n;
            lo = (uint64_t)m;
        }
    }
    return (uint64_t)(m >> 64);
}

/* --- sample_uniform ------------------------------------------------------------------ */

/* An open-addressing set of offsets for Floyd's draw with large fanouts. */
typedef struct {
    int64_t *slot; /* -1: empty */
    uint64_t mask;
} Set;

static int set_insert(Set *s, int64_t x) { /* 1 if added, 0 if present */
    uint64_t h = ((uint64_t)x * 0x9e3779b97f4a7c15ULL) & s->mask;
    while (s->slot[h] != -1) {
        if (s->slot[h] == x) return 0;
        h = (h + 1) & s->mask;
    }
    s->slot[h] = x;
    return 1;
}

#define LAG 128 /* edges: values are gathered this far behind the draw (prefetched) */
#define LINEAR_MAX 48 /* fanouts up to this check picks by a scan, above by the set */

/* f distinct offsets in [0, d), d > f: Floyd's algorithm (a uniform f-subset; the picks
 * in the order drawn). Membership: a bit mask for d <= 64, a scan of the picks for small
 * fanouts, else a hash set. */
static void floyd(Rng *r, int64_t d, int64_t f, int64_t *out, Set *set) {
    if (d <= 64) {
        uint64_t mask = 0;
        for (int64_t i = 0; i < f; i++) {
            int64_t j = d - f + i, t = (int64_t)rng_below(r, (uint64_t)j + 1);
            if (mask >> t & 1) t = j; /* j was not pickable before: always new */
            mask |= 1ULL << t;
            out[i] = t;
        }
        return;
    }
    if (f <= LINEAR_MAX) {
        for (int64_t i = 0; i < f; i++) {
            int64_t j = d - f + i, t = (int64_t)rng_below(r, (uint64_t)j + 1);
            for (int64_t k = 0; k < i; k++)
                if (out[k] == t) {
                    t = j;
                    break;
                }
            out[i] = t;
        }
        return;
    }
    for (int64_t i = 0; i < f; i++) {
        int64_t j = d - f + i, t = (int64_t)rng_below(r, (uint64_t)j + 1);
        if (!set_insert(set, t)) {
            set_insert(set, j);
            t = j;
        }
        out[i] = t;
    }
    for (uint64_t h = 0; h <= set->mask; h++) set->slot[h] = -1;
}

static PyObject *sample_uniform(PyObject *self, PyObject *args) {
    PyObject *o_indptr, *o_seeds, *o_vals = Py_None, *o_opos = Py_None, *o_oval = Py_None;
    long long fanout, max_edges = -1;
    int replace;
    unsigned long long seed;
    if (!PyArg_ParseTuple(args, "OOLpK|OLOO", &o_indptr, &o_seeds, &fanout, &replace, &seed,
                          &o_vals, &max_edges, &o_opos, &o_oval))
        return NULL;
    Py_buffer vi, vs, vv;
    int has_vals = o_vals != Py_None;
    if (get_buf(o_indptr, &vi, 'q', "indptr") < 0) return NULL;
    if (get_buf(o_seeds, &vs, 'q', "seeds") < 0) {
        PyBuffer_Release(&vi);
        return NULL;
    }
    if (has_vals && get_buf(o_vals, &vv, 'q', "values") < 0) {
        PyBuffer_Release(&vi);
        PyBuffer_Release(&vs);
        return NULL;
    }
    PyObject *res = NULL, *b_pos = NULL, *b_rs = NULL, *b_rl = NULL, *b_val = NULL;
    Py_buffer vop, vov;
    int has_opos = 0, has_oval = 0, into = 0;
    const int64_t *indptr = vi.buf, *seeds = vs.buf, *vals = has_vals ? vv.buf : NULL;
    int64_t n = (int64_t)vi.shape[0] - 1, ns = (int64_t)vs.shape[0];
    int64_t nvals = has_vals ? (int64_t)vv.shape[0] : 0;
    int64_t total = 0, nruns = 0, maxdeg = 0;
    const int64_t limit = PY_SSIZE_T_MAX / 8;
    const char *err = NULL;
    if (n < 0) err = "indptr must not be empty";
    for (int64_t i = 0; !err && i < ns; i++) {
        int64_t s = seeds[i];
        if (s < 0 || s >= n) err = "a seed is out of the CSC's range";
        else if (indptr[s] < 0 || indptr[s + 1] < indptr[s]) err = "indptr is not ascending";
        else if (has_vals && indptr[s + 1] > nvals) err = "values are shorter than indptr";
        else {
            int64_t d = indptr[s + 1] - indptr[s], add = 0;
            if (d > maxdeg) maxdeg = d;
            if (fanout < 0) add = d, nruns++;
            else if (fanout == 0) continue;
            else if (replace) add = d > 0 ? fanout : 0, nruns += d > 0;
            else add = d < fanout ? d : fanout, nruns++;
            if (add > limit - total) err = "the sample is too large";
            else total += add;
        }
    }
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        goto done;
    }
    if (max_edges >= 0 && total > max_edges) { /* refused: the count, nothing drawn */
        res = PyLong_FromLongLong(total);
        goto done;
    }
    char *p_pos = NULL, *p_rs = NULL, *p_rl = NULL;
    char *p_val = NULL;
    if (has_vals && o_opos != Py_None && o_oval != Py_None) { /* the caller's buffers */
        if (out_buf(o_opos, &vop, "out_pos") < 0) goto done;
        has_opos = 1;
        if (out_buf(o_oval, &vov, "out_values") < 0) goto done;
        has_oval = 1;
        const char *a = vop.buf, *b = vov.buf;
        size_t span = (size_t)total * 8;
        if (vop.shape[0] >= total && vov.shape[0] >= total && (a + span <= b || b + span <= a)) {
            into = 1; /* else too small (or overlapping): fresh results, as without them */
            p_pos = vop.buf, p_val = vov.buf;
        }
    }
    if (!into) {
        b_pos = new_bytes(total, 8, &p_pos);
        if (has_vals) b_val = new_bytes(total, 8, &p_val);
    }
    b_rs = new_bytes(nruns, 8, &p_rs);
    b_rl = new_bytes(nruns, 8, &p_rl);
    if ((!into && (!b_pos || (has_vals && !b_val))) || !b_rs || !b_rl) goto done;
    int64_t *pos = (int64_t *)p_pos, *rs = (int64_t *)p_rs, *rl = (int64_t *)p_rl;
    int64_t *val = (int64_t *)p_val;
    Set set = {NULL, 0};
    if (!replace && fanout > LINEAR_MAX && maxdeg > fanout) { /* Floyd with a set */
        uint64_t cap = 1; /* fanout < maxdeg <= total edges: the set is smaller than pos */
        while (cap < (uint64_t)fanout * 2) cap <<= 1;
        set.slot = malloc(cap * sizeof(int64_t));
        if (!set.slot) {
            PyErr_NoMemory();
            goto done;
        }
        set.mask = cap - 1;
        for (uint64_t h = 0; h < cap; h++) set.slot[h] = -1;
    }
    Py_BEGIN_ALLOW_THREADS
    Rng r;
    rng_seed(&r, seed);
    int64_t e = 0, k = 0, g = 0;
    for (int64_t i = 0; fanout != 0 && i < ns; i++) {
        int64_t st = indptr[seeds[i]], d = indptr[seeds[i] + 1] - st, e0 = e;
        if (fanout < 0 || (!replace && d <= fanout)) {
            for (int64_t j = 0; j < d; j++) pos[e + j] = st + j;
            rs[k] = i, rl[k++] = d, e += d;
        } else if (replace) {
            if (d == 0) continue;
            for (int64_t j = 0; j < fanout; j++)
                pos[e + j] = st + (int64_t)rng_below(&r, (uint64_t)d);
            rs[k] = i, rl[k++] = fanout, e += fanout;
        } else {
            floyd(&r, d, fanout, pos + e, &set);
            for (int64_t j = 0; j < fanout; j++) pos[e + j] += st;
            rs[k] = i, rl[k++] = fanout, e += fanout;
        }
        if (vals) { /* the random reads: prefetch this seed's picks, gather LAG behind */
            for (int64_t j = e0; j < e; j++) __builtin_prefetch(vals + pos[j]);
            for (; g < e - LAG; g++) val[g] = vals[pos[g]];
        }
    }
    for (; vals && g < e; g++) val[g] = vals[pos[g]];
    Py_END_ALLOW_THREADS
    free(set.slot);
    if (into) res = Py_BuildValue("(OOOOL)", o_opos, b_rs, b_rl, o_oval, (long long)total);
    else
        res = has_vals ? PyTuple_Pack(4, b_pos, b_rs, b_rl, b_val)
                       : PyTuple_Pack(3, b_pos, b_rs, b_rl);
done:
    if (has_opos) PyBuffer_Release(&vop);
    if (has_oval) PyBuffer_Release(&vov);
    Py_XDECREF(b_val);
    if (has_vals) PyBuffer_Release(&vv);
    Py_XDECREF(b_pos);
    Py_XDECREF(b_rs);
    Py_XDECREF(b_rl);
    PyBuffer_Release(&vi);
    PyBuffer_Release(&vs);
    return res;
}

/* --- mean_csr ------------------------------------------------------------------------ */

static PyObject *mean_csr(PyObject *self, PyObject *args) {
    PyObject *o_keys, *o_other, *o_inv;
    Py_ssize_t nkeys, nother;
    int wide;
    if (!PyArg_ParseTuple(args, "OOnnOp", &o_keys, &o_other, &nkeys, &nother, &o_inv, &wide))
        return NULL;
    if (nkeys < 0 || nother < 0 || nkeys >= PY_SSIZE_T_MAX / 8) {
        PyErr_SetString(PyExc_ValueError, "node counts must be >= 0 (and allocatable)");
        return NULL;
    }
    Py_buffer vk, vo, vinv;
    int has_inv = o_inv != Py_None;
    if (get_buf(o_keys, &vk, 'q', "keys") < 0) return NULL;
    if (get_buf(o_other, &vo, 'q', "other") < 0) {
        PyBuffer_Release(&vk);
        return NULL;
    }
    if (has_inv && get_buf(o_inv, &vinv, 'f', "inv") < 0) {
        PyBuffer_Release(&vk);
        PyBuffer_Release(&vo);
        return NULL;
    }
    PyObject *res = NULL, *b_crow = NULL, *b_col = NULL, *b_val = NULL, *b_inv = NULL;
    int64_t *next = NULL;
    const int64_t *keys = vk.buf, *other = vo.buf;
    int64_t ne = (int64_t)vk.shape[0];
    const char *err = NULL;
    if (vo.shape[0] != ne) err = "keys and other differ in length";
    else if (has_inv && vinv.shape[0] != nother) err = "inv must have one value per other node";
    else if (!wide && (ne >= INT32_MAX || nother >= INT32_MAX))
        err = "int32 indices cannot hold this matrix";
    for (int64_t e = 0; !err && e < ne; e++)
        if (keys[e] < 0 || keys[e] >= nkeys || other[e] < 0 || other[e] >= nother)
            err = "an edge's node index is out of range";
    if (err) {
        PyErr_SetString(PyExc_ValueError, err);
        goto done;
    }
    int isz = wide ? 8 : 4;
    char *p_crow = NULL, *p_col = NULL, *p_val = NULL, *p_inv = NULL;
    b_crow = new_bytes(nkeys + 1, isz, &p_crow);
    b_col = new_bytes(ne, isz, &p_col);
    b_val = new_bytes(ne, 4, &p_val);
    if (!has_inv) b_inv = new_bytes(nkeys, 4, &p_inv);
    next = malloc(((size_t)nkeys + 1) * sizeof(int64_t));
    if (!b_crow || !b_col || !b_val || (!has_inv && !b_inv)) goto done;
    if (!next) {
        PyErr_NoMemory();
        goto done;
    }
    Py_BEGIN_ALLOW_THREADS
    memset(next, 0, ((size_t)nkeys + 1) * sizeof(int64_t));
    for (int64_t e = 0; e < ne; e++) next[keys[e] + 1]++;
    float *val = (float *)p_val, *inv = (float *)p_inv;
    if (!has_inv)
        for (int64_t v = 0; v < nkeys; v++)
            inv[v] = (float)(1.0 / (double)(next[v + 1] > 1 ? next[v + 1] : 1));
    for (int64_t v = 0; v < nkeys; v++) next[v + 1] += next[v];
    if (wide) memcpy(p_crow, next, ((size_t)nkeys + 1) * 8);
    else
        for (int64_t v = 0; v <= nkeys; v++) ((int32_t *)p_crow)[v] = (int32_t)next[v];
    const float *by_other = has_inv ? (const float *)vinv.buf : NULL;
    if (wide) {
        int64_t *col = (int64_t *)p_col;
        for (int64_t e = 0; e < ne; e++) {
            int64_t at = next[keys[e]]++;
            col[at] = other[e];
            val[at] = by_other ? by_other[other[e]] : inv[keys[e]];
        }
    } else {
        int32_t *col = (int32_t *)p_col;
        for (int64_t e = 0; e < ne; e++) {
            int64_t at = next[keys[e]]++;
            col[at] = (int32_t)other[e];
            val[at] = by_other ? by_other[other[e]] : inv[keys[e]];
        }
    }
    Py_END_ALLOW_THREADS
    res = PyTuple_Pack(4, b_crow, b_col, b_val, has_inv ? Py_None : b_inv);
done:
    free(next);
    Py_XDECREF(b_crow);
    Py_XDECREF(b_col);
    Py_XDECREF(b_val);
    Py_XDECREF(b_inv);
    PyBuffer_Release(&vk);
    PyBuffer_Release(&vo);
    if (has_inv) PyBuffer_Release(&vinv);
    return res;
}

#if (defined(__x86_64__) || defined(__i386__)) && (defined(__GNUC__) || defined(__clang__))
#define HW_POPCNT 1
static int hw_popcnt = 0; /* the CPU has POPCNT: set at import */
#endif

static inline int64_t popcount64(uint64_t x) { /* SWAR: no libgcc call without -mpopcnt */
    x = x - ((x >> 1) & 0x5555555555555555ULL);
    x = (x & 0x3333333333333333ULL) + ((x >> 2) & 0x3333333333333333ULL);
    x = (x + (x >> 4)) & 0x0f0f0f0f0f0f0f0fULL;
    return (int64_t)((x * 0x0101010101010101ULL) >> 56);
}

/* --- relabel ------------------------------------------------------------------------- */

/* Local IDs without a table over the ID range: the rank of an ID's bit in its bit map
 * (the set bits before it: a per-word prefix count plus a popcount in its word). The
 * maps, their prefix counts and the destinations' positions by rank are ~1/10 of an
 * int32 table over the range, so the edges' random lookups stay in the cache. */
typedef struct {
    uint64_t *bits;
    int32_t *before; /* set bits in the words before this one */
} Rank;

static inline int64_t rank_of(const Rank *m, int64_t v) {
    uint64_t w = m->bits[v >> 6], below = (1ULL << (v & 63)) - 1;
    return m->before[v >> 6] + popcount64(w & below);
}

static inline int has_bit(const uint64_t *bits, int64_t v) {
    return (int)(bits[v >> 6] >> (v & 63) & 1);
}

static int64_t prefix_counts(Rank *m, size_t words) {
    int64_t acc = 0;
    for (size_t w = 0; w < words; w++) {
        m->before[w] = (int32_t)acc;
        acc += popcount64(m->bits[w]);
    }
    return acc;
}

/* Each edge's local source (and destination) ID: a rank lookup per edge, so the
 * popcount is in the hot loop. The hardware instruction (x86 POPCNT, checked at import:
 * the extension is built once for an image that may run on any x86-64) is ~2x the SWAR
 * sequence there; both give the same ranks. NULL, or the error. */
#define EDGE_IDS(NAME, ATTR, POP)                                                          \
    ATTR static const char *NAME(const Rank *d, const Rank *s, const int32_t *by_rank,     \
                                 const int64_t *src, const int64_t *dst, int64_t ne,       \
                                 int64_t nd, int64_t n, int64_t *es, int64_t *ed) {        \
        for (int64_t e = 0; e < ne; e++) {                                                 \
            int64_t v = src[e];                                                            \
            uint64_t below = (1ULL << (v & 63)) - 1;                                       \
            es[e] = has_bit(d->bits, v)                                                    \
                        ? by_rank[d->before[v >> 6] + POP(d->bits[v >> 6] & below)]        \
                        : nd + s->before[v >> 6] + POP(s->bits[v >> 6] & below);           \
        }                                                                                  \
        for (int64_t e = 0; ed && e < ne; e++) {                                           \
            int64_t v = dst[e];                                                            \
            if ((uint64_t)v >= (uint64_t)n || !has_bit(d->bits, v))                        \
                return "sampled edges: a destination is not among the seeds";             \
            uint64_t below = (1ULL << (v & 63)) - 1;                                       \
            ed[e] = by_rank[d->before[v >> 6] + POP(d->bits[v >> 6] & below)];             \
        }                                                                                  \
        return NULL;                                                                       \
    }

EDGE_IDS(edge_ids_swar, , popcount64)
#ifdef HW_POPCNT
EDGE_IDS(edge_ids_hw, __attribute__((target("popcnt"))), __builtin_popcountll)
#endif

static PyObject *relabel(PyObject *self, PyObject *args) {
    PyObject *o_dn, *o_src, *o_dst;
    Py_ssize_t n;
    int swar = 0;
    if (!PyArg_ParseTuple(args, "OOOn|p", &o_dn, &o_src, &o_dst, &n, &swar)) return NULL;
#ifdef HW_POPCNT
    int hw = hw_popcnt && !swar;
#endif
    Py_buffer vd, vs, vt;
    int has_dst = o_dst != Py_None;
    if (get_buf(o_dn, &vd, 'q', "dst_nid") < 0) return NULL;
    if (get_buf(o_src, &vs, 'q', "src") < 0) {
        PyBuffer_Release(&vd);
        return NULL;
    }
    if (has_dst && get_buf(o_dst, &vt, 'q', "dst") < 0) {
        PyBuffer_Release(&vd);
        PyBuffer_Release(&vs);
        return NULL;
    }
    PyObject *res = NULL, *b_nid = NULL, *b_es = NULL, *b_ed = NULL;
    Rank d = {NULL, NULL}, s = {NULL, NULL};
    int32_t *by_rank = NULL; /* a destination's position in dst_nid, by its rank */
    const int64_t *dn = vd.buf, *src = vs.buf, *dst = has_dst ? vt.buf : NULL;
    int64_t nd = (int64_t)vd.shape[0], ne = (int64_t)vs.shape[0];
    const char *err = NULL;
    if (has_dst && vt.shape[0] != ne) err = "src and dst differ in length";
    else if (n < 0 || nd + ne >= INT32_MAX) err = "too many nodes for int32 local IDs";
    for (int64_t i = 0; !err && i < nd; i++)
        if (dn[i] < 0 || dn[i] >= n) err = "a destination node ID is out of range";
    if (err) goto fail;
    size_t words = ((size_t)n + 63) / 64 + 1;
    d.bits = calloc(words, sizeof(uint64_t));
    s.bits = calloc(words, sizeof(uint64_t));
    d.before = malloc(words * sizeof(int32_t));
    s.before = malloc(words * sizeof(int32_t));
    by_rank = malloc(((size_t)nd > 0 ? (size_t)nd : 1) * sizeof(int32_t));
    if (!d.bits || !s.bits || !d.before || !s.before || !by_rank) {
        PyErr_NoMemory();
        goto done;
    }
    int64_t nnew = 0;
    Py_BEGIN_ALLOW_THREADS
    for (int64_t i = 0; i < nd; i++) {
        int64_t v = dn[i];
        if (has_bit(d.bits, v)) {
            err = "seeds: destination node IDs must be unique";
            break;
        }
        d.bits[v >> 6] |= 1ULL << (v & 63);
    }
    if (!err) {
        prefix_counts(&d, words);
        for (int64_t i = 0; i < nd; i++) by_rank[rank_of(&d, dn[i])] = (int32_t)i;
    }
    for (int64_t e = 0; !err && e < ne; e++) {
        int64_t v = src[e];
        if ((uint64_t)v >= (uint64_t)n) {
            err = "an edge's node ID is out of range";
            break;
        }
        s.bits[v >> 6] |= 1ULL << (v & 63);
    }
    if (!err) {
        for (size_t w = 0; w < words; w++) s.bits[w] &= ~d.bits[w]; /* the new sources */
        nnew = prefix_counts(&s, words);
    }
    Py_END_ALLOW_THREADS
    if (err) goto fail;
    char *p_nid = NULL, *p_es = NULL, *p_ed = NULL;
    b_nid = new_bytes(nd + nnew, 8, &p_nid);
    b_es = new_bytes(ne, 8, &p_es);
    b_ed = has_dst ? new_bytes(ne, 8, &p_ed) : NULL;
    if (!b_nid || !b_es || (has_dst && !b_ed)) goto done;
    int64_t *nid = (int64_t *)p_nid, *es = (int64_t *)p_es, *ed = has_dst ? (int64_t *)p_ed : NULL;
    Py_BEGIN_ALLOW_THREADS
    memcpy(nid, dn, (size_t)nd * 8);
    int64_t k = nd; /* the new sources, ascending */
    for (size_t w = 0; w < words; w++)
        for (uint64_t m = s.bits[w]; m; m &= m - 1) nid[k++] = (int64_t)(w * 64) + __builtin_ctzll(m);
#ifdef HW_POPCNT
    if (hw)
        err = edge_ids_hw(&d, &s, by_rank, src, dst, ne, nd, n, es, ed);
    else
#endif
        err = edge_ids_swar(&d, &s, by_rank, src, dst, ne, nd, n, es, ed);
    Py_END_ALLOW_THREADS
    if (err) goto fail;
    res = PyTuple_Pack(3, b_nid, b_es, has_dst ? b_ed : Py_None);
    goto done;
fail:
    PyErr_SetString(PyExc_ValueError, err);
done:
    free(d.bits);
    free(s.bits);
    free(d.before);
    free(s.before);
    free(by_rank);
    Py_XDECREF(b_nid);
    Py_XDECREF(b_es);
    Py_XDECREF(b_ed);
    PyBuffer_Release(&vd);
    PyBuffer_Release(&vs);
    if (has_dst) PyBuffer_Release(&vt);
    return res;
}

/* --- gather_rows (the co-located trainer's feature read; issue 17) ------------------ */

/* A step reads ~220k rows of 400 bytes from the co-located server's shared memory, in a
 * few ascending sweeps (the seeds, then each hop's new nodes in ID order): np.take's
 * loop is memory-bound at ~1.5x a plain memcpy of the same bytes. Two things take most
 * of that back (measured): writing the output with non-temporal stores (no read for
 * ownership of 88 MB of destination lines the model reads much later anyway) and
 * prefetching the source rows ~32 KiB ahead into L2. The rows are first copied into a
 * small buffer that stays in L1, which is then streamed out in whole 64-byte lines
 * (a row of 400 bytes is not line-aligned). Non-temporal stores only pay when the
 * output is larger than the caches: the caller decides (``stream``). Without stream (a
 * server's pull answer, sent at once from the caches), rows are prefetched the same way
 * and copied by plain stores: 8 MiB of random 512-byte rows from /dev/shm in 0.38 vs
 * 0.67 ms for np.take (round 14). */

#if defined(__x86_64__) || defined(_M_X64) || defined(__SSE2__)
#include <emmintrin.h>
#define GATHER_SSE2 1
#endif

#define GATHER_BUF 8192            /* bytes: the L1-resident staging buffer ... */
#define GATHER_SLACK 4096          /* ... plus room for one row past it */
#define GATHER_PREFETCH (32 << 10) /* bytes of rows prefetched ahead */

static void stream_lines(char *dst, const char *src, size_t n) { /* n: whole lines */
#ifdef GATHER_SSE2
    for (size_t k = 0; k < n; k += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(src + k));
        __m128i b = _mm_loadu_si128((const __m128i *)(src + k + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(src + k + 32));
        __m128i d = _mm_loadu_si128((const __m128i *)(src + k + 48));
        _mm_stream_si128((__m128i *)(dst + k), a);
        _mm_stream_si128((__m128i *)(dst + k + 16), b);
        _mm_stream_si128((__m128i *)(dst + k + 32), c);
        _mm_stream_si128((__m128i *)(dst + k + 48), d);
    }
#else
    memcpy(dst, src, n);
#endif
}

/* n bytes to dst: the partial lines at either end by plain stores, the rest streamed. */
static void stream_bytes(char *dst, const char *src, size_t n) {
    size_t head = (size_t)(-(uintptr_t)dst) & 63;
    if (head > n) head = n;
    memcpy(dst, src, head);
    size_t body = (n - head) & ~(size_t)63;
    stream_lines(dst + head, src + head, body);
    memcpy(dst + head + body, src + head + body, n - head - body);
}

static inline void prefetch_row(const char *p, size_t row) {
    for (size_t q = 0; q < row; q += 64) __builtin_prefetch(p + q, 0, 2); /* into L2 */
}

static Py_ssize_t prefetch_ahead(size_t row) {
    Py_ssize_t a = (Py_ssize_t)(GATHER_PREFETCH / row);
    return a < 4 ? 4 : a > 256 ? 256 : a;
}

/* the streamed lines are visible before the caller reads them */
#ifdef GATHER_SSE2
#define SFENCE() _mm_sfence()
#else
#define SFENCE() ((void)0)
#endif

/* gather_IT(t, nrows, row, ids, n, out, stream): out[i] = t[ids[i]]; returns the position
 * of the first ID outside [0, nrows) (rows before it are written), or -1. */
#define GATHER_COPY(NAME, IT)                                                              \
    static Py_ssize_t NAME(const char *t, Py_ssize_t nrows, size_t row, const IT *ids,     \
                           Py_ssize_t n, char *out, int stream) {                          \
        if (!stream) {                                                                     \
            Py_ssize_t pa = prefetch_ahead(row);                                           \
            for (Py_ssize_t i = 0; i < n; i++) {                                           \
                if (i + pa < n && (uint64_t)ids[i + pa] < (uint64_t)nrows)                 \
                    prefetch_row(t + (size_t)ids[i + pa] * row, row);                      \
                int64_t j = (int64_t)ids[i];                                               \
                if ((uint64_t)j >= (uint64_t)nrows) return i;                              \
                memcpy(out + (size_t)i * row, t + (size_t)j * row, row);                   \
            }                                                                              \
            return -1;                                                                     \
        }                                                                                  \
        Py_ssize_t ahead = prefetch_ahead(row), bad = -1;                                  \
        if (row > GATHER_SLACK) { /* wide rows: streamed one by one */                     \
            for (Py_ssize_t i = 0; i < n; i++) {                                           \
                if (i + ahead < n && (uint64_t)ids[i + ahead] < (uint64_t)nrows)           \
                    prefetch_row(t + (size_t)ids[i + ahead] * row, row);                   \
                int64_t j = (int64_t)ids[i];                                               \
                if ((uint64_t)j >= (uint64_t)nrows) {                                      \
                    bad = i;                                                               \
                    break;                                                                 \
                }                                                                          \
                stream_bytes(out + (size_t)i * row, t + (size_t)j * row, row);             \
            }                                                                              \
            SFENCE();                                                                      \
            return bad;                                                                    \
        }                                                                                  \
        /* narrow rows: staged in L1, written out in whole lines */                        \
        _Alignas(64) char buf[GATHER_BUF + GATHER_SLACK];                                  \
        char *o = out;                                                                     \
        size_t fill = 0, head = (size_t)(-(uintptr_t)o) & 63;                              \
        for (Py_ssize_t i = 0; i < n; i++) {                                               \
            if (i + ahead < n && (uint64_t)ids[i + ahead] < (uint64_t)nrows)               \
                prefetch_row(t + (size_t)ids[i + ahead] * row, row);                       \
            int64_t j = (int64_t)ids[i];                                                   \
            if ((uint64_t)j >= (uint64_t)nrows) {                                          \
                bad = i;                                                                   \
                break;                                                                     \
            }                                                                              \
            memcpy(buf + fill, t + (size_t)j * row, row);                                  \
            fill += row;                                                                   \
            if (fill >= GATHER_BUF) {                                                      \
                size_t h = head < fill ? head : fill;                                      \
                memcpy(o, buf, h);                                                         \
                head = 0;                                                                  \
                size_t body = (fill - h) & ~(size_t)63, done = h + body;                   \
                stream_lines(o + h, buf + h, body);                                        \
                memmove(buf, buf + done, fill - done);                                     \
                o += done;                                                                 \
                fill -= done;                                                              \
            }                                                                              \
        }                                                                                  \
        memcpy(o, buf, fill);                                                              \
        SFENCE();                                                                          \
        return bad;                                                                        \
    }

GATHER_COPY(gather_i64, int64_t)
GATHER_COPY(gather_i32, int32_t)

#define ROW_ID(i) (wide ? ((const int64_t *)ids)[i] : (int64_t)((const int32_t *)ids)[i])

static PyObject *gather_rows(PyObject *self, PyObject *args) {
    PyObject *o_table, *o_ids, *o_out;
    int stream;
    if (!PyArg_ParseTuple(args, "OOOp", &o_table, &o_ids, &o_out, &stream)) return NULL;
    Py_buffer vt, vi, vo;
    if (PyObject_GetBuffer(o_table, &vt, PyBUF_C_CONTIGUOUS) < 0) {
        PyErr_SetString(PyExc_TypeError, "table: expected a C-contiguous array");
        return NULL;
    }
    if (PyObject_GetBuffer(o_ids, &vi, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT) < 0) {
        PyBuffer_Release(&vt);
        PyErr_SetString(PyExc_TypeError, "ids: expected a contiguous array");
        return NULL;
    }
    if (PyObject_GetBuffer(o_out, &vo, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&vt);
        PyBuffer_Release(&vi);
        PyErr_SetString(PyExc_TypeError, "out: expected a writable C-contiguous array");
        return NULL;
    }
    PyObject *res = NULL;
    const void *ids = vi.buf;
    const char *f = vi.format ? vi.format : "B";
    if (*f == '<' || *f == '=' || *f == '@') f++;
    int wide = vi.itemsize == 8 && (f[0] == 'q' || f[0] == 'l') && f[1] == 0;
    int narrow = vi.itemsize == 4 && (f[0] == 'i' || f[0] == 'l') && f[1] == 0;
    if ((!wide && !narrow) || vi.ndim != 1) {
        PyErr_SetString(PyExc_TypeError, "ids: expected a 1-D int64 or int32 array");
        goto done;
    }
    if (vt.ndim < 1) {
        PyErr_SetString(PyExc_TypeError, "table: expected an array of rows (ndim >= 1)");
        goto done;
    }
    Py_ssize_t nrows = vt.shape[0], n = vi.shape[0];
    size_t row = (size_t)vt.itemsize;
    for (int d = 1; d < vt.ndim; d++) row *= (size_t)vt.shape[d];
    if (vo.len < 0 || (size_t)vo.len != row * (size_t)n) {
        PyErr_Format(PyExc_ValueError, "out: %zd bytes for %zd rows of %zu bytes", vo.len, n,
                     row);
        goto done;
    }
    Py_ssize_t bad = -1;
    if (n > 0 && row > 0) {
        Py_BEGIN_ALLOW_THREADS
        if (wide)
            bad = gather_i64((const char *)vt.buf, nrows, row, (const int64_t *)ids, n,
                             (char *)vo.buf, stream);
        else
            bad = gather_i32((const char *)vt.buf, nrows, row, (const int32_t *)ids, n,
                             (char *)vo.buf, stream);
        Py_END_ALLOW_THREADS
    } else {
        for (Py_ssize_t i = 0; i < n && bad < 0; i++)
            if ((uint64_t)ROW_ID(i) >= (uint64_t)nrows) bad = i;
    }
    if (bad >= 0) {
        PyErr_Format(PyExc_ValueError, "ids[%zd] = %lld is out of range [0, %zd)", bad,
                     (long long)ROW_ID(bad), nrows);
        goto done;
    }
    res = Py_None;
    Py_INCREF(res);
done:
    PyBuffer_Release(&vt);
    PyBuffer_Release(&vi);
    PyBuffer_Release(&vo);
    return res;
}

/* --- place_rows (the feature cache's read; issue 17) --------------------------------- */

/* A cached read of a step's ~270k rows has ~60 % of them in the cache (random rows of a
 * table) and receives the others from the servers, packed in the caller's order. One
 * pass writes the output in order: each position takes its cached row or the next
 * pulled one. The pulled rows may be received into the output's own first rows: going
 * from the end, position i's pulled row comes from a position k <= i that no block
 * written so far covers. Blocks of a few KiB are staged in a buffer (in L1) and written
 * out in whole lines (non-temporal with stream), the cached rows prefetched ahead. */

static void place_packed(char *out, Py_ssize_t n, size_t row, const int32_t *codes,
                         const char *rows, const char *pulled, Py_ssize_t npulled,
                         int stream, char *buf, Py_ssize_t blk) {
    Py_ssize_t k = npulled, pf = n, ahead = prefetch_ahead(row);
    for (Py_ssize_t b = n; b > 0;) {
        Py_ssize_t a = b > blk ? b - blk : 0, miss = 0;
        for (Py_ssize_t i = a; i < b; i++) miss += codes[i] < 0;
        if (pulled == out && miss == b - a && k == b) break; /* the rest is in place */
        Py_ssize_t lim = a > ahead ? a - ahead : 0;
        for (; pf > lim; pf--)
            if (codes[pf - 1] >= 0) prefetch_row(rows + (size_t)codes[pf - 1] * row, row);
        k -= miss;
        Py_ssize_t kk = k;
        char *o = buf;
        for (Py_ssize_t i = a; i < b; i++, o += row) {
            int32_t c = codes[i];
            memcpy(o, c >= 0 ? rows + (size_t)c * row : pulled + (size_t)(kk++) * row, row);
        }
        if (stream)
            stream_bytes(out + (size_t)a * row, buf, (size_t)(b - a) * row);
        else
            memcpy(out + (size_t)a * row, buf, (size_t)(b - a) * row);
        b = a;
    }
    if (stream) SFENCE();
}

static void place_hits(char *out, Py_ssize_t n, size_t row, const int32_t *codes,
                       const char *rows) {
    Py_ssize_t ahead = prefetch_ahead(row);
    for (Py_ssize_t i = 0; i < n; i++) {
        if (i + ahead < n && codes[i + ahead] >= 0)
            prefetch_row(rows + (size_t)codes[i + ahead] * row, row);
        if (codes[i] >= 0) memcpy(out + (size_t)i * row, rows + (size_t)codes[i] * row, row);
    }
}

static PyObject *place_rows(PyObject *self, PyObject *args) {
    PyObject *o_out, *o_codes, *o_rows, *o_pulled;
    int stream;
    if (!PyArg_ParseTuple(args, "OOOOp", &o_out, &o_codes, &o_rows, &o_pulled, &stream))
        return NULL;
    Py_buffer vo, vc, vr, vp;
    int has_pulled = o_pulled != Py_None;
    if (PyObject_GetBuffer(o_out, &vo, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        PyErr_SetString(PyExc_TypeError, "out: expected a writable C-contiguous array");
        return NULL;
    }
    if (get_buf(o_codes, &vc, 'i', "codes") < 0) {
        PyBuffer_Release(&vo);
        return NULL;
    }
    if (PyObject_GetBuffer(o_rows, &vr, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&vo);
        PyBuffer_Release(&vc);
        PyErr_SetString(PyExc_TypeError, "rows: expected a C-contiguous array");
        return NULL;
    }
    if (has_pulled && PyObject_GetBuffer(o_pulled, &vp, PyBUF_C_CONTIGUOUS) < 0) {
        PyBuffer_Release(&vo);
        PyBuffer_Release(&vc);
        PyBuffer_Release(&vr);
        PyErr_SetString(PyExc_TypeError, "pulled: expected a C-contiguous array");
        return NULL;
    }
    PyObject *res = NULL;
    char *buf = NULL;
    if (vr.ndim < 1) {
        PyErr_SetString(PyExc_TypeError, "rows: expected an array of rows (ndim >= 1)");
        goto done;
    }
    Py_ssize_t nrows = vr.shape[0], n = vc.shape[0], miss = 0;
    size_t row = (size_t)vr.itemsize;
    for (int d = 1; d < vr.ndim; d++) row *= (size_t)vr.shape[d];
    if (vo.len < 0 || (size_t)vo.len != row * (size_t)n) {
        PyErr_Format(PyExc_ValueError, "out: %zd bytes for %zd rows of %zu bytes", vo.len, n,
                     row);
        goto done;
    }
    const int32_t *codes = (const int32_t *)vc.buf;
    for (Py_ssize_t i = 0; i < n; i++) { /* every code checked before a row is written */
        if (codes[i] >= nrows) {
            PyErr_Format(PyExc_ValueError, "codes[%zd] = %d is out of range [-1, %zd)", i,
                         (int)codes[i], nrows);
            goto done;
        }
        miss += codes[i] < 0;
    }
    const char *po = (const char *)vo.buf, *pp = NULL;
    if (has_pulled) {
        pp = (const char *)vp.buf;
        if (vp.len < 0 || (size_t)vp.len != row * (size_t)miss) {
            PyErr_Format(PyExc_ValueError,
                         "pulled: %zd bytes for the %zd positions without a cached row "
                         "(rows of %zu bytes)", vp.len, miss, row);
            goto done;
        }
        /* the pulled rows are out's first rows, or do not overlap out at all */
        if (pp != po && vp.len > 0 && vo.len > 0 && pp < po + vo.len && po < pp + vp.len) {
            PyErr_SetString(PyExc_ValueError, "pulled overlaps out but is not its first rows");
            goto done;
        }
    }
    if (n > 0 && row > 0) {
        Py_ssize_t blk = (Py_ssize_t)(GATHER_BUF / row);
        if (blk < 1) blk = 1;
        if (has_pulled && !(buf = (char *)malloc((size_t)blk * row + 64))) {
            PyErr_NoMemory();
            goto done;
        }
        char *aligned = buf ? buf + ((64 - ((uintptr_t)buf & 63)) & 63) : NULL;
        Py_BEGIN_ALLOW_THREADS
        if (has_pulled)
            place_packed((char *)vo.buf, n, row, codes, (const char *)vr.buf, pp, miss, stream,
                         aligned, blk);
        else
            place_hits((char *)vo.buf, n, row, codes, (const char *)vr.buf);
        Py_END_ALLOW_THREADS
    }
    res = Py_None;
    Py_INCREF(res);
done:
    free(buf);
    PyBuffer_Release(&vo);
    PyBuffer_Release(&vc);
    PyBuffer_Release(&vr);
    if (has_pulled) PyBuffer_Release(&vp);
    return res;
}

/* --- module -------------------------------------------------------------------------- */

static PyMethodDef methods[] = {
    {"sample_uniform", sample_uniform, METH_VARARGS,
     "sample_uniform(indptr, seeds, fanout, replace, seed[, values[, max_edges[, out_pos, "
     "out_values]]]) -> (pos, run_seed, run_len[, picked][, edges]) or the edge count over "
     "max_edges"},
    {"mean_csr", mean_csr, METH_VARARGS,
     "mean_csr(keys, other, nkeys, nother, inv, wide) -> (crow, col, val, inv_deg)"},
    {"relabel", relabel, METH_VARARGS,
     "relabel(dst_nid, src, dst, n[, swar]) -> (src_nid, edge_src, edge_dst)"},
    {"gather_rows", gather_rows, METH_VARARGS,
     "gather_rows(table, ids, out, stream) -> None: out[i] = table[ids[i]]"},
    {"place_rows", place_rows, METH_VARARGS,
     "place_rows(out, codes, rows, pulled, stream) -> None: out[i] = rows[codes[i]] where "
     "codes[i] >= 0, the others the rows of pulled in order (None: left)"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "distgnn._native",
    "Native kernels of a training step (see distgnn.native).", -1, methods,
};

PyMODINIT_FUNC PyInit__native(void) {
    PyObject *m = PyModule_Create(&module);
    if (!m) return NULL;
#ifdef HW_POPCNT
    __builtin_cpu_init();
    hw_popcnt = __builtin_cpu_supports("popcnt") ? 1 : 0;
    int hw = hw_popcnt;
#else
    int hw = 0;
#endif
    /* relabel's rank lookups use the hardware popcount (1) or the SWAR one (0) */
    /* sample_uniform takes out_pos / out_values (a stale build does not: the callers
     * check this first) */
    if (PyModule_AddIntConstant(m, "SAMPLE_INTO", 1) < 0 ||
        PyModule_AddIntConstant(m, "HW_POPCNT", hw) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
