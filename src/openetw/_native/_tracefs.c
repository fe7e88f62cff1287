/* openetw._native._tracefs: the compiled twin of the tracefs page decoder.
 *
 *   decode_batch(pages, cpu, params, plan, fixed, out)
 *       the pages of one CPU walked header by header and their events decoded, as
 *       kernel/ringbuffer_batch.py decode_batch: events of a fixed layout column-wise, the
 *       others appended to out as (timestamp, cpu, name, values), the same counts, the same
 *       last time per page. Returns (fixed columns or None, discarded, unknown,
 *       damaged, page_errors, last_timestamps).
 *
 * params: (data_start, timestamp_offset, commit_offset, commit_size, delta_bits, type_mask,
 * data_max_type_len, padding, time_extend, time_stamp, type_offset, type_size (0: no type)).
 * plan: a list indexed by event type: None, or (name, min_payload, ops, decode_at) where ops is
 * a tuple of (op, name, offset, size, flag, count) fields the C decodes (see gen_tracefs.py's
 * OPS; flag: signed for integers, text for dynamic fields) or None, and decode_at the pure
 * decoder's method, called with the page for an event the C does not decode itself
 * (TraceDataError: damaged). Each page is read in place (the pure code joins them: the same
 * values, as no event reaches past its page).
 * fixed: None or (table, min_payloads, kinds' fields, column count): table an int64 kind per
 * event type (-1: not fixed), fields per kind a tuple of (column, offset, size, signed).
 * The pure code (kernel/ringbuffer_batch.py, kernel/event_decoder.py) is the reference: tests
 * hold the two together on captured, damaged and live pages.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_tracefs_constants.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "openetw._native._tracefs reads little-endian data with native loads"
#endif

static PyObject *TraceDataError;

static inline uint32_t rd32(const uint8_t *p) { uint32_t v; memcpy(&v, p, 4); return v; }
static inline uint64_t rd64(const uint8_t *p) { uint64_t v; memcpy(&v, p, 8); return v; }

static inline uint64_t rd_int(const uint8_t *p, int size, int is_signed) {
    switch (size) {
    case 1: return is_signed ? (uint64_t)(int64_t)(int8_t)p[0] : p[0];
    case 2: { uint16_t v; memcpy(&v, p, 2); return is_signed ? (uint64_t)(int64_t)(int16_t)v : v; }
    case 4: { uint32_t v = rd32(p); return is_signed ? (uint64_t)(int64_t)(int32_t)v : v; }
    default: return rd64(p);
    }
}

/* ---- one event format as the C decodes it ------------------------------------------------ */
typedef struct {
    int op, size, flag, count;
    Py_ssize_t offset;
    PyObject *name; /* borrowed from the plan */
} field_op;

typedef struct {
    int state; /* 0: not looked at, 1: unknown type, 2: native ops, 3: pure decode_at */
    PyObject *name, *decode_at; /* borrowed */
    Py_ssize_t min_payload;
    int nops;
    field_op *ops;
} format_plan;

