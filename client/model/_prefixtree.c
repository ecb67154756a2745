/* The batch update of the tool-status map's prefix tree, compiled.
 *
 * ``update`` is ``PrefixTree.update``'s hot loop (``_Batch.merge``, ``merge_one`` and
 * ``build`` in vmap.py) over the same Python objects: the sorted keys, their values, the
 * rows held in memory (a dict of ``InnerNode`` tuples by node id) and, for rows not
 * held, the batch's ``row`` callable. It appends the rows it writes to ``written`` in
 * exactly the order the Python does (a group's stored bytes follow that order) and
 * returns the new root's ``ChildRef``. vmap.py stays the function's definition: the
 * tests run both over the same batches and require the same root and the same rows.
 *
 * ``update_groups`` is the same batch over a store's rows as client/mapstore.py keeps
 * them, each group of nodes as its stored bytes, and ``decode_group`` reads those bytes
 * back as the Python's rows; mapstore.py's Python (``PrefixTree.update`` over
 * ``SqliteNodeStore``, ``_decode_group_in_python``) stays their definition, held to the
 * same groups, roots and rows by the tests.
 *
 * Tuples made here that hold only untracked objects are left untracked by the cyclic
 * collector (``untrack_if_atomic``), as its first scan would leave them: a batch makes
 * thousands, and a young collection that scans them costs more than making them.
 *
 * Invariants this file relies on, all kept by vmap.py's writers and checked on every
 * row read here (a row that breaks one raises KeyError("map node malformed"), as the
 * stores do for a row they cannot read: its holder reports altered storage; it never
 * reads out of bounds):
 *   - a key and a leaf's id are 32 bytes, a hash 32 bytes;
 *   - an inner node's id is ``u8 bit`` then ``ceil(bit / 8)`` prefix bytes, and its
 *     ``bits`` is that bit, below 256; a leaf's ``bits`` is 256;
 *   - split bits strictly increase from a node to its children, so a walk is at most
 *     256 rows long.
 * SHA-256 is FIPS 180-4, written out for the two short inputs the tree hashes: a leaf
 * (65 bytes) and an inner node (66 bytes).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define KEY_BITS 256
#define KEY_BYTES 32
#define TAG_LEAF 0x10
#define TAG_NODE 0x11

/* --- SHA-256 ------------------------------------------------------------------------ */

static const uint32_t ROUND_K[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4,
    0xab1c5ed5, 0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe,
    0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f,
    0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7,
    0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc,
    0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b,
    0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116,
    0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
    0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2,
};

static const uint32_t INITIAL_H[8] = {
    0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
    0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19,
};

#define ROTR(x, n) (((x) >> (n)) | ((x) << (32 - (n))))

static void sha256_block(uint32_t h[8], const uint8_t block[64])
{
    uint32_t w[64];
    for (int t = 0; t < 16; t++) {
        w[t] = (uint32_t)block[4 * t] << 24 | (uint32_t)block[4 * t + 1] << 16
             | (uint32_t)block[4 * t + 2] << 8 | (uint32_t)block[4 * t + 3];
    }
    for (int t = 16; t < 64; t++) {
        uint32_t s0 = ROTR(w[t - 15], 7) ^ ROTR(w[t - 15], 18) ^ (w[t - 15] >> 3);
        uint32_t s1 = ROTR(w[t - 2], 17) ^ ROTR(w[t - 2], 19) ^ (w[t - 2] >> 10);
        w[t] = w[t - 16] + s0 + w[t - 7] + s1;
    }
    uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4], f = h[5], g = h[6], k = h[7];
    for (int t = 0; t < 64; t++) {
        uint32_t t1 = k + (ROTR(e, 6) ^ ROTR(e, 11) ^ ROTR(e, 25)) + ((e & f) ^ (~e & g))
                    + ROUND_K[t] + w[t];
        uint32_t t2 = (ROTR(a, 2) ^ ROTR(a, 13) ^ ROTR(a, 22)) + ((a & b) ^ (a & c) ^ (b & c));
        k = g;
        g = f;
        f = e;
        e = d + t1;
        d = c;
        c = b;
        b = a;
        a = t1 + t2;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d;
    h[4] += e; h[5] += f; h[6] += g; h[7] += k;
}

/* The same compression on the SHA extensions of x86-64 (SHA-NI), when the CPU has them:
 * the state as the instructions take it (ABEF, CDGH), the schedule four words at a time
 * (``sha256msg1``: W[t-16] + s0(W[t-15]); plus W[t-7]; ``sha256msg2``: + s1(W[t-2])). */
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_SHA_EXTENSIONS 1

__attribute__((target("sha,sse4.1,ssse3")))
static void sha256_block_extensions(uint32_t h[8], const uint8_t block[64])
{
    const __m128i byte_swap = _mm_set_epi64x(0x0c0d0e0f08090a0bULL, 0x0405060700010203ULL);
    __m128i dcba = _mm_loadu_si128((const __m128i *)&h[0]);
    __m128i hgfe = _mm_loadu_si128((const __m128i *)&h[4]);
    __m128i cdab = _mm_shuffle_epi32(dcba, 0xB1);
    __m128i efgh = _mm_shuffle_epi32(hgfe, 0x1B);
    __m128i abef = _mm_alignr_epi8(cdab, efgh, 8);
    __m128i cdgh = _mm_blend_epi16(efgh, cdab, 0xF0);
    const __m128i abef_in = abef, cdgh_in = cdgh;
    __m128i w[16];
    for (int j = 0; j < 16; j++) {
        if (j < 4) {
            w[j] = _mm_shuffle_epi8(_mm_loadu_si128((const __m128i *)(block + 16 * j)),
                                    byte_swap);
        } else {
            __m128i sum = _mm_add_epi32(_mm_sha256msg1_epu32(w[j - 4], w[j - 3]),
                                        _mm_alignr_epi8(w[j - 1], w[j - 2], 4));
            w[j] = _mm_sha256msg2_epu32(sum, w[j - 1]);
        }
        __m128i message = _mm_add_epi32(w[j], _mm_loadu_si128((const __m128i *)&ROUND_K[4 * j]));
        cdgh = _mm_sha256rnds2_epu32(cdgh, abef, message);
        abef = _mm_sha256rnds2_epu32(abef, cdgh, _mm_shuffle_epi32(message, 0x0E));
    }
    abef = _mm_add_epi32(abef, abef_in);
    cdgh = _mm_add_epi32(cdgh, cdgh_in);
    __m128i feba = _mm_shuffle_epi32(abef, 0x1B);
    __m128i dchg = _mm_shuffle_epi32(cdgh, 0xB1);
    _mm_storeu_si128((__m128i *)&h[0], _mm_blend_epi16(feba, dchg, 0xF0));
    _mm_storeu_si128((__m128i *)&h[4], _mm_alignr_epi8(dchg, feba, 8));
}

static int cpu_has_sha_extensions(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_SSE4_1) || !(c & bit_SSSE3)) {
        return 0;
    }
    if (__get_cpuid_max(0, NULL) < 7) {
        return 0;
    }
    __cpuid_count(7, 0, a, b, c, d);
    return (b & bit_SHA) != 0;
}
#else
#define HAVE_SHA_EXTENSIONS 0
#endif

/* Set at import: the extensions when the CPU has them (``use_sha_extensions`` turns them
 * off, so the tests run both compressions on one machine). */
static int sha_extensions = 0;

