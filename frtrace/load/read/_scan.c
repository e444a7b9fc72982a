/* frtrace.load.read._scan: one pass over a dump's decoded entries, in C.
 *
 * The columns of a file are read from its entry dicts (frtrace.load.read.columns). In Python each
 * value costs an object (a row tuple, an int for an id, a marshal key); here each is read once
 * and written where it belongs. This is only a fast path: wherever a value is not the plain
 * kind its column expects (a wrong type, a number past int64, a missing required key), that
 * column is given up (None) and Python's careful path reads it, with the same result. This
 * file reads Python objects through the C API only, and never calls Python code: every object
 * it hashes or compares is a str, bytes or a tuple of str. The column helpers are shared
 * (_scan.h) with _tree.c, which reads a pickle into nodes and runs the same pass over them.
 */
#include "_scan.h"

#include <string.h>

void column_clear(Column *c) {
    Py_CLEAR(c->values);
    Py_CLEAR(c->valid);
    Py_CLEAR(c->index);
    Py_CLEAR(c->distinct);
    PyMem_Free(c->shape.data);
    c->shape.data = NULL;
    if (c->kind == K_SHAPES) {  /* (its cached keys are copies) */
        for (int k = 0; k < CODE_CACHE; k++) PyMem_Free((void *)c->cache[k].at);
    }
    memset(c->cache, 0, sizeof(c->cache));
}

/* A hash of a key's bytes, eight at a time, never 0 (0 marks an empty slot). */
uint64_t key_hash(const char *at, Py_ssize_t size) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ (uint64_t)size;
    Py_ssize_t k = 0;
    for (; k + 8 <= size; k += 8) {
        uint64_t word;
        memcpy(&word, at + k, 8);
        h = (h ^ word) * 0xBF58476D1CE4E5B9ULL;
        h ^= h >> 31;
    }
    uint64_t tail = 0;
    memcpy(&tail, at + k, (size_t)(size - k));
    h = (h ^ tail) * 0x94D049BB133111EBULL;
    h ^= h >> 29;
    return h ? h : 1;
}

/* The code cached for this key (`at` NULL: the key is the hash alone), or -1. */
int32_t cached_code(Column *c, uint64_t hash, const char *at, Py_ssize_t size) {
    Cached *slot = &c->cache[hash % CODE_CACHE];
    if (slot->hash != hash) return -1;
    if (at != NULL && (slot->size != size || memcmp(slot->at, at, (size_t)size) != 0)) return -1;
    return slot->code;
}

/* Keep the code of this key (a copy of its bytes where `copy`): 0, or -1 (out of memory). */
int cache_code(Column *c, uint64_t hash, const char *at, Py_ssize_t size, int copy, int32_t code) {
    Cached *slot = &c->cache[hash % CODE_CACHE];
    const char *kept = at;
    if (copy) {
        char *bytes = PyMem_Malloc(size ? (size_t)size : 1);
        if (bytes == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        memcpy(bytes, at, (size_t)size);
        PyMem_Free((void *)slot->at);
        kept = bytes;
    }
    slot->hash = hash;
    slot->at = kept;
    slot->size = size;
    slot->code = code;
    return 0;
}

int column_init(Column *c, PyObject *spec, Py_ssize_t n) {
    memset(c, 0, sizeof(*c));
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3) {
        PyErr_SetString(PyExc_TypeError, "a spec is (key, kind, required)");
        return -1;
    }
    c->key = PyTuple_GET_ITEM(spec, 0);
    c->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
    c->required = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 2));
    if (PyErr_Occurred() || c->required < 0) return -1;
    if (c->kind < K_INT64 || c->kind > K_SHAPES) {
        PyErr_SetString(PyExc_ValueError, "a spec's kind is one of _scan's");
        return -1;
    }
    c->width = 1;
    if (c->kind == K_SHAPES) {
        c->width = PyTuple_Check(c->key) ? PyTuple_GET_SIZE(c->key) : 0;
        for (Py_ssize_t j = 0; j < c->width; j++) {
            if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(c->key, j))) c->width = 0;
        }
        if (c->width == 0) {
            PyErr_SetString(PyExc_ValueError, "a K_SHAPES spec's key is a tuple of str");
            return -1;
        }
    } else if (!PyUnicode_CheckExact(c->key)) {
        PyErr_SetString(PyExc_ValueError, "a spec's key is a str");
        return -1;
    }
    c->ok = 1;
    if (c->kind == K_NONE) return 0;
    Py_ssize_t width = c->kind == K_BOOL ? 1 : (c->kind <= K_FLOAT64 ? 8 : 4);  /* (bytes) */
    if (n > PY_SSIZE_T_MAX / 8) {
        PyErr_NoMemory();
        return -1;
    }
    c->values = PyBytes_FromStringAndSize(NULL, n * width);
    if (c->values == NULL) return -1;
    if (c->kind <= K_BOOL) {
        c->valid = PyBytes_FromStringAndSize(NULL, n);
        if (c->valid == NULL) return -1;
    } else {
        c->index = PyDict_New();
        c->distinct = PyList_New(0);
        if (c->index == NULL || c->distinct == NULL) return -1;
    }
    return 0;
}

