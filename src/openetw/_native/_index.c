/* openetw._native._index: the index file's byte planes, compiled.
 *
 * The twin of the plane split and join of ``consumer/_engine/blocks.py`` (the numpy code stays
 * the reference): a block's columns are stored as byte planes, all first bytes of a column, then
 * all second bytes, ...; here they go between the planes and the packed rows of RECORD_DTYPE in
 * one pass, the fields' places and widths given by the caller (from the dtype).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#define TILE_ROWS 256

typedef struct {
    Py_ssize_t at, width;
} Field;

/* The (offset, width) pairs of ``fields`` (an int64 array of 2k values), checked against ``itemsize``. */
static Field *fields_of(PyObject *obj, Py_ssize_t itemsize, Py_ssize_t *count, Py_ssize_t *row_bytes) {
    Py_buffer view;
    if (PyObject_GetBuffer(obj, &view, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    Field *fields = NULL;
    if (view.len % 16 != 0) {
        PyErr_SetString(PyExc_ValueError, "fields: (offset, width) int64 pairs expected");
        goto done;
    }
    *count = view.len / 16;
    fields = PyMem_Malloc(sizeof(Field) * (*count ? *count : 1));
    if (fields == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    const int64_t *pairs = (const int64_t *)view.buf;
    *row_bytes = 0;
    for (Py_ssize_t i = 0; i < *count; i++) {
        int64_t at = pairs[2 * i], width = pairs[2 * i + 1];
        if (at < 0 || width <= 0 || width > 8 || at + width > itemsize) {
            PyErr_SetString(PyExc_ValueError, "fields: a field outside the row");
            PyMem_Free(fields);
            fields = NULL;
            goto done;
        }
        fields[i].at = (Py_ssize_t)at;
        fields[i].width = (Py_ssize_t)width;
        *row_bytes += (Py_ssize_t)width;
    }
done:
    PyBuffer_Release(&view);
    return fields;
}

/* planes_to_rows(planes, rows, itemsize, fields): fill the fields of every row of ``rows`` (a
 * writable buffer of n rows of ``itemsize`` bytes) from ``planes``, which must hold exactly n
 * rows' worth of them (else ValueError). */
static PyObject *planes_to_rows(PyObject *self, PyObject *args) {
    Py_buffer planes, rows;
    Py_ssize_t itemsize;
    PyObject *fields_obj;
    if (!PyArg_ParseTuple(args, "y*w*nO", &planes, &rows, &itemsize, &fields_obj))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t count = 0, row_bytes = 0;
    Field *fields = NULL;
    if (itemsize <= 0 || rows.len % itemsize != 0) {
        PyErr_SetString(PyExc_ValueError, "rows: not a whole number of rows");
        goto done;
    }
    fields = fields_of(fields_obj, itemsize, &count, &row_bytes);
    if (fields == NULL)
        goto done;
    Py_ssize_t n = rows.len / itemsize;
    if (planes.len != n * row_bytes) {
        PyErr_SetString(PyExc_ValueError, "block size does not match its row count");
        goto done;
    }
    const uint8_t *src = (const uint8_t *)planes.buf;
    uint8_t *out = (uint8_t *)rows.buf;
    /* A tile of rows at a time, so that its rows stay in the cache while every plane is read. */
    for (Py_ssize_t first = 0; first < n; first += TILE_ROWS) {
        Py_ssize_t last = first + TILE_ROWS < n ? first + TILE_ROWS : n;
        const uint8_t *plane = src;
        for (Py_ssize_t f = 0; f < count; f++) {
            for (Py_ssize_t b = 0; b < fields[f].width; b++) {
                uint8_t *dst = out + fields[f].at + b;
                for (Py_ssize_t i = first; i < last; i++)
                    dst[i * itemsize] = plane[i];
                plane += n;
            }
        }
    }
    result = Py_None;
    Py_INCREF(result);
done:
    PyMem_Free(fields);
    PyBuffer_Release(&planes);
    PyBuffer_Release(&rows);
    return result;
}

/* rows_to_planes(rows, itemsize, fields) -> bytes: the byte planes of the fields of every row. */
static PyObject *rows_to_planes(PyObject *self, PyObject *args) {
    Py_buffer rows;
    Py_ssize_t itemsize;
    PyObject *fields_obj;
    if (!PyArg_ParseTuple(args, "y*nO", &rows, &itemsize, &fields_obj))
        return NULL;
    PyObject *result = NULL;
    Py_ssize_t count = 0, row_bytes = 0;
    Field *fields = NULL;
    if (itemsize <= 0 || rows.len % itemsize != 0) {
        PyErr_SetString(PyExc_ValueError, "rows: not a whole number of rows");
        goto done;
    }
    fields = fields_of(fields_obj, itemsize, &count, &row_bytes);
    if (fields == NULL)
        goto done;
    Py_ssize_t n = rows.len / itemsize;
    result = PyBytes_FromStringAndSize(NULL, n * row_bytes);
    if (result == NULL)
        goto done;
    uint8_t *dst = (uint8_t *)PyBytes_AS_STRING(result);
    const uint8_t *in = (const uint8_t *)rows.buf;
    for (Py_ssize_t first = 0; first < n; first += TILE_ROWS) {
        Py_ssize_t last = first + TILE_ROWS < n ? first + TILE_ROWS : n;
        uint8_t *plane = dst;
        for (Py_ssize_t f = 0; f < count; f++) {
            for (Py_ssize_t b = 0; b < fields[f].width; b++) {
                const uint8_t *src = in + fields[f].at + b;
                for (Py_ssize_t i = first; i < last; i++)
                    plane[i] = src[i * itemsize];
                plane += n;
            }
        }
    }
done:
    PyMem_Free(fields);
    PyBuffer_Release(&rows);
    return result;
}

static PyMethodDef methods[] = {
    {"planes_to_rows", planes_to_rows, METH_VARARGS, "Fill the fields of packed rows from a block's byte planes."},
    {"rows_to_planes", rows_to_planes, METH_VARARGS, "The byte planes of the fields of packed rows."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_index", "The index file's byte planes, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__index(void) { return PyModule_Create(&module); }
