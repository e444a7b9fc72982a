/* frtrace.load.read._scan, part two: a dump's pickle read into nodes, and its columns read from them.
 *
 * Unpickling makes a Python object of every value of every entry (about 15 per entry), only
 * for the column pass to read each once and the interpreter to free them all again: most of
 * the time a file costs. Here the pickle's opcodes are read into a table of nodes (16 bytes
 * each: a kind and a value, or where its bytes or children are) and the same column pass
 * (_scan.c) reads them there; Python objects are made only for what is asked for: the
 * top-level values, an entry or a value the caller looks at, the distinct texts and stacks.
 *
 * It is a fast path only. It reads the data opcodes of pickle protocols 2 to 5 (what torch's
 * pickler and Python's write for plain data); anything else (another opcode, a truncated or
 * inconsistent stream, a dict key that is not a plain scalar, a memo index far past the data)
 * makes read() return None, and the caller unpickles the file the careful way, which gives
 * the result or the error. For what it reads, every object it makes is what pickle makes
 * (same values, same sharing: one object per node, as pickle makes one per opcode or memo
 * entry), and the column pass gives what the pass over pickle's objects gives. No opcode can
 * call anything: there are no globals here at all.
 */
#include "_scan.h"

#include <string.h>

enum { T_NONE, T_TRUE, T_FALSE, T_INT, T_BIG, T_FLOAT, T_STR, T_BYTES, T_LIST, T_TUPLE, T_DICT };

#define IS_CONTAINER(kind) ((kind) >= T_LIST)
#define NO_NODE UINT32_MAX
#define HIGHEST_PROTOCOL 5

typedef struct {
    uint8_t kind;
    uint8_t again; /* pushed again from the memo: the only way a node is a child twice, or a
                    * child and the top level at once (in the padding: 16 bytes as before) */
    uint32_t len;  /* T_STR, T_BYTES, T_BIG: bytes; containers: children (keys and values) */
    uint64_t v;    /* T_INT: the value; T_FLOAT: its bits; T_STR, T_BYTES, T_BIG: where its bytes
                    * start in the data; containers: where its children start in kids */
} Node;
_Static_assert(sizeof(Node) == 16, "a node is 16 bytes");

typedef struct {
    uint32_t *at;
    size_t size, cap;
} U32s;

/* The arrays of the last tree freed and of the last read, kept for the next file: a fresh
 * allocation per file costs its pages faulted in again (a sixth of the time). One of each,
 * none past SPARE_LIMIT (a huge file's arrays are not kept). */
enum { S_NODES, S_KIDS, S_MADE, S_STACK, S_MARKS, S_RUNS, S_MEMO, N_SPARES };
#define SPARE_LIMIT ((size_t)64 << 20)

static struct {
    void *at;
    size_t bytes;
} spares[N_SPARES];

static void *spare_take(int slot, size_t *bytes) {
    void *at = spares[slot].at;
    *bytes = at != NULL ? spares[slot].bytes : 0;
    spares[slot].at = NULL;
    return at;
}

static void spare_give(int slot, void *at, size_t bytes) {
    if (at != NULL && spares[slot].at == NULL && bytes <= SPARE_LIMIT) {
        spares[slot].at = at;
        spares[slot].bytes = bytes;
    } else {
        PyMem_Free(at);
    }
}

/* A buffer of at least `bytes`, the spare one where it is large enough. */
static void *spare_sized(int slot, size_t bytes, size_t *got) {
    void *at = spare_take(slot, got);
    if (*got >= bytes) return at;
    void *more = PyMem_Realloc(at, bytes ? bytes : 1);
    if (more == NULL) {
        PyMem_Free(at);
        PyErr_NoMemory();
        return NULL;
    }
    *got = bytes;
    return more;
}

static void u32_take(U32s *a, int slot) {
    size_t bytes;
    a->at = spare_take(slot, &bytes);
    a->cap = bytes / sizeof(uint32_t);
    a->size = 0;
}

/* Make room in an array of *cap items of `width` bytes for item `index`: doubled (from
 * `first`) until it fits. 0, or -1 with an exception set (the array is left as it was). */
