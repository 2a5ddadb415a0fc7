/* The compiled column decoder of the Parquet loader: runs a schema program (ingest/loader/cdecode.py
 * builds it from a writer schema) over a chunk of framed Avro payloads and returns one Python list per
 * leaf column, refusing the chunk exactly where the generated Python decode_columns refuses it.
 *
 * Every read is bounds-checked against the payload: varints of at most 9 bytes (a 10th byte is
 * refused, as the Python decoder refuses it), lengths >= 0 and <= the bytes left, union and enum
 * indexes in range, no byte left over. The program has no loops (records flattened, unions of null
 * and one leaf), so a payload costs at most one pass over the program and its own bytes: no input
 * can make it spin. A refusal raises ValueError naming the payload's index, the reason and the byte.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum {
    OP_NULL = 1, OP_BOOLEAN = 2, OP_INT = 3, OP_LONG = 4, OP_FLOAT = 5, OP_DOUBLE = 6,
    OP_BYTES = 7, OP_STRING = 8, OP_ENUM = 9, OP_OPTIONAL = 10,
};

/* operands per opcode (after the opcode itself): column, [symbols index | null byte, other byte] */
static int
op_size(int32_t op)
{
    switch (op) {
    case OP_NULL: case OP_BOOLEAN: case OP_INT: case OP_LONG: case OP_FLOAT: case OP_DOUBLE:
    case OP_BYTES: case OP_STRING:
        return 2;
    case OP_ENUM:
        return 3;
    case OP_OPTIONAL:
        return 4;
    default:
        return 0;
    }
}

/* The program is checked once per call: opcodes known, columns within width, symbol tables present,
 * an OPTIONAL followed by one plain leaf op of the same column. */
static int
check_program(const int32_t *ops, Py_ssize_t n, Py_ssize_t width, PyObject *enums)
{
    Py_ssize_t ip = 0;
    while (ip < n) {
        int32_t op = ops[ip];
        int size = op_size(op);
        if (size == 0 || ip + size > n) {
            PyErr_Format(PyExc_ValueError, "schema program: opcode %d at %zd is not one of 1..10 or is cut", (int)op, ip);
            return -1;
        }
        if (ops[ip + 1] < 0 || ops[ip + 1] >= width) {
            PyErr_Format(PyExc_ValueError, "schema program: column %d at %zd, allowed 0..%zd", (int)ops[ip + 1], ip, width - 1);
            return -1;
        }
        if (op == OP_ENUM) {
            if (ops[ip + 2] < 0 || ops[ip + 2] >= PyTuple_GET_SIZE(enums)
                || !PyTuple_Check(PyTuple_GET_ITEM(enums, ops[ip + 2]))) {
                PyErr_Format(PyExc_ValueError, "schema program: symbols %d at %zd is not a tuple of enums", (int)ops[ip + 2], ip);
                return -1;
            }
        }
        if (op == OP_OPTIONAL) {
            Py_ssize_t next = ip + size;
            int32_t inner = next < n ? ops[next] : 0;
            if (ops[ip + 2] < 0 || ops[ip + 2] > 255 || ops[ip + 3] < 0 || ops[ip + 3] > 255
                || inner == OP_OPTIONAL || inner == OP_NULL || op_size(inner) == 0
                || next + op_size(inner) > n || ops[next + 1] != ops[ip + 1]) {
                PyErr_Format(PyExc_ValueError, "schema program: optional at %zd needs branch bytes 0..255 and one leaf "
                             "op of its column after it", ip);
                return -1;
            }
        }
        ip += size;
    }
    return 0;
}

/* A zigzag varint of at most 9 bytes (63 bits), as the generated Python decoder reads it. */
static inline int
read_varint(const unsigned char *p, Py_ssize_t *pos, Py_ssize_t end, int64_t *out, const char **why)
{
    uint64_t n = 0;
    Py_ssize_t i = *pos;
    for (int k = 0; k < 9; k++) {
        if (i >= end) {
            *why = "varint cut by the end of the payload";
            return -1;
        }
        unsigned char b = p[i++];
        n |= (uint64_t)(b & 127) << (7 * k);
        if (b < 128) {
            *pos = i;
            *out = (int64_t)(n >> 1) ^ -(int64_t)(n & 1);
            return 0;
        }
    }
    *why = "varint longer than 9 bytes";
    return -1;
}