static int load_format(PyObject *entry, format_plan *f) {
    if (entry == Py_None) { f->state = 1; return 0; }
    if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 4) {
        PyErr_SetString(PyExc_TypeError, "a plan entry is (name, min_payload, ops, decode_at)");
        return -1;
    }
    f->name = PyTuple_GET_ITEM(entry, 0);
    f->min_payload = PyLong_AsSsize_t(PyTuple_GET_ITEM(entry, 1));
    if (f->min_payload == -1 && PyErr_Occurred()) return -1;
    f->decode_at = PyTuple_GET_ITEM(entry, 3);
    PyObject *ops = PyTuple_GET_ITEM(entry, 2);
    if (ops == Py_None) { f->state = 3; return 0; }
    if (!PyTuple_Check(ops)) { PyErr_SetString(PyExc_TypeError, "ops must be a tuple"); return -1; }
    f->nops = (int)PyTuple_GET_SIZE(ops);
    f->ops = PyMem_Calloc(f->nops ? f->nops : 1, sizeof(field_op));
    if (f->ops == NULL) { PyErr_NoMemory(); return -1; }
    for (int i = 0; i < f->nops; i++) {
        PyObject *t = PyTuple_GET_ITEM(ops, i);
        if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 6) { PyErr_SetString(PyExc_TypeError, "an op is a 6-tuple"); return -1; }
        field_op *o = &f->ops[i];
        o->op = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 0));
        o->name = PyTuple_GET_ITEM(t, 1);
        o->offset = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 2));
        o->size = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 3));
        o->flag = PyObject_IsTrue(PyTuple_GET_ITEM(t, 4));
        o->count = (int)PyLong_AsLong(PyTuple_GET_ITEM(t, 5));
        if (PyErr_Occurred()) return -1;
        if ((o->op == OE_OP_INTEGER || o->op == OE_OP_INT_ARRAY) && o->size != 1 && o->size != 2 && o->size != 4 && o->size != 8) {
            PyErr_SetString(PyExc_ValueError, "integer fields are 1, 2, 4 or 8 bytes");
            return -1;
        }
    }
    f->state = 2;
    return 0;
}

/* The text of a char area up to its first NUL, as bytes.decode("utf-8", "replace"). */
static PyObject *cstring(const uint8_t *p, Py_ssize_t n) {
    const uint8_t *nul = n > 0 ? memchr(p, 0, (size_t)n) : NULL;
    if (nul != NULL) n = nul - p;
    return PyUnicode_DecodeUTF8((const char *)p, n, "replace");
}

/* The values of one event (a new dict), NULL with no error set: damaged; NULL with an error: failure. */
static PyObject *decode_native(const format_plan *f, const uint8_t *page, Py_ssize_t length) {
    PyObject *values = PyDict_New();
    if (values == NULL) return NULL;
    for (int i = 0; i < f->nops; i++) {
        const field_op *o = &f->ops[i];
        const uint8_t *at = page + o->offset;
        PyObject *v = NULL;
        switch (o->op) {
        case OE_OP_INTEGER: {
            uint64_t bits = rd_int(at, o->size, o->flag);
            v = o->flag ? PyLong_FromLongLong((long long)bits) : PyLong_FromUnsignedLongLong(bits);
            break;
        }
        case OE_OP_BYTES: v = PyBytes_FromStringAndSize((const char *)at, o->size); break;
        case OE_OP_STRING: v = cstring(at, o->size); break;
        case OE_OP_INT_ARRAY: {
            v = PyTuple_New(o->count);
            if (v == NULL) break;
            for (int k = 0; k < o->count; k++) {
                uint64_t bits = rd_int(at + (Py_ssize_t)k * o->size, o->size, o->flag);
                PyObject *item = o->flag ? PyLong_FromLongLong((long long)bits) : PyLong_FromUnsignedLongLong(bits);
                if (item == NULL) { Py_CLEAR(v); break; }
                PyTuple_SET_ITEM(v, k, item);
            }
            break;
        }
        case OE_OP_DATA_LOC:
        case OE_OP_REL_LOC: {
            uint32_t word = rd32(at);
            Py_ssize_t size = word >> 16, start = word & 0xFFFF;
            if (o->op == OE_OP_REL_LOC) start += o->offset + o->size;
            if (start + size > length) { Py_DECREF(values); return NULL; } /* damaged */
            v = o->flag ? cstring(page + start, size) : PyBytes_FromStringAndSize((const char *)page + start, size);
            break;
        }
        case OE_OP_TAIL: {
            Py_ssize_t n = length - o->offset;
            if (n < 0) n = 0;
            v = o->flag ? cstring(at, n) : PyBytes_FromStringAndSize(n ? (const char *)at : "", n);
            break;
        }
        default:
            PyErr_SetString(PyExc_ValueError, "unknown field op");
        }
        if (v == NULL || PyDict_SetItem(values, o->name, v) < 0) {
            Py_XDECREF(v);
            Py_DECREF(values);
            if (!PyErr_Occurred()) PyErr_NoMemory();
            return NULL;
        }
        Py_DECREF(v);
    }
    return values;
}