static int grow(void **at, size_t *cap, size_t index, size_t first, size_t width) {
    if (index < *cap) return 0;
    size_t more = *cap ? *cap : first;
    while (more <= index) more *= 2;
    void *bigger = PyMem_Realloc(*at, more * width);
    if (bigger == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    *at = bigger;
    *cap = more;
    return 0;
}

/* (inlined: one is pushed per opcode; only a full array calls grow) */
static inline __attribute__((always_inline)) int u32_push(U32s *a, uint32_t x) {
    if (__builtin_expect(a->size >= a->cap, 0) &&
        grow((void **)&a->at, &a->cap, a->size, 1024, sizeof(uint32_t)) < 0) {
        return -1;
    }
    a->at[a->size++] = x;
    return 0;
}

typedef struct {
    PyObject_HEAD
    PyObject *data;   /* the pickle (bytes) the nodes point into */
    Node *nodes;
    size_t n_nodes, cap_nodes;
    uint32_t *kids;   /* every container's children, container after container */
    PyObject **made;  /* node -> the object made for it (NULL: not yet) */
    size_t kids_bytes, made_bytes;
    int broken;       /* making objects failed half way (out of memory): nothing more is made */
} Tree;

typedef struct {
    PyObject_HEAD
    Tree *tree;
    uint32_t node;  /* the list of entries */
} Entries;

static PyTypeObject TreeType, EntriesType;

/* ---- reading the opcodes ------------------------------------------------------------------ */

typedef struct {
    const unsigned char *s;
    size_t n, pos;
    size_t frame_end;  /* where the current FRAME ends (at or before pos: none) */
    Tree *t;
    U32s stack, marks;
    U32s children;  /* every container's children, in the order they were added (the kids) */
    U32s runs;      /* (parent, first child, count): each batch of children added together */
    size_t edges;   /* children added (before finish lays out those of a container added in
                     * several runs again, after them) */
    uint32_t *memo;  /* memo index -> node + 1 (0: empty) */
    size_t memo_cap, memo_len;
} Reader;

/* 1: read; 0: not a stream read here (the caller unpickles it); -1: an exception. */
#define NOT_HERE 0

/* A new node: its index, or -2 with an exception set (nodes are fewer than the data's
 * bytes, which read() keeps under NO_NODE). */
static inline __attribute__((always_inline)) int64_t new_node(Reader *r, uint8_t kind, uint32_t len, uint64_t v) {
    Tree *t = r->t;
    if (__builtin_expect(t->n_nodes >= t->cap_nodes, 0) &&
        grow((void **)&t->nodes, &t->cap_nodes, t->n_nodes, 4096, sizeof(Node)) < 0) {
        return -2;
    }
    Node *nd = &t->nodes[t->n_nodes];
    nd->kind = kind;
    nd->again = 0;
    nd->len = len;
    nd->v = v;
    return (int64_t)t->n_nodes++;
}

/* Push a new node: 1, or -1 (an exception). */
static inline int push_new(Reader *r, uint8_t kind, uint32_t len, uint64_t v) {
    int64_t at = new_node(r, kind, len, v);
    if (at < 0) return -1;
    return u32_push(&r->stack, (uint32_t)at) < 0 ? -1 : 1;
}

/* One read of `count` bytes, as pickle's reads (an opcode, its argument, a length, the bytes
 * it counts): 0 where the data ends first, or the current frame ends inside it (the Python
 * unpickler refuses such a stream, pickle.loads reads across; never written by a pickler:
 * declined, and the careful path refuses it, frtrace/load/read/framing.py). */
static int take(Reader *r, size_t count, const unsigned char **out) {
    if (count > r->n - r->pos) return 0;  /* truncated */
    if (r->pos < r->frame_end && count > r->frame_end - r->pos) return 0;  /* across a frame's end */
    *out = r->s + r->pos;
    r->pos += count;
    return 1;
}

static uint64_t little(const unsigned char *p, int width) {
    uint64_t x = 0;
    for (int k = width - 1; k >= 0; k--) x = (x << 8) | p[k];
    return x;
}

static size_t fence(Reader *r) {
    return r->marks.size ? r->marks.at[r->marks.size - 1] : 0;
}

/* Pop the last mark: where it was, or -1 (none: not read here). */
static int64_t pop_mark(Reader *r) {
    if (r->marks.size == 0) return -1;
    return r->marks.at[--r->marks.size];
}

/* A dict key pickle could hash without calling anything: a str, bytes or number. */
static int plain_key(Reader *r, uint32_t node) {
    uint8_t kind = r->t->nodes[node].kind;
    return kind != T_LIST && kind != T_DICT && kind != T_TUPLE;
}

/* The items above stack position x become children of `parent` (in pairs for a dict). */
static int adopt(Reader *r, uint32_t parent, size_t x) {
    size_t count = r->stack.size - x;
    if (r->t->nodes[parent].kind == T_DICT) {
        if (count % 2) return NOT_HERE;  /* odd number of items */
        for (size_t k = x; k < r->stack.size; k += 2) {
            if (!plain_key(r, r->stack.at[k])) return NOT_HERE;
        }
    }
    if (count) {  /* one run: the items copied at once, the parent noted once */
        U32s *c = &r->children;
        if (grow((void **)&c->at, &c->cap, c->size + count - 1, 1024, sizeof(uint32_t)) < 0 ||
            u32_push(&r->runs, parent) < 0 || u32_push(&r->runs, (uint32_t)c->size) < 0 ||
            u32_push(&r->runs, (uint32_t)count) < 0) {
            return -1;
        }
        memcpy(c->at + c->size, r->stack.at + x, count * sizeof(uint32_t));
        c->size += count;
    }
    r->stack.size = x;
    return 1;
}

/* APPEND(S), SETITEM(S): the items above x into the list or dict at x - 1 (pickle's do_append
 * and do_setitems, with their checks). */
static int fill(Reader *r, size_t x, uint8_t kind) {
    if (x > r->stack.size || x <= fence(r)) return NOT_HERE;  /* stack underflow */
    if (x == r->stack.size) return 1;                          /* nothing to add */
    uint32_t target = r->stack.at[x - 1];
    if (r->t->nodes[target].kind != kind) return NOT_HERE;     /* (pickle calls methods) */
    return adopt(r, target, x);
}

/* A new container from the items above x (TUPLE, LIST, DICT and the counted tuples). */
static int collect(Reader *r, size_t x, uint8_t kind) {
    if (x > r->stack.size || x < fence(r)) return NOT_HERE;
    int64_t at = new_node(r, kind, 0, 0);
    if (at < 0) return -1;
    int done = adopt(r, (uint32_t)at, x);
    if (done <= 0) return done;
    return u32_push(&r->stack, (uint32_t)at) < 0 ? -1 : 1;
}

static int memo_put(Reader *r, uint64_t index) {
    if (r->stack.size <= fence(r)) return NOT_HERE;
    if (index > r->n) return NOT_HERE;  /* past anything a real pickle numbers: pickle decides */
    size_t had = r->memo_cap;
    if (grow((void **)&r->memo, &r->memo_cap, index, 1024, sizeof(uint32_t)) < 0) return -1;
    memset(r->memo + had, 0, (r->memo_cap - had) * sizeof(uint32_t));  /* (new slots: empty) */
    r->memo_len += r->memo[index] == 0;
    r->memo[index] = r->stack.at[r->stack.size - 1] + 1;
    return 1;
}

static int memo_get(Reader *r, uint64_t index) {
    if (index >= r->memo_cap || r->memo[index] == 0) return NOT_HERE;
    r->t->nodes[r->memo[index] - 1].again = 1;
    return u32_push(&r->stack, r->memo[index] - 1) < 0 ? -1 : 1;
}

/* Text as pickle decodes it (UTF-8, lone surrogates passed): checked now, made when asked. */
static int text(Reader *r, uint8_t kind, uint64_t size) {
    const unsigned char *p;
    if (size > UINT32_MAX || !take(r, (size_t)size, &p)) return NOT_HERE;
    if (kind == T_STR) {
        size_t k = 0;
        while (k < size && p[k] < 0x80) k++;
        if (k < size) {
            PyObject *decoded = PyUnicode_DecodeUTF8((const char *)p, (Py_ssize_t)size, "surrogatepass");
            if (decoded == NULL) {
                if (PyErr_ExceptionMatches(PyExc_MemoryError)) return -1;
                PyErr_Clear();
                return NOT_HERE;
            }
            Py_DECREF(decoded);
        }
    }
    return push_new(r, kind, (uint32_t)size, (uint64_t)(p - r->s));
}

/* LONG1, LONG4: little-endian two's complement; a T_INT where it fits in int64. */
static int long_bytes(Reader *r, uint64_t size) {
    const unsigned char *p;
    if (size > UINT32_MAX || !take(r, (size_t)size, &p)) return NOT_HERE;
    if (size == 0) return push_new(r, T_INT, 0, 0);
    unsigned char fill_byte = (p[size > 8 ? 7 : size - 1] & 0x80) ? 0xff : 0x00;
    for (uint64_t k = 8; k < size; k++) {
        if (p[k] != fill_byte) return push_new(r, T_BIG, (uint32_t)size, (uint64_t)(p - r->s));
    }
    uint64_t x = fill_byte ? UINT64_MAX : 0;
    int width = size > 8 ? 8 : (int)size;
    for (int k = width - 1; k >= 0; k--) x = (x << 8) | p[k];  /* (the fill shifted up) */
    return push_new(r, T_INT, 0, x);
}

static int push_int(Reader *r, int64_t x) {
    return push_new(r, T_INT, 0, (uint64_t)x);
}

/* One opcode: 1 read, 2 STOP, 0 not read here, -1 an exception. */
static int step(Reader *r) {
    const unsigned char *p;
    if (!take(r, 1, &p)) return NOT_HERE;
    switch (*p) {
    case 0x80: /* PROTO */
        if (!take(r, 1, &p)) return NOT_HERE;
        return *p <= HIGHEST_PROTOCOL ? 1 : NOT_HERE;
    case 0x95: { /* FRAME: its bytes must all be there, and the last frame must have ended */
        if (!take(r, 8, &p)) return NOT_HERE;
        uint64_t size = little(p, 8);
        if (r->pos < r->frame_end || size > r->n - r->pos) return NOT_HERE;
        r->frame_end = r->pos + (size_t)size;
        return 1;
    }
    case '.': /* STOP */
        return r->stack.size > fence(r) ? 2 : NOT_HERE;
    case '(': /* MARK */
        return u32_push(&r->marks, (uint32_t)r->stack.size) < 0 ? -1 : 1;
    case 'N': return push_new(r, T_NONE, 0, 0);
    case 0x88: return push_new(r, T_TRUE, 0, 0);
    case 0x89: return push_new(r, T_FALSE, 0, 0);
    case 'J': /* BININT */
        if (!take(r, 4, &p)) return NOT_HERE;
        return push_int(r, (int32_t)(uint32_t)little(p, 4));
    case 'K': /* BININT1 */
        if (!take(r, 1, &p)) return NOT_HERE;
        return push_int(r, p[0]);
    case 'M': /* BININT2 */
        if (!take(r, 2, &p)) return NOT_HERE;
        return push_int(r, (int64_t)little(p, 2));
    case 0x8a: /* LONG1 */
        if (!take(r, 1, &p)) return NOT_HERE;
        return long_bytes(r, p[0]);
    case 0x8b: { /* LONG4: a negative count is an error */
        if (!take(r, 4, &p)) return NOT_HERE;
        int32_t size = (int32_t)(uint32_t)little(p, 4);
        return size < 0 ? NOT_HERE : long_bytes(r, (uint64_t)size);
    }
    case 'G': { /* BINFLOAT: big-endian */
        if (!take(r, 8, &p)) return NOT_HERE;
        double x = PyFloat_Unpack8((const char *)p, 0);
        if (x == -1.0 && PyErr_Occurred()) return -1;
        uint64_t bits;
        memcpy(&bits, &x, 8);
        return push_new(r, T_FLOAT, 0, bits);
    }
    case 0x8c: /* SHORT_BINUNICODE */
        if (!take(r, 1, &p)) return NOT_HERE;
        return text(r, T_STR, p[0]);
    case 'X': /* BINUNICODE */
        if (!take(r, 4, &p)) return NOT_HERE;
        return text(r, T_STR, little(p, 4));
    case 0x8d: /* BINUNICODE8 */
        if (!take(r, 8, &p)) return NOT_HERE;
        return text(r, T_STR, little(p, 8));
    case 'C': /* SHORT_BINBYTES */
        if (!take(r, 1, &p)) return NOT_HERE;
        return text(r, T_BYTES, p[0]);
    case 'B': /* BINBYTES */
        if (!take(r, 4, &p)) return NOT_HERE;
        return text(r, T_BYTES, little(p, 4));
    case 0x8e: /* BINBYTES8 */
        if (!take(r, 8, &p)) return NOT_HERE;
        return text(r, T_BYTES, little(p, 8));
    case ']': return push_new(r, T_LIST, 0, 0);   /* EMPTY_LIST */
    case '}': return push_new(r, T_DICT, 0, 0);   /* EMPTY_DICT */
    case ')': return push_new(r, T_TUPLE, 0, 0);  /* EMPTY_TUPLE */
    case 0x85: /* TUPLE1 */
    case 0x86: /* TUPLE2 */
    case 0x87: { /* TUPLE3 */
        size_t count = (size_t)(*p - 0x85 + 1);
        if (r->stack.size < count) return NOT_HERE;
        return collect(r, r->stack.size - count, T_TUPLE);
    }
    case 't': /* TUPLE */
    case 'l': /* LIST */
    case 'd': { /* DICT */
        int64_t x = pop_mark(r);
        if (x < 0) return NOT_HERE;
        return collect(r, (size_t)x, *p == 't' ? T_TUPLE : (*p == 'l' ? T_LIST : T_DICT));
    }
    case 'a': /* APPEND */
        return r->stack.size ? fill(r, r->stack.size - 1, T_LIST) : NOT_HERE;
    case 's': /* SETITEM */
        return r->stack.size >= 2 ? fill(r, r->stack.size - 2, T_DICT) : NOT_HERE;
    case 'e': /* APPENDS */
    case 'u': { /* SETITEMS */
        int64_t x = pop_mark(r);
        if (x < 0) return NOT_HERE;
        return fill(r, (size_t)x, *p == 'e' ? T_LIST : T_DICT);
    }
    case 'q': /* BINPUT */
        if (!take(r, 1, &p)) return NOT_HERE;
        return memo_put(r, p[0]);
    case 'r': /* LONG_BINPUT */
        if (!take(r, 4, &p)) return NOT_HERE;
        return memo_put(r, little(p, 4));
    case 0x94: /* MEMOIZE */
        return memo_put(r, r->memo_len);
    case 'h': /* BINGET */
        if (!take(r, 1, &p)) return NOT_HERE;
        return memo_get(r, p[0]);
    case 'j': /* LONG_BINGET */
        if (!take(r, 4, &p)) return NOT_HERE;
        return memo_get(r, little(p, 4));
    default: /* globals, persistent ids, protocol 0 text, POP, DUP, ...: not read here */
        return NOT_HERE;
    }
}

/* Lay every container's children out together, in the order they were added: those added in
 * one run (most containers: a dict's SETITEMS, a list's APPENDS) are where they were added;
 * those of a container filled in several runs (a list of over 1,000 items, whose APPENDS the
 * pickler batches) are copied after all of them, run after run. The children array becomes
 * the tree's kids. (Containers are made with len 0 and v 0, and given children only here.) */
#define SEVERAL ((uint64_t)1 << 63)  /* (in v while laying out: more than one run) */
#define PLACED ((uint64_t)1 << 62)   /* (and its place after the others is chosen) */
static int finish(Reader *r) {
    Tree *t = r->t;
    U32s *c = &r->children;
    size_t n_runs = r->runs.size / 3;
    const uint32_t *runs = r->runs.at;
    size_t moved = 0;  /* children of the containers of several runs */
    r->edges = c->size;
    for (size_t k = 0; k < n_runs; k++) {
        Node *parent = &t->nodes[runs[3 * k]];
        uint32_t count = runs[3 * k + 2];
        if (parent->len == 0) {
            parent->v = runs[3 * k + 1];
        } else {
            if (!(parent->v & SEVERAL)) {
                parent->v |= SEVERAL;
                moved += parent->len;
            }
            moved += count;
        }
        parent->len += count;  /* (fewer children in all than bytes: under NO_NODE) */
    }
    if (moved) {
        if (grow((void **)&c->at, &c->cap, c->size + moved - 1, 1024, sizeof(uint32_t)) < 0) return -1;
        size_t tail = c->size;
        for (size_t k = 0; k < n_runs; k++) {
            Node *parent = &t->nodes[runs[3 * k]];
            if (!(parent->v & SEVERAL)) continue;
            if (!(parent->v & PLACED)) {
                parent->v = SEVERAL | PLACED | tail;
                tail += parent->len;
                parent->len = 0;  /* (counted again as its runs are copied) */
            }
            uint64_t at = (parent->v & ~(SEVERAL | PLACED)) + parent->len;
            memcpy(c->at + at, c->at + runs[3 * k + 1], runs[3 * k + 2] * sizeof(uint32_t));
            parent->len += runs[3 * k + 2];
        }
        for (size_t k = 0; k < n_runs; k++) t->nodes[runs[3 * k]].v &= ~(SEVERAL | PLACED);
        c->size = tail;
    }
    t->kids = c->at != NULL ? c->at : PyMem_Malloc(sizeof(uint32_t));  /* (taken over) */
    if (t->kids == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    t->kids_bytes = c->at != NULL ? c->cap * sizeof(uint32_t) : sizeof(uint32_t);
    c->at = NULL;
    c->cap = c->size = 0;
    t->made = spare_sized(S_MADE, (t->n_nodes ? t->n_nodes : 1) * sizeof(PyObject *), &t->made_bytes);
    if (t->made == NULL) return -1;
    memset(t->made, 0, t->n_nodes * sizeof(PyObject *));
    return 0;
}

/* ---- making objects ----------------------------------------------------------------------- */

/* (v is an offset into the data only for T_STR, T_BYTES and T_BIG: for T_INT and T_FLOAT it
 * is the value, and data + v would be pointer arithmetic far outside the object: UB) */
static const char *bytes_of(Tree *t, Node *nd) {
    return PyBytes_AS_STRING(t->data) + nd->v;
}

static PyObject *make_leaf(Tree *t, Node *nd) {
    switch (nd->kind) {
    case T_NONE: Py_RETURN_NONE;
    case T_TRUE: Py_RETURN_TRUE;
    case T_FALSE: Py_RETURN_FALSE;
    case T_INT: return PyLong_FromLongLong((long long)(int64_t)nd->v);
    case T_FLOAT: {
        double x;
        memcpy(&x, &nd->v, 8);
        return PyFloat_FromDouble(x);
    }
    case T_STR: return PyUnicode_DecodeUTF8(bytes_of(t, nd), nd->len, "surrogatepass");
    case T_BYTES: return PyBytes_FromStringAndSize(bytes_of(t, nd), nd->len);
    default: /* T_BIG: int.from_bytes(bytes, "little", signed=True) */
#if PY_VERSION_HEX >= 0x030D0000
        return PyLong_FromNativeBytes(bytes_of(t, nd), nd->len, Py_ASNATIVEBYTES_LITTLE_ENDIAN);
#else
        return _PyLong_FromByteArray((const unsigned char *)bytes_of(t, nd), nd->len, 1, 1);
#endif
    }
}

static PyObject *make_empty(Node *nd) {
    switch (nd->kind) {
    case T_LIST: return PyList_New(nd->len);
    case T_TUPLE: return PyTuple_New(nd->len);
    default: return PyDict_New();
    }
}

typedef struct {
    uint32_t node, pos;
} Frame;

/* After a failure half way: every slot of a list or tuple made so far holds an object (None
 * where it was not filled), so that nothing (the collector, gc.get_objects()) finds a hole. */
static void plug_holes(Tree *t) {
    for (size_t i = 0; i < t->n_nodes; i++) {
        PyObject *x = t->made[i];
        if (x == NULL || !(PyList_CheckExact(x) || PyTuple_CheckExact(x))) continue;
        for (Py_ssize_t k = 0; k < Py_SIZE(x); k++) {
            PyObject **slot = PyList_CheckExact(x) ? &((PyListObject *)x)->ob_item[k]
                                                   : &((PyTupleObject *)x)->ob_item[k];
            if (*slot == NULL) *slot = Py_NewRef(Py_None);
        }
    }
}

static PyObject *fill_from(Tree *t, uint32_t i);

/* The object of node i (borrowed: the tree holds it), made with everything under it. Each
 * container is made empty first and filled from a stack, not by recursion: nesting as deep
 * as a pickle can make costs no C stack, and a list that holds itself is the same object.
 * The cyclic collector is off meanwhile: no Python code (a gc callback, a finalizer) runs
 * while a list or tuple has slots not yet filled. */
static PyObject *made(Tree *t, uint32_t i) {
    if (t->made[i] != NULL) return t->made[i];
    int was_enabled = PyGC_Disable();
    PyObject *x = fill_from(t, i);
    if (x == NULL) plug_holes(t);
    if (was_enabled) PyGC_Enable();
    return x;
}

static PyObject *fill_from(Tree *t, uint32_t i) {
    if (t->made[i] != NULL) return t->made[i];
    if (t->broken) return PyErr_NoMemory();
    Node *nd = &t->nodes[i];
    if (!IS_CONTAINER(nd->kind)) return t->made[i] = make_leaf(t, nd);
    Frame *frames = NULL;
    size_t depth = 0, cap = 0;
    if ((t->made[i] = make_empty(nd)) == NULL) goto failed;
    Frame first = {i, 0};
    frames = PyMem_Malloc(sizeof(Frame) * (cap = 64));
    if (frames == NULL) goto failed;
    frames[depth++] = first;
    while (depth) {
        Frame *f = &frames[depth - 1];
        Node *parent = &t->nodes[f->node];
        if (f->pos == parent->len) {
            depth--;
            continue;
        }
        PyObject *whole = t->made[f->node];
        uint32_t key = NO_NODE, child;
        if (parent->kind == T_DICT) {
            key = t->kids[parent->v + f->pos];
            f->pos++;
        }
        child = t->kids[parent->v + f->pos];
        uint32_t at = f->pos++;
        int fresh = t->made[child] == NULL && IS_CONTAINER(t->nodes[child].kind);
        PyObject *value = t->made[child];
        if (value == NULL) {
            Node *cn = &t->nodes[child];
            value = t->made[child] = fresh ? make_empty(cn) : make_leaf(t, cn);
            if (value == NULL) goto failed;
        }
        if (parent->kind == T_LIST) {
            Py_INCREF(value);
            PyList_SET_ITEM(whole, at, value);
        } else if (parent->kind == T_TUPLE) {
            Py_INCREF(value);
            PyTuple_SET_ITEM(whole, at, value);
        } else {
            if (t->made[key] == NULL && (t->made[key] = make_leaf(t, &t->nodes[key])) == NULL) {
                goto failed;
            }
            if (PyDict_SetItem(whole, t->made[key], value) < 0) goto failed;
        }
        if (fresh) {
            if (depth == cap) {
                Frame *more = PyMem_Realloc(frames, sizeof(Frame) * (cap *= 2));
                if (more == NULL) goto failed;
                frames = more;
            }
            frames[depth].node = child;
            frames[depth].pos = 0;
            depth++;
        }
    }
    PyMem_Free(frames);
    return t->made[i];
failed:
    /* Containers may be half filled: none is handed out again. */
    PyMem_Free(frames);
    t->broken = 1;
    if (!PyErr_Occurred()) PyErr_NoMemory();
    return NULL;
}

static PyObject *made_new(Tree *t, uint32_t i) {
    PyObject *x = made(t, i);
    Py_XINCREF(x);
    return x;
}

/* ---- the column pass over nodes (as _scan.c's over objects) --------------------------------- */

static int node_shape(Tree *t, Buffer *b, uint32_t i, Py_ssize_t *leaves, Py_ssize_t max_leaves) {
    Node *nd = &t->nodes[i];
    if (nd->kind != T_LIST && nd->kind != T_TUPLE) return 0;
    *leaves += nd->len;
    if (*leaves > max_leaves) return 0;
    if (put_tagged(b, 'V', nd->len) < 0) return -1;
    for (uint32_t j = 0; j < nd->len; j++) {
        uint32_t item = t->kids[nd->v + j];
        Node *it = &t->nodes[item];
        if (it->kind == T_STR) { /* a dtype: its node stands for its text, as an object would */
            if (put_tagged(b, 'S', item) < 0) return -1;
            continue;
        }
        if (it->kind != T_LIST && it->kind != T_TUPLE) return 0;
        *leaves += it->len;
        if (*leaves > max_leaves) return 0;
        if (put_tagged(b, 'T', it->len) < 0) return -1;
        for (uint32_t d = 0; d < it->len; d++) {
            Node *size = &t->nodes[t->kids[it->v + d]];
            if (size->kind != T_INT) return 0;
            if (put(b, &size->v, 8) < 0) return -1;
        }
    }
    return 1;
}

static int node_shapes_take(Tree *t, Column *c, Py_ssize_t i, uint32_t *nodes, Py_ssize_t max_leaves) {
    c->shape.size = 0;
    for (Py_ssize_t j = 0; j < c->width; j++) {
        int written = nodes[j] == NO_NODE ? 0 : node_shape(t, &c->shape, nodes[j], &c->leaves, max_leaves);
        if (written <= 0) {
            c->ok = 0;
            return written;
        }
    }
    uint64_t hash = key_hash(c->shape.data, c->shape.size);
    int32_t code = cached_code(c, hash, c->shape.data, c->shape.size);
    if (code >= 0) {
        ((int32_t *)PyBytes_AS_STRING(c->values))[i] = code;
        return 0;
    }
    if (shape_code(c, i) < 0) return -1;
    code = ((int32_t *)PyBytes_AS_STRING(c->values))[i];
    return cache_code(c, hash, c->shape.data, c->shape.size, 1, code);
}

static int all_kids(Tree *t, Node *nd, uint8_t kind) {
    for (uint32_t j = 0; j < nd->len; j++) {
        if (t->nodes[t->kids[nd->v + j]].kind != kind) return 0;
    }
    return 1;
}

/* Entry i's value (node, or NO_NODE when absent) into the column: 0 done or given up, -1 an
 * exception. The rules are column_take's, node kind for object type. */
static int node_take(Tree *t, Column *c, Py_ssize_t i, uint32_t *nodes, Py_ssize_t max_leaves) {
    if (c->kind == K_SHAPES) return node_shapes_take(t, c, i, nodes, max_leaves);
    uint32_t node = nodes[0];
    Node *nd = node == NO_NODE ? NULL : &t->nodes[node];
    int null = nd == NULL || nd->kind == T_NONE;
    if (c->kind == K_NONE) {
        c->ok = null;
        return 0;
    }
    if (null) {
        column_null(c, i, nd == NULL);
        return 0;
    }
    char *out = PyBytes_AS_STRING(c->values);
    int32_t code;
    switch (c->kind) {
    case K_INT64:
    case K_FLOAT64:
        if (nd->kind != (c->kind == K_INT64 ? T_INT : T_FLOAT)) break;
        memcpy(out + 8 * i, &nd->v, 8);
        PyBytes_AS_STRING(c->valid)[i] = 1;
        return 0;
    case K_BOOL:
        if (nd->kind != T_TRUE && nd->kind != T_FALSE) break;
        out[i] = nd->kind == T_TRUE;
        PyBytes_AS_STRING(c->valid)[i] = 1;
        return 0;
    case K_TEXT:
    case K_PAIR: {  /* (a node is one value: its code, once known, is kept by the node) */
        if ((code = cached_code(c, (uint64_t)node + 1, NULL, 0)) >= 0) {
            ((int32_t *)out)[i] = code;
            return 0;
        }
        int plain = c->kind == K_TEXT ? nd->kind == T_STR
                                      : nd->kind == T_TUPLE && all_kids(t, nd, T_STR);
        if (!plain) break;
        PyObject *value = made(t, node);
        if (value == NULL || (code = code_of(c, value, value, i)) < 0) return -1;
        ((int32_t *)out)[i] = code;
        return cache_code(c, (uint64_t)node + 1, NULL, 0, 0, code);
    }
    default: { /* K_FRAMES: a list of frames, known by the nodes of the frames in it */
        if (nd->kind != T_LIST) break;
        c->leaves += nd->len;
        if (c->leaves > max_leaves) break;
        if (nd->len == 0) {
            ((int32_t *)out)[i] = -1;
            return 0;
        }
        const char *kids = (const char *)&t->kids[nd->v];
        Py_ssize_t size = (Py_ssize_t)(nd->len * sizeof(uint32_t));
        uint64_t hash = key_hash(kids, size);
        if ((code = cached_code(c, hash, kids, size)) >= 0) {
            ((int32_t *)out)[i] = code;
            return 0;
        }
        PyObject *key = PyBytes_FromStringAndSize(kids, size);
        if (key == NULL) return -1;
        PyObject *found = PyDict_GetItemWithError(c->index, key);
        PyObject *value = found != NULL || PyErr_Occurred() ? NULL : made(t, node);
        code = found != NULL ? (int32_t)PyLong_AsLong(found) : (value == NULL ? -1 : code_of(c, key, value, i));
        Py_DECREF(key);
        if (code < 0) return -1;
        ((int32_t *)out)[i] = code;
        return cache_code(c, hash, kids, size, 0, code);
    }
    }
    c->ok = 0;  /* not the plain kind expected: given up */
    return 0;
}

/* Which column slot a key node is (slot + 2; 1: none), found by its bytes the first time. */
static uint8_t slot_of(Tree *t, uint8_t *slots, uint32_t key, const char **names, Py_ssize_t *sizes, Py_ssize_t count) {
    if (slots[key]) return slots[key];
    Node *nd = &t->nodes[key];
    slots[key] = 1;
    if (nd->kind != T_STR) return 1;  /* (a key of another type never equals a str) */
    const char *bytes = bytes_of(t, nd);
    for (Py_ssize_t s = 0; s < count; s++) {
        if (sizes[s] == (Py_ssize_t)nd->len && memcmp(names[s], bytes, nd->len) == 0) {
            slots[key] = (uint8_t)(s + 2);
            break;
        }
    }
    return slots[key];
}

PyDoc_STRVAR(entries_columns_doc,
"columns(specs, max_leaves) -> list\n\n"
"What _scan.columns gives for these entries, read from their nodes.");

static PyObject *entries_columns(Entries *self, PyObject *args) {
    PyObject *specs;
    Py_ssize_t max_leaves;
    if (!PyArg_ParseTuple(args, "O!n", &PyTuple_Type, &specs, &max_leaves)) return NULL;
    Tree *t = self->tree;
    Node *list = &t->nodes[self->node];
    if (!all_kids(t, list, T_DICT)) {
        PyErr_SetString(PyExc_TypeError, "every entry is a dict");
        return NULL;
    }
    Py_ssize_t n = list->len, m = PyTuple_GET_SIZE(specs), made_count = 0, count = 0;
    Column *cols = NULL;
    PyObject *result = NULL;
    uint8_t *slots = NULL;
    if (columns_begin(specs, n, &cols, &made_count) < 0) goto done;
    const char *names[MAX_SLOTS];
    Py_ssize_t sizes[MAX_SLOTS];
    for (Py_ssize_t k = 0; k < m; k++) {
        Column *c = &cols[k];
        for (Py_ssize_t j = 0; j < c->width; j++, count++) {
            PyObject *key = c->kind == K_SHAPES ? PyTuple_GET_ITEM(c->key, j) : c->key;
            names[count] = PyUnicode_AsUTF8AndSize(key, &sizes[count]);
            if (names[count] == NULL) goto done;
        }
    }
    slots = PyMem_Calloc(t->n_nodes ? t->n_nodes : 1, 1);
    if (slots == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    uint32_t staged[MAX_SLOTS];
    for (Py_ssize_t i = 0; i < n; i++) {
        Node *entry = &t->nodes[t->kids[list->v + i]];
        for (Py_ssize_t s = 0; s < count; s++) staged[s] = NO_NODE;
        for (uint32_t j = 0; j + 1 < entry->len; j += 2) {  /* (a key set twice: the last) */
            uint32_t *pair = &t->kids[entry->v + j];
            uint8_t slot = slot_of(t, slots, pair[0], names, sizes, count);
            if (slot >= 2) staged[slot - 2] = pair[1];
        }
        for (Py_ssize_t k = 0; k < m; k++) {
            Column *c = &cols[k];
            if (c->ok && node_take(t, c, i, &staged[c->slot], max_leaves) < 0) goto done;
        }
    }
    result = columns_end(cols, m);
done:
    PyMem_Free(slots);
    columns_free(cols, made_count);
    return result;
}

/* ---- the Python types ------------------------------------------------------------------------ */

static void tree_dealloc(Tree *t) {
    if (t->made != NULL) {
        for (size_t i = 0; i < t->n_nodes; i++) Py_XDECREF(t->made[i]);
    }
    spare_give(S_MADE, t->made, t->made_bytes);
    spare_give(S_KIDS, t->kids, t->kids_bytes);
    spare_give(S_NODES, t->nodes, t->cap_nodes * sizeof(Node));
    Py_XDECREF(t->data);
    Py_TYPE(t)->tp_free((PyObject *)t);
}

static PyObject *entries_view(Tree *t, uint32_t node) {
    Entries *view = PyObject_New(Entries, &EntriesType);
    if (view == NULL) return NULL;
    Py_INCREF(t);
    view->tree = t;
    view->node = node;
    return (PyObject *)view;
}

static void entries_dealloc(Entries *self) {
    Py_XDECREF(self->tree);
    PyObject_Free(self);
}

static Py_ssize_t entries_len(Entries *self) {
    return self->tree->nodes[self->node].len;
}

static PyObject *entries_item(Entries *self, Py_ssize_t i) {
    Node *list = &self->tree->nodes[self->node];
    if (i < 0 || i >= (Py_ssize_t)list->len) {
        PyErr_SetString(PyExc_IndexError, "entry index out of range");
        return NULL;
    }
    return made_new(self->tree, self->tree->kids[list->v + i]);
}

PyDoc_STRVAR(entries_all_dicts_doc, "all_dicts() -> bool: whether every entry is a dict.");

static PyObject *entries_all_dicts(Entries *self, PyObject *unused) {
    return PyBool_FromLong(all_kids(self->tree, &self->tree->nodes[self->node], T_DICT));
}

static PySequenceMethods entries_as_sequence = {
    .sq_length = (lenfunc)entries_len,
    .sq_item = (ssizeargfunc)entries_item,
};

static PyMethodDef entries_methods[] = {
    {"columns", (PyCFunction)entries_columns, METH_VARARGS, entries_columns_doc},
    {"all_dicts", (PyCFunction)entries_all_dicts, METH_NOARGS, entries_all_dicts_doc},
    {NULL, NULL, 0, NULL},
};

static PyTypeObject TreeType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "frtrace.load.read._scan.Tree",
    .tp_basicsize = sizeof(Tree),
    .tp_dealloc = (destructor)tree_dealloc,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A pickle read into nodes (what Entries views share).",
};

static PyTypeObject EntriesType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "frtrace.load.read._scan.Entries",
    .tp_basicsize = sizeof(Entries),
    .tp_dealloc = (destructor)entries_dealloc,
    .tp_as_sequence = &entries_as_sequence,
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "A dump's list of entries, read from its pickle: each entry is made when asked for.",
    .tp_methods = entries_methods,
};

int tree_types_ready(PyObject *module) {
    if (PyType_Ready(&TreeType) < 0 || PyType_Ready(&EntriesType) < 0) return -1;
    Py_INCREF(&EntriesType);
    if (PyModule_AddObject(module, "Entries", (PyObject *)&EntriesType) < 0) {
        Py_DECREF(&EntriesType);
        return -1;
    }
    return 0;
}

/* The list of entries payload() makes a view of: the top-level list, or the list under the
 * top-level dict's (last) "entries"; NO_NODE where there is none. */
static uint32_t entries_node(Tree *t, uint32_t root) {
    Node *nd = &t->nodes[root];
    if (nd->kind == T_LIST) return root;
    uint32_t found = NO_NODE;
    for (uint32_t j = 0; nd->kind == T_DICT && j + 1 < nd->len; j += 2) {
        Node *kn = &t->nodes[t->kids[nd->v + j]];
        uint32_t value = t->kids[nd->v + j + 1];
        if (kn->kind == T_STR && kn->len == 7 && memcmp(bytes_of(t, kn), "entries", 7) == 0) {
            found = t->nodes[value].kind == T_LIST ? value : NO_NODE;
        }
    }
    return found;
}

/* Whether the top level or its list of entries is also held somewhere inside (pickle would
 * give the same object there; payload() makes the top dict anew and the entries a view, so
 * such a stream is left to the unpickler: only damage or a crafted file does this). */
static int shared_top(Reader *r, uint32_t root) {
    uint32_t entries = entries_node(r->t, root);
    /* A node is on the stack once when made, and again each time the memo gives it: never
     * pushed again, it is a child at most once, and not both a child and the top level. */
    if (!r->t->nodes[root].again && (entries == NO_NODE || !r->t->nodes[entries].again)) {
        return 0;
    }
    size_t held = 0;
    size_t roots = 0;
    const uint32_t *kids = r->t->kids;
    for (size_t e = 0; e < r->edges; e++) {  /* (as added: the copies after them aside) */
        roots += kids[e] == root;
        held += kids[e] == entries;
    }
    if (roots) return 1;
    return held > (entries == root ? 0 : 1);  /* (once: the top dict's own "entries") */
}

/* The decoded top level: a dict's values made, but its "entries" list a view; a list (torch
 * 2.2: the entries themselves) a view; anything else made. */
static PyObject *payload(Tree *t, uint32_t root) {
    Node *nd = &t->nodes[root];
    if (nd->kind == T_LIST) return entries_view(t, root);
    if (nd->kind != T_DICT) return made_new(t, root);
    uint32_t view = entries_node(t, root);
    PyObject *top = PyDict_New();
    if (top == NULL) return NULL;
    for (uint32_t j = 0; j + 1 < nd->len; j += 2) {
        uint32_t key = t->kids[nd->v + j], value = t->kids[nd->v + j + 1];
        int entries = value == view;
        PyObject *k = made(t, key);
        PyObject *v = entries ? entries_view(t, value) : made_new(t, value);
        int failed = k == NULL || v == NULL || PyDict_SetItem(top, k, v) < 0;
        Py_XDECREF(v);
        if (failed) {
            Py_DECREF(top);
            return NULL;
        }
    }
    return top;
}

const char tree_read_doc[] =
"read(data) -> object or None\n\n"
"The pickle in data (bytes) as pickle decodes it, except that a list of entries (the\n"
"top-level list, or the top-level dict's 'entries') is an Entries view; None where the\n"
"stream is not one read here (the caller unpickles it).";

PyObject *tree_read(PyObject *self, PyObject *data) {
    if (!PyBytes_CheckExact(data)) {
        PyErr_SetString(PyExc_TypeError, "data is bytes");
        return NULL;
    }
    Tree *t = PyObject_New(Tree, &TreeType);
    if (t == NULL) return NULL;
    Py_INCREF(data);
    t->data = data;
    size_t bytes;
    t->nodes = spare_take(S_NODES, &bytes);
    t->cap_nodes = bytes / sizeof(Node);
    t->n_nodes = 0;
    t->kids = NULL;
    t->made = NULL;
    t->kids_bytes = t->made_bytes = 0;
    t->broken = 0;
    Reader r;
    memset(&r, 0, sizeof(r));
    u32_take(&r.stack, S_STACK);
    u32_take(&r.marks, S_MARKS);
    u32_take(&r.runs, S_RUNS);
    u32_take(&r.children, S_KIDS);  /* (the last tree's kids: they become this one's) */
    r.memo = spare_take(S_MEMO, &bytes);
    r.memo_cap = bytes / sizeof(uint32_t);
    if (r.memo != NULL) memset(r.memo, 0, bytes);
    r.s = (const unsigned char *)PyBytes_AS_STRING(data);
    r.n = (size_t)PyBytes_GET_SIZE(data);
    r.t = t;
    PyObject *result = NULL;
    int got = 1;
    if (r.n >= NO_NODE) got = NOT_HERE;
    while (got == 1) got = step(&r);
    if (got == 2) {
        uint32_t root = r.stack.at[r.stack.size - 1];
        if (finish(&r) == 0) result = shared_top(&r, root) ? Py_NewRef(Py_None) : payload(t, root);
    } else if (got == NOT_HERE) {
        result = Py_NewRef(Py_None);
    }
    spare_give(S_STACK, r.stack.at, r.stack.cap * sizeof(uint32_t));
    spare_give(S_MARKS, r.marks.at, r.marks.cap * sizeof(uint32_t));
    spare_give(S_RUNS, r.runs.at, r.runs.cap * sizeof(uint32_t));
    spare_give(S_KIDS, r.children.at, r.children.cap * sizeof(uint32_t));  /* (not taken over) */
    spare_give(S_MEMO, r.memo, r.memo_cap * sizeof(uint32_t));
    Py_DECREF(t);
    return result;
}
