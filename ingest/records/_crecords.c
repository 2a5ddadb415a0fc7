/* The records of a v2 record batch read in C: every record's offset, timestamp, key, value and headers as
 * columns (one Python list each), for the loader's batch path (ingest/records/compiled_records.py).
 *
 * It accepts exactly what ingest/records/record.py's iter_records accepts and refuses (returns None)
 * everything else, without saying why: the caller then reads the batch with iter_records, which raises
 * the precise error. Every read is bounded by the record's own length (a read past it would leave the
 * record's fields longer than its length, which iter_records refuses); varints of at most 5 bytes within
 * 32 bits, varlongs of at most 10 bytes within 64 bits; the record count is bounded by the bytes (a
 * record takes at least 7), so no input can make it allocate or loop beyond its own size. It also
 * refuses offsets that do not increase within the batch (iter_records reads them; the caller's batch
 * path cuts a batch at offsets by bisection, so it leaves such a batch to iter_records).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>

/* An unsigned varint of at most max_bytes bytes, no further than end; -1 when cut, too long or too wide. */
static inline int
read_uvarint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, int max_bytes, uint64_t *out)
{
    uint64_t v = 0;
    Py_ssize_t i = *pos;
    for (int k = 0; k < max_bytes; k++) {
        if (i >= end)
            return -1;
        unsigned char b = p[i++];
        if (k == 9 && b > 1)
            return -1;   /* a 10th byte beyond bit 63 */
        v |= (uint64_t)(b & 127) << (7 * k);
        if (b < 128) {
            *pos = i;
            *out = v;
            return 0;
        }
    }
    return -1;
}

static inline int
read_varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, int64_t *out)
{
    uint64_t v;
    if (read_uvarint(p, pos, end, 5, &v) < 0 || v > 0xFFFFFFFFu)
        return -1;
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    return 0;
}

static inline int
read_varlong(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, int64_t *out)
{
    uint64_t v;
    if (read_uvarint(p, pos, end, 10, &v) < 0)
        return -1;
    *out = (int64_t)(v >> 1) ^ -(int64_t)(v & 1);
    return 0;
}

/* A nullable byte string (length -1: None) as a new reference; NULL with no error set when refused. */
static PyObject *
read_nullable(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t stop)
{
    int64_t n;
    if (read_varint(p, pos, stop, &n) < 0 || n < -1 || n > stop - *pos)
        return NULL;
    if (n == -1)
        Py_RETURN_NONE;
    PyObject *out = PyBytes_FromStringAndSize((const char *)p + *pos, (Py_ssize_t)n);
    *pos += (Py_ssize_t)n;
    return out;
}

/* The headers of one record as a tuple of (key bytes, value bytes or None); NULL when refused. */
static PyObject *
read_headers(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t stop, int64_t count)
{
    PyObject *out = PyTuple_New((Py_ssize_t)count);
    if (out == NULL)
        return NULL;
    for (int64_t h = 0; h < count; h++) {
        int64_t klen;
        if (read_varint(p, pos, stop, &klen) < 0 || klen < 0 || klen > stop - *pos)
            goto refused;
        PyObject *key = PyBytes_FromStringAndSize((const char *)p + *pos, (Py_ssize_t)klen);
        if (key == NULL)
            goto refused;
        *pos += (Py_ssize_t)klen;
        PyObject *value = read_nullable(p, pos, stop);
        if (value == NULL) {
            Py_DECREF(key);
            goto refused;
        }
        PyObject *pair = PyTuple_Pack(2, key, value);
        Py_DECREF(key);
        Py_DECREF(value);
        if (pair == NULL)
            goto refused;
        PyTuple_SET_ITEM(out, (Py_ssize_t)h, pair);
    }
    return out;
refused:
    Py_DECREF(out);
    return NULL;
}