/* The digest of a message of at most 119 bytes (two blocks with the padding). */
static void sha256_short(const uint8_t *message, size_t length, uint8_t out[32])
{
    uint8_t buffer[128] = {0};
    uint32_t h[8];
    size_t blocks = length + 9 <= 64 ? 1 : 2;
    uint64_t bit_length = (uint64_t)length * 8;
    memcpy(h, INITIAL_H, sizeof h);
    memcpy(buffer, message, length);
    buffer[length] = 0x80;
    for (int i = 0; i < 8; i++) {
        buffer[64 * blocks - 1 - i] = (uint8_t)(bit_length >> (8 * i));
    }
    for (size_t i = 0; i < blocks; i++) {
#if HAVE_SHA_EXTENSIONS
        if (sha_extensions) {
            sha256_block_extensions(h, buffer + 64 * i);
            continue;
        }
#endif
        sha256_block(h, buffer + 64 * i);
    }
    for (int i = 0; i < 8; i++) {
        out[4 * i] = (uint8_t)(h[i] >> 24);
        out[4 * i + 1] = (uint8_t)(h[i] >> 16);
        out[4 * i + 2] = (uint8_t)(h[i] >> 8);
        out[4 * i + 3] = (uint8_t)h[i];
    }
}

/* --- keys and bits ------------------------------------------------------------------ */

static inline int bit_at(const uint8_t *key, int i)
{
    return (key[i >> 3] >> (7 - (i & 7))) & 1;
}

/* The first bit at which two keys differ, KEY_BITS when they are equal. */
static int first_difference(const uint8_t *a, const uint8_t *b)
{
    for (int i = 0; i < KEY_BYTES; i++) {
        uint8_t x = a[i] ^ b[i];
        if (x) {
            return 8 * i + __builtin_clz((unsigned)x) - 24;
        }
    }
    return KEY_BITS;
}

/* --- rows as the Python keeps them ---------------------------------------------------- */

typedef struct {
    PyObject *keys;            /* list of 32-byte bytes, sorted, distinct */
    PyObject *values;          /* list of 32-byte bytes, one per key */
    PyObject *held;            /* dict: node id -> InnerNode */
    PyObject *row;             /* callable: node id -> InnerNode, for ids not held */
    PyObject *written;         /* list the rewritten rows are appended to */
    PyTypeObject *ref_type;    /* ChildRef: (id, bits, hash) */
    PyTypeObject *inner_type;  /* InnerNode: (id, bit, left, right) */
} Batch;

/* A child reference's parts, borrowed from it. */
typedef struct {
    PyObject *id;
    int bits;
    PyObject *hash;
} Ref;

static int malformed(void)
{
    PyErr_SetString(PyExc_KeyError, "map node malformed");
    return -1;
}

/* Reads and checks a ChildRef: (bytes id, int bits, 32-byte hash) with the id's length
 * and first byte matching ``bits``. */
static int read_ref(PyObject *obj, Ref *ref)
{
    if (!PyTuple_Check(obj) || PyTuple_GET_SIZE(obj) != 3) {
        return malformed();
    }
    PyObject *id = PyTuple_GET_ITEM(obj, 0), *bits = PyTuple_GET_ITEM(obj, 1);
    PyObject *hash = PyTuple_GET_ITEM(obj, 2);
    if (!PyBytes_Check(id) || !PyLong_Check(bits) || !PyBytes_Check(hash)
        || PyBytes_GET_SIZE(hash) != 32) {
        return malformed();
    }
    long value = PyLong_AsLong(bits);
    if (value == -1 && PyErr_Occurred()) {
        PyErr_Clear();
        return malformed();
    }
    if (value == KEY_BITS) {
        if (PyBytes_GET_SIZE(id) != KEY_BYTES) {
            return malformed();
        }
    } else if (value < 0 || value > KEY_BITS
               || PyBytes_GET_SIZE(id) != 1 + (value + 7) / 8
               || (long)(uint8_t)PyBytes_AS_STRING(id)[0] != value) {
        return malformed();
    }
    ref->id = id;
    ref->bits = (int)value;
    ref->hash = hash;
    return 0;
}

/* The key bits above a child (all of them for a leaf) as 32 bytes: an inner id's prefix
 * bytes after its first, zero-padded (``_prefix_int``). */
static void prefix_of(const Ref *ref, uint8_t out[KEY_BYTES])
{
    const uint8_t *id = (const uint8_t *)PyBytes_AS_STRING(ref->id);
    if (ref->bits == KEY_BITS) {
        memcpy(out, id, KEY_BYTES);
        return;
    }
    Py_ssize_t n = PyBytes_GET_SIZE(ref->id) - 1;
    memset(out, 0, KEY_BYTES);
    memcpy(out, id + 1, (size_t)n);
}

/* ``node_id``: ``u8 bit`` and the first ``ceil(bit/8)`` key bytes, bits from ``bit`` on
 * zeroed. */
static PyObject *node_id(int bit, const uint8_t *key)
{
    int n = (bit + 7) / 8;
    PyObject *out = PyBytes_FromStringAndSize(NULL, 1 + n);
    if (out == NULL) {
        return NULL;
    }
    uint8_t *data = (uint8_t *)PyBytes_AS_STRING(out);
    data[0] = (uint8_t)bit;
    memcpy(data + 1, key, (size_t)n);
    if (bit % 8) {
        data[n] &= (uint8_t)(0xFF << (8 - bit % 8));
    }
    return out;
}

/* Stops the collector tracking ``tuple`` when none of its items is tracked: it can never be
 * in a reference cycle. CPython's collector does the same to every such tuple it scans
 * (``_PyTuple_MaybeUntrack``); done at creation, the map's rows never cost a young
 * collection's scan (thousands a batch, most of them long-lived). */
static void untrack_if_atomic(PyObject *tuple)
{
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(tuple); i++) {
        PyObject *item = PyTuple_GET_ITEM(tuple, i);
        if (item == NULL || (PyObject_IS_GC(item) && PyObject_GC_IsTracked(item))) {
            return;
        }
    }
    PyObject_GC_UnTrack(tuple);
}

/* A tuple of the named tuple type ``type`` from ``n`` new references (stolen, also on
 * failure), as ``tuple.__new__(type, items)`` makes it, untracked when it holds only
 * untracked objects. */
static PyObject *new_tuple(PyTypeObject *type, int n, PyObject **items)
{
    PyObject *out = type->tp_alloc(type, n);
    if (out == NULL) {
        for (int i = 0; i < n; i++) {
            Py_XDECREF(items[i]);
        }
        return NULL;
    }
    for (int i = 0; i < n; i++) {
        PyTuple_SET_ITEM(out, i, items[i]);
    }
    untrack_if_atomic(out);
    return out;
}

/* The row of inner node ``id``: held in memory, else the batch's ``row`` callable. A new
 * reference, checked to be an InnerNode-shaped tuple. */
static PyObject *get_row(Batch *batch, PyObject *id)
{
    PyObject *row = PyDict_GetItemWithError(batch->held, id);
    if (row != NULL) {
        Py_INCREF(row);
    } else if (PyErr_Occurred()) {
        return NULL;
    } else {
        row = PyObject_CallOneArg(batch->row, id);
        if (row == NULL) {
            return NULL;
        }
    }
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 4) {
        Py_DECREF(row);
        malformed();
        return NULL;
    }
    return row;
}

/* ChildRef(id, bits, digest). Steals ``id``. */
static PyObject *new_ref(Batch *batch, PyObject *id, int bits, const uint8_t digest[32])
{
    PyObject *items[3] = {id, PyLong_FromLong(bits),
                          PyBytes_FromStringAndSize((const char *)digest, 32)};
    if (items[1] == NULL || items[2] == NULL) {
        Py_DECREF(id);
        Py_XDECREF(items[1]);
        Py_XDECREF(items[2]);
        return NULL;
    }
    return new_tuple(batch->ref_type, 3, items);
}

