/* openetw._native._write: the compiled twin of the producer's write path.
 *
 *   PoolWriter(mapping, buffer_size, buffer_count, logger_id, full)
 *       .write(record, timestamp, cpu=0) -> bool      as ipc/pool.py's write (and write_big)
 *       .flush() -> bool                              as its flush
 *       .orphan()                                     as its orphan (a forked child's)
 *       .release()                                    lets the mapping go (the pool closes)
 *
 * The pure closures in ipc/pool.py (_write_path) are the reference: the same stores, in the same
 * order, so a pool holds the same bytes whichever engine wrote it (tests hold the two together).
 * A write runs wholly under the GIL, so threads need no token here; ``full(index)`` is called
 * after a write that made a buffer FULL, as the pure path calls its ``on_full``. The stores that
 * publish (a buffer's Offset, a state word) are release stores, so the service, which reads the
 * state word and then the buffer, never sees a word before the bytes it vouches for.
 *
 * Every constant comes from _write_constants.h, generated from etl/layouts.py and ipc/pool.py
 * (python -m openetw._native.gen).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_write_constants.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "openetw._native._write writes little-endian data with native stores"
#endif

static inline void st16(uint8_t *p, uint16_t v) { memcpy(p, &v, 2); }
static inline void st32(uint8_t *p, uint32_t v) { memcpy(p, &v, 4); }
static inline void st64(uint8_t *p, uint64_t v) { memcpy(p, &v, 8); }
static inline int64_t ld64(const uint8_t *p) { int64_t v; memcpy(&v, p, 8); return v; }
static inline void publish32(uint8_t *p, uint32_t v) { __atomic_store_n((uint32_t *)p, v, __ATOMIC_RELEASE); }
static inline uint32_t acquire32(const uint8_t *p) { return __atomic_load_n((const uint32_t *)p, __ATOMIC_ACQUIRE); }

typedef struct {
    PyObject_HEAD
    Py_buffer view;
    int mapped;
    uint8_t *map;
    Py_ssize_t size;
    Py_ssize_t buffer_size, count, max_record;
    uint16_t logger_id;
    /* the FILLING buffer, as absolute positions in the mapping; none: index -1, limit -1 */
    Py_ssize_t index, base, cursor, limit;
    uint16_t buffer_cpu, buffer_flags, pending_flags;
    Py_ssize_t next_free;
    int orphaned;
    PyObject *full; /* called with the index of a buffer that became FULL, or None */
} Writer;

static PyObject *closed_error(void) {
    PyErr_SetString(PyExc_ValueError, "the buffer pool is closed");
    return NULL;
}

static void flag_loss(Writer *w) {
    if (w->index >= 0) {
        w->buffer_flags |= OE_BUFFER_FLAG_EVENTS_LOST;
        st16(w->map + w->base + OE_BH_BUFFERFLAG_AT, w->buffer_flags);
    } else {
        w->pending_flags |= OE_BUFFER_FLAG_EVENTS_LOST;
    }
}

static void add64(Writer *w, Py_ssize_t at) { st64(w->map + at, (uint64_t)ld64(w->map + at) + 1); }

static Py_ssize_t find_free(Writer *w) {
    const uint8_t *states = w->map + OE_POOL_STATE_OFFSET;
    for (Py_ssize_t step = 0; step < w->count; step++) {
        Py_ssize_t candidate = (w->next_free + step) % w->count;
        if (acquire32(states + 4 * candidate) == OE_STATE_FREE) {
            w->next_free = (candidate + 1) % w->count;
            return candidate;
        }
    }
    return -1;
}

static void open_buffer(Writer *w, Py_ssize_t index, long cpu) {
    uint8_t *map = w->map;
    publish32(map + OE_POOL_STATE_OFFSET + 4 * index, OE_STATE_FILLING);
    w->index = index;
    w->base = OE_POOL_HEADER_SIZE + index * w->buffer_size;
    w->cursor = w->base + OE_BUFFER_HEADER_SIZE;
    w->limit = w->base + w->buffer_size;
    w->buffer_cpu = (uint16_t)(cpu & 0xFFFF);
    w->buffer_flags = OE_BUFFER_FLAG_PROCESSOR_INDEX | w->pending_flags;
    w->pending_flags = 0;
    st64(map + w->base + OE_BH_TIMESTAMP_AT, 0);
    publish32(map + w->base + OE_BH_OFFSET_AT, OE_BUFFER_HEADER_SIZE);
    st16(map + w->base + OE_BH_PROCESSORINDEX_AT, w->buffer_cpu);
    st16(map + w->base + OE_BH_BUFFERFLAG_AT, w->buffer_flags);
}

