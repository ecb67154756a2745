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
 * ``group_nodes``, ``group_rows`` and ``encode_group`` are the next steps of a batch in
 * client/mapstore.py (``SqliteNodeStore.write`` and ``write_groups``): its rows filed by
 * group with their leaf values, and a group's stored bytes. mapstore.py's Python stays
 * their definition, held to the same groups, rows and bytes by the tests.
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

static inline const uint8_t *key_at(Batch *batch, Py_ssize_t i)
{
    return (const uint8_t *)PyBytes_AS_STRING(PyList_GET_ITEM(batch->keys, i));
}

/* The first key in ``[lo, hi)`` with ``bit`` set, the keys there agreeing above ``bit``
 * (so the bit is 0 then 1 along the sorted range): ``bisect_left`` on the split point. */
static Py_ssize_t split_index(Batch *batch, Py_ssize_t lo, Py_ssize_t hi, int bit)
{
    while (lo < hi) {
        Py_ssize_t mid = lo + (hi - lo) / 2;
        if (bit_at(key_at(batch, mid), bit)) {
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
    Py_ssize_t mid = split_index(batch, lo, hi, bit);
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
        Py_ssize_t mid = split_index(batch, lo, hi, bit);
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
    Py_ssize_t mid = split_index(batch, lo, hi, ref.bits);
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
    Py_ssize_t count = PyList_GET_SIZE(batch.keys);
    if (count == 0 || PyList_GET_SIZE(batch.values) != count) {
        PyErr_SetString(PyExc_ValueError, "update: one value per key, at least one key");
        return NULL;
    }
    for (Py_ssize_t i = 0; i < count; i++) {
        PyObject *key = PyList_GET_ITEM(batch.keys, i);
        PyObject *value = PyList_GET_ITEM(batch.values, i);
        if (!PyBytes_Check(key) || PyBytes_GET_SIZE(key) != KEY_BYTES || !PyBytes_Check(value)
            || PyBytes_GET_SIZE(value) != 32) {
            PyErr_SetString(PyExc_ValueError, "keys and values are 32 bytes");
            return NULL;
        }
        if (i && memcmp(PyBytes_AS_STRING(PyList_GET_ITEM(batch.keys, i - 1)),
                        PyBytes_AS_STRING(key), KEY_BYTES) >= 0) {
            PyErr_SetString(PyExc_ValueError, "update: keys sorted and distinct");
            return NULL;
        }
    }
    /* The lists are only read below, and nothing here runs Python code but ``row`` (the
     * batch's own reader): the keys and values stay as checked. */
    if (root == Py_None) {
        return build(&batch, 0, count);
    }
    return merge(&batch, root, 0, count);
}

/* --- the rows a store keeps: client.mapstore's groups (its rule 7) ---------------------- */

#define GROUP_BITS 4

/* ``mapstore.group_id``: the id of the group of inner node ``id`` (checked: ``u8 bit``
 * and ``ceil(bit/8)`` prefix bytes), a new reference. */
static PyObject *group_of(PyObject *id)
{
    Py_ssize_t size = PyBytes_GET_SIZE(id);
    const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(id);
    if (size < 1 || size != 1 + (data[0] + 7) / 8) {  /* an inner bit is below 256 */
        malformed();
        return NULL;
    }
    int bit = data[0], top = bit - bit % GROUP_BITS;
    if (top == bit) {
        Py_INCREF(id);
        return id;
    }
    return node_id(top, data + 1);
}

/* The parts of an InnerNode-shaped tuple (borrowed): its id and its two children. */
static int read_node(PyObject *node, PyObject **id, PyObject **left, PyObject **right)
{
    if (!PyTuple_Check(node) || PyTuple_GET_SIZE(node) != 4
        || !PyBytes_Check(PyTuple_GET_ITEM(node, 0))) {
        return malformed();
    }
    *id = PyTuple_GET_ITEM(node, 0);
    *left = PyTuple_GET_ITEM(node, 2);
    *right = PyTuple_GET_ITEM(node, 3);
    return 0;
}

/* True (1) if the child reference ``ref`` is a leaf's, its id borrowed into ``id``. */
static int leaf_child(PyObject *ref, PyObject **id)
{
    Ref parts;
    if (read_ref(ref, &parts) < 0) {
        return -1;
    }
    *id = parts.id;
    return parts.bits == KEY_BITS;
}

/* A group's row (borrowed) checked: (InnerNode, value or None, value or None, bytes or
 * None). */
static int read_row(PyObject *row, PyObject **node)
{
    if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 4) {
        return malformed();
    }
    *node = PyTuple_GET_ITEM(row, 0);
    return 0;
}

typedef struct {
    PyObject *leaves;     /* dict: the batch's leaf key -> value */
    PyObject *before;     /* dict: group id -> group as it was (those that exist) */
    PyObject *touched;    /* dict: group id -> the batch's nodes in it */
    PyObject *root_leaf;  /* callable: () -> (key, value) of a root leaf, or None */
    PyObject *kept;       /* dict, made on first need: leaf key -> value kept before */
} Values;

/* ``_LeafValues._kept``: the leaf values the batch's nodes kept before it, and the root
 * leaf's. */
static int make_kept(Values *values)
{
    PyObject *kept = PyDict_New();
    if (kept == NULL) {
        return -1;
    }
    Py_ssize_t at = 0;
    PyObject *gid, *nodes;
    while (PyDict_Next(values->touched, &at, &gid, &nodes)) {
        PyObject *group = PyDict_GetItemWithError(values->before, gid);
        if (group == NULL) {
            if (PyErr_Occurred()) {
                goto fail;
            }
            continue;
        }
        if (!PyDict_Check(group)) {
            malformed();
            goto fail;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
            PyObject *id, *left, *right, *old_node, *old_left, *old_right, *child;
            if (read_node(PyList_GET_ITEM(nodes, i), &id, &left, &right) < 0) {
                goto fail;
            }
            PyObject *old = PyDict_GetItemWithError(group, id);
            if (old == NULL) {
                if (PyErr_Occurred()) {
                    goto fail;
                }
                continue;
            }
            if (read_row(old, &old_node) < 0
                || read_node(old_node, &child, &old_left, &old_right) < 0) {
                goto fail;
            }
            for (int side = 0; side < 2; side++) {
                PyObject *value = PyTuple_GET_ITEM(old, 1 + side);
                if (value == Py_None) {
                    continue;
                }
                Ref ref;
                if (read_ref(side ? old_right : old_left, &ref) < 0
                    || PyDict_SetItem(kept, ref.id, value) < 0) {
                    goto fail;
                }
            }
        }
    }
    PyObject *root = PyObject_CallNoArgs(values->root_leaf);
    if (root == NULL) {
        goto fail;
    }
    if (root != Py_None) {
        if (!PyTuple_Check(root) || PyTuple_GET_SIZE(root) != 2
            || PyDict_SetItem(kept, PyTuple_GET_ITEM(root, 0), PyTuple_GET_ITEM(root, 1)) < 0) {
            Py_DECREF(root);
            if (!PyErr_Occurred()) {
                malformed();
            }
            goto fail;
        }
    }
    Py_DECREF(root);
    values->kept = kept;
    return 0;
fail:
    Py_DECREF(kept);
    return -1;
}

/* ``_LeafValues.of``: the value (borrowed) of leaf ``key`` whose new parent's row before
 * the batch was ``old`` (NULL: none): the batch's own, else that row's, else the one the
 * batch's rows kept before it. KeyError("map leaf missing") if none has it. */
static PyObject *leaf_value(Values *values, PyObject *key, PyObject *old)
{
    PyObject *value = PyDict_GetItemWithError(values->leaves, key);
    if (value != NULL || PyErr_Occurred()) {
        return value;
    }
    if (old != NULL) {
        PyObject *node, *id, *left, *right, *child;
        if (read_row(old, &node) < 0 || read_node(node, &id, &left, &right) < 0) {
            return NULL;
        }
        for (int side = 0; side < 2; side++) {
            int is_leaf = leaf_child(side ? right : left, &child);
            if (is_leaf < 0) {
                return NULL;
            }
            int same = PyObject_RichCompareBool(child, key, Py_EQ);
            if (same < 0) {
                return NULL;
            }
            if (same) {
                value = PyTuple_GET_ITEM(old, 1 + side);
                if (value != Py_None) {
                    return value;
                }
                break;
            }
        }
    }
    if (values->kept == NULL && make_kept(values) < 0) {
        return NULL;
    }
    value = PyDict_GetItemWithError(values->kept, key);
    if (value == NULL && !PyErr_Occurred()) {
        PyErr_SetString(PyExc_KeyError, "map leaf missing");
    }
    return value;
}

/* ``group_nodes(inners, where) -> {group id: [node, ...]}``: the batch's written nodes by
 * the group they are in (``where``'s, else ``group_id``), groups and nodes in order. */
static PyObject *group_nodes(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 2 || !PyList_Check(args[0]) || !PyDict_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "group_nodes(inners: list, where: dict)");
        return NULL;
    }
    PyObject *inners = args[0], *where = args[1];
    PyObject *touched = PyDict_New();
    if (touched == NULL) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(inners); i++) {
        PyObject *node = PyList_GET_ITEM(inners, i), *id, *left, *right, *gid;
        if (read_node(node, &id, &left, &right) < 0) {
            goto fail;
        }
        gid = PyDict_GetItemWithError(where, id);
        if (gid != NULL) {
            Py_INCREF(gid);
        } else if (PyErr_Occurred() || (gid = group_of(id)) == NULL) {
            goto fail;
        }
        PyObject *nodes = PyDict_GetItemWithError(touched, gid);
        int failed;
        if (nodes != NULL) {
            failed = PyList_Append(nodes, node);
        } else if (PyErr_Occurred()) {
            failed = -1;
        } else {
            nodes = PyList_New(1);
            failed = nodes == NULL;
            if (!failed) {
                Py_INCREF(node);
                PyList_SET_ITEM(nodes, 0, node);
                failed = PyDict_SetItem(touched, gid, nodes);
                Py_DECREF(nodes);
            }
        }
        Py_DECREF(gid);
        if (failed) {
            goto fail;
        }
    }
    return touched;