static int
append_steal(PyObject *list, PyObject *item)
{
    if (item == NULL)
        return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static PyObject *
read_records(PyObject *self, PyObject *args)
{
    Py_buffer buf;
    Py_ssize_t count;
    long long base_offset, base_ts, append_ts;
    int log_append;
    if (!PyArg_ParseTuple(args, "y*nLLpL", &buf, &count, &base_offset, &base_ts, &log_append, &append_ts))
        return NULL;
    const unsigned char *p = buf.buf;
    Py_ssize_t end = buf.len, pos = 0;
    PyObject *offsets = NULL, *times = NULL, *keys = NULL, *values = NULL, *headers = NULL, *result = NULL;
    PyObject *no_headers = NULL;
    int with_headers = 0;
    if (count <= 0 || count > end / 7)
        goto done;   /* iter_records reads nothing of an empty batch; more records than bytes allow: cut off */
    offsets = PyList_New(0);
    times = PyList_New(0);
    keys = PyList_New(0);
    values = PyList_New(0);
    headers = PyList_New(0);
    if (!offsets || !times || !keys || !values || !headers)
        goto done;
    no_headers = PyTuple_New(0);
    if (no_headers == NULL)
        goto done;
    int64_t last_delta = -1;
    for (Py_ssize_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, n;
        if (read_varint(p, &pos, end, &length) < 0 || length < 6 || length > end - pos)
            goto refused;
        Py_ssize_t stop = pos + (Py_ssize_t)length;
        pos++;   /* attributes: no bits defined, not checked (as Kafka) */
        if (read_varlong(p, &pos, stop, &ts_delta) < 0 || read_varint(p, &pos, stop, &offset_delta) < 0)
            goto refused;
        long long offset, ts;
        if (__builtin_add_overflow(base_offset, (long long)offset_delta, &offset) || offset_delta <= last_delta)
            goto refused;   /* offsets that do not increase: iter_records reads them, the batch path does not */
        last_delta = offset_delta;
        if (log_append)
            ts = append_ts;
        else if (__builtin_add_overflow(base_ts, (long long)ts_delta, &ts))
            goto refused;
        PyObject *key = read_nullable(p, &pos, stop);
        if (key == NULL)
            goto refused;
        if (append_steal(keys, key) < 0)
            goto refused;
        PyObject *value = read_nullable(p, &pos, stop);
        if (value == NULL)
            goto refused;
        if (value == Py_None) {   /* a null value: the loader's rows take b"" (then refused by the decoder) */
            Py_DECREF(value);
            value = PyBytes_FromStringAndSize("", 0);
        }
        if (append_steal(values, value) < 0)
            goto refused;
        if (read_varint(p, &pos, stop, &n) < 0 || n < 0 || n > stop - pos)
            goto refused;
        if (n == 0) {
            Py_INCREF(no_headers);
            if (append_steal(headers, no_headers) < 0)
                goto refused;
        } else {
            with_headers = 1;
            if (append_steal(headers, read_headers(p, &pos, stop, n)) < 0)
                goto refused;
        }
        if (pos != stop)
            goto refused;
        if (append_steal(offsets, PyLong_FromLongLong(offset)) < 0 || append_steal(times, PyLong_FromLongLong(ts)) < 0)
            goto refused;
    }
    if (pos != end)
        goto refused;
    result = Py_BuildValue("(OOOOO)", offsets, times, keys, values, with_headers ? headers : Py_None);
    goto done;
refused:   /* not what iter_records accepts; an error other than running out of memory is a refusal too */
    if (PyErr_Occurred() && !PyErr_ExceptionMatches(PyExc_MemoryError))
        PyErr_Clear();
done:
    Py_XDECREF(no_headers);
    Py_XDECREF(offsets);
    Py_XDECREF(times);
    Py_XDECREF(keys);
    Py_XDECREF(values);
    Py_XDECREF(headers);
    PyBuffer_Release(&buf);
    if (result == NULL && !PyErr_Occurred())
        Py_RETURN_NONE;
    return result;
}

static PyMethodDef methods[] = {
    {"read_records", read_records, METH_VARARGS,
     "read_records(records, count, base_offset, base_timestamp, log_append_time, append_timestamp)\n"
     "-> (offsets, timestamps, keys, values, headers or None) or None\n\n"
     "The records section of a v2 batch (inflated) as five lists; None when iter_records would refuse it.\n"
     "A null value is b\"\"; headers is None when no record has one, else one tuple of (key bytes, value) per record."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ingest.records._crecords",
    "The records of a v2 batch read as columns (see ingest/records/compiled_records.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__crecords(void)
{
    return PyModule_Create(&module);
}