#define REFUSE(reason) do { why = (reason); goto refused; } while (0)

/* One leaf op at ops[ip] for payload row `row`: value read at *pos, stored in its column. */
static inline int
leaf(const int32_t *ops, Py_ssize_t ip, const unsigned char *p, Py_ssize_t *posp, Py_ssize_t end,
     PyObject **cols, Py_ssize_t row, PyObject *enums, const char **whyp)
{
    const char *why = NULL;
    Py_ssize_t pos = *posp;
    PyObject *v = NULL;
    int64_t n;
    switch (ops[ip]) {
    case OP_NULL:
        v = Py_NewRef(Py_None);
        break;
    case OP_BOOLEAN:
        if (pos >= end) REFUSE("boolean cut by the end of the payload");
        if (p[pos] > 1) REFUSE("boolean byte not 0 or 1");
        v = Py_NewRef(p[pos] ? Py_True : Py_False);
        pos++;
        break;
    case OP_INT:
        if (read_varint(p, &pos, end, &n, &why) < 0) goto refused;
        if (n < INT32_MIN || n > INT32_MAX) REFUSE("int out of the 32-bit range");
        v = PyLong_FromLongLong(n);
        break;
    case OP_LONG:
        if (read_varint(p, &pos, end, &n, &why) < 0) goto refused;
        v = PyLong_FromLongLong(n);
        break;
    case OP_FLOAT: {
        float f;
        if (end - pos < 4) REFUSE("float cut by the end of the payload");
        memcpy(&f, p + pos, 4);  /* little-endian hosts only: cdecode.py imports this module only there */
        pos += 4;
        v = PyFloat_FromDouble((double)f);
        break;
    }
    case OP_DOUBLE: {
        double d;
        if (end - pos < 8) REFUSE("double cut by the end of the payload");
        memcpy(&d, p + pos, 8);
        pos += 8;
        v = PyFloat_FromDouble(d);
        break;
    }
    case OP_BYTES:
    case OP_STRING:
        if (read_varint(p, &pos, end, &n, &why) < 0) goto refused;
        if (n < 0) REFUSE("negative length");
        if (n > end - pos) REFUSE("length beyond the end of the payload");
        v = PyBytes_FromStringAndSize((const char *)p + pos, (Py_ssize_t)n);
        pos += (Py_ssize_t)n;
        break;
    case OP_ENUM: {
        PyObject *symbols = PyTuple_GET_ITEM(enums, ops[ip + 2]);
        if (read_varint(p, &pos, end, &n, &why) < 0) goto refused;
        if (n < 0 || n >= PyTuple_GET_SIZE(symbols)) REFUSE("enum index out of range");
        v = Py_NewRef(PyTuple_GET_ITEM(symbols, (Py_ssize_t)n));
        break;
    }
    default:
        REFUSE("unknown opcode");
    }
    if (v == NULL)
        return -2;  /* MemoryError already set */
    PyList_SET_ITEM(cols[ops[ip + 1]], row, v);
    *posp = pos;
    return 0;
refused:
    *whyp = why;
    *posp = pos;
    return -1;
}