fail:
    Py_DECREF(touched);
    return NULL;
}

/* ``group_rows(touched, before, leaves, root_leaf) -> {group id: group}``: each group the
 * batch touched rewritten (a copy of ``before``'s, or a new one) with a row (node, left
 * leaf value, right leaf value, None) for each of its nodes, as
 * ``SqliteNodeStore.write`` does in Python. */
static PyObject *group_rows(PyObject *module, PyObject *const *args, Py_ssize_t nargs)
{
    (void)module;
    if (nargs != 4 || !PyDict_Check(args[0]) || !PyDict_Check(args[1]) || !PyDict_Check(args[2])
        || !PyCallable_Check(args[3])) {
        PyErr_SetString(PyExc_TypeError,
                        "group_rows(touched: dict, before: dict, leaves: dict, root_leaf)");
        return NULL;
    }
    Values values = {args[2], args[1], args[0], args[3], NULL};
    PyObject *after = PyDict_New(), *group = NULL;
    if (after == NULL) {
        return NULL;
    }
    Py_ssize_t at = 0;
    PyObject *gid, *nodes;
    while (PyDict_Next(values.touched, &at, &gid, &nodes)) {
        if (!PyList_Check(nodes)) {
            PyErr_SetString(PyExc_TypeError, "group_rows: touched maps to lists");
            goto fail;
        }
        PyObject *kept = PyDict_GetItemWithError(values.before, gid);
        if (kept != NULL && !PyDict_Check(kept)) {
            malformed();
            goto fail;
        }
        group = kept != NULL ? PyDict_Copy(kept) : PyErr_Occurred() ? NULL : PyDict_New();
        if (group == NULL) {
            goto fail;
        }
        for (Py_ssize_t i = 0; i < PyList_GET_SIZE(nodes); i++) {
            PyObject *node = PyList_GET_ITEM(nodes, i), *id, *children[2], *child;
            if (read_node(node, &id, &children[0], &children[1]) < 0) {
                goto fail;
            }
            PyObject *old = PyDict_GetItemWithError(group, id);
            if (old == NULL && PyErr_Occurred()) {
                goto fail;
            }
            PyObject *row = PyTuple_New(4);
            if (row == NULL) {
                goto fail;
            }
            Py_INCREF(node);
            PyTuple_SET_ITEM(row, 0, node);
            Py_INCREF(Py_None);
            PyTuple_SET_ITEM(row, 3, Py_None);
            Py_XINCREF(old);  /* replaced below */
            int failed = 0;
            for (int side = 0; side < 2 && !failed; side++) {
                PyObject *value = Py_None;
                int is_leaf = leaf_child(children[side], &child);
                if (is_leaf > 0) {
                    value = leaf_value(&values, child, old);
                }
                failed = is_leaf < 0 || value == NULL;
                if (!failed) {
                    Py_INCREF(value);
                    PyTuple_SET_ITEM(row, 1 + side, value);
                }
            }
            if (!failed) {
                untrack_if_atomic(row);
            }
            failed = failed || PyDict_SetItem(group, id, row) < 0;
            Py_DECREF(row);  /* unset items are NULL: a tuple's dealloc skips them */
            Py_XDECREF(old);
            if (failed) {
                goto fail;
            }
        }
        int failed = PyDict_SetItem(after, gid, group);
        Py_CLEAR(group);
        if (failed) {
            goto fail;
        }
    }
    Py_XDECREF(values.kept);
    return after;
fail:
    Py_XDECREF(group);
    Py_XDECREF(values.kept);
    Py_DECREF(after);
    return NULL;
}