/* A child's hash (borrowed), or NULL when it is not a ChildRef-shaped tuple: a child a
 * batch passes on from a row without walking into it is checked here. */
static PyObject *hash_of(PyObject *ref)
{
    if (!PyTuple_Check(ref) || PyTuple_GET_SIZE(ref) != 3) {
        return NULL;
    }
    PyObject *hash = PyTuple_GET_ITEM(ref, 2);
    return PyBytes_Check(hash) && PyBytes_GET_SIZE(hash) == 32 ? hash : NULL;
}

/* ``_Batch.inner``: appends InnerNode(id, bit, left, right) to ``written`` and returns the
 * ChildRef(id, bit, hash) over it. Steals ``id``, ``left`` and ``right``. */
static PyObject *inner(Batch *batch, PyObject *id, int bit, PyObject *left, PyObject *right)
{
    PyObject *items[4] = {id, NULL, left, right};
    if (id == NULL || left == NULL || right == NULL) {
        Py_XDECREF(id);
        Py_XDECREF(left);
        Py_XDECREF(right);
        return NULL;
    }
    PyObject *left_hash = hash_of(left), *right_hash = hash_of(right);
    if (left_hash == NULL || right_hash == NULL) {
        Py_DECREF(id);
        Py_DECREF(left);
        Py_DECREF(right);
        malformed();
        return NULL;
    }
    uint8_t message[66];
    message[0] = TAG_NODE;
    message[1] = (uint8_t)bit;
    memcpy(message + 2, PyBytes_AS_STRING(left_hash), 32);
    memcpy(message + 34, PyBytes_AS_STRING(right_hash), 32);
    uint8_t digest[32];
    sha256_short(message, sizeof message, digest);

    items[1] = PyLong_FromLong(bit);
    if (items[1] == NULL) {
        Py_DECREF(id);
        Py_DECREF(left);
        Py_DECREF(right);
        return NULL;
    }
    Py_INCREF(id);
    PyObject *node = new_tuple(batch->inner_type, 4, items);
    if (node == NULL) {
        Py_DECREF(id);
        return NULL;
    }
    int failed = PyList_Append(batch->written, node);
    Py_DECREF(node);
    if (failed) {
        Py_DECREF(id);
        return NULL;
    }
    return new_ref(batch, id, bit, digest);
}

static inline const uint8_t *item_at(PyObject *list, Py_ssize_t i)
{
    return (const uint8_t *)PyBytes_AS_STRING(PyList_GET_ITEM(list, i));
}

static inline const uint8_t *key_at(Batch *batch, Py_ssize_t i)
{
    return item_at(batch->keys, i);
}

/* The first key of the sorted list ``keys`` in ``[lo, hi)`` with ``bit`` set, the keys
 * there agreeing above ``bit`` (so the bit is 0 then 1 along the range): ``bisect_left``
 * on the split point. */
static Py_ssize_t split_index(PyObject *keys, Py_ssize_t lo, Py_ssize_t hi, int bit)
{
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (bit_at(item_at(keys, mid), bit)) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    return lo;
}

/* A leaf's ChildRef(key, 256, leaf_hash(key, value)) for key ``i``. */
static PyObject *leaf(Batch *batch, Py_ssize_t i)
{
    PyObject *key = PyList_GET_ITEM(batch->keys, i);
    PyObject *value = PyList_GET_ITEM(batch->values, i);
    uint8_t message[65], digest[32];
    message[0] = TAG_LEAF;
    memcpy(message + 1, PyBytes_AS_STRING(key), 32);
    memcpy(message + 33, PyBytes_AS_STRING(value), 32);
    sha256_short(message, sizeof message, digest);
    Py_INCREF(key);
    return new_ref(batch, key, KEY_BITS, digest);
}

/* ``_Batch.build``: a fresh subtree of keys ``[lo, hi)`` (non-empty), left then right
 * then the node itself written. */
static PyObject *build(Batch *batch, Py_ssize_t lo, Py_ssize_t hi)
{
    if (hi - lo == 1) {
        return leaf(batch, lo);
    }
    const uint8_t *first = key_at(batch, lo);
    int bit = first_difference(first, key_at(batch, hi - 1));
    Py_ssize_t mid = split_index(batch->keys, lo, hi, bit);
    PyObject *left = build(batch, lo, mid);
    if (left == NULL) {
        return NULL;
    }
    PyObject *right = build(batch, mid, hi);
    if (right == NULL) {
        Py_DECREF(left);
        return NULL;
    }
    return inner(batch, node_id(bit, first), bit, left, right);
}

/* ``_Batch.merge_one``: key ``at`` set under ``ref`` by one walk down its bits and one
 * rehash back up, every row on the way rewritten in place. */
static PyObject *merge_one(Batch *batch, PyObject *ref_obj, Py_ssize_t at)
{
    const uint8_t *key = key_at(batch, at);
    PyObject *path[KEY_BITS + 1];   /* rows walked (new references) */
    int sides[KEY_BITS + 1];        /* 1: the walk went right */
    PyObject *refs[KEY_BITS + 2];   /* refs[i]: the child entered at depth i (borrowed) */
    int depth = 0;
    PyObject *child = NULL, *result = NULL;
    Ref ref;

    refs[0] = ref_obj;
    if (read_ref(ref_obj, &ref) < 0) {
        return NULL;
    }
    while (ref.bits != KEY_BITS) {
        if (depth == KEY_BITS) {  /* bits did not increase: not a tree vmap.py writes */
            malformed();
            goto done;
        }
        PyObject *row = get_row(batch, ref.id);
        if (row == NULL) {
            goto done;
        }
        int right = bit_at(key, ref.bits);
        path[depth] = row;
        sides[depth] = right;
        depth++;
        PyObject *next = PyTuple_GET_ITEM(row, right ? 3 : 2);
        int parent_bits = ref.bits;
        if (read_ref(next, &ref) < 0) {
            goto done;
        }
        if (ref.bits <= parent_bits) {
            malformed();
            goto done;
        }
        refs[depth] = next;
    }
    child = leaf(batch, at);
    if (child == NULL) {
        goto done;
    }
    if (memcmp(PyBytes_AS_STRING(ref.id), key, KEY_BYTES) != 0) {
        /* Another key's leaf: part from it where they first differ, above the first row
         * on the walk that splits below that bit. */
        int split = first_difference(key, (const uint8_t *)PyBytes_AS_STRING(ref.id));
        int cut = 0;
        while (cut < depth) {
            PyObject *bit = PyTuple_GET_ITEM(path[cut], 1);
            long value = PyLong_Check(bit) ? PyLong_AsLong(bit) : -1;
            if (value < 0) {
                PyErr_Clear();
                malformed();
                goto done;
            }
            if (value >= split) {
                break;
            }
            cut++;
        }
        PyObject *below = refs[cut];
        Py_INCREF(below);
        PyObject *id = node_id(split, key);
        child = bit_at(key, split) ? inner(batch, id, split, below, child)
                                   : inner(batch, id, split, child, below);
        if (child == NULL) {
            goto done;
        }
        for (int i = cut; i < depth; i++) {
            Py_DECREF(path[i]);
        }
        depth = cut;
    }
    while (depth > 0) {
        depth--;
        PyObject *row = path[depth];
        PyObject *id = PyTuple_GET_ITEM(row, 0), *bit = PyTuple_GET_ITEM(row, 1);
        PyObject *left = PyTuple_GET_ITEM(row, 2), *right = PyTuple_GET_ITEM(row, 3);
        long value = PyLong_Check(bit) ? PyLong_AsLong(bit) : -1;
        if (!PyBytes_Check(id) || value < 0 || value >= KEY_BITS) {
            PyErr_Clear();
            Py_DECREF(row);
            malformed();
            goto done;
        }
        Py_INCREF(id);
        if (sides[depth]) {
            Py_INCREF(left);
            right = child;
        } else {
            Py_INCREF(right);
            left = child;
        }
        child = inner(batch, id, (int)value, left, right);
        Py_DECREF(row);
        if (child == NULL) {
            goto done;
        }
    }
    result = child;
    child = NULL;
done:
    while (depth > 0) {
        Py_DECREF(path[--depth]);
    }
    Py_XDECREF(child);
    return result;
}