static PyObject *
decode_columns(PyObject *self, PyObject *args)
{
    Py_buffer prog;
    Py_ssize_t width;
    PyObject *prefix, *enums, *payloads;
    if (!PyArg_ParseTuple(args, "y*nOO!O:decode_columns", &prog, &width, &prefix, &PyTuple_Type, &enums, &payloads))
        return NULL;
    PyObject *result = NULL, *seq = NULL;
    PyObject **cols = NULL;
    const int32_t *ops = (const int32_t *)prog.buf;
    Py_ssize_t nops = prog.len / (Py_ssize_t)sizeof(int32_t);
    const char *pfx = NULL;
    Py_ssize_t pfx_len = 0;
    if (prog.len % (Py_ssize_t)sizeof(int32_t) != 0 || width < 1 || width > 1 << 20) {
        PyErr_Format(PyExc_ValueError, "schema program of %zd bytes for %zd columns: allowed a whole number of "
                     "int32 opcodes and 1..1048576 columns", prog.len, width);
        goto done;
    }
    if (prefix != Py_None) {
        if (!PyBytes_Check(prefix)) {
            PyErr_Format(PyExc_TypeError, "prefix %R: allowed bytes or None", prefix);
            goto done;
        }
        pfx = PyBytes_AS_STRING(prefix);
        pfx_len = PyBytes_GET_SIZE(prefix);
    }
    if (check_program(ops, nops, width, enums) < 0)
        goto done;
    seq = PySequence_Fast(payloads, "payloads: allowed a sequence of bytes-like objects");
    if (seq == NULL)
        goto done;
    Py_ssize_t rows = PySequence_Fast_GET_SIZE(seq);
    result = PyList_New(width);
    if (result == NULL)
        goto done;
    cols = PyMem_Calloc((size_t)width, sizeof(PyObject *));
    if (cols == NULL) {
        PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t c = 0; c < width; c++) {
        /* filled by row index; a refused chunk leaves NULL slots, which list_dealloc skips */
        cols[c] = PyList_New(rows);
        if (cols[c] == NULL)
            goto fail;
        PyList_SET_ITEM(result, c, cols[c]);
    }
    PyObject **items = PySequence_Fast_ITEMS(seq);
    for (Py_ssize_t row = 0; row < rows; row++) {
        PyObject *item = items[row];
        Py_buffer view;
        const unsigned char *p;
        Py_ssize_t end;
        int have_view = 0;
        if (PyBytes_Check(item)) {
            p = (const unsigned char *)PyBytes_AS_STRING(item);
            end = PyBytes_GET_SIZE(item);
        } else {
            if (PyObject_GetBuffer(item, &view, PyBUF_SIMPLE) < 0)
                goto fail;
            have_view = 1;
            p = (const unsigned char *)view.buf;
            end = view.len;
        }
        const char *why = NULL;
        Py_ssize_t pos = 0;
        int rc = 0;
        if (pfx != NULL) {
            if (end < pfx_len || memcmp(p, pfx, (size_t)pfx_len) != 0) {
                why = "framing (magic byte and schema id) not this program's";
                rc = -1;
            }
            pos = pfx_len;
        } else {
            pos = end < 5 ? end : 5;  /* the framing's 5 bytes, not compared */
            if (end < 5) {
                why = "shorter than the framing";
                rc = -1;
            }
        }
        for (Py_ssize_t ip = 0; rc == 0 && ip < nops;) {
            int32_t op = ops[ip];
            if (op == OP_OPTIONAL) {
                int32_t col = ops[ip + 1];
                if (pos >= end) {
                    why = "union index cut by the end of the payload";
                    rc = -1;
                    break;
                }
                unsigned char b = p[pos++];
                Py_ssize_t next = ip + 4;
                if (b == (unsigned char)ops[ip + 2]) {
                    PyList_SET_ITEM(cols[col], row, Py_NewRef(Py_None));
                } else if (b == (unsigned char)ops[ip + 3]) {
                    rc = leaf(ops, next, p, &pos, end, cols, row, enums, &why);
                } else {
                    why = "union index not a one-byte branch of the union";
                    rc = -1;
                }
                ip = next + op_size(ops[next]);
            } else {
                rc = leaf(ops, ip, p, &pos, end, cols, row, enums, &why);
                ip += op_size(op);
            }
        }
        if (rc == 0 && pos != end) {
            why = "bytes left over after the datum";
            rc = -1;
        }
        if (have_view)
            PyBuffer_Release(&view);
        if (rc == -2)
            goto fail;
        if (rc < 0) {
            PyErr_Format(PyExc_ValueError, "payload %zd of the chunk: %s (byte %zd of %zd)", row, why, pos, end);
            goto fail;
        }
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    PyMem_Free(cols);
    Py_XDECREF(seq);
    PyBuffer_Release(&prog);
    return result;
}

static PyMethodDef methods[] = {
    {"decode_columns", decode_columns, METH_VARARGS,
     "decode_columns(program, width, prefix, enums, payloads) -> list of width lists\n\n"
     "Runs the schema program (int32 opcodes) over every payload; raises ValueError on the first\n"
     "payload it refuses (framing, cut data, bad index, bad length, bytes left over)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "ingest.loader._cdecode",
    "The compiled column decoder of the Parquet loader (see ingest/loader/cdecode.py).", -1, methods,
};

PyMODINIT_FUNC
PyInit__cdecode(void)
{
    return PyModule_Create(&module);
}
