/* frtrace.load._scan: one pass over a dump's decoded entries, in C.
 *
 * The columns of a file are read from its entry dicts (frtrace.load.columns). In Python each
 * value costs an object (a row tuple, an int for an id, a marshal key); here each is read once
 * and written where it belongs. This is only a fast path: wherever a value is not the plain
 * kind its column expects (a wrong type, a number past int64, a missing required key), that
 * column is given up (None) and Python's careful path reads it, with the same result. The
 * module reads Python objects through the C API only (no bytes of the file are parsed here),
 * and never calls Python code: every object it hashes or compares is a str, bytes or a
 * tuple of str.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>
#include <string.h>

/* What a column holds (frtrace.load.native has the same numbers). K_NONE: nothing, a column
 * expected to be empty (every value None or absent). */
enum { K_INT64 = 0, K_FLOAT64 = 1, K_BOOL = 2, K_TEXT = 3, K_PAIR = 4, K_FRAMES = 5, K_NONE = 6 };

typedef struct {
    PyObject *key;      /* borrowed from the specs */
    int kind;
    int required;       /* a missing key gives the column up (it may be under another name) */
    int ok;             /* still on the fast path */
    int any_null;
    PyObject *values;   /* bytes: n values (8 bytes, 1 for bool) or n int32 codes */
    PyObject *valid;    /* bytes: n flags (numbers only) */
    PyObject *index;    /* dict: value -> code (text, pairs, frames) */
    PyObject *distinct; /* list: the distinct values, first seen first */
    Py_ssize_t leaves;
} Column;

static void column_clear(Column *c) {
    Py_CLEAR(c->values);
    Py_CLEAR(c->valid);
    Py_CLEAR(c->index);
    Py_CLEAR(c->distinct);
}

static int column_init(Column *c, PyObject *spec, Py_ssize_t n) {
    memset(c, 0, sizeof(*c));
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) != 3) {
        PyErr_SetString(PyExc_TypeError, "a spec is (key, kind, required)");
        return -1;
    }
    c->key = PyTuple_GET_ITEM(spec, 0);
    c->kind = (int)PyLong_AsLong(PyTuple_GET_ITEM(spec, 1));
    c->required = PyObject_IsTrue(PyTuple_GET_ITEM(spec, 2));
    if (PyErr_Occurred() || c->required < 0) return -1;
    if (!PyUnicode_CheckExact(c->key) || c->kind < K_INT64 || c->kind > K_NONE) {
        PyErr_SetString(PyExc_ValueError, "a spec's key is a str and its kind one of _scan's");
        return -1;
    }
    c->ok = 1;
    if (c->kind == K_NONE) return 0;
    Py_ssize_t width = c->kind == K_BOOL ? 1 : (c->kind <= K_FLOAT64 ? 8 : 4);
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
 * exception set. `key` is what identifies it (the value itself, or bytes standing for it). */
static int32_t code_of(Column *c, PyObject *key, PyObject *value) {
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
    if (failed || PyList_Append(c->distinct, value) < 0) return -1;
    return (int32_t)code;
}

/* A (name, desc) pair of str: the only tuples hashed here (no nesting, no other types). */
static int plain_pair(PyObject *value) {
    if (!PyTuple_CheckExact(value)) return 0;
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(value); i++) {
        if (!PyUnicode_CheckExact(PyTuple_GET_ITEM(value, i))) return 0;
    }
    return 1;
}

/* Read entry i's value (borrowed; NULL when absent) into the column. 0: done, or the column
 * given up; -1: an exception (out of memory). */
static int column_take(Column *c, Py_ssize_t i, PyObject *value, Py_ssize_t max_leaves) {
    if (c->kind == K_NONE) {
        c->ok = value == NULL || value == Py_None;
        return 0;
    }
    char *out = PyBytes_AS_STRING(c->values);
    char *valid = c->valid == NULL ? NULL : PyBytes_AS_STRING(c->valid);
    if (value == NULL && c->required) {
        c->ok = 0;
        return 0;
    }
    if (value == NULL || value == Py_None) {
        switch (c->kind) {
        case K_INT64:
        case K_FLOAT64:
            memset(out + 8 * i, 0, 8);
            valid[i] = 0;
            c->any_null = 1;
            return 0;
        case K_BOOL:
            out[i] = 0;
            valid[i] = 0;
            c->any_null = 1;
            return 0;
        case K_PAIR:  /* no group: the careful path works out what to say */
            c->ok = 0;
            return 0;
        default:
            ((int32_t *)out)[i] = -1;
            return 0;
        }
    }
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
        int32_t code = code_of(c, value, value);
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
        int32_t code = code_of(c, key, value);
        Py_DECREF(key);
        if (code < 0) return -1;
        ((int32_t *)out)[i] = code;
        return 0;
    }
    }
}

static PyObject *column_result(Column *c) {
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
"One result per (key, kind, required) spec: for numbers (values, valid or None), for text,\n"
"pairs and frames (int32 codes, -1 for none, distinct values first seen first), True for\n"
"an empty column; None where a value is not the plain kind the column expects.");