/* ``_encode_row``: one row's stored bytes, a new reference: the node's id, then each child
 * as ``u8 bits-1``, its id after the first byte and its hash, or for a leaf child (its
 * value kept in the row) its whole key and that value. */
static PyObject *encode_row(PyObject *row)
{
    PyObject *node, *id, *children[2];
    if (read_row(row, &node) < 0 || read_node(node, &id, &children[0], &children[1]) < 0) {
        return NULL;
    }
    Ref refs[2];
    PyObject *kept[2];
    Py_ssize_t size = PyBytes_GET_SIZE(id);
    for (int side = 0; side < 2; side++) {
        if (read_ref(children[side], &refs[side]) < 0) {
            return NULL;
        }
        kept[side] = PyTuple_GET_ITEM(row, 1 + side);
        if (kept[side] != Py_None
            && (!PyBytes_Check(kept[side]) || PyBytes_GET_SIZE(kept[side]) != 32)) {
            malformed();
            return NULL;
        }
        size += 1 + PyBytes_GET_SIZE(refs[side].id) - (kept[side] == Py_None) + 32;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, size);
    if (out == NULL) {
        return NULL;
    }
    char *at = PyBytes_AS_STRING(out);
    memcpy(at, PyBytes_AS_STRING(id), (size_t)PyBytes_GET_SIZE(id));
    at += PyBytes_GET_SIZE(id);
    for (int side = 0; side < 2; side++) {
        int leaf = kept[side] != Py_None;
        *at++ = (char)(uint8_t)(refs[side].bits - 1);
        Py_ssize_t n = PyBytes_GET_SIZE(refs[side].id) - !leaf;
        memcpy(at, PyBytes_AS_STRING(refs[side].id) + !leaf, (size_t)n);
        at += n;
        memcpy(at, PyBytes_AS_STRING(leaf ? kept[side] : refs[side].hash), 32);
        at += 32;
    }
    return out;
}