/* The code of `value` among the column's distinct values (added if new), or -1 with an
 * exception set. `key` is what identifies it (the value itself, or bytes standing for it);
 * a NULL `value` stands for entry `i` (K_SHAPES keeps the first entry with each). */
int32_t code_of(Column *c, PyObject *key, PyObject *value, Py_ssize_t i) {
    PyObject *found = PyDict_GetItemWithError(c->index, key);
    if (found != NULL) return (int32_t)PyLong_AsLong(found);
    if (PyErr_Occurred()) return -1;
    Py_ssize_t code = PyList_GET_SIZE(c->distinct);
    if (code >= INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "too many distinct values");
        return -1;
    }
    PyObject *number = PyLong_FromSsize_t(code);
    if (number == NULL) return -1;
    int failed = PyDict_SetItem(c->index, key, number) < 0;
    Py_DECREF(number);
    if (failed) return -1;
    if (value != NULL) return PyList_Append(c->distinct, value) < 0 ? -1 : (int32_t)code;
    PyObject *first = PyLong_FromSsize_t(i);
    failed = first == NULL || PyList_Append(c->distinct, first) < 0;
    Py_XDECREF(first);
    return failed ? -1 : (int32_t)code;
}

int put(Buffer *b, const void *bytes, Py_ssize_t count) {
    if (b->size + count > b->cap) {
        Py_ssize_t cap = b->cap ? b->cap : 256;
        while (cap < b->size + count) {
            if (cap > PY_SSIZE_T_MAX / 2) {
                PyErr_NoMemory();
                return -1;
            }
            cap *= 2;
        }
        char *data = PyMem_Realloc(b->data, cap);
        if (data == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->size, bytes, count);
    b->size += count;
    return 0;
}

int put_tagged(Buffer *b, char tag, int64_t number) {
    if (put(b, &tag, 1) < 0) return -1;
    return put(b, &number, 8);
}

/* Write one sizes or dtypes value into the key: 1 written, 0 not plain (a list or tuple of
 * str, or of lists or tuples of int64), -1 an exception. */
static int put_shape(Buffer *b, PyObject *value, Py_ssize_t *leaves, Py_ssize_t max_leaves) {
    if (!PyList_CheckExact(value) && !PyTuple_CheckExact(value)) return 0;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(value);
    PyObject **items = PySequence_Fast_ITEMS(value);
    *leaves += count;
    if (*leaves > max_leaves) return 0;
    if (put_tagged(b, 'V', count) < 0) return -1;
    for (Py_ssize_t j = 0; j < count && j < 16; j++) __builtin_prefetch(items[j]);
    for (Py_ssize_t j = 0; j < count; j++) {
        PyObject *item = items[j];
        if (PyUnicode_CheckExact(item)) { /* a dtype: the string object stands for its text */
            if (put_tagged(b, 'S', (int64_t)(intptr_t)item) < 0) return -1;
            continue;
        }
        if (!PyList_CheckExact(item) && !PyTuple_CheckExact(item)) return 0;
        Py_ssize_t dims = PySequence_Fast_GET_SIZE(item);
        PyObject **sizes = PySequence_Fast_ITEMS(item);
        *leaves += dims;
        if (*leaves > max_leaves) return 0;
        if (put_tagged(b, 'T', dims) < 0) return -1;
        for (Py_ssize_t d = 0; d < dims; d++) {
            int overflow = 0;
            if (!PyLong_CheckExact(sizes[d])) return 0;
            long long size = PyLong_AsLongLongAndOverflow(sizes[d], &overflow);
            if (overflow) return 0;
            int64_t v = (int64_t)size;
            if (put(b, &v, 8) < 0) return -1;
        }
    }
    return 1;
}

/* A (name, desc) pair of str: the only tuples hashed here (no nesting, no other types). */
static int plain_pair(PyObject *value) {
    if (!PyTuple_CheckExact(value)) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(value); i++) {
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(value, i))) return 0;
    }
    return 1;
}