static PyObject *columns(PyObject *self, PyObject *args) {
    PyObject *entries, *specs;
    Py_ssize_t max_leaves;
    if (!PyArg_ParseTuple(args, "OO!n", &entries, &PyTuple_Type, &specs, &max_leaves)) return NULL;
    if (check_entries(entries) < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(entries), m = PyTuple_GET_SIZE(specs);
    Column *cols = PyMem_Calloc(m ? m : 1, sizeof(Column));
    if (cols == NULL) return PyErr_NoMemory();
    PyObject *result = NULL;
    Py_ssize_t made = 0;
    for (; made < m; made++) {
        if (column_init(&cols[made], PyTuple_GET_ITEM(specs, made), n) < 0) {
            made++;
            goto done;
        }
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *entry = PyList_GET_ITEM(entries, i);
        for (Py_ssize_t k = 0; k < m; k++) {
            Column *c = &cols[k];
            if (!c->ok) continue;
            PyObject *value = PyDict_GetItemWithError(entry, c->key);
            if (value == NULL && PyErr_Occurred()) goto done;
            if (column_take(c, i, value, max_leaves) < 0) goto done;
        }
    }
    result = PyList_New(m);
    if (result == NULL) goto done;
    for (Py_ssize_t k = 0; k < m; k++) {
        PyObject *item = column_result(&cols[k]);
        if (item == NULL) {
            Py_CLEAR(result);
            goto done;
        }
        PyList_SET_ITEM(result, k, item);
    }
done:
    for (Py_ssize_t k = 0; k < made; k++) column_clear(&cols[k]);
    PyMem_Free(cols);
    return result;
}

/* Growable key buffer for `shapes`. */
typedef struct {
    char *data;
    Py_ssize_t size, cap;
} Buffer;

static int put(Buffer *b, const void *bytes, Py_ssize_t count) {
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

static int put_tagged(Buffer *b, char tag, int64_t number) {
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

PyDoc_STRVAR(shapes_doc,
"shapes(entries, keys, max_leaves) -> (codes, firsts) | None\n\n"
"Entries whose values under `keys` (sizes and dtypes) are equal get one int32 code;\n"
"firsts[code] is the first entry with it. Equal codes mean equal values; equal values may\n"
"get different codes (two str objects with one text). None where an entry lacks a key or a\n"
"value is not a list or tuple of str or of lists of int64.");

static PyObject *shapes(PyObject *self, PyObject *args) {
    PyObject *entries, *keys;
    Py_ssize_t max_leaves;
    if (!PyArg_ParseTuple(args, "OO!n", &entries, &PyTuple_Type, &keys, &max_leaves)) return NULL;
    if (check_entries(entries) < 0) return NULL;
    Py_ssize_t n = PyList_GET_SIZE(entries), leaves = 0;
    Buffer b = {NULL, 0, 0};
    PyObject *index = PyDict_New(), *firsts = PyList_New(0);
    PyObject *codes = PyBytes_FromStringAndSize(NULL, n * 4);
    PyObject *result = NULL;
    int plain = 1;
    if (index == NULL || firsts == NULL || codes == NULL) goto done;
    int32_t *out = (int32_t *)PyBytes_AS_STRING(codes);
    for (Py_ssize_t i = 0; i < n && plain; i++) {
        PyObject *entry = PyList_GET_ITEM(entries, i);
        b.size = 0;
        for (Py_ssize_t k = 0; k < PyTuple_GET_SIZE(keys) && plain; k++) {
            PyObject *value = PyDict_GetItemWithError(entry, PyTuple_GET_ITEM(keys, k));
            if (value == NULL) {
                if (PyErr_Occurred()) goto done;
                plain = 0;
                break;
            }
            int written = put_shape(&b, value, &leaves, max_leaves);
            if (written < 0) goto done;
            plain = written;
        }
        if (!plain) break;
        PyObject *key = PyBytes_FromStringAndSize(b.data ? b.data : "", b.size);
        if (key == NULL) goto done;
        PyObject *found = PyDict_GetItemWithError(index, key);
        if (found != NULL) {
            out[i] = (int32_t)PyLong_AsLong(found);
            Py_DECREF(key);
            continue;
        }
        if (PyErr_Occurred()) {
            Py_DECREF(key);
            goto done;
        }
        PyObject *code = PyLong_FromSsize_t(PyList_GET_SIZE(firsts));
        PyObject *first = PyLong_FromSsize_t(i);
        int failed = code == NULL || first == NULL || PyDict_SetItem(index, key, code) < 0 ||
                     PyList_Append(firsts, first) < 0;
        out[i] = (int32_t)(PyList_GET_SIZE(firsts) - 1);
        Py_XDECREF(code);
        Py_XDECREF(first);
        Py_DECREF(key);
        if (failed) goto done;
    }
    if (plain) {
        result = PyTuple_Pack(2, codes, firsts);
    } else {
        result = Py_None;
        Py_INCREF(result);
    }
done:
    PyMem_Free(b.data);
    Py_XDECREF(index);
    Py_XDECREF(firsts);
    Py_XDECREF(codes);
    return result;
}

static PyMethodDef methods[] = {
    {"columns", columns, METH_VARARGS, columns_doc},
    {"shapes", shapes, METH_VARARGS, shapes_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_scan", "One pass over a dump's decoded entries, in C.", -1, methods,
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
        PyModule_AddIntConstant(m, "NONE", K_NONE) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