/* ---- growable columns of the fixed events ------------------------------------------------ */
typedef struct {
    Py_ssize_t len, cap;
    int ncol;
    int64_t *kinds, *times;
    uint64_t *cols;
} fixed_out;

static int fixed_grow(fixed_out *o) {
    Py_ssize_t cap = o->cap ? o->cap * 2 : 1024;
    int64_t *k = PyMem_Realloc(o->kinds, cap * sizeof(int64_t));
    if (k == NULL) return -1;
    o->kinds = k;
    int64_t *t = PyMem_Realloc(o->times, cap * sizeof(int64_t));
    if (t == NULL) return -1;
    o->times = t;
    if (o->ncol) {
        uint64_t *c = PyMem_Malloc(cap * o->ncol * sizeof(uint64_t));
        if (c == NULL) return -1;
        for (int j = 0; j < o->ncol; j++)
            if (o->len) memcpy(c + j * cap, o->cols + j * o->cap, o->len * sizeof(uint64_t));
        PyMem_Free(o->cols);
        o->cols = c;
    }
    o->cap = cap;
    return 0;
}

typedef struct {
    int column, size, is_signed;
    Py_ssize_t offset;
} fixed_field;

typedef struct {
    Py_ssize_t min_payload;
    int nfields;
    fixed_field *fields;
} fixed_kind;

/* ---- the walk ---------------------------------------------------------------------------- */
typedef struct { int64_t ts; Py_ssize_t start, size; } data_event;

