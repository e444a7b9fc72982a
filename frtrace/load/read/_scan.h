/* frtrace.load.read._scan: what its two parts share (_scan.c: the pass over decoded entries;
 * _tree.c: the pickle read into nodes, and the same pass over them). */
#ifndef FRTRACE_SCAN_H
#define FRTRACE_SCAN_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

/* What a column holds (frtrace.load.read.native has the same numbers). K_NONE: nothing, a column
 * expected to be empty (every value None or absent). K_SHAPES: the values under several keys
 * (an op's sizes and dtypes) together, coded by content. */
enum {
    K_INT64 = 0, K_FLOAT64 = 1, K_BOOL = 2, K_TEXT = 3, K_PAIR = 4, K_FRAMES = 5, K_NONE = 6,
    K_SHAPES = 7,
};

/* Values looked up per entry at most (a column, or a K_SHAPES column's keys, takes one each);
 * entries ahead whose memory is asked for. */
#define MAX_SLOTS 64
#define PREFETCH_AHEAD 4

/* A growable key: what one entry's sizes and dtypes are. */
typedef struct {
    char *data;
    Py_ssize_t size, cap;
} Buffer;

/* The codes of values seen lately, by what stands for them (a node, or a key's bytes and
 * their hash): the pass over a pickle's nodes looks a value up here before the column's dict,
 * whose lookups (an object made, hashed and compared per entry) were a third of that pass.
 * A miss goes to the dict, which alone assigns codes: the codes are the same either way. */
#define CODE_CACHE 64
typedef struct {
    uint64_t hash;       /* 0: empty; else the node + 1, or the key's hash (never 0) */
    const char *at;      /* the key's bytes (K_FRAMES: the tree's; K_SHAPES: a copy) */
    Py_ssize_t size;
    int32_t code;
} Cached;

typedef struct {
    PyObject *key;      /* borrowed from the specs: a str (K_SHAPES: a tuple of str) */
    Py_ssize_t slot;    /* where its values are staged, and how many (K_SHAPES: its keys) */
    Py_ssize_t width;
    Buffer shape;       /* K_SHAPES: the entry's key being built */
    int kind;
    int required;       /* a missing key gives the column up (it may be under another name) */
    int ok;             /* still on the fast path */
    int any_null;
    PyObject *values;   /* bytes: n values (8 bytes, 1 for bool) or n int32 codes */
    PyObject *valid;    /* bytes: n flags (numbers only) */
    PyObject *index;    /* dict: value (K_FRAMES, K_SHAPES: bytes standing for it) -> code */
    PyObject *distinct; /* list: the distinct values, first seen first (K_SHAPES: the index of
                         * the first entry with each) */
    Py_ssize_t leaves;
    Cached cache[CODE_CACHE];  /* (the node pass only) */
} Column;

void column_clear(Column *c);
int32_t cached_code(Column *c, uint64_t hash, const char *at, Py_ssize_t size);
int cache_code(Column *c, uint64_t hash, const char *at, Py_ssize_t size, int copy, int32_t code);
uint64_t key_hash(const char *at, Py_ssize_t size);
int column_init(Column *c, PyObject *spec, Py_ssize_t n);
int32_t code_of(Column *c, PyObject *key, PyObject *value, Py_ssize_t i);
int put(Buffer *b, const void *bytes, Py_ssize_t count);
int put_tagged(Buffer *b, char tag, int64_t number);
void column_null(Column *c, Py_ssize_t i, int absent);
int shape_code(Column *c, Py_ssize_t i);
PyObject *column_result(Column *c);
int columns_begin(PyObject *specs, Py_ssize_t n, Column **cols, Py_ssize_t *made);
PyObject *columns_end(Column *cols, Py_ssize_t m);
void columns_free(Column *cols, Py_ssize_t made);

/* _tree.c */
PyObject *tree_read(PyObject *self, PyObject *data);
extern const char tree_read_doc[];
int tree_types_ready(PyObject *module);

#endif
