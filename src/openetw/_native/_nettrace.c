/* openetw._native._nettrace: the compiled twin of the EventPipe row walk (nettrace/events.py).
 *
 *   walk(data, start, end, base, mode, limit, null) -> (columns, pos, failed)
 *       the rows of data[start:end] (a buffer: bytes, mmap), read as nettrace/events.py reads
 *       them: ``mode`` WALK_V3 (rows_v3: versions 1-3, stack inline), WALK_V4 (_v4_rows,
 *       uncompressed) or WALK_V4_COMPRESSED (_compressed_rows: the header state starts at its
 *       defaults, as at the start of a block). ``base`` is the file offset of data[0]. At most
 *       ``limit`` rows are read in WALK_V3 (0: no limit; the rows of that mode carry no state);
 *       the other modes read every row. ``null`` is the bytes object an activity id is until
 *       a row sets one.
 *       ``columns`` is a tuple of 14 lists, the positional fields of ``EventHeader`` in order
 *       (offset, metadata id, sequence, thread id, capture thread id, processor, stack id,
 *       timestamp, activity id, related activity id, sorted, payload start, payload size,
 *       inline stack). ``pos`` is where the walk stopped: ``end``, the row after the limit, or
 *       (``failed`` true) the start of the first row that does not parse, whose error the
 *       caller takes from the pure walk (the rows before it are in the columns).
 *
 *   constants() -> dict
 *       what this module was compiled with (a test compares it with the Python).
 *
 * Every read is checked against ``end`` (and ``end`` against the buffer). The flags and row
 * sizes come from _nettrace_constants.h, generated from nettrace/events.py.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_nettrace_constants.h"

#define NCOLUMNS 14

static int32_t rd_i32(const uint8_t *p) { int32_t v; memcpy(&v, p, 4); return v; }
static uint32_t rd_u32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static int64_t rd_i64(const uint8_t *p) { int64_t v; memcpy(&v, p, 8); return v; }

/* A variable-length integer of at most ``bits`` bits (Cursor.varuint): 0 when it runs past
 * ``end`` or is too long, else 1 with *out set and *pos moved past it. */
static int varuint(const uint8_t *d, Py_ssize_t *pos, Py_ssize_t end, int bits, uint64_t *out) {
    uint64_t result = 0;
    int shift = 0;
    Py_ssize_t p = *pos;
    for (;;) {
        if (p >= end) return 0;
        uint8_t byte = d[p++];
        if (shift < 64) result |= (uint64_t)(byte & 0x7F) << shift;
        if (!(byte & 0x80)) break;
        shift += 7;
        if (shift >= bits + 7) return 0;
    }
    *pos = p;
    *out = bits >= 64 ? result : (result & ((UINT64_C(1) << bits) - 1));
    return 1;
}

/* Appends a new reference (stolen) to column i; 0 on failure. */
static int put(PyObject **cols, int i, PyObject *value) {
    if (value == NULL) return 0;
    int rc = PyList_Append(cols[i], value);
    Py_DECREF(value);
    return rc == 0;
}

static int put_borrowed(PyObject **cols, int i, PyObject *value) {
    return PyList_Append(cols[i], value) == 0;
}

