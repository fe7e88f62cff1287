/* openetw._native._dispatch: the consumer's usual delivery, compiled.
 *
 * The twin of the first branch of ``consumer/_engine/plan.py``'s delivery loop (the pure code
 * stays the reference): over rows in merged order (the buffers of every processor taking
 * turns), each row of a lane with a single direct callback and a schema entry already found
 * gets its lazy record (made, or the record before taken over when nothing else holds it), the
 * context primed with the entry, and the callback called. The loop hands back the first row it
 * does not handle itself (another lane, an entry to look up, the trace stopping), and the Python
 * loop goes on from there.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <structmember.h>

static PyObject *s_stopping, *s_generation, *s_primed_record, *s_primed, *s_pos, *s_size, *s_user_data_offset, *s_header;
static PyObject *s_raw, *s_cpu, *s_ctx, *s_buffer_index, *s_record, *s_parser;

typedef struct {
    const int64_t *p;
    Py_ssize_t n;
    Py_buffer view;
} Column;

static int column_of(PyObject *obj, Column *column, const char *name, int writable) {
    if (PyObject_GetBuffer(obj, &column->view, PyBUF_C_CONTIGUOUS | PyBUF_FORMAT | (writable ? PyBUF_WRITABLE : 0)) < 0)
        return -1;
    if (column->view.itemsize != 8 || (column->view.format && strcmp(column->view.format, "l") != 0 && strcmp(column->view.format, "q") != 0 &&
                                       strcmp(column->view.format, "<q") != 0 && strcmp(column->view.format, "<l") != 0)) {
        PyErr_Format(PyExc_TypeError, "%s: int64 array expected", name);
        PyBuffer_Release(&column->view);
        return -1;
    }
    column->p = (const int64_t *)column->view.buf;
    column->n = column->view.len / 8;
    return 0;
}

/* Whether the trace is stopping (``dispatcher.stopping``): 1, 0, or -1 with an error set. */
static int stopping(PyObject *dispatcher) {
    PyObject *value = PyObject_GetAttr(dispatcher, s_stopping);
    if (value == NULL)
        return -1;
    int truth = PyObject_IsTrue(value);
    Py_DECREF(value);
    return truth;
}

static int generation_is(PyObject *context, long long expected) {
    PyObject *value = PyObject_GetAttr(context, s_generation);
    if (value == NULL)
        return -1;
    long long now = PyLong_AsLongLong(value);
    Py_DECREF(value);
    if (now == -1 && PyErr_Occurred())
        return -1;
    return now == expected;
}

/* Where a lazy record class keeps its slots (offsets into the object), found once per class:
 * writing a slot is then a store, as ``PyMember_SetOne`` does it, without looking the name up. */
typedef struct {
    PyTypeObject *type;
    Py_ssize_t raw, pos, size, cpu, ctx, buffer_index, user_data_offset, header;
} Slots;

#define SLOT_CLASSES 32
static Slots slot_cache[SLOT_CLASSES];
static int slot_classes;

static Py_ssize_t slot_at(PyTypeObject *type, PyObject *name) {
    PyObject *descr = _PyType_Lookup(type, name);
    if (descr == NULL || Py_TYPE(descr) != &PyMemberDescr_Type)
        return -1;
    PyMemberDef *member = ((PyMemberDescrObject *)descr)->d_member;
    if (member->type != T_OBJECT_EX || (member->flags & READONLY))
        return -1;
    return member->offset;
}

/* The slots of ``type``, or NULL when it does not keep them all as plain slots (set by name then). */
static const Slots *slots_of(PyTypeObject *type) {
    for (int i = 0; i < slot_classes; i++)
        if (slot_cache[i].type == type)
            return &slot_cache[i];
    if (slot_classes == SLOT_CLASSES)
        return NULL;
    Slots found = {type, slot_at(type, s_raw), slot_at(type, s_pos), slot_at(type, s_size), slot_at(type, s_cpu), slot_at(type, s_ctx),
                   slot_at(type, s_buffer_index), slot_at(type, s_user_data_offset), slot_at(type, s_header)};
    if (found.raw < 0 || found.pos < 0 || found.size < 0 || found.cpu < 0 || found.ctx < 0 || found.buffer_index < 0 || found.user_data_offset < 0 ||
        found.header < 0)
        return NULL;
    Py_INCREF(type);  /* kept for good: the address stays that class's */
    slot_cache[slot_classes] = found;
    return &slot_cache[slot_classes++];
}

/* Store ``value`` (a new reference, taken over) in the slot at ``at``. */
static inline void put(PyObject *obj, Py_ssize_t at, PyObject *value) {
    PyObject **slot = (PyObject **)((char *)obj + at);
    PyObject *old = *slot;
    *slot = value;
    Py_XDECREF(old);
}