/* Entry i's values under a K_SHAPES column's keys, coded by content. */
static int shapes_take(Column *c, Py_ssize_t i, PyObject **values, Py_ssize_t max_leaves) {
    c->shape.size = 0;
    for (Py_ssize_t j = 0; j < c->width; j++) {
        int written = values[j] == NULL ? 0 : put_shape(&c->shape, values[j], &c->leaves, max_leaves);
        if (written <= 0) {
            c->ok = 0;
            return written;
        }
    }
    return shape_code(c, i);
}

/* Entry i's code in a K_SHAPES column, from the key its values wrote (c->shape): 0, or -1
 * with an exception set. */
int shape_code(Column *c, Py_ssize_t i) {
    PyObject *key = PyBytes_FromStringAndSize(c->shape.data, c->shape.size);
    if (key == NULL) return -1;
    int32_t code = code_of(c, key, NULL, i);
    Py_DECREF(key);
    if (code < 0) return -1;
    ((int32_t *)PyBytes_AS_STRING(c->values))[i] = code;
    return 0;
}

/* Entry i has no value (absent) or None: a null, -1 code, or the column given up. */
void column_null(Column *c, Py_ssize_t i, int absent) {
    if (c->kind == K_NONE) return;
    if (absent && c->required) {
        c->ok = 0;
        return;
    }
    char *out = PyBytes_AS_STRING(c->values);
    switch (c->kind) {
    case K_INT64:
    case K_FLOAT64:
        memset(out + 8 * i, 0, 8);
        PyBytes_AS_STRING(c->valid)[i] = 0;
        c->any_null = 1;
        return;
    case K_BOOL:
        out[i] = 0;
        PyBytes_AS_STRING(c->valid)[i] = 0;
        c->any_null = 1;
        return;
    case K_PAIR:  /* no group: the careful path works out what to say */
    case K_SHAPES:
        c->ok = 0;
        return;
    default:
        ((int32_t *)out)[i] = -1;
        return;
    }
}

/* Read entry i's value (values[0], borrowed; NULL when absent) into the column. 0: done, or
 * the column given up; -1: an exception (out of memory). */