static PyObject *walk(PyObject *self, PyObject *args) {
    PyObject *source, *null;
    Py_ssize_t start, end, base, limit;
    int mode;
    if (!PyArg_ParseTuple(args, "OnnninO!", &source, &start, &end, &base, &mode, &limit, &PyBytes_Type, &null)) return NULL;
    if (PyBytes_GET_SIZE(null) != OE_NT_ACTIVITY) {
        PyErr_SetString(PyExc_ValueError, "null must be 16 bytes");
        return NULL;
    }
    if (mode != OE_NT_WALK_V3 && mode != OE_NT_WALK_V4 && mode != OE_NT_WALK_V4_COMPRESSED) {
        PyErr_SetString(PyExc_ValueError, "unknown walk mode");
        return NULL;
    }
    Py_buffer view;
    if (PyObject_GetBuffer(source, &view, PyBUF_SIMPLE) != 0) return NULL;
    if (end > view.len) end = view.len;
    if (start < 0) start = 0;
    if (end < start) end = start;
    const uint8_t *d = (const uint8_t *)view.buf;

    PyObject *cols[NCOLUMNS] = {0};
    PyObject *columns = NULL, *result = NULL;
    PyObject *activity = null, *related = null, *empty = NULL;
    Py_INCREF(activity);
    Py_INCREF(related);
    for (int i = 0; i < NCOLUMNS; i++) {
        if ((cols[i] = PyList_New(0)) == NULL) goto done;
    }
    if ((empty = PyBytes_FromStringAndSize(NULL, 0)) == NULL) goto done;

    Py_ssize_t pos = start, rows = 0;
    int failed = 0;
    if (mode == OE_NT_WALK_V3) {
        const Py_ssize_t fixed = OE_NT_V3_ROW;
        while (pos < end && (limit <= 0 || rows < limit)) {
            if (fixed > end - pos) { failed = 1; break; }
            const uint8_t *p = d + pos;
            int32_t size = rd_i32(p), metadata_id = rd_i32(p + 4), payload_size = rd_i32(p + 52);
            uint32_t thread_id = rd_u32(p + 8);
            int64_t timestamp = rd_i64(p + 12);
            if (!((Py_ssize_t)size >= fixed - 4 && (Py_ssize_t)size <= end - pos - 4)) { failed = 1; break; }
            if (!(payload_size >= 0 && (Py_ssize_t)payload_size <= (Py_ssize_t)size - (fixed - 4))) { failed = 1; break; }
            Py_ssize_t payload_start = pos + fixed;
            Py_ssize_t stack_at = payload_start + payload_size;
            Py_ssize_t next = pos + 4 + size;
            PyObject *stack = NULL;
            if (next - stack_at >= 4) {
                int32_t stack_size = rd_i32(d + stack_at);
                if (stack_size >= 0 && (Py_ssize_t)stack_size <= next - stack_at - 4)
                    stack = PyBytes_FromStringAndSize((const char *)d + stack_at + 4, stack_size);
                else { stack = empty; Py_INCREF(stack); }
            } else { stack = empty; Py_INCREF(stack); }
            if (!put(cols, 0, PyLong_FromSsize_t(base + pos)) || !put(cols, 1, PyLong_FromLong(metadata_id)) ||
                !put(cols, 2, PyLong_FromLong(0)) || !put(cols, 3, PyLong_FromUnsignedLong(thread_id)) ||
                !put(cols, 4, PyLong_FromLong(-1)) || !put(cols, 5, PyLong_FromLong(-1)) || !put(cols, 6, PyLong_FromLong(0)) ||
                !put(cols, 7, PyLong_FromLongLong(timestamp)) ||
                !put(cols, 8, PyBytes_FromStringAndSize((const char *)p + 20, OE_NT_ACTIVITY)) ||
                !put(cols, 9, PyBytes_FromStringAndSize((const char *)p + 36, OE_NT_ACTIVITY)) ||
                !put_borrowed(cols, 10, Py_False) || !put(cols, 11, PyLong_FromSsize_t(payload_start)) ||
                !put(cols, 12, PyLong_FromLong(payload_size)) || !put(cols, 13, stack))
                goto done;
            pos = next;
            rows++;
        }
    } else if (mode == OE_NT_WALK_V4) {
        const Py_ssize_t fixed = OE_NT_V4_ROW;
        while (pos < end) {
            if (fixed > end - pos) { failed = 1; break; }
            const uint8_t *p = d + pos;
            int32_t size = rd_i32(p), sequence = rd_i32(p + 8), processor = rd_i32(p + 28), stack_id = rd_i32(p + 32);
            int32_t payload_size = rd_i32(p + 76);
            uint32_t metadata_id = rd_u32(p + 4);
            int64_t thread_id = rd_i64(p + 12), capture = rd_i64(p + 20), timestamp = rd_i64(p + 36);
            if (!((Py_ssize_t)size >= fixed - 4 && (Py_ssize_t)size <= end - pos - 4) ||
                !(payload_size >= 0 && (Py_ssize_t)payload_size <= (Py_ssize_t)size - (fixed - 4))) { failed = 1; break; }
            if (!put(cols, 0, PyLong_FromSsize_t(base + pos)) || !put(cols, 1, PyLong_FromUnsignedLong(metadata_id & 0x7FFFFFFFu)) ||
                !put(cols, 2, PyLong_FromLong(sequence)) || !put(cols, 3, PyLong_FromLongLong(thread_id)) ||
                !put(cols, 4, PyLong_FromLongLong(capture)) || !put(cols, 5, PyLong_FromLong(processor)) ||
                !put(cols, 6, PyLong_FromLong(stack_id)) || !put(cols, 7, PyLong_FromLongLong(timestamp)) ||
                !put(cols, 8, PyBytes_FromStringAndSize((const char *)p + 44, OE_NT_ACTIVITY)) ||
                !put(cols, 9, PyBytes_FromStringAndSize((const char *)p + 60, OE_NT_ACTIVITY)) ||
                !put_borrowed(cols, 10, (metadata_id & 0x80000000u) ? Py_False : Py_True) ||
                !put(cols, 11, PyLong_FromSsize_t(pos + fixed)) || !put(cols, 12, PyLong_FromLong(payload_size)) ||
                !put_borrowed(cols, 13, empty))
                goto done;
            pos = pos + 4 + size;
            if (pos < end) {
                Py_ssize_t pad = (4 - ((base + pos) % 4)) % 4;
                pos = pos + pad < end ? pos + pad : end;
            }
            rows++;
        }
    } else {
        uint64_t metadata_id = 0, sequence = 0, thread_id = 0, stack_id = 0, timestamp = 0, payload_size = 0;
        uint64_t capture = 0, processor = 0, value;
        int capture_set = 0, processor_set = 0;
        PyObject *minus_one = PyLong_FromLong(-1);
        if (minus_one == NULL) goto done;
        while (pos < end) {
            Py_ssize_t at = pos, q = pos;
            uint8_t flags = d[q++];
            if (flags & OE_NT_FLAG_METADATA_ID) {
                if (!varuint(d, &q, end, 32, &metadata_id)) { failed = 1; break; }
            }
            if (flags & OE_NT_FLAG_CAPTURE_THREAD_AND_SEQUENCE) {
                if (!varuint(d, &q, end, 32, &value)) { failed = 1; break; }
                sequence = (sequence + value + 1) & 0xFFFFFFFFu;
                if (!varuint(d, &q, end, 64, &capture)) { failed = 1; break; }
                capture_set = 1;
                if (!varuint(d, &q, end, 32, &processor)) { failed = 1; break; }
                processor_set = 1;
            } else if (metadata_id != 0) {
                sequence = (sequence + 1) & 0xFFFFFFFFu;
            }
            if (flags & OE_NT_FLAG_THREAD_ID) {
                if (!varuint(d, &q, end, 64, &thread_id)) { failed = 1; break; }
            }
            if (flags & OE_NT_FLAG_STACK_ID) {
                if (!varuint(d, &q, end, 32, &stack_id)) { failed = 1; break; }
            }
            if (!varuint(d, &q, end, 64, &value)) { failed = 1; break; }
            timestamp += value;
            if (flags & OE_NT_FLAG_ACTIVITY_ID) {
                if (end - q < OE_NT_ACTIVITY) { failed = 1; break; }
                PyObject *fresh = PyBytes_FromStringAndSize((const char *)d + q, OE_NT_ACTIVITY);
                if (fresh == NULL) { Py_DECREF(minus_one); goto done; }
                Py_SETREF(activity, fresh);
                q += OE_NT_ACTIVITY;
            }
            if (flags & OE_NT_FLAG_RELATED_ACTIVITY_ID) {
                if (end - q < OE_NT_ACTIVITY) { failed = 1; break; }
                PyObject *fresh = PyBytes_FromStringAndSize((const char *)d + q, OE_NT_ACTIVITY);
                if (fresh == NULL) { Py_DECREF(minus_one); goto done; }
                Py_SETREF(related, fresh);
                q += OE_NT_ACTIVITY;
            }
            if (flags & OE_NT_FLAG_DATA_LENGTH) {
                if (!varuint(d, &q, end, 32, &payload_size)) { failed = 1; break; }
            }
            if (payload_size > (uint64_t)(end - q)) { failed = 1; break; }
            int ok = put(cols, 0, PyLong_FromSsize_t(base + at)) && put(cols, 1, PyLong_FromUnsignedLongLong(metadata_id)) &&
                     put(cols, 2, PyLong_FromUnsignedLongLong(sequence)) && put(cols, 3, PyLong_FromUnsignedLongLong(thread_id)) &&
                     (capture_set ? put(cols, 4, PyLong_FromUnsignedLongLong(capture)) : put_borrowed(cols, 4, minus_one)) &&
                     (processor_set ? put(cols, 5, PyLong_FromUnsignedLongLong(processor)) : put_borrowed(cols, 5, minus_one)) &&
                     put(cols, 6, PyLong_FromUnsignedLongLong(stack_id)) && put(cols, 7, PyLong_FromUnsignedLongLong(timestamp)) &&
                     put_borrowed(cols, 8, activity) && put_borrowed(cols, 9, related) &&
                     put_borrowed(cols, 10, (flags & OE_NT_FLAG_SORTED) ? Py_True : Py_False) &&
                     put(cols, 11, PyLong_FromSsize_t(q)) && put(cols, 12, PyLong_FromUnsignedLongLong(payload_size)) &&
                     put_borrowed(cols, 13, empty);
            if (!ok) { Py_DECREF(minus_one); goto done; }
            pos = q + (Py_ssize_t)payload_size;
            rows++;
        }
        Py_DECREF(minus_one);
    }
    if ((columns = PyTuple_New(NCOLUMNS)) == NULL) goto done;
    for (int i = 0; i < NCOLUMNS; i++) {
        PyTuple_SET_ITEM(columns, i, cols[i]);
        cols[i] = NULL;
    }
    result = Py_BuildValue("(NnO)", columns, pos, failed ? Py_True : Py_False);
    columns = NULL;
done:
    for (int i = 0; i < NCOLUMNS; i++) Py_XDECREF(cols[i]);
    Py_XDECREF(columns);
    Py_XDECREF(empty);
    Py_DECREF(activity);
    Py_DECREF(related);
    PyBuffer_Release(&view);
    return result;
}

