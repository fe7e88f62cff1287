/* openetw._native._stacks: CPU samples joined to their stack records, compiled.
 *
 * The twin of the join of ``events/profile_columns.py`` (its numpy code stays the reference) for
 * stacks whose addresses are in the stack records themselves (no key references): each stack
 * part goes to the first free sample of the same timestamp and thread; a sample's parts are
 * taken kernel rank first, each rank in file order; the samples with frames are ordered by when
 * their first part met them (the later of the sample's row and that part's row); their addresses
 * are gathered from the file's bytes in that order, in one pass. Where a part's addresses start
 * in the bytes is the caller's (no record layout is known here); every read is bounds-checked.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    Py_buffer view;
    Py_ssize_t count;
} Array;

static int array_of(PyObject *obj, Array *out, Py_ssize_t item, const char *name) {
    if (PyObject_GetBuffer(obj, &out->view, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (out->view.len % item != 0) {
        PyErr_Format(PyExc_ValueError, "%s: whole items expected", name);
        PyBuffer_Release(&out->view);
        return -1;
    }
    out->count = out->view.len / item;
    return 0;
}

static uint64_t mix(int64_t when, int64_t tid) {
    uint64_t h = (uint64_t)when * 0x9E3779B97F4A7C15ULL ^ ((uint64_t)tid + 0x632BE59BD9B4E019ULL) * 0xBF58476D1CE4E5B9ULL;
    return h ^ (h >> 31);
}

/* join_gather(data, s_row, s_time, s_tid, s_free, p_row, p_when, p_tid, p_rank, p_at, p_count, p_width, rows)
 *   -> (target, with_frames, order_key, first_part, offsets, addresses), each as bytes (int64; addresses uint64) */