/* ``_Batch.merge``: the subtree ``ref`` with keys ``[lo, hi)`` (non-empty) set in it. */
static PyObject *merge(Batch *batch, PyObject *ref_obj, Py_ssize_t lo, Py_ssize_t hi)
{
    if (hi - lo == 1) {
        return merge_one(batch, ref_obj, lo);
    }
    Ref ref;
    if (read_ref(ref_obj, &ref) < 0) {
        return NULL;
    }
    uint8_t prefix[KEY_BYTES];
    prefix_of(&ref, prefix);
    /* The first bit above ``bits`` where either end of the range leaves the prefix (the
     * range is sorted, so no key between them leaves it higher). */
    int low = first_difference(prefix, key_at(batch, lo));
    int high = first_difference(prefix, key_at(batch, hi - 1));
    int differ = low < high ? low : high;
    if (differ < ref.bits) {  /* some keys leave this subtree above it: a new node */
        int bit = differ;
        Py_ssize_t mid = split_index(batch->keys, lo, hi, bit);
        PyObject *left, *right;
        if (bit_at(prefix, bit)) {
            left = build(batch, lo, mid);
            if (left == NULL) {
                return NULL;
            }
            if (mid < hi) {
                right = merge(batch, ref_obj, mid, hi);
            } else {
                Py_INCREF(ref_obj);
                right = ref_obj;
            }
        } else {
            if (lo < mid) {
                left = merge(batch, ref_obj, lo, mid);
            } else {
                Py_INCREF(ref_obj);
                left = ref_obj;
            }
            if (left == NULL) {
                return NULL;
            }
            right = build(batch, mid, hi);
        }
        if (right == NULL) {
            Py_DECREF(left);
            return NULL;
        }
        return inner(batch, node_id(bit, prefix), bit, left, right);
    }
    if (ref.bits == KEY_BITS) {  /* the same key: a new value */
        return build(batch, lo, hi);
    }
    PyObject *row = get_row(batch, ref.id);
    if (row == NULL) {
        return NULL;
    }
    Ref left_ref, right_ref;  /* children split below their parent: no walk loops */
    if (read_ref(PyTuple_GET_ITEM(row, 2), &left_ref) < 0
        || read_ref(PyTuple_GET_ITEM(row, 3), &right_ref) < 0
        || left_ref.bits <= ref.bits || right_ref.bits <= ref.bits) {
        Py_DECREF(row);
        if (!PyErr_Occurred()) {
            malformed();
        }
        return NULL;
    }
    Py_ssize_t mid = split_index(batch->keys, lo, hi, ref.bits);
    PyObject *left, *right;
    if (lo < mid) {
        left = merge(batch, PyTuple_GET_ITEM(row, 2), lo, mid);
    } else {
        left = PyTuple_GET_ITEM(row, 2);
        Py_INCREF(left);
    }
    if (left == NULL) {
        Py_DECREF(row);
        return NULL;
    }
    if (mid < hi) {
        right = merge(batch, PyTuple_GET_ITEM(row, 3), mid, hi);
    } else {
        right = PyTuple_GET_ITEM(row, 3);
        Py_INCREF(right);
    }
    Py_DECREF(row);
    if (right == NULL) {
        Py_DECREF(left);
        return NULL;
    }
    Py_INCREF(ref.id);  /* rewritten in place: the same id */
    return inner(batch, ref.id, ref.bits, left, right);
}

/* The keys and values ``update`` and ``update_groups`` take, checked: 32 bytes each, the
 * keys sorted and distinct, at least one. */
static int check_batch(PyObject *keys, PyObject *values, const char *name)
{
    Py_ssize_t count = PyList_GET_SIZE(keys);
    if (count == 0 || PyList_GET_SIZE(values) != count) {
        PyErr_Format(PyExc_ValueError, "%s: one value per key, at least one key", name);
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyList_GET_ITEM(keys, i), *value = PyList_GET_ITEM(values, i);
        if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) != KEY_BYTES || !PyBytes_Check(value)
            || PyBytes_GET_SIZE(value) != 32) {
            PyErr_SetString(PyExc_ValueError, "keys and values are 32 bytes");
            return -1;
        }
        if (i && memcmp(item_at(keys, i - 1), PyBytes_AS_STRING(key), KEY_BYTES) >= 0) {
            PyErr_Format(PyExc_ValueError, "%s: keys sorted and distinct", name);
            return -1;
        }
    }
    return 0;
}

static PyObject *update(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 8) {
        PyErr_SetString(PyExc_TypeError,
                        "update(keys, values, root, held, row, written, ChildRef, InnerNode)");
        return NULL;
    }
    Batch batch = {args[0], args[1], args[3], args[4], args[5],
                   (PyTypeObject *)args[6], (PyTypeObject *)args[7]};
    PyObject *root = args[2];
    if (!PyList_CheckExact(batch.keys) || !PyList_CheckExact(batch.values)
        || !PyDict_Check(batch.held) || !PyCallable_Check(batch.row)
        || !PyList_Check(batch.written) || !PyType_Check(args[6]) || !PyType_Check(args[7])
        || !PyType_IsSubtype(batch.ref_type, &PyTuple_Type)
        || !PyType_IsSubtype(batch.inner_type, &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "update: arguments of the wrong types");
        return NULL;
    }
    if (check_batch(batch.keys, batch.values, "update") < 0) {
        return NULL;
    }
    Py_ssize_t count = PyList_GET_SIZE(batch.keys);
    /* The lists are only read below, and nothing here runs Python code but ``row`` (the
     * batch's own reader): the keys and values stay as checked. */
    if (root == Py_None) {
        return build(&batch, 0, count);
    }
    return merge(&batch, root, 0, count);
}

/* --- a batch over stored groups: client.mapstore's rows (its rule 7) --------------------
 *
 * ``update_groups`` is the same batch as ``update``, over the rows as a store keeps them:
 * each group of inner nodes as its stored bytes. It takes the groups on the batch's paths
 * from the caller's dicts of groups held in memory, else from its ``read`` (group id ->
 * bytes, None for a group not stored yet), decodes them into the fixed slots below for
 * the batch's length, rewrites them there, and hands back the bytes of each group it
 * changed: no Python object per node, so a batch makes a bytes object a group instead of
 * five objects a node. The rows it writes, their order within a group (stored order,
 * then new nodes in the order ``update`` writes them) and the bytes are exactly those the
 * Python's batch writes through ``SqliteNodeStore.write`` in mapstore.py, its
 * definition; the tests hold the two to the same groups and roots. A group is checked as
 * it is decoded (every field whole, no node twice, at most 15) and a node as it is
 * walked (children split below it), so altered bytes raise KeyError, as the Python's
 * reads do, and nothing is read or written out of bounds. */