static PyObject *constants(PyObject *self, PyObject *unused) {
    return Py_BuildValue(
        "{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i}",
        "FLAG_METADATA_ID", OE_NT_FLAG_METADATA_ID, "FLAG_CAPTURE_THREAD_AND_SEQUENCE", OE_NT_FLAG_CAPTURE_THREAD_AND_SEQUENCE,
        "FLAG_THREAD_ID", OE_NT_FLAG_THREAD_ID, "FLAG_STACK_ID", OE_NT_FLAG_STACK_ID, "FLAG_ACTIVITY_ID", OE_NT_FLAG_ACTIVITY_ID,
        "FLAG_RELATED_ACTIVITY_ID", OE_NT_FLAG_RELATED_ACTIVITY_ID, "FLAG_SORTED", OE_NT_FLAG_SORTED,
        "FLAG_DATA_LENGTH", OE_NT_FLAG_DATA_LENGTH, "V3_ROW", OE_NT_V3_ROW, "V4_ROW", OE_NT_V4_ROW, "ACTIVITY", OE_NT_ACTIVITY,
        "WALK_V3", OE_NT_WALK_V3, "WALK_V4", OE_NT_WALK_V4, "WALK_V4_COMPRESSED", OE_NT_WALK_V4_COMPRESSED);
}

static PyMethodDef methods[] = {
    {"walk", walk, METH_VARARGS, "The rows of an EventPipe block's content as 14 columns (see the module's comment)."},
    {"constants", constants, METH_NOARGS, "What this module was compiled with."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "openetw._native._nettrace",
    "The compiled twin of the EventPipe row walk (nettrace/events.py).", -1, methods,
};

PyMODINIT_FUNC PyInit__nettrace(void) { return PyModule_Create(&module); }