/* The buffers a delivery has met lately (rows of a file come in time order, so the buffers of
 * every processor take turns): each one's bytes, record context, processor and number, looked
 * up once through ``buffer_of(place)`` while it stays here. */
#define RECENT_BUFFERS 16
typedef struct {
    int64_t place;
    PyObject *data, *record_context, *cpu, *buffer;
} Recent;

/* Store ``value`` (a new reference, taken over; NULL: making it failed) in the field of
 * ``record`` at slot offset ``at``, or by ``name`` when the class keeps it otherwise (``at`` < 0). */
static int store(PyObject *record, Py_ssize_t at, PyObject *name, PyObject *value) {
    if (value == NULL)
        return -1;
    if (at >= 0) {
        put(record, at, value);
        return 0;
    }
    int failed = PyObject_SetAttr(record, name, value);
    Py_DECREF(value);
    return failed;
}

/* Point the lazy record ``record`` at the record ``pos`` bytes into ``buffer`` (``lazy.lazy_record``,
 * ``lazy.reuse_lazy_record``): where it is, its header to be unpacked again when read, and, when
 * ``moved`` (a new record, or one taken over from another buffer), the buffer's bytes, processor,
 * record context and number. The one place the delivery writes a record's fields. */
static int place_record(PyObject *record, const Recent *buffer, int64_t pos, int64_t size, int64_t user_data_offset, int moved) {
    static const Slots by_name = {NULL, -1, -1, -1, -1, -1, -1, -1, -1};
    const Slots *slots = slots_of(Py_TYPE(record));
    if (slots == NULL)
        slots = &by_name;
    if (store(record, slots->pos, s_pos, PyLong_FromLongLong(pos)) < 0 || store(record, slots->size, s_size, PyLong_FromLongLong(size)) < 0 ||
        store(record, slots->user_data_offset, s_user_data_offset, PyLong_FromLongLong(user_data_offset)) < 0 ||
        store(record, slots->header, s_header, Py_NewRef(Py_None)) < 0)
        return -1;
    if (!moved)
        return 0;
    if (store(record, slots->raw, s_raw, Py_NewRef(buffer->data)) < 0 || store(record, slots->cpu, s_cpu, Py_NewRef(buffer->cpu)) < 0 ||
        store(record, slots->ctx, s_ctx, Py_NewRef(buffer->record_context)) < 0 ||
        store(record, slots->buffer_index, s_buffer_index, Py_NewRef(buffer->buffer)) < 0)
        return -1;
    return 0;
}

/* A new lazy record of ``cls`` at ``pos`` in ``buffer``. */
static PyObject *make_record(PyObject *cls, const Recent *buffer, int64_t pos, int64_t size, int64_t user_data_offset) {
    PyTypeObject *type = (PyTypeObject *)cls;
    PyObject *record = type->tp_alloc(type, 0);
    if (record == NULL)
        return NULL;
    if (place_record(record, buffer, pos, size, user_data_offset, 1) < 0) {
        Py_DECREF(record);
        return NULL;
    }
    return record;
}

static void forget_recent(Recent *recent, int count) {
    for (int i = 0; i < count; i++) {
        Py_XDECREF(recent[i].data);
        Py_XDECREF(recent[i].record_context);
        Py_XDECREF(recent[i].cpu);
        Py_XDECREF(recent[i].buffer);
    }
}

/* The buffer at ``place`` (file << 32 | buffer), its processor ``cpu``; NULL with an error set. */
static Recent *recent_buffer(Recent *recent, int *count, int *next, int64_t place, int64_t cpu, PyObject *buffer_of) {
    for (int i = 0; i < *count; i++)
        if (recent[i].place == place)
            return &recent[i];
    PyObject *found = PyObject_CallFunction(buffer_of, "L", (long long)place);
    if (found == NULL)
        return NULL;
    if (!PyTuple_Check(found) || PyTuple_GET_SIZE(found) != 2) {
        Py_DECREF(found);
        PyErr_SetString(PyExc_TypeError, "buffer_of must return (data, record_context)");
        return NULL;
    }
    PyObject *cpu_number = PyLong_FromLongLong(cpu), *buffer_number = PyLong_FromLongLong(place & 0xFFFFFFFF);
    if (cpu_number == NULL || buffer_number == NULL) {
        Py_XDECREF(cpu_number);
        Py_XDECREF(buffer_number);
        Py_DECREF(found);
        return NULL;
    }
    Recent *slot;
    if (*count < RECENT_BUFFERS) {
        slot = &recent[(*count)++];
    } else {
        slot = &recent[*next];
        *next = (*next + 1) % RECENT_BUFFERS;
        forget_recent(slot, 1);
    }
    slot->place = place;
    slot->data = PyTuple_GET_ITEM(found, 0);
    slot->record_context = PyTuple_GET_ITEM(found, 1);
    Py_INCREF(slot->data);
    Py_INCREF(slot->record_context);
    slot->cpu = cpu_number;
    slot->buffer = buffer_number;
    Py_DECREF(found);
    return slot;
}