#define GROUP_BITS 4
#define GROUP_NODES 15

/* A child as a row holds it, decoded. */
typedef struct {
    int bits;                /* an inner child's split bit; KEY_BITS for a leaf */
    uint8_t id[KEY_BYTES];   /* an inner child's id after its first byte, zero-padded, or
                              * a leaf's key */
    uint8_t hash[32];        /* an inner child's hash; a leaf's once ``hashed`` */
    uint8_t value[32];       /* a leaf's value (kept in its parent's row) */
    int hashed;
} Child;

typedef struct {
    int bit;
    uint8_t prefix[KEY_BYTES];  /* the node's id after its first byte, zero-padded */
    Child left, right;
} Node;

typedef struct {
    int count;
    int changed;
    Node nodes[GROUP_NODES];
} Group;

typedef struct {
    PyObject *keys;       /* list of 32-byte bytes, sorted, distinct */
    PyObject *values;     /* list of 32-byte bytes, one per key */
    PyObject *held;       /* tuple of dicts: group id -> bytes, looked in first, in order */
    PyObject *read;       /* callable: group id -> bytes, or None, for groups none holds */
    PyObject *slots;      /* dict: group id -> index in ``groups`` */
    PyObject *changed;    /* list: the ids of the groups changed, in the order first changed */
    Group **groups;
    Py_ssize_t count, capacity;
} Stored;

static int missing_node(void)
{
    PyErr_SetString(PyExc_KeyError, "map node missing");
    return -1;
}

/* ``mapstore.group_id`` of the node (``bit``, ``prefix``): a new reference. */
static PyObject *group_id_of(int bit, const uint8_t *prefix)
{
    return node_id(bit - bit % GROUP_BITS, prefix);
}

/* The node's prefix as ``node_id`` makes it: bits from ``bit`` on zeroed. */
static void masked_prefix(int bit, const uint8_t *key, uint8_t out[KEY_BYTES])
{
    int n = (bit + 7) / 8;
    memset(out, 0, KEY_BYTES);
    memcpy(out, key, (size_t)n);
    if (bit % 8) {
        out[n - 1] &= (uint8_t)(0xFF << (8 - bit % 8));
    }
}

/* One child of a stored row at ``*at``; -1 if the bytes end inside it. */
static int decode_stored_child(const uint8_t *blob, Py_ssize_t size, Py_ssize_t *at, Child *child)
{
    if (*at >= size) {
        return -1;
    }
    memset(child, 0, sizeof *child);
    child->bits = blob[*at] + 1;
    Py_ssize_t from = *at + 1;
    if (child->bits == KEY_BITS) {
        if (from + 64 > size) {
            return -1;
        }
        memcpy(child->id, blob + from, 32);
        memcpy(child->value, blob + from + 32, 32);
        *at = from + 64;
        return 0;
    }
    Py_ssize_t n = (child->bits + 7) / 8;
    if (from + n + 32 > size) {
        return -1;
    }
    memcpy(child->id, blob + from, (size_t)n);
    memcpy(child->hash, blob + from + n, 32);
    child->hashed = 1;
    *at = from + n + 32;
    return 0;
}

static int slot_of(const Group *group, int bit, const uint8_t *prefix);

/* A stored group's rows into ``group`` (empty); -1 for bytes a store did not write (as
 * ``_decode_group``: more than 15 nodes, a node twice, a field cut short). */
static int decode_stored_group(const uint8_t *blob, Py_ssize_t size, Group *group)
{
    Py_ssize_t at = 0;
    while (at < size) {
        if (group->count == GROUP_NODES) {
            return -1;
        }
        Node *node = &group->nodes[group->count];
        node->bit = blob[at];
        Py_ssize_t n = (node->bit + 7) / 8;
        if (at + 1 + n > size) {
            return -1;
        }
        memcpy(node->prefix, blob + at + 1, (size_t)n);
        at += 1 + n;
        if (slot_of(group, node->bit, node->prefix) >= 0
            || decode_stored_child(blob, size, &at, &node->left) < 0
            || decode_stored_child(blob, size, &at, &node->right) < 0) {
            return -1;
        }
        group->count++;
    }
    return 0;
}

/* The group with id ``gid`` (borrowed) as the batch has it: read and decoded on first
 * need. A group not stored is an empty one when ``create``, else "map node missing". */
static Group *get_group(Stored *stored, PyObject *gid, int create)
{
    PyObject *slot = PyDict_GetItemWithError(stored->slots, gid);
    if (slot != NULL) {
        return stored->groups[PyLong_AsSsize_t(slot)];
    }
    if (PyErr_Occurred()) {
        return NULL;
    }
    PyObject *blob = NULL;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(stored->held) && blob == NULL; i++) {
        blob = PyDict_GetItemWithError(PyTuple_GET_ITEM(stored->held, i), gid);
        if (blob == NULL && PyErr_Occurred()) {
            return NULL;
        }
        Py_XINCREF(blob);
    }
    if (blob == NULL && (blob = PyObject_CallOneArg(stored->read, gid)) == NULL) {
        return NULL;
    }
    if (blob == Py_None ? !create : !PyBytes_Check(blob)) {
        Py_DECREF(blob);
        if (blob == Py_None) {
            missing_node();
        } else {
            PyErr_SetString(PyExc_KeyError, "map group malformed");
        }
        return NULL;
    }
    if (stored->count == stored->capacity) {
        Py_ssize_t capacity = stored->capacity ? 2 * stored->capacity : 16;
        Group **grown = PyMem_Realloc(stored->groups, (size_t)capacity * sizeof(Group *));
        if (grown == NULL) {
            Py_DECREF(blob);
            PyErr_NoMemory();
            return NULL;
        }
        stored->groups = grown;
        stored->capacity = capacity;
    }
    Group *group = PyMem_Calloc(1, sizeof(Group));
    if (group == NULL) {
        Py_DECREF(blob);
        PyErr_NoMemory();
        return NULL;
    }
    int bad = blob != Py_None
              && decode_stored_group((const uint8_t *)PyBytes_AS_STRING(blob),
                                     PyBytes_GET_SIZE(blob), group) < 0;
    Py_DECREF(blob);
    PyObject *index = bad ? NULL : PyLong_FromSsize_t(stored->count);
    if (index == NULL || PyDict_SetItem(stored->slots, gid, index) < 0) {
        Py_XDECREF(index);
        PyMem_Free(group);
        if (bad) {
            PyErr_SetString(PyExc_KeyError, "map group malformed");
        }
        return NULL;
    }
    Py_DECREF(index);
    stored->groups[stored->count++] = group;
    return group;
}

/* The slot of node (``bit``, ``prefix``) in ``group``, -1 if it has none. */
static int slot_of(const Group *group, int bit, const uint8_t *prefix)
{
    size_t n = (size_t)(bit + 7) / 8;
    for (int i = 0; i < group->count; i++) {
        if (group->nodes[i].bit == bit && memcmp(group->nodes[i].prefix, prefix, n) == 0) {
            return i;
        }
    }
    return -1;
}

/* The stored node an inner child ``ref`` points at. */
static Node *find_node(Stored *stored, const Child *ref)
{
    PyObject *gid = group_id_of(ref->bits, ref->id);
    if (gid == NULL) {
        return NULL;
    }
    Group *group = get_group(stored, gid, 0);
    Py_DECREF(gid);
    if (group == NULL) {
        return NULL;
    }
    int slot = slot_of(group, ref->bits, ref->id);
    if (slot < 0) {
        missing_node();
        return NULL;
    }
    return &group->nodes[slot];
}