/* FILLING -> FULL, the WMI_BUFFER_HEADER filled in first; returns the buffer's index. */
static Py_ssize_t complete(Writer *w) {
    uint8_t *map = w->map, *h = map + w->base;
    uint32_t used = (uint32_t)(w->cursor - w->base);
    int64_t sequence = ld64(map + OE_POOL_BUFFERSCOMPLETED_AT) + 1;
    st64(map + OE_POOL_BUFFERSCOMPLETED_AT, (uint64_t)sequence);
    int64_t timestamp = ld64(h + OE_BH_TIMESTAMP_AT);
    st32(h + OE_BH_BUFFERSIZE_AT, (uint32_t)w->buffer_size);
    st32(h + OE_BH_SAVEDOFFSET_AT, used);
    st32(h + OE_BH_CURRENTOFFSET_AT, used);
    st32(h + OE_BH_REFERENCECOUNT_AT, 0);
    st64(h + OE_BH_TIMESTAMP_AT, (uint64_t)timestamp);
    st64(h + OE_BH_SEQUENCENUMBER_AT, (uint64_t)sequence);
    st64(h + OE_BH_CLOCKTYPEFREQUENCY_AT, 0);
    st16(h + OE_BH_PROCESSORINDEX_AT, w->buffer_cpu);
    st16(h + OE_BH_LOGGERID_AT, w->logger_id);
    st32(h + OE_BH_STATE_AT, OE_BUFFER_STATE_WRITTEN);
    st32(h + OE_BH_OFFSET_AT, used);
    st16(h + OE_BH_BUFFERFLAG_AT, w->buffer_flags);
    st16(h + OE_BH_BUFFERTYPE_AT, OE_BUFFER_TYPE_GENERIC);
    memset(h + OE_BH_KERNELPOINTERS_AT, 0, OE_BH_KERNELPOINTERS_SIZE);
    publish32(map + OE_POOL_STATE_OFFSET + 4 * w->index, OE_STATE_FULL);
    Py_ssize_t full = w->index;
    w->index = -1;
    w->cursor = 0;
    w->limit = -1;
    return full;
}

static inline void copy_in(Writer *w, const void *record, Py_ssize_t size, int64_t timestamp) {
    uint8_t *map = w->map;
    Py_ssize_t end = w->cursor + size;
    memcpy(map + w->cursor, record, (size_t)size); /* the padding after it is zero already */
    Py_ssize_t aligned = (end + 7) & ~(Py_ssize_t)7;
    st64(map + w->base + OE_BH_TIMESTAMP_AT, (uint64_t)timestamp);
    publish32(map + w->base + OE_BH_OFFSET_AT, (uint32_t)(aligned - w->base)); /* last: now the record is in */
    w->cursor = aligned;
}

/* Refuse; or complete the FILLING buffer, open the next FREE one and write; or drop.
 * Returns 1 written / 0 not; *full the buffer that became FULL or -1. */
static int write_slow(Writer *w, const void *record, Py_ssize_t size, int64_t timestamp, long cpu, Py_ssize_t *full) {
    *full = -1;
    if (w->orphaned)
        return 0;
    if (size < OE_POOL_MIN_RECORD || size > w->max_record) {
        add64(w, OE_POOL_EVENTSREFUSED_AT);
        flag_loss(w);
        return 0;
    }
    if (w->index >= 0)
        *full = complete(w);
    Py_ssize_t free_index = find_free(w);
    if (free_index < 0) {
        add64(w, OE_POOL_EVENTSLOST_AT);
        flag_loss(w);
        return 0;
    }
    open_buffer(w, free_index, cpu);
    copy_in(w, record, size, timestamp);
    return 1;
}