/* ``TraceContext.let_go``: forget ``record`` when the context alone holds it and the parser made
 * for it (that parser held by the context alone); 1 when it did, 0 when not, -1 on an error. */
static int let_go(PyObject *context, PyObject *record) {
    PyObject *held = PyObject_GetAttr(context, s_record);
    if (held == NULL)
        return -1;
    int same = held == record;
    Py_DECREF(held);
    if (!same)
        return 0;
    PyObject *parser = PyObject_GetAttr(context, s_parser);
    if (parser == NULL)
        return -1;
    int alone = Py_REFCNT(parser) == 2;  /* the context's and ours */
    Py_DECREF(parser);
    if (!alone)
        return 0;
    return PyObject_SetAttr(context, s_record, Py_None) < 0 ? -1 : 1;
}

/* deliver(lanes, entries, lane, offset, size, user_data_offset, place, cpu, start, stop, buffer_of, context, dispatcher,
 *         callback_failed, generation, reuse, spare, spare_place, progress) -> (row, spare, spare_place)
 *
 * ``lanes[k]`` is (callback or None, group, schema kind, record class) as the Python loop has them;
 * ``place`` is each row's file << 32 | buffer, ``cpu`` its processor; ``buffer_of(place)`` gives
 * (bytes, record context) of a buffer. ``spare`` is a record nothing else holds (of the buffer
 * at ``spare_place``) that the next row may take over. ``progress`` (an int64 array of one) is
 * kept at the row being delivered, for an exception that leaves. */