static const uint8_t *child_hash(Child *child)
{
    if (!child->hashed) {  /* a leaf read from its parent's row: hashed on first need */
        uint8_t message[65];
        message[0] = TAG_LEAF;
        memcpy(message + 1, child->id, 32);
        memcpy(message + 33, child->value, 32);
        sha256_short(message, sizeof message, child->hash);
        child->hashed = 1;
    }
    return child->hash;
}

/* ``_Batch.inner`` over groups: the node (``bit``, ``prefix``) written with these
 * children (in its group's slot, or a new one at the end), ``*out`` the child over it. */
static int put_node(Stored *stored, int bit, const uint8_t *prefix, Child left, Child right,
                    Child *out)
{
    uint8_t message[66];
    message[0] = TAG_NODE;
    message[1] = (uint8_t)bit;
    memcpy(message + 2, child_hash(&left), 32);
    memcpy(message + 34, child_hash(&right), 32);
    Child made = {.bits = bit, .hashed = 1};
    sha256_short(message, sizeof message, made.hash);
    memcpy(made.id, prefix, (size_t)(bit + 7) / 8);

    PyObject *gid = group_id_of(bit, prefix);
    if (gid == NULL) {
        return -1;
    }
    Group *group = get_group(stored, gid, 1);
    if (group == NULL) {
        Py_DECREF(gid);
        return -1;
    }
    if (!group->changed && PyList_Append(stored->changed, gid) < 0) {
        Py_DECREF(gid);
        return -1;
    }
    Py_DECREF(gid);
    group->changed = 1;
    int slot = slot_of(group, bit, prefix);
    if (slot < 0) {
        if (group->count == GROUP_NODES) {  /* only stored bytes a store did not write */
            return malformed();
        }
        slot = group->count++;
    }
    Node *node = &group->nodes[slot];
    node->bit = bit;
    memcpy(node->prefix, made.id, KEY_BYTES);
    node->left = left;
    node->right = right;
    *out = made;
    return 0;
}

/* Key ``i``'s leaf with the batch's value. */
static void new_leaf(Stored *stored, Py_ssize_t i, Child *out)
{
    memset(out, 0, sizeof *out);
    out->bits = KEY_BITS;
    memcpy(out->id, item_at(stored->keys, i), 32);
    memcpy(out->value, item_at(stored->values, i), 32);
    child_hash(out);
}

/* ``_Batch.build``: a fresh subtree of keys ``[lo, hi)`` (non-empty). */
static int build_stored(Stored *stored, Py_ssize_t lo, Py_ssize_t hi, Child *out)
{
    if (hi - lo == 1) {
        new_leaf(stored, lo, out);
        return 0;
    }
    const uint8_t *first = item_at(stored->keys, lo);
    int bit = first_difference(first, item_at(stored->keys, hi - 1));
    Py_ssize_t mid = split_index(stored->keys, lo, hi, bit);
    Child left, right;
    if (build_stored(stored, lo, mid, &left) < 0 || build_stored(stored, mid, hi, &right) < 0) {
        return -1;
    }
    uint8_t prefix[KEY_BYTES];
    masked_prefix(bit, first, prefix);
    return put_node(stored, bit, prefix, left, right, out);
}

/* ``_Batch.merge_one``: key ``at`` set under ``ref`` by one walk down and one rehash up.
 * The walk keeps pointers into the batch's groups: a group's nodes never move, and each
 * node on the walk is rewritten only once the walk is over. */
static int merge_one_stored(Stored *stored, const Child *ref, Py_ssize_t at, Child *out)
{
    const uint8_t *key = item_at(stored->keys, at);
    Node *path[KEY_BITS];
    int sides[KEY_BITS];
    const Child *refs[KEY_BITS + 1];  /* refs[i]: the child entered at depth i */
    int depth = 0;
    refs[0] = ref;
    while (ref->bits != KEY_BITS) {
        if (depth == KEY_BITS) {
            return malformed();
        }
        Node *node = find_node(stored, ref);
        if (node == NULL) {
            return -1;
        }
        int right = bit_at(key, node->bit);
        path[depth] = node;
        sides[depth] = right;
        const Child *next = right ? &node->right : &node->left;
        if (next->bits <= node->bit) {  /* bits that do not increase: no walk loops */
            return malformed();
        }
        refs[++depth] = ref = next;
    }
    Child child;
    new_leaf(stored, at, &child);
    if (memcmp(ref->id, key, KEY_BYTES) != 0) {
        /* Another key's leaf: part from it where they first differ, above the first node
         * on the walk that splits below that bit. */
        int split = first_difference(key, ref->id);
        int cut = 0;
        while (cut < depth && path[cut]->bit < split) {
            cut++;
        }
        Child below = *refs[cut];
        uint8_t prefix[KEY_BYTES];
        masked_prefix(split, key, prefix);
        int failed = bit_at(key, split) ? put_node(stored, split, prefix, below, child, &child)
                                        : put_node(stored, split, prefix, child, below, &child);
        if (failed) {
            return -1;
        }
        depth = cut;
    }
    while (depth > 0) {
        Node *node = path[--depth];
        uint8_t prefix[KEY_BYTES];
        memcpy(prefix, node->prefix, KEY_BYTES);
        Child left = sides[depth] ? node->left : child;
        Child right = sides[depth] ? child : node->right;
        if (put_node(stored, node->bit, prefix, left, right, &child) < 0) {
            return -1;
        }
    }
    *out = child;
    return 0;
}

/* ``_Batch.merge``: the subtree ``ref`` with keys ``[lo, hi)`` (non-empty) set in it. */
static int merge_stored(Stored *stored, Child ref, Py_ssize_t lo, Py_ssize_t hi, Child *out)
{
    if (hi - lo == 1) {
        return merge_one_stored(stored, &ref, lo, out);
    }
    /* The first bit above ``bits`` where either end of the range leaves the prefix. */
    int low = first_difference(ref.id, item_at(stored->keys, lo));
    int high = first_difference(ref.id, item_at(stored->keys, hi - 1));
    int differ = low < high ? low : high;
    Child left, right;
    if (differ < ref.bits) {  /* some keys leave this subtree above it: a new node */
        int bit = differ;
        Py_ssize_t mid = split_index(stored->keys, lo, hi, bit);
        int failed;
        if (bit_at(ref.id, bit)) {
            failed = build_stored(stored, lo, mid, &left) < 0
                     || (mid < hi ? merge_stored(stored, ref, mid, hi, &right) < 0
                                  : (right = ref, 0));
        } else {
            failed = (lo < mid ? merge_stored(stored, ref, lo, mid, &left) < 0 : (left = ref, 0))
                     || build_stored(stored, mid, hi, &right) < 0;
        }
        if (failed) {
            return -1;
        }
        uint8_t prefix[KEY_BYTES];
        masked_prefix(bit, ref.id, prefix);
        return put_node(stored, bit, prefix, left, right, out);
    }
    if (ref.bits == KEY_BITS) {  /* the same key: a new value */
        return build_stored(stored, lo, hi, out);
    }
    Node *node = find_node(stored, &ref);
    if (node == NULL) {
        return -1;
    }
    Child was_left = node->left, was_right = node->right;  /* copies: the node is rewritten */
    if (was_left.bits <= ref.bits || was_right.bits <= ref.bits) {
        return malformed();
    }
    Py_ssize_t mid = split_index(stored->keys, lo, hi, ref.bits);
    if (lo < mid ? merge_stored(stored, was_left, lo, mid, &left) < 0 : (left = was_left, 0)) {
        return -1;
    }
    if (mid < hi ? merge_stored(stored, was_right, mid, hi, &right) < 0 : (right = was_right, 0)) {
        return -1;
    }
    return put_node(stored, ref.bits, ref.id, left, right, out);
}