static PyObject *became_full(Writer *w, Py_ssize_t full, PyObject *result) {
    if (full >= 0 && w->full != Py_None) {
        PyObject *index = PyLong_FromSsize_t(full);
        PyObject *r = index ? PyObject_CallOneArg(w->full, index) : NULL;
        Py_XDECREF(index);
        if (r == NULL) {
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(r);
    }
    return result;
}

static PyObject *Writer_write(Writer *w, PyObject *const *args, Py_ssize_t nargs, PyObject *kwnames) {
    /* write(record, timestamp, cpu=0): positional, or by these names, as the pure closure takes them */
    static const char *names[] = {"record", "timestamp", "cpu"};
    PyObject *given[3] = {NULL, NULL, NULL};
    if (nargs > 3) {
        PyErr_Format(PyExc_TypeError, "write() takes at most 3 arguments (%zd given)", nargs);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < nargs; i++)
        given[i] = args[i];
    Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
    for (Py_ssize_t k = 0; k < nkw; k++) {
        PyObject *key = PyTuple_GET_ITEM(kwnames, k);
        int slot = -1;
        for (int i = 0; i < 3; i++)
            if (PyUnicode_CompareWithASCIIString(key, names[i]) == 0)
                slot = i;
        if (slot < 0 || given[slot] != NULL) {
            PyErr_Format(PyExc_TypeError, slot < 0 ? "write() got an unexpected keyword argument '%U'" : "write() got multiple values for argument '%U'", key);
            return NULL;
        }
        given[slot] = args[nargs + k];
    }
    if (given[0] == NULL || given[1] == NULL) {
        PyErr_SetString(PyExc_TypeError, "write() needs record and timestamp");
        return NULL;
    }
    args = (PyObject *const *)given;
    nargs = given[2] != NULL ? 3 : 2;
    if (!w->mapped)
        return closed_error();
    int64_t timestamp = PyLong_AsLongLong(args[1]);
    if (timestamp == -1 && PyErr_Occurred())
        return NULL;
    long cpu = 0;
    if (nargs == 3) {
        cpu = PyLong_AsLong(args[2]);
        if (cpu == -1 && PyErr_Occurred())
            return NULL;
    }
    PyObject *record = args[0];
    const void *data;
    Py_ssize_t size;
    Py_buffer view;
    int have_view = 0;
    if (PyBytes_CheckExact(record)) {
        data = PyBytes_AS_STRING(record);
        size = PyBytes_GET_SIZE(record);
    } else {
        if (PyObject_GetBuffer(record, &view, PyBUF_SIMPLE) < 0)
            return NULL;
        have_view = 1;
        data = view.buf;
        size = view.len;
    }
    if (w->cursor + size <= w->limit && size >= OE_POOL_MIN_RECORD && size <= w->max_record) {
        copy_in(w, data, size, timestamp);
        if (have_view)
            PyBuffer_Release(&view);
        Py_RETURN_TRUE;
    }
    Py_ssize_t full;
    int written = write_slow(w, data, size, timestamp, cpu, &full);
    if (have_view)
        PyBuffer_Release(&view);
    return became_full(w, full, written ? Py_NewRef(Py_True) : Py_NewRef(Py_False));
}

static PyObject *Writer_flush(Writer *w, PyObject *Py_UNUSED(ignored)) {
    if (!w->mapped)
        return closed_error();
    Py_ssize_t full = (w->index >= 0 && w->cursor > w->base + OE_BUFFER_HEADER_SIZE) ? complete(w) : -1;
    return became_full(w, full, Py_NewRef(full >= 0 ? Py_True : Py_False));
}

static PyObject *Writer_orphan(Writer *w, PyObject *Py_UNUSED(ignored)) {
    w->orphaned = 1;
    w->index = -1;
    w->limit = -1;
    Py_RETURN_NONE;
}

static void unmap(Writer *w) {
    if (w->mapped) {
        w->mapped = 0;
        w->map = NULL;
        w->index = -1;
        w->limit = -1;
        PyBuffer_Release(&w->view);
    }
}

static PyObject *Writer_release(Writer *w, PyObject *Py_UNUSED(ignored)) {
    unmap(w);
    Py_RETURN_NONE;
}

static PyObject *Writer_new(PyTypeObject *type, PyObject *args, PyObject *kwds) {
    static char *names[] = {"mapping", "buffer_size", "buffer_count", "logger_id", "full", NULL};
    PyObject *mapping, *full;
    Py_ssize_t buffer_size, count;
    int logger_id;
    if (!PyArg_ParseTupleAndKeywords(args, kwds, "OnniO:PoolWriter", names, &mapping, &buffer_size, &count, &logger_id, &full))
        return NULL;
    if (full != Py_None && !PyCallable_Check(full)) {
        PyErr_SetString(PyExc_TypeError, "full must be callable or None");
        return NULL;
    }
    if (buffer_size < OE_BUFFER_HEADER_SIZE + OE_POOL_MIN_RECORD || buffer_size % 8 || count < 1 ||
        OE_POOL_STATE_OFFSET + 4 * count > OE_POOL_HEADER_SIZE || logger_id < 0 || logger_id > 0xFFFF) {
        PyErr_SetString(PyExc_ValueError, "not a buffer pool's shape");
        return NULL;
    }
    Writer *w = (Writer *)type->tp_alloc(type, 0);
    if (w == NULL)
        return NULL;
    if (PyObject_GetBuffer(mapping, &w->view, PyBUF_WRITABLE) < 0) {
        Py_DECREF(w);
        return NULL;
    }
    w->mapped = 1;
    if (w->view.len < OE_POOL_HEADER_SIZE + count * buffer_size) {
        unmap(w);
        Py_DECREF(w);
        PyErr_SetString(PyExc_ValueError, "the mapping is smaller than the pool it should hold");
        return NULL;
    }
    w->map = w->view.buf;
    w->size = w->view.len;
    w->buffer_size = buffer_size;
    w->count = count;
    w->max_record = buffer_size - OE_BUFFER_HEADER_SIZE < OE_POOL_MAX_RECORD_SIZE ? buffer_size - OE_BUFFER_HEADER_SIZE : OE_POOL_MAX_RECORD_SIZE;
    w->logger_id = (uint16_t)logger_id;
    w->index = -1;
    w->limit = -1;
    w->full = Py_NewRef(full);
    return (PyObject *)w;
}

static void Writer_dealloc(Writer *w) {
    unmap(w);
    Py_XDECREF(w->full);
    Py_TYPE(w)->tp_free((PyObject *)w);
}

static PyMethodDef Writer_methods[] = {
    {"write", (PyCFunction)(void (*)(void))Writer_write, METH_FASTCALL | METH_KEYWORDS, "write(record, timestamp, cpu=0) -> bool: copy one record into the pool"},
    {"flush", (PyCFunction)Writer_flush, METH_NOARGS, "flush() -> bool: mark a non-empty FILLING buffer FULL"},
    {"orphan", (PyCFunction)Writer_orphan, METH_NOARGS, "orphan(): in a forked child, never touch the pool again"},
    {"release", (PyCFunction)Writer_release, METH_NOARGS, "release(): let the mapping go; later writes raise ValueError"},
    {NULL},
};

static PyTypeObject WriterType = {
    PyVarObject_HEAD_INIT(NULL, 0)
    .tp_name = "openetw._native._write.PoolWriter",
    .tp_basicsize = sizeof(Writer),
    .tp_flags = Py_TPFLAGS_DEFAULT,
    .tp_doc = "The producer's write path over one pool mapping (see ipc/pool.py).",
    .tp_new = Writer_new,
    .tp_dealloc = (destructor)Writer_dealloc,
    .tp_methods = Writer_methods,
};

static PyObject *constants(PyObject *self, PyObject *Py_UNUSED(ignored)) {
    return Py_BuildValue(
        "{s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:i,s:(iiii)}",
        "buffer_header_size", OE_BUFFER_HEADER_SIZE, "timestamp_at", OE_BH_TIMESTAMP_AT, "offset_at", OE_BH_OFFSET_AT,
        "flags_at", OE_BH_BUFFERFLAG_AT, "pool_header_size", OE_POOL_HEADER_SIZE, "state_offset", OE_POOL_STATE_OFFSET,
        "events_lost_at", OE_POOL_EVENTSLOST_AT, "buffers_completed_at", OE_POOL_BUFFERSCOMPLETED_AT,
        "states", OE_STATE_FREE, OE_STATE_FILLING, OE_STATE_FULL, OE_STATE_TAKEN);
}

static PyMethodDef module_methods[] = {
    {"constants", constants, METH_NOARGS, "the constants this module was built with"},
    {NULL},
};

static struct PyModuleDef module_def = {
    PyModuleDef_HEAD_INIT, "openetw._native._write", "The compiled twin of the producer's write path.", -1, module_methods,
};

PyMODINIT_FUNC PyInit__write(void) {
    if (PyType_Ready(&WriterType) < 0)
        return NULL;
    PyObject *m = PyModule_Create(&module_def);
    if (m == NULL)
        return NULL;
    if (PyModule_AddObjectRef(m, "PoolWriter", (PyObject *)&WriterType) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