static PyObject *join_gather(PyObject *self, PyObject *args) {
    PyObject *objects[12];
    Py_ssize_t rows;
    if (!PyArg_ParseTuple(args, "OOOOOOOOOOOOn", &objects[0], &objects[1], &objects[2], &objects[3], &objects[4], &objects[5],
                          &objects[6], &objects[7], &objects[8], &objects[9], &objects[10], &objects[11], &rows))
        return NULL;
    static const char *names[12] = {"data", "s_row", "s_time", "s_tid", "s_free", "p_row", "p_when", "p_tid", "p_rank", "p_at", "p_count", "p_width"};
    Array a[12];
    int held = 0;
    PyObject *result = NULL;
    int64_t *slots = NULL, *target = NULL, *first = NULL, *total = NULL, *start = NULL, *list = NULL, *sample_at = NULL;
    PyObject *target_b = NULL, *with_b = NULL, *key_b = NULL, *first_b = NULL, *offsets_b = NULL, *addresses_b = NULL;
    for (; held < 12; held++) {
        Py_ssize_t item = held == 0 || held == 4 ? (Py_ssize_t)sizeof(uint8_t) : (Py_ssize_t)sizeof(int64_t);
        if (array_of(objects[held], &a[held], item, names[held]) < 0)
            goto done;
    }
    const uint8_t *data = (const uint8_t *)a[0].view.buf;
    Py_ssize_t data_len = a[0].count, samples = a[1].count, parts = a[5].count;
    for (int i = 2; i < 5; i++)
        if (a[i].count != samples) {
            PyErr_SetString(PyExc_ValueError, "the sample columns differ in length");
            goto done;
        }
    for (int i = 6; i < 12; i++)
        if (a[i].count != parts) {
            PyErr_SetString(PyExc_ValueError, "the stack part columns differ in length");
            goto done;
        }
    if (rows < 0) {
        PyErr_SetString(PyExc_ValueError, "a negative row count");
        goto done;
    }
    const int64_t *s_row = a[1].view.buf, *s_time = a[2].view.buf, *s_tid = a[3].view.buf;
    const uint8_t *s_free = a[4].view.buf;
    const int64_t *p_row = a[5].view.buf, *p_when = a[6].view.buf, *p_tid = a[7].view.buf, *p_rank = a[8].view.buf;
    const int64_t *p_at = a[9].view.buf, *p_count = a[10].view.buf, *p_width = a[11].view.buf;

    /* the first free sample of each (timestamp, thread): open addressing, a power of two twice the samples */
    Py_ssize_t capacity = 1;
    while (capacity < 2 * samples + 2)
        capacity <<= 1;
    slots = PyMem_Malloc(sizeof(int64_t) * capacity);
    target_b = PyBytes_FromStringAndSize(NULL, sizeof(int64_t) * parts);
    first = PyMem_Malloc(sizeof(int64_t) * (samples + 1));
    total = PyMem_Malloc(sizeof(int64_t) * (samples + 1));
    start = PyMem_Malloc(sizeof(int64_t) * (samples + 2));
    list = PyMem_Malloc(sizeof(int64_t) * (parts + 1));
    sample_at = PyMem_Malloc(sizeof(int64_t) * (rows + 1));
    if (slots == NULL || target_b == NULL || first == NULL || total == NULL || start == NULL || list == NULL || sample_at == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    target = (int64_t *)PyBytes_AS_STRING(target_b);
    for (Py_ssize_t i = 0; i < capacity; i++)
        slots[i] = -1;
    uint64_t mask = (uint64_t)capacity - 1;
    for (Py_ssize_t s = 0; s < samples; s++) {
        if (!s_free[s])
            continue;
        for (uint64_t h = mix(s_time[s], s_tid[s]) & mask;; h = (h + 1) & mask) {
            int64_t there = slots[h];
            if (there < 0) {
                slots[h] = s;
                break;
            }
            if (s_time[there] == s_time[s] && s_tid[there] == s_tid[s])
                break; /* an earlier sample holds the key */
        }
    }
    for (Py_ssize_t s = 0; s < samples; s++) {
        first[s] = INT64_MAX;
        total[s] = 0;
    }
    for (Py_ssize_t s = 0; s <= samples; s++)
        start[s] = 0;
    for (Py_ssize_t p = 0; p < parts; p++) {
        target[p] = -1;
        for (uint64_t h = mix(p_when[p], p_tid[p]) & mask;; h = (h + 1) & mask) {
            int64_t there = slots[h];
            if (there < 0)
                break;
            if (s_time[there] == p_when[p] && s_tid[there] == p_tid[p]) {
                target[p] = there;
                break;
            }
        }
        int64_t s = target[p];
        if (s < 0)
            continue;
        if (p_count[p] < 0 || (p_width[p] != 4 && p_width[p] != 8)) {
            PyErr_SetString(PyExc_ValueError, "a stack part's count or pointer size is out of range");
            goto done;
        }
        if (p_row[p] < first[s])
            first[s] = p_row[p];
        total[s] += p_count[p];
        start[s + 1] += 1;
    }
    /* each sample's parts: kernel rank first, each rank in file order (the parts come in file order) */
    start[0] = 0;
    for (Py_ssize_t s = 0; s < samples; s++)
        start[s + 1] += start[s];
    {
        int64_t *fill = PyMem_Malloc(sizeof(int64_t) * (samples + 1));
        if (fill == NULL) {
            PyErr_NoMemory();
            goto done;
        }
        memcpy(fill, start, sizeof(int64_t) * (samples + 1));
        for (int rank = 0; rank < 2; rank++)
            for (Py_ssize_t p = 0; p < parts; p++)
                if (target[p] >= 0 && (p_rank[p] != 0) == (rank != 0))
                    list[fill[target[p]]++] = p;
        PyMem_Free(fill);
    }
    /* the samples with frames, by the later of their row and their first part's (distinct rows) */
    for (Py_ssize_t r = 0; r <= rows; r++)
        sample_at[r] = -1;
    Py_ssize_t with = 0, frames = 0;
    for (Py_ssize_t s = 0; s < samples; s++) {
        if (total[s] <= 0)
            continue;
        int64_t key = s_row[s] > first[s] ? s_row[s] : first[s];
        if (key < 0 || key >= rows || sample_at[key] >= 0) {
            PyErr_SetString(PyExc_ValueError, "a sample's order key is outside the rows or shared");
            goto done;
        }
        sample_at[key] = s;
        with++;
        frames += total[s];
    }
    with_b = PyBytes_FromStringAndSize(NULL, sizeof(int64_t) * with);
    key_b = PyBytes_FromStringAndSize(NULL, sizeof(int64_t) * with);
    first_b = PyBytes_FromStringAndSize(NULL, sizeof(int64_t) * with);
    offsets_b = PyBytes_FromStringAndSize(NULL, sizeof(int64_t) * (with + 1));
    addresses_b = PyBytes_FromStringAndSize(NULL, sizeof(uint64_t) * frames);
    if (with_b == NULL || key_b == NULL || first_b == NULL || offsets_b == NULL || addresses_b == NULL)
        goto done;
    int64_t *with_frames = (int64_t *)PyBytes_AS_STRING(with_b), *order_key = (int64_t *)PyBytes_AS_STRING(key_b);
    int64_t *first_part = (int64_t *)PyBytes_AS_STRING(first_b), *offsets = (int64_t *)PyBytes_AS_STRING(offsets_b);
    uint64_t *addresses = (uint64_t *)PyBytes_AS_STRING(addresses_b);
    Py_ssize_t w = 0, out = 0;
    offsets[0] = 0;
    for (Py_ssize_t r = 0; r < rows; r++) {
        int64_t s = sample_at[r];
        if (s < 0)
            continue;
        with_frames[w] = s;
        order_key[w] = r;
        first_part[w] = -1;
        for (int64_t k = start[s]; k < start[s + 1]; k++) {
            int64_t p = list[k];
            if (p_row[p] == first[s])
                first_part[w] = p;
            int64_t count = p_count[p], width = p_width[p], at = p_at[p];
            if (at < 0 || count > (data_len - at) / width) {
                PyErr_SetString(PyExc_ValueError, "a stack part's addresses lie past the bytes");
                goto done;
            }
            const uint8_t *from = data + at;
            for (int64_t i = 0; i < count; i++, from += width) {
                uint64_t value = 0;
                for (int64_t b = width - 1; b >= 0; b--)
                    value = (value << 8) | from[b];
                addresses[out++] = value;
            }
        }
        w++;
        offsets[w] = out;
    }
    result = Py_BuildValue("(OOOOOO)", target_b, with_b, key_b, first_b, offsets_b, addresses_b);
done:
    Py_XDECREF(target_b);
    Py_XDECREF(with_b);
    Py_XDECREF(key_b);
    Py_XDECREF(first_b);
    Py_XDECREF(offsets_b);
    Py_XDECREF(addresses_b);
    PyMem_Free(slots);
    PyMem_Free(first);
    PyMem_Free(total);
    PyMem_Free(start);
    PyMem_Free(list);
    PyMem_Free(sample_at);
    for (int i = 0; i < held; i++)
        PyBuffer_Release(&a[i].view);
    return result;
}

static PyMethodDef methods[] = {
    {"join_gather", join_gather, METH_VARARGS, "CPU samples joined to their stack parts and their addresses gathered, in one pass."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_stacks", "CPU samples joined to their stack records, compiled.", -1, methods};

PyMODINIT_FUNC PyInit__stacks(void) { return PyModule_Create(&module); }