/* A group's stored bytes (``mapstore._encode_row`` of each node, in slot order). */
static PyObject *encode_stored_group(const Group *group)
{
    Py_ssize_t size = 0;
    for (int i = 0; i < group->count; i++) {
        const Node *node = &group->nodes[i];
        size += 1 + (node->bit + 7) / 8;
        for (int side = 0; side < 2; side++) {
            int bits = (side ? &node->right : &node->left)->bits;
            size += 1 + (bits == KEY_BITS ? 64 : (bits + 7) / 8 + 32);
        }
    }
    PyObject *blob = PyBytes_FromStringAndSize(NULL, size);
    if (blob == NULL) {
        return NULL;
    }
    uint8_t *at = (uint8_t *)PyBytes_AS_STRING(blob);
    for (int i = 0; i < group->count; i++) {
        const Node *node = &group->nodes[i];
        size_t n = (size_t)(node->bit + 7) / 8;
        *at++ = (uint8_t)node->bit;
        memcpy(at, node->prefix, n);
        at += n;
        for (int side = 0; side < 2; side++) {
            const Child *child = side ? &node->right : &node->left;
            *at++ = (uint8_t)(child->bits - 1);
            if (child->bits == KEY_BITS) {
                memcpy(at, child->id, 32);
                memcpy(at + 32, child->value, 32);
                at += 64;
            } else {
                n = (size_t)(child->bits + 7) / 8;
                memcpy(at, child->id, n);
                memcpy(at + n, child->hash, 32);
                at += n + 32;
            }
        }
    }
    return blob;
}

/* The root's ChildRef and value (None unless a leaf) over ``child``. */
static PyObject *root_result(const Child *child, PyTypeObject *ref_type)
{
    PyObject *id;
    if (child->bits == KEY_BITS) {
        id = PyBytes_FromStringAndSize((const char *)child->id, KEY_BYTES);
    } else {
        id = PyBytes_FromStringAndSize(NULL, 1 + (child->bits + 7) / 8);
        if (id != NULL) {
            PyBytes_AS_STRING(id)[0] = (char)child->bits;
            memcpy(PyBytes_AS_STRING(id) + 1, child->id, (size_t)(child->bits + 7) / 8);
        }
    }
    PyObject *items[3] = {id, PyLong_FromLong(child->bits),
                          PyBytes_FromStringAndSize((const char *)child->hash, 32)};
    if (items[0] == NULL || items[1] == NULL || items[2] == NULL) {
        Py_XDECREF(items[0]);
        Py_XDECREF(items[1]);
        Py_XDECREF(items[2]);
        return NULL;
    }
    PyObject *ref = new_tuple(ref_type, 3, items);
    PyObject *value = child->bits == KEY_BITS
                          ? PyBytes_FromStringAndSize((const char *)child->value, 32)
                          : Py_NewRef(Py_None);
    PyObject *out = ref == NULL || value == NULL ? NULL : PyTuple_Pack(2, ref, value);
    Py_XDECREF(ref);
    Py_XDECREF(value);
    return out;
}

static PyObject *update_groups(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    int held_dicts = nargs == 7 && PyTuple_Check(args[4]);
    for (Py_ssize_t i = 0; held_dicts && i < PyTuple_GET_SIZE(args[4]); i++) {
        held_dicts = PyDict_Check(PyTuple_GET_ITEM(args[4], i));
    }
    if (!held_dicts || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1])
        || !PyCallable_Check(args[5]) || !PyType_Check(args[6])
        || !PyType_IsSubtype((PyTypeObject *)args[6], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError,
                        "update_groups(keys: list, values: list, root, root_value, "
                        "held: tuple of dicts, read, ChildRef)");
        return NULL;
    }
    if (check_batch(args[0], args[1], "update_groups") < 0) {
        return NULL;
    }
    Child root;
    memset(&root, 0, sizeof root);
    if (args[2] != Py_None) {
        Ref ref;
        if (read_ref(args[2], &ref) < 0) {
            return NULL;
        }
        root.bits = ref.bits;
        root.hashed = 1;
        memcpy(root.hash, PyBytes_AS_STRING(ref.hash), 32);
        prefix_of(&ref, root.id);
        if (ref.bits == KEY_BITS) {  /* a root leaf's value is the store's, beside it */
            PyObject *value = args[3];
            if (!PyBytes_Check(value) || PyBytes_GET_SIZE(value) != 32) {
                malformed();
                return NULL;
            }
            memcpy(root.value, PyBytes_AS_STRING(value), 32);
        }
    }
    Stored stored = {args[0], args[1], args[4], args[5], PyDict_New(), PyList_New(0), NULL, 0, 0};
    PyObject *result = NULL, *groups = NULL, *top = NULL;
    Child out;
    if (stored.slots == NULL || stored.changed == NULL) {
        goto done;
    }
    /* Nothing below runs Python code but ``read``, the caller's (and the held dicts' keys
     * are bytes, which compare without any): the lists stay as checked. */
    Py_ssize_t count = PyList_GET_SIZE(stored.keys);
    if ((args[2] == Py_None ? build_stored(&stored, 0, count, &out)
                            : merge_stored(&stored, root, 0, count, &out)) < 0) {
        goto done;
    }
    if ((groups = PyDict_New()) == NULL
        || (top = root_result(&out, (PyTypeObject *)args[6])) == NULL) {
        goto done;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(stored.changed); i++) {
        PyObject *gid = PyList_GET_ITEM(stored.changed, i);
        PyObject *slot = PyDict_GetItemWithError(stored.slots, gid);
        PyObject *blob = slot == NULL ? NULL
                                      : encode_stored_group(stored.groups[PyLong_AsSsize_t(slot)]);
        int failed = blob == NULL || PyDict_SetItem(groups, gid, blob) < 0;
        Py_XDECREF(blob);
        if (failed) {
            goto done;
        }
    }
    result = PyTuple_Pack(3, PyTuple_GET_ITEM(top, 0), PyTuple_GET_ITEM(top, 1), groups);
done:
    Py_XDECREF(top);
    Py_XDECREF(groups);
    for (Py_ssize_t i = 0; i < stored.count; i++) {
        PyMem_Free(stored.groups[i]);
    }
    PyMem_Free(stored.groups);
    Py_XDECREF(stored.slots);
    Py_XDECREF(stored.changed);
    return result;
}

/* ``mapstore._decode_child``: the child at ``*at`` of a stored row, moving ``*at`` past it;
 * ``*value`` is set to a leaf child's value (a new reference), else None. */