static int column_take(Column *c, Py_ssize_t i, PyObject **values, Py_ssize_t max_leaves) {
    if (c->kind == K_SHAPES) return shapes_take(c, i, values, max_leaves);
    PyObject *value = values[0];
    if (c->kind == K_NONE) {
        c->ok = value == NULL || value == Py_None;
        return 0;
    }
    if (value == NULL || value == Py_None) {
        column_null(c, i, value == NULL);
        return 0;
    }
    char *out = PyBytes_AS_STRING(c->values);
    char *valid = c->valid == NULL ? NULL : PyBytes_AS_STRING(c->valid);
    switch (c->kind) {
    case K_INT64: {
        int overflow = 0;
        long long number = PyLong_CheckExact(value) ? PyLong_AsLongLongAndOverflow(value, &overflow) : 0;
        if (!PyLong_CheckExact(value) || overflow) {
            c->ok = 0;
            return 0;
        }
        int64_t v = (int64_t)number;
        memcpy(out + 8 * i, &v, 8);
        valid[i] = 1;
        return 0;
    }
    case K_FLOAT64: {
        if (!PyFloat_CheckExact(value)) {
            c->ok = 0;
            return 0;
        }
        double v = PyFloat_AS_DOUBLE(value);
        memcpy(out + 8 * i, &v, 8);
        valid[i] = 1;
        return 0;
    }
    case K_BOOL:
        if (value != Py_True && value != Py_False) {
            c->ok = 0;
            return 0;
        }
        out[i] = value == Py_True;
        valid[i] = 1;
        return 0;
    case K_TEXT:
    case K_PAIR: {
        if (c->kind == K_TEXT ? !PyUnicode_CheckExact(value) : !plain_pair(value)) {
            c->ok = 0;
            return 0;
        }
        int32_t code = code_of(c, value, value, i);
        if (code < 0) return -1;
        ((int32_t *)out)[i] = code;
        return 0;
    }
    default: { /* K_FRAMES: a list of frames, known by the identity of the frames in it */
        if (!PyList_CheckExact(value)) {
            c->ok = 0;
            return 0;
        }
        Py_ssize_t count = PyList_GET_SIZE(value);
        c->leaves += count;
        if (c->leaves > max_leaves) {
            c->ok = 0;
            return 0;
        }
        if (count == 0) {
            ((int32_t *)out)[i] = -1;
            return 0;
        }
        /* (the frames stay alive with the entries, so their addresses cannot be reused) */
        PyObject *key = PyBytes_FromStringAndSize(NULL, count * (Py_ssize_t)sizeof(void *));
        if (key == NULL) return -1;
        char *at = PyBytes_AS_STRING(key);
        for (Py_ssize_t j = 0; j < count; j++) {
            void *frame = PyList_GET_ITEM(value, j);
            memcpy(at + j * sizeof(void *), &frame, sizeof(void *));
        }
        int32_t code = code_of(c, key, value, i);
        Py_DECREF(key);
        if (code < 0) return -1;
        ((int32_t *)out)[i] = code;
        return 0;
    }
    }
}

PyObject *column_result(Column *c) {
    if (!c->ok) Py_RETURN_NONE;
    if (c->kind == K_NONE) Py_RETURN_TRUE;
    if (c->kind <= K_BOOL) {
        PyObject *valid = c->any_null ? c->valid : Py_None;
        return PyTuple_Pack(2, c->values, valid);
    }
    return PyTuple_Pack(2, c->values, c->distinct);
}

static int check_entries(PyObject *entries) {
    if (!PyList_CheckExact(entries)) {
        PyErr_SetString(PyExc_TypeError, "entries is a list");
        return -1;
    }
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(entries); i++) {
        if (!PyDict_CheckExact(PyList_GET_ITEM(entries, i))) {
            PyErr_SetString(PyExc_TypeError, "every entry is a dict");
            return -1;
        }
    }
    return 0;
}

PyDoc_STRVAR(columns_doc,
"columns(entries, specs, max_leaves) -> list\n\n"
"One result per (key, kind, required) spec: for numbers (values, valid or None); for text,\n"
"pairs and frames (int32 codes, -1 for none, distinct values first seen first); for shapes\n"
"(a tuple of keys: int32 codes, equal codes for equal values, and the first entry with each\n"
"code); True for an empty column; None where a value is not the plain kind expected (or,\n"
"for frames and shapes, more than max_leaves frames or sizes in all).");