static PyObject *decode_batch(PyObject *self, PyObject *args) {
    PyObject *pages, *cpu_obj, *params, *plan, *fixed, *out;
    if (!PyArg_ParseTuple(args, "O!OO!O!OO!", &PyList_Type, &pages, &cpu_obj, &PyTuple_Type, &params, &PyList_Type, &plan, &fixed, &PyList_Type, &out))
        return NULL;
    long long p[12];
    if (PyTuple_GET_SIZE(params) != 12) { PyErr_SetString(PyExc_TypeError, "params is a 12-tuple"); return NULL; }
    for (int i = 0; i < 12; i++) {
        p[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(params, i));
        if (p[i] == -1 && PyErr_Occurred()) return NULL;
    }
    const Py_ssize_t data_start = (Py_ssize_t)p[0], ts_offset = (Py_ssize_t)p[1], commit_offset = (Py_ssize_t)p[2];
    const int commit_size = (int)p[3], delta_bits = (int)p[4];
    const uint32_t type_mask = (uint32_t)p[5], data_max = (uint32_t)p[6], padding = (uint32_t)p[7];
    const uint32_t extend = (uint32_t)p[8], stamp = (uint32_t)p[9];
    const Py_ssize_t type_offset = (Py_ssize_t)p[10];
    const int type_size = (int)p[11];
    const int shift = 32 - delta_bits;
    if (shift <= 0 || shift >= 32 || (type_size != 0 && type_size != 2 && type_size != 4)) {
        PyErr_SetString(PyExc_ValueError, "bad page parameters");
        return NULL;
    }

    Py_ssize_t npages = PyList_GET_SIZE(pages), total = 0;
    for (Py_ssize_t k = 0; k < npages; k++) {
        PyObject *page = PyList_GET_ITEM(pages, k);
        if (!PyBytes_Check(page)) { PyErr_SetString(PyExc_TypeError, "pages are bytes"); return NULL; }
        total += PyBytes_GET_SIZE(page);
    }
    if (ts_offset + 8 > data_start || commit_offset + commit_size > data_start || data_start % 4) {
        PyErr_SetString(PyExc_ValueError, "the page header must lie before the data, which starts 4-aligned");
        return NULL;
    }

    PyObject *result = NULL, *last_list = NULL;
    Py_ssize_t plan_len = PyList_GET_SIZE(plan);
    format_plan *formats = PyMem_Calloc(plan_len ? plan_len : 1, sizeof(format_plan));
    data_event *events = NULL;
    Py_ssize_t events_cap = 0;
    fixed_out fo = {0};
    fixed_kind *kinds = NULL;
    Py_ssize_t nkinds = 0, table_len = 0;
    const int64_t *table = NULL;
    Py_buffer table_view = {0}, min_view = {0};
    long long discarded = 0, unknown = 0, damaged = 0, page_errors = 0;
    if (formats == NULL) { PyErr_NoMemory(); goto done; }

    if (fixed != Py_None) {
        PyObject *fields;
        int ncol;
        if (!PyArg_ParseTuple(fixed, "y*y*O!i", &table_view, &min_view, &PyTuple_Type, &fields, &ncol)) goto done;
        table = table_view.buf;
        table_len = table_view.len / 8;
        nkinds = PyTuple_GET_SIZE(fields);
        if (min_view.len / 8 != nkinds || ncol < 0) { PyErr_SetString(PyExc_ValueError, "bad fixed layouts"); goto done; }
        kinds = PyMem_Calloc(nkinds ? nkinds : 1, sizeof(fixed_kind));
        if (kinds == NULL) { PyErr_NoMemory(); goto done; }
        fo.ncol = ncol;
        for (Py_ssize_t i = 0; i < nkinds; i++) {
            PyObject *kf = PyTuple_GET_ITEM(fields, i);
            if (!PyTuple_Check(kf)) { PyErr_SetString(PyExc_TypeError, "a kind's fields are a tuple"); goto done; }
            kinds[i].min_payload = (Py_ssize_t)((const int64_t *)min_view.buf)[i];
            kinds[i].nfields = (int)PyTuple_GET_SIZE(kf);
            kinds[i].fields = PyMem_Calloc(kinds[i].nfields ? kinds[i].nfields : 1, sizeof(fixed_field));
            if (kinds[i].fields == NULL) { PyErr_NoMemory(); goto done; }
            for (int j = 0; j < kinds[i].nfields; j++) {
                fixed_field *ff = &kinds[i].fields[j];
                long long column, offset;
                int size, is_signed;
                if (!PyArg_ParseTuple(PyTuple_GET_ITEM(kf, j), "LLii", &column, &offset, &size, &is_signed)) goto done;
                if (column < 0 || column >= ncol || (size != 1 && size != 2 && size != 4 && size != 8)) {
                    PyErr_SetString(PyExc_ValueError, "bad fixed field");
                    goto done;
                }
                ff->column = (int)column; ff->offset = (Py_ssize_t)offset; ff->size = size; ff->is_signed = is_signed;
            }
        }
    }

    last_list = PyList_New(npages);
    if (last_list == NULL) goto done;
    if (fo.ncol || table != NULL) {
        /* room for the events of the pages at a typical size (a system call's are 28 and 68 bytes) */
        fo.cap = total / 32 + 16;
        fo.kinds = PyMem_Malloc(fo.cap * sizeof(int64_t));
        fo.times = PyMem_Malloc(fo.cap * sizeof(int64_t));
        fo.cols = PyMem_Malloc(fo.cap * (fo.ncol ? fo.ncol : 1) * sizeof(uint64_t));
        if (fo.kinds == NULL || fo.times == NULL || fo.cols == NULL) { PyErr_NoMemory(); goto done; }
    }
    for (Py_ssize_t k = 0; k < npages; k++) {
        PyObject *page_obj = PyList_GET_ITEM(pages, k);
        const uint8_t *data = (const uint8_t *)PyBytes_AS_STRING(page_obj);
        Py_ssize_t length = PyBytes_GET_SIZE(page_obj);
        Py_INCREF(Py_None);
        PyList_SET_ITEM(last_list, k, Py_None);
        if (length < data_start) { page_errors++; continue; }
        uint64_t page_ts = rd64(data + ts_offset);
        uint64_t commit = commit_size == 8 ? rd64(data + commit_offset) : rd32(data + commit_offset);
        Py_ssize_t end = data_start + (Py_ssize_t)(commit & OE_COMMIT_LENGTH_MASK);
        if (end > length || page_ts >= (uint64_t)OE_TIME_LIMIT) { page_errors++; continue; }
        Py_ssize_t i = data_start >> 2, end_w = end >> 2, end_byte = end;
        __int128 ts = page_ts;
        Py_ssize_t count = 0;
        long long page_discarded = 0;
        int bad = 0;
        while (i < end_w) {
            uint32_t word = rd32(data + i * 4);
            uint32_t type_len = word & type_mask, delta = word >> shift;
            Py_ssize_t start, size;
            if (type_len > 0 && type_len <= data_max) {
                ts += delta;
                start = (i + 1) * 4;
                size = (Py_ssize_t)type_len * 4;
                i += type_len + 1;
            } else {
                if (i + 1 >= end_w) {
                    if (type_len == padding && delta == 0) break;
                    bad = 1; break;
                }
                uint32_t array0 = rd32(data + (i + 1) * 4);
                if (type_len == 0) {
                    if (array0 < 4 || array0 % 4 || i * 4 + 4 + (Py_ssize_t)array0 > end_byte) { bad = 1; break; }
                    ts += delta;
                    start = (i + 2) * 4;
                    size = (Py_ssize_t)array0 - 4;
                    i += 1 + (array0 >> 2);
                } else if (type_len == padding) {
                    if (delta == 0) break;
                    if (array0 % 4 || i * 4 + 4 + (Py_ssize_t)array0 > end_byte) { bad = 1; break; }
                    ts += delta;
                    page_discarded++;
                    i += 1 + (array0 >> 2);
                    continue;
                } else if (type_len == extend) {
                    ts += ((__int128)array0 << delta_bits) | delta;
                    i += 2;
                    continue;
                } else if (type_len == stamp) {
                    ts = (ts & (__int128)OE_ABS_TIME_TOP_BITS) | (((__int128)array0 << delta_bits) | delta);
                    i += 2;
                    continue;
                } else { bad = 1; break; }
            }
            if (ts > (__int128)INT64_MAX) { bad = 1; break; } /* the pure walk's int64 times overflow */
            if (count == events_cap) {
                Py_ssize_t cap = events_cap ? events_cap * 2 : 256;
                data_event *e = PyMem_Realloc(events, cap * sizeof(data_event));
                if (e == NULL) { PyErr_NoMemory(); goto done; }
                events = e;
                events_cap = cap;
            }
            events[count].ts = (int64_t)ts;
            events[count].start = start;
            events[count].size = size;
            count++;
        }
        if (bad || i > end_w) { page_errors++; continue; }
        discarded += page_discarded;
        if (count) {
            PyObject *last = PyLong_FromLongLong(events[count - 1].ts);
            if (last == NULL) goto done;
            PyList_SET_ITEM(last_list, k, last);
            Py_DECREF(Py_None);
        }
        /* the page's data events, in order */
        if (type_size == 0) { unknown += count; continue; }
        for (Py_ssize_t e = 0; e < count; e++) {
            Py_ssize_t start = events[e].start, size = events[e].size;
            if (size < type_offset + type_size) { damaged++; continue; }
            uint32_t type = type_size == 2 ? (uint32_t)rd_int(data + start + type_offset, 2, 0) : rd32(data + start + type_offset);
            if (table != NULL && (Py_ssize_t)type < table_len && table[type] >= 0 && table[type] < nkinds) {
                const fixed_kind *fk = &kinds[table[type]];
                if (size < fk->min_payload) { damaged++; continue; }
                if (fo.len == fo.cap && fixed_grow(&fo) < 0) { PyErr_NoMemory(); goto done; }
                Py_ssize_t row = fo.len++;
                fo.kinds[row] = table[type];
                fo.times[row] = events[e].ts;
                for (int j = 0; j < fo.ncol; j++) fo.cols[j * fo.cap + row] = 0;
                for (int j = 0; j < fk->nfields; j++) {
                    const fixed_field *ff = &fk->fields[j];
                    fo.cols[ff->column * fo.cap + row] = rd_int(data + start + ff->offset, ff->size, ff->is_signed);
                }
                continue;
            }
            if ((Py_ssize_t)type >= plan_len) { unknown++; continue; }
            format_plan *f = &formats[type];
            if (f->state == 0 && load_format(PyList_GET_ITEM(plan, type), f) < 0) goto done;
            if (f->state == 1) { unknown++; continue; }
            PyObject *values;
            if (f->state == 2) {
                if (size < f->min_payload) { damaged++; continue; }
                values = decode_native(f, data + start, size);
                if (values == NULL) {
                    if (PyErr_Occurred()) goto done;
                    damaged++;
                    continue;
                }
            } else {
                values = PyObject_CallFunction(f->decode_at, "Onn", page_obj, start, size);
                if (values == NULL) {
                    if (!PyErr_ExceptionMatches(TraceDataError)) goto done;
                    PyErr_Clear();
                    damaged++;
                    continue;
                }
            }
            PyObject *tuple = PyTuple_New(4), *when = PyLong_FromLongLong(events[e].ts);
            if (tuple == NULL || when == NULL) { Py_XDECREF(tuple); Py_XDECREF(when); Py_DECREF(values); goto done; }
            Py_INCREF(cpu_obj);
            Py_INCREF(f->name);
            PyTuple_SET_ITEM(tuple, 0, when);
            PyTuple_SET_ITEM(tuple, 1, cpu_obj);
            PyTuple_SET_ITEM(tuple, 2, f->name);
            PyTuple_SET_ITEM(tuple, 3, values);
            int failed = PyList_Append(out, tuple);
            Py_DECREF(tuple);
            if (failed) goto done;
        }
    }

    PyObject *fixed_result;
    if (fo.len == 0) {
        fixed_result = Py_None;
        Py_INCREF(fixed_result);
    } else {
        PyObject *cols = PyTuple_New(fo.ncol);
        if (cols == NULL) goto done;
        for (int j = 0; j < fo.ncol; j++) {
            PyObject *c = PyByteArray_FromStringAndSize((const char *)(fo.cols + j * fo.cap), fo.len * 8);
            if (c == NULL) { Py_DECREF(cols); goto done; }
            PyTuple_SET_ITEM(cols, j, c);
        }
        fixed_result = Py_BuildValue("(NNN)", PyByteArray_FromStringAndSize((const char *)fo.kinds, fo.len * 8),
                                     PyByteArray_FromStringAndSize((const char *)fo.times, fo.len * 8), cols);
        if (fixed_result == NULL) goto done;
    }
    result = Py_BuildValue("(NLLLLO)", fixed_result, discarded, unknown, damaged, page_errors, last_list);

done:
    Py_XDECREF(last_list);
    if (formats != NULL) {
        for (Py_ssize_t t = 0; t < plan_len; t++) PyMem_Free(formats[t].ops);
        PyMem_Free(formats);
    }
    if (kinds != NULL) {
        for (Py_ssize_t t = 0; t < nkinds; t++) PyMem_Free(kinds[t].fields);
        PyMem_Free(kinds);
    }
    if (table_view.obj != NULL) PyBuffer_Release(&table_view);
    if (min_view.obj != NULL) PyBuffer_Release(&min_view);
    PyMem_Free(events);
    PyMem_Free(fo.kinds);
    PyMem_Free(fo.times);
    PyMem_Free(fo.cols);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_batch", decode_batch, METH_VARARGS, "The pages of one CPU decoded, as kernel/ringbuffer_batch.py decode_batch."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {PyModuleDef_HEAD_INIT, "openetw._native._tracefs", NULL, -1, methods};

PyMODINIT_FUNC PyInit__tracefs(void) {
    PyObject *errors = PyImport_ImportModule("openetw.errors");
    if (errors == NULL) return NULL;
    TraceDataError = PyObject_GetAttrString(errors, "TraceDataError");
    Py_DECREF(errors);
    if (TraceDataError == NULL) return NULL;
    return PyModule_Create(&moduledef);
}