/* ``encode_group(group) -> (group, bytes)``: ``mapstore._encoded``. */
static PyObject *encode_group(PyObject *module, PyObject *group)
{
    (void)module;
    if (!PyDict_Check(group)) {
        PyErr_SetString(PyExc_TypeError, "encode_group(group: dict)");
        return NULL;
    }
    PyObject *done = NULL, *parts = PyList_New(0), *blob = NULL;
    if (parts == NULL) {
        return NULL;
    }
    Py_ssize_t at = 0;
    PyObject *nid, *row;
    int all_encoded = 1;
    while (PyDict_Next(group, &at, &nid, &row)) {
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 4) {
            malformed();
            goto fail;
        }
        if (PyTuple_GET_ITEM(row, 3) == Py_None) {
            all_encoded = 0;
            break;
        }
    }
    if (all_encoded) {
        done = group;
        Py_INCREF(done);
    } else if ((done = PyDict_New()) == NULL) {
        goto fail;
    }
    at = 0;
    while (PyDict_Next(group, &at, &nid, &row)) {
        if (!PyTuple_Check(row) || PyTuple_GET_SIZE(row) != 4) {
            malformed();
            goto fail;
        }
        PyObject *encoding = PyTuple_GET_ITEM(row, 3);
        int failed;
        if (encoding != Py_None) {
            if (!PyBytes_Check(encoding)) {
                malformed();
                goto fail;
            }
            failed = PyList_Append(parts, encoding) < 0
                     || (!all_encoded && PyDict_SetItem(done, nid, row) < 0);
        } else {
            PyObject *fresh = encode_row(row), *copy = NULL;
            if (fresh != NULL && (copy = PyTuple_New(4)) != NULL) {
                for (int k = 0; k < 3; k++) {
                    Py_INCREF(PyTuple_GET_ITEM(row, k));
                    PyTuple_SET_ITEM(copy, k, PyTuple_GET_ITEM(row, k));
                }
                Py_INCREF(fresh);
                PyTuple_SET_ITEM(copy, 3, fresh);
                untrack_if_atomic(copy);
            }
            failed = copy == NULL || PyList_Append(parts, fresh) < 0
                     || PyDict_SetItem(done, nid, copy) < 0;
            Py_XDECREF(fresh);
            Py_XDECREF(copy);
        }
        if (failed) {
            goto fail;
        }
    }
    Py_ssize_t size = 0;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts); i++) {
        size += PyBytes_GET_SIZE(PyList_GET_ITEM(parts, i));
    }
    if ((blob = PyBytes_FromStringAndSize(NULL, size)) == NULL) {
        goto fail;
    }
    char *into = PyBytes_AS_STRING(blob);
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(parts); i++) {
        PyObject *part = PyList_GET_ITEM(parts, i);
        memcpy(into, PyBytes_AS_STRING(part), (size_t)PyBytes_GET_SIZE(part));
        into += PyBytes_GET_SIZE(part);
    }
    Py_DECREF(parts);
    PyObject *out = PyTuple_Pack(2, done, blob);
    Py_DECREF(done);
    Py_DECREF(blob);
    return out;
fail:
    Py_XDECREF(done);
    Py_DECREF(parts);
    return NULL;
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
        int failed = row == NULL || PyDict_SetItem(group, id, row) < 0;
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
    {"group_nodes", (PyCFunction)(void (*)(void))group_nodes, METH_FASTCALL,
     "group_nodes(inners, where) -> dict: a batch's written nodes by group id\n"
     "(mapstore.SqliteNodeStore.write's first step)."},
    {"group_rows", (PyCFunction)(void (*)(void))group_rows, METH_FASTCALL,
     "group_rows(touched, before, leaves, root_leaf) -> dict: the groups a batch\n"
     "rewrites, with its rows and their leaf values (SqliteNodeStore.write's second step)."},
    {"decode_group", (PyCFunction)(void (*)(void))decode_group, METH_FASTCALL,
     "decode_group(blob, ChildRef, InnerNode) -> dict: a stored group's rows\n"
     "(mapstore._decode_group)."},
    {"encode_group", encode_group, METH_O,
     "encode_group(group) -> (group, bytes): the group with every row's encoding, and its\n"
     "stored bytes (mapstore._encoded)."},
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