/* Columns for specs over n entries: *made of them set up (to free, even on failure). */
int columns_begin(PyObject *specs, Py_ssize_t n, Column **cols, Py_ssize_t *made) {
    Py_ssize_t m = PyTuple_GET_SIZE(specs), slots = 0;
    *made = 0;
    *cols = PyMem_Calloc(m ? m : 1, sizeof(Column));
    if (*cols == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    PyObject *keys[MAX_SLOTS];
    for (Py_ssize_t k = 0; k < m; k++) {
        Column *c = &(*cols)[k];
        *made = k + 1;
        if (column_init(c, PyTuple_GET_ITEM(specs, k), n) < 0) return -1;
        c->slot = slots;
        if (slots + c->width > MAX_SLOTS) {
            PyErr_SetString(PyExc_ValueError, "too many keys");
            return -1;
        }
        /* every key once, and UTF-8 (the pass over a pickle's nodes finds keys by their bytes) */
        for (Py_ssize_t j = 0; j < c->width; j++) {
            PyObject *key = c->kind == K_SHAPES ? PyTuple_GET_ITEM(c->key, j) : c->key;
            if (PyUnicode_AsUTF8AndSize(key, NULL) == NULL) {
                PyErr_Clear();
                PyErr_SetString(PyExc_ValueError, "a spec's key is not UTF-8 text");
                return -1;
            }
            for (Py_ssize_t before = 0; before < slots + j; before++) {
                if (PyUnicode_Compare(keys[before], key) == 0) {
                    PyErr_SetString(PyExc_ValueError, "a key is in two specs");
                    return -1;
                }
            }
            keys[slots + j] = key;
        }
        slots += c->width;
    }
    return 0;
}

/* The list of the m columns' results. */
PyObject *columns_end(Column *cols, Py_ssize_t m) {
    PyObject *result = PyList_New(m);
    if (result == NULL) return NULL;
    for (Py_ssize_t k = 0; k < m; k++) {
        PyObject *item = column_result(&cols[k]);
        if (item == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        PyList_SET_ITEM(result, k, item);
    }
    return result;
}

void columns_free(Column *cols, Py_ssize_t made) {
    for (Py_ssize_t k = 0; k < made; k++) column_clear(&cols[k]);
    PyMem_Free(cols);
}

static PyObject *columns(PyObject *self, PyObject *args) {
    PyObject *entries, *specs;
    Py_ssize_t max_leaves;
    if (!PyArg_ParseTuple(args, "OO!n", &entries, &PyTuple_Type, &specs, &max_leaves)) return NULL;
    if (check_entries(entries) < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(entries), m = PyTuple_GET_SIZE(specs), made = 0;
    Column *cols = NULL;
    PyObject *result = NULL;
    if (columns_begin(specs, n, &cols, &made) < 0) goto done;
    /* The entries were just decoded and are far larger than the CPU's caches: every value of
     * an entry is looked up first and the memory it lives in asked for, so that the reads
     * then wait for many values at once rather than for one after another. */
    PyObject *staged[MAX_SLOTS];
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyList_GET_ITEM(entries, i);
        if (i + PREFETCH_AHEAD < n) __builtin_prefetch(PyList_GET_ITEM(entries, i + PREFETCH_AHEAD));
        for (Py_ssize_t k = 0; k < m; k++) {
            Column *c = &cols[k];
            for (Py_ssize_t j = 0; j < c->width; j++) {
                PyObject *key = c->kind == K_SHAPES ? PyTuple_GET_ITEM(c->key, j) : c->key;
                PyObject *value = c->ok ? PyDict_GetItemWithError(entry, key) : NULL;
                if (value == NULL && PyErr_Occurred()) goto done;
                if (value != NULL) __builtin_prefetch(value);
                staged[c->slot + j] = value;
            }
        }
        for (Py_ssize_t k = 0; k < m; k++) {
            Column *c = &cols[k];
            if (c->ok && column_take(c, i, &staged[c->slot], max_leaves) < 0) goto done;
        }
    }
    result = columns_end(cols, m);
done:
    columns_free(cols, made);
    return result;
}

PyDoc_STRVAR(scatter_doc,
"scatter(part, rows, at, targets, widths, remaps, zeroed) -> None\n\n"
"One dump's part of a writer's file (its columns one after another, each padded to 8 bytes)\n"
"into the targets (writable buffers, one per column) from row `at`: each column's values\n"
"copied, or where its remap is not None (int32) each value replaced by remap[value] (a\n"
"negative value counts from the end, as numpy's take), then set to 0 where its zeroed flags\n"
"(one byte per row) are 0. What numpy does column by column (frtrace.load.handover.gather).");

/* Release the buffers taken (held[k] set), and forget them. */
static void release_all(Py_buffer *views, int *held) {
    for (int k = 0; k < 3; k++) {
        if (held[k]) PyBuffer_Release(&views[k]);
        held[k] = 0;
    }
}

static PyObject *scatter(PyObject *self, PyObject *args) {
    Py_buffer part;
    Py_ssize_t rows, at;
    PyObject *targets, *widths, *remaps, *zeroed;
    if (!PyArg_ParseTuple(args, "y*nnO!O!O!O!", &part, &rows, &at, &PyList_Type, &targets,
                          &PyTuple_Type, &widths, &PyList_Type, &remaps, &PyList_Type, &zeroed)) {
        return NULL;
    }
    Py_ssize_t m = PyList_GET_SIZE(targets);
    PyObject *result = NULL;
    Py_buffer views[3];
    int held[3] = {0, 0, 0};
    if (PyTuple_GET_SIZE(widths) != m || PyList_GET_SIZE(remaps) != m ||
        PyList_GET_SIZE(zeroed) != m || rows < 0 || at < 0) {
        PyErr_SetString(PyExc_ValueError, "a target, a width, a remap and flags per column");
        goto done;
    }
    /* (rows * 8 and at + rows below cannot overflow: neither is anywhere near this) */
    if (rows > PY_SSIZE_T_MAX / 16 || at > PY_SSIZE_T_MAX / 16) {
        PyErr_SetString(PyExc_ValueError, "more rows than a buffer can hold");
        goto done;
    }
    Py_ssize_t offset = 0;
    for (Py_ssize_t k = 0; k < m; k++) {
        Py_ssize_t width = PyLong_AsSsize_t(PyTuple_GET_ITEM(widths, k));
        if (width == -1 && PyErr_Occurred()) goto done;
        if (width != 1 && width != 4 && width != 8) {
            PyErr_SetString(PyExc_ValueError, "a column is 1, 4 or 8 bytes a value");
            goto done;
        }
        Py_ssize_t bytes = rows * width;
        if (offset > part.len - bytes) {
            PyErr_SetString(PyExc_ValueError, "the part ends before its columns");
            goto done;
        }
        const char *source = (const char *)part.buf + offset;
        offset += (bytes + 7) / 8 * 8;
        if (PyObject_GetBuffer(PyList_GET_ITEM(targets, k), &views[0], PyBUF_WRITABLE) < 0) goto done;
        held[0] = 1;
        if (views[0].len / width < at + rows) {
            PyErr_SetString(PyExc_ValueError, "a target is shorter than its rows");
            goto done;
        }
        char *target = (char *)views[0].buf + at * width;
        PyObject *remap = PyList_GET_ITEM(remaps, k), *flags = PyList_GET_ITEM(zeroed, k);
        if (remap == Py_None) {
            memcpy(target, source, (size_t)bytes);
        } else {
            if (width != 4) {
                PyErr_SetString(PyExc_ValueError, "a remapped column is int32");
                goto done;
            }
            if (PyObject_GetBuffer(remap, &views[1], PyBUF_FORMAT) < 0) goto done;
            held[1] = 1;
            const char *format = views[1].format;
            size_t chars = format == NULL ? 0 : strlen(format);
            if (views[1].itemsize != 4 || chars == 0 ||
                (format[chars - 1] != 'i' && format[chars - 1] != 'l')) {
                PyErr_SetString(PyExc_ValueError, "a remap is int32");
                goto done;
            }
            const char *table = (const char *)views[1].buf;
            Py_ssize_t size = views[1].len / 4;
            for (Py_ssize_t j = 0; j < rows; j++) {
                int32_t value;
                memcpy(&value, source + 4 * j, 4);
                Py_ssize_t index = value < 0 ? value + size : value;
                if (index < 0 || index >= size) {
                    PyErr_Format(PyExc_IndexError, "index %d is out of bounds for size %zd",
                                 (int)value, size);
                    goto done;
                }
                memcpy(target + 4 * j, table + 4 * index, 4);  /* (either may be unaligned) */
            }
        }
        if (flags != Py_None) {
            if (PyObject_GetBuffer(flags, &views[2], PyBUF_SIMPLE) < 0) goto done;
            held[2] = 1;
            if (views[2].len < rows) {
                PyErr_SetString(PyExc_ValueError, "fewer flags than rows");
                goto done;
            }
            const char *ok = (const char *)views[2].buf;
            for (Py_ssize_t j = 0; j < rows; j++) {
                if (!ok[j]) memset(target + width * j, 0, (size_t)width);
            }
        }
        release_all(views, held);
    }
    result = Py_NewRef(Py_None);
done:
    release_all(views, held);
    PyBuffer_Release(&part);
    return result;
}

PyDoc_STRVAR(runs_order_doc,
"runs_order(key, wide, rank, span, order, first) -> int | None\n\n"
"The stable order of n rows by key (n int64 values if wide, else int32, each in [0, span))\n"
"into order (room for n int64), and into first (room for n int64) the places in it where a\n"
"run of rows equal in key and in rank (n int32) starts; the number of runs. None (order and\n"
"first left half written) where a key is outside [0, span). A counting sort, without the\n"
"GIL: one pass to count each key, one to place each row, one to find the runs.");

static PyObject *runs_order(PyObject *self, PyObject *args) {
    Py_buffer key, rank, order, first;
    int wide;
    Py_ssize_t span;
    if (!PyArg_ParseTuple(args, "y*py*nw*w*", &key, &wide, &rank, &span, &order, &first)) {
        return NULL;
    }
    PyObject *result = NULL;
    int64_t *ends = NULL;
    Py_ssize_t n = rank.len / 4;
    if (rank.len % 4 || key.len != n * (wide ? 8 : 4) || order.len < n * 8 || first.len < n * 8 || span < 1 ||
        span > PY_SSIZE_T_MAX / 8) {
        PyErr_SetString(PyExc_ValueError, "a key and a rank per row; room for n rows; span >= 1");
        goto done;
    }
    ends = PyMem_Calloc((size_t)span, sizeof(int64_t));
    if (ends == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int32_t *keys32 = (const int32_t *)key.buf;
    const int64_t *keys64 = (const int64_t *)key.buf;
    const int32_t *ranks = (const int32_t *)rank.buf;
    int64_t *out = (int64_t *)order.buf, *starts = (int64_t *)first.buf;
    int outside = 0;
    Py_ssize_t runs = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) { /* each key's count */
        int64_t k = wide ? keys64[i] : keys32[i];
        if (k < 0 || k >= span) {
            outside = 1;
            break;
        }
        ends[k]++;
    }
    if (!outside) {
        int64_t at = 0; /* each key's first place, then (as rows are placed) its next */
        for (Py_ssize_t k = 0; k < span; k++) {
            int64_t count = ends[k];
            ends[k] = at;
            at += count;
        }
        for (Py_ssize_t i = 0; i < n; i++) out[ends[wide ? keys64[i] : keys32[i]]++] = i;
        /* ends[k] is now where key k's rows end: a run starts at each key's first row, and
         * where the rank changes among its rows */
        int64_t j = 0;
        for (Py_ssize_t k = 0; k < span; k++) {
            int64_t end = ends[k];
            if (j < end) {
                int32_t last = ranks[out[j]];
                starts[runs++] = j;
                for (j++; j < end; j++) {
                    int32_t r = ranks[out[j]];
                    if (r != last) starts[runs++] = j;
                    last = r;
                }
            }
        }
    }
    Py_END_ALLOW_THREADS
    result = outside ? Py_NewRef(Py_None) : PyLong_FromSsize_t(runs);
done:
    PyMem_Free(ends);
    PyBuffer_Release(&key);
    PyBuffer_Release(&rank);
    PyBuffer_Release(&order);
    PyBuffer_Release(&first);
    return result;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_VARARGS, columns_doc},
    {"scatter", scatter, METH_VARARGS, scatter_doc},
    {"runs_order", runs_order, METH_VARARGS, runs_order_doc},
    {"read", tree_read, METH_O, tree_read_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan",
    "One pass over a dump's entries, in C: decoded ones, or read from a pickle as nodes.", -1,
    methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scan(void) {
    PyObject *m = PyModule_Create(&module);
    if (m == NULL) return NULL;
    if (PyModule_AddIntConstant(m, "INT64", K_INT64) < 0 ||
        PyModule_AddIntConstant(m, "FLOAT64", K_FLOAT64) < 0 ||
        PyModule_AddIntConstant(m, "BOOL", K_BOOL) < 0 ||
        PyModule_AddIntConstant(m, "TEXT", K_TEXT) < 0 ||
        PyModule_AddIntConstant(m, "PAIR", K_PAIR) < 0 ||
        PyModule_AddIntConstant(m, "FRAMES", K_FRAMES) < 0 ||
        PyModule_AddIntConstant(m, "NONE", K_NONE) < 0 ||
        PyModule_AddIntConstant(m, "SHAPES", K_SHAPES) < 0 || tree_types_ready(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