static PyObject *decode_child(const uint8_t *blob, Py_ssize_t size, Py_ssize_t *at,
                              PyTypeObject *ref_type, PyObject **value)
{
    if (*at >= size) {
        return NULL;
    }
    int bits = blob[*at] + 1;
    const uint8_t *from = blob + *at + 1;
    PyObject *items[3] = {NULL, PyLong_FromLong(bits), NULL};
    if (bits == KEY_BITS) {
        if (*at + 1 + 64 > size) {
            Py_XDECREF(items[1]);
            return NULL;
        }
        uint8_t message[65], hash[32];
        message[0] = TAG_LEAF;
        memcpy(message + 1, from, 64);
        sha256_short(message, sizeof message, hash);
        items[0] = PyBytes_FromStringAndSize((const char *)from, 32);
        items[2] = PyBytes_FromStringAndSize((const char *)hash, 32);
        *value = PyBytes_FromStringAndSize((const char *)from + 32, 32);
        *at += 1 + 64;
    } else {
        Py_ssize_t n = (bits + 7) / 8;
        if (*at + 1 + n + 32 > size) {
            Py_XDECREF(items[1]);
            return NULL;
        }
        items[0] = PyBytes_FromStringAndSize(NULL, 1 + n);
        if (items[0] != NULL) {
            PyBytes_AS_STRING(items[0])[0] = (char)bits;
            memcpy(PyBytes_AS_STRING(items[0]) + 1, from, (size_t)n);
        }
        items[2] = PyBytes_FromStringAndSize((const char *)from + n, 32);
        *value = Py_None;
        Py_INCREF(Py_None);
        *at += 1 + n + 32;
    }
    if (items[0] == NULL || items[1] == NULL || items[2] == NULL || *value == NULL) {
        Py_XDECREF(items[0]);
        Py_XDECREF(items[1]);
        Py_XDECREF(items[2]);
        Py_CLEAR(*value);
        return NULL;
    }
    return new_tuple(ref_type, 3, items);
}

/* ``decode_group(blob, ChildRef, InnerNode) -> {node id: row}``: ``mapstore._decode_group``,
 * KeyError("map group malformed") for bytes it did not write, where the Python raises. */
static PyObject *decode_group(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 3 || !PyBytes_Check(args[0]) || !PyType_Check(args[1]) || !PyType_Check(args[2])
        || !PyType_IsSubtype((PyTypeObject *)args[1], &PyTuple_Type)
        || !PyType_IsSubtype((PyTypeObject *)args[2], &PyTuple_Type)) {
        PyErr_SetString(PyExc_TypeError, "decode_group(blob: bytes, ChildRef, InnerNode)");
        return NULL;
    }
    const uint8_t *blob = (const uint8_t *)PyBytes_AS_STRING(args[0]);
    Py_ssize_t size = PyBytes_GET_SIZE(args[0]), at = 0;
    PyTypeObject *ref_type = (PyTypeObject *)args[1], *inner_type = (PyTypeObject *)args[2];
    PyObject *group = PyDict_New();
    if (group == NULL) {
        return NULL;
    }
    while (at < size) {
        Py_ssize_t start = at;
        int bit = blob[at];
        Py_ssize_t end = at + 1 + (bit + 7) / 8;
        PyObject *values[2] = {NULL, NULL}, *children[2] = {NULL, NULL};
        if (end < size) {
            children[0] = decode_child(blob, size, &end, ref_type, &values[0]);
        }
        if (children[0] != NULL) {
            children[1] = decode_child(blob, size, &end, ref_type, &values[1]);
        }
        if (children[1] == NULL) {
            Py_XDECREF(children[0]);
            Py_XDECREF(values[0]);
            Py_DECREF(group);
            if (!PyErr_Occurred()) {
                PyErr_SetString(PyExc_KeyError, "map group malformed");
            }
            return NULL;
        }
        PyObject *id = PyBytes_FromStringAndSize((const char *)blob + start, 1 + (bit + 7) / 8);
        PyObject *node_items[4] = {id, PyLong_FromLong(bit), children[0], children[1]};
        PyObject *node = NULL, *row = NULL;
        if (id == NULL || node_items[1] == NULL) {
            Py_XDECREF(id);
            Py_XDECREF(node_items[1]);
            Py_DECREF(children[0]);
            Py_DECREF(children[1]);
        } else {
            Py_INCREF(id);  /* the dict's key below */
            node = new_tuple(inner_type, 4, node_items);
        }
        PyObject *encoding = PyBytes_FromStringAndSize((const char *)blob + start, end - start);
        if (node != NULL && encoding != NULL && (row = PyTuple_New(4)) != NULL) {
            PyObject *row_items[4] = {node, values[0], values[1], encoding};
            for (int k = 0; k < 4; k++) {
                PyTuple_SET_ITEM(row, k, row_items[k]);
            }
            node = encoding = values[0] = values[1] = NULL;  /* the row's now */
            untrack_if_atomic(row);
        }
        Py_XDECREF(node);
        Py_XDECREF(encoding);
        Py_XDECREF(values[0]);
        Py_XDECREF(values[1]);
        int failed = row == NULL;
        if (!failed && (PyDict_GET_SIZE(group) == GROUP_NODES || PyDict_Contains(group, id))) {
            PyErr_SetString(PyExc_KeyError, "map group malformed");  /* a node twice, or 16 */
            failed = 1;
        }
        failed = failed || PyDict_SetItem(group, id, row) < 0;
        Py_XDECREF(row);
        if (id != NULL && node_items[1] != NULL) {
            Py_DECREF(id);  /* the key's reference */
        }
        if (failed) {
            Py_DECREF(group);
            return NULL;
        }
        at = end;
    }
    return group;
}

static PyObject *digest(PyObject *module, PyObject *arg)
{
    (void)module;
    Py_buffer view;
    if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0) {
        return NULL;
    }
    if (view.len > 119) {
        PyBuffer_Release(&view);
        PyErr_SetString(PyExc_ValueError, "sha256: at most 119 bytes");
        return NULL;
    }
    uint8_t out[32];
    sha256_short((const uint8_t *)view.buf, (size_t)view.len, out);
    PyBuffer_Release(&view);
    return PyBytes_FromStringAndSize((const char *)out, 32);
}

static PyObject *use_sha_extensions(PyObject *module, PyObject *arg)
{
    (void)module;
    int wanted = PyObject_IsTrue(arg);
    if (wanted < 0) {
        return NULL;
    }
    int before = sha_extensions;
#if HAVE_SHA_EXTENSIONS
    sha_extensions = wanted && cpu_has_sha_extensions();
#endif
    return PyBool_FromLong(before);
}

static PyMethodDef methods[] = {
    {"update", (PyCFunction)(void (*)(void))update, METH_FASTCALL,
     "update(keys, values, root, held, row, written, ChildRef, InnerNode) -> ChildRef\n\n"
     "PrefixTree.update's batch over sorted distinct 32-byte keys: the new root's ref;\n"
     "the rows rewritten are appended to ``written`` in vmap._Batch's order."},
    {"update_groups", (PyCFunction)(void (*)(void))update_groups, METH_FASTCALL,
     "update_groups(keys, values, root, root_value, held, read, ChildRef)\n"
     "    -> (root, root_value, {group id: bytes})\n\n"
     "update's batch over a store's groups of rows (client.mapstore rule 7): a group's\n"
     "stored bytes are the first of the ``held`` dicts' that has it, else ``read``'s (None:\n"
     "not stored); returns the new root's ref, its value if it is a leaf, and the stored\n"
     "bytes of every group the batch changed."},
    {"decode_group", (PyCFunction)(void (*)(void))decode_group, METH_FASTCALL,
     "decode_group(blob, ChildRef, InnerNode) -> dict: a stored group's rows\n"
     "(mapstore._decode_group)."},
    {"sha256", digest, METH_O,
     "sha256(data) -> bytes: the digest this module hashes with (at most 119 bytes)."},
    {"use_sha_extensions", use_sha_extensions, METH_O,
     "use_sha_extensions(flag) -> bool: hash on the CPU's SHA extensions when it has them\n"
     "(the default) or not; returns whether they were in use (for the tests)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "_prefixtree",
    "The map's batch update, compiled: vmap.py's _Batch over the same objects.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__prefixtree(void)
{
#if HAVE_SHA_EXTENSIONS
    sha_extensions = cpu_has_sha_extensions();
#endif
    return PyModule_Create(&module_def);
}