static PyObject *deliver(PyObject *self, PyObject *args) {
    PyObject *lanes, *entries, *lane_obj, *offset_obj, *size_obj, *udo_obj, *place_obj, *cpu_obj, *buffer_of, *context, *dispatcher;
    PyObject *callback_failed, *spare, *progress_obj;
    Py_ssize_t start, stop;
    long long generation, spare_place;
    int reuse;
    if (!PyArg_ParseTuple(args, "O!O!OOOOOOnnOOOOLpOLO", &PyList_Type, &lanes, &PyList_Type, &entries, &lane_obj, &offset_obj, &size_obj, &udo_obj,
                          &place_obj, &cpu_obj, &start, &stop, &buffer_of, &context, &dispatcher, &callback_failed, &generation, &reuse, &spare,
                          &spare_place, &progress_obj))
        return NULL;
    Column lane = {0}, offset = {0}, size = {0}, udo = {0}, place = {0}, cpu = {0}, progress = {0};
    Column *columns[] = {&lane, &offset, &size, &udo, &place, &cpu, &progress};
    PyObject *objects[] = {lane_obj, offset_obj, size_obj, udo_obj, place_obj, cpu_obj, progress_obj};
    const char *names[] = {"lane", "offset", "size", "user_data_offset", "place", "cpu", "progress"};
    int held = 0;
    PyObject *result = NULL;
    Recent recent[RECENT_BUFFERS];
    int recent_count = 0, recent_next = 0;
    for (; held < 7; held++)
        if (column_of(objects[held], columns[held], names[held], held == 6) < 0)
            goto release;
    if (start < 0 || stop > lane.n || stop > offset.n || stop > size.n || stop > udo.n || stop > place.n || stop > cpu.n || progress.n < 1) {
        PyErr_SetString(PyExc_IndexError, "deliver: rows out of range");
        goto release;
    }
    int64_t *at = (int64_t *)progress.p;
    Py_ssize_t lane_count = PyList_GET_SIZE(lanes);
    Py_INCREF(spare);
    Py_ssize_t row = start;
    for (; row < stop; row++) {
        *at = row;
        int64_t k = lane.p[row];
        if (k < 0 || k >= lane_count)
            break;
        PyObject *lane_tuple = PyList_GET_ITEM(lanes, k);
        if (!PyTuple_Check(lane_tuple) || PyTuple_GET_SIZE(lane_tuple) < 4)
            break;
        PyObject *callback = PyTuple_GET_ITEM(lane_tuple, 0);
        if (callback == Py_None)
            break;
        int is_stopping = stopping(dispatcher);
        if (is_stopping != 0) {
            if (is_stopping < 0)
                goto fail;
            break;
        }
        Py_ssize_t kind = PyLong_AsSsize_t(PyTuple_GET_ITEM(lane_tuple, 2));
        if (kind == -1 && PyErr_Occurred())
            goto fail;
        if (kind < 0 || kind >= PyList_GET_SIZE(entries))
            break;
        PyObject *entry = PyList_GET_ITEM(entries, kind);
        if (entry == Py_None)
            break;
        int same = generation_is(context, generation);
        if (same <= 0) {
            if (same < 0)
                goto fail;
            break;
        }
        PyObject *record_class = PyTuple_GET_ITEM(lane_tuple, 3);
        if (!PyType_Check(record_class))
            break;
        Recent *buffer = recent_buffer(recent, &recent_count, &recent_next, place.p[row], cpu.p[row], buffer_of);
        if (buffer == NULL)
            goto fail;
        PyObject *record;
        if (spare != Py_None && (PyObject *)Py_TYPE(spare) == record_class) {
            record = spare;  /* the reference the spare held */
            spare = Py_None;
            Py_INCREF(Py_None);
            if (place_record(record, buffer, offset.p[row], size.p[row], udo.p[row], spare_place != place.p[row]) < 0) {
                Py_DECREF(record);
                goto fail;
            }
        } else {
            record = make_record(record_class, buffer, offset.p[row], size.p[row], udo.p[row]);
            if (record == NULL)
                goto fail;
        }
        Py_INCREF(entry);  /* held across the priming, as the list may change under the callback */
        int primed = PyObject_SetAttr(context, s_primed_record, record) < 0 || PyObject_SetAttr(context, s_primed, entry) < 0;
        Py_DECREF(entry);
        if (primed) {
            Py_DECREF(record);
            goto fail;
        }
        PyObject *call_args[2] = {record, context};
        PyObject *returned = PyObject_Vectorcall(callback, call_args, 2, NULL);
        if (returned == NULL) {
            if (!PyErr_ExceptionMatches(PyExc_Exception)) {
                Py_DECREF(record);
                goto fail;
            }
            PyObject *error_type, *error, *traceback;
            PyErr_Fetch(&error_type, &error, &traceback);
            PyErr_NormalizeException(&error_type, &error, &traceback);
            if (traceback != NULL)
                PyException_SetTraceback(error, traceback);
            Py_XDECREF(error_type);
            Py_XDECREF(traceback);
            PyObject *reported = PyObject_CallFunctionObjArgs(callback_failed, error, record, NULL);
            Py_DECREF(error);
            Py_DECREF(record);
            if (reported == NULL)
                goto fail;
            Py_DECREF(reported);
            continue;
        }
        Py_DECREF(returned);
        /* Held by this loop and ``context._primed_record`` alone (the Python loop's 3, with
         * ``sys.getrefcount``'s own argument), or also by the context's parser (5): the next row
         * takes the record over. */
        if (reuse) {
            Py_ssize_t references = Py_REFCNT(record);
            int take = references == 2;
            if (references == 4) {
                take = let_go(context, record);
                if (take < 0) {
                    Py_DECREF(record);
                    goto fail;
                }
            }
            if (take) {
                Py_DECREF(spare);
                spare = record;
                spare_place = place.p[row];
                continue;
            }
        }
        Py_DECREF(record);
    }
    *at = row;
    result = Py_BuildValue("(nNL)", row, spare, spare_place);
    goto release;
fail:
    Py_DECREF(spare);
release:
    forget_recent(recent, recent_count);
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&columns[i]->view);
    return result;
}

static PyMethodDef methods[] = {
    {"deliver", deliver, METH_VARARGS, "Deliver the usual rows to their lanes' callbacks; returns (first row not handled, spare record, its place)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_dispatch", "The consumer's usual delivery, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__dispatch(void) {
    struct {
        PyObject **slot;
        const char *text;
    } names[] = {
        {&s_stopping, "stopping"}, {&s_generation, "generation"}, {&s_primed_record, "_primed_record"}, {&s_primed, "_primed"},
        {&s_pos, "_pos"}, {&s_size, "_size"}, {&s_user_data_offset, "user_data_offset"}, {&s_header, "_header"},
        {&s_raw, "_raw"}, {&s_cpu, "cpu"}, {&s_ctx, "_ctx"}, {&s_buffer_index, "buffer_index"}, {&s_record, "_record"}, {&s_parser, "_parser"},
    };
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        *names[i].slot = PyUnicode_InternFromString(names[i].text);
        if (*names[i].slot == NULL)
            return NULL;
    }
    return PyModule_Create(&module);
}
