/* The compiled column decoder of the Parquet loader: runs a schema program (ingest/loader/cdecode.py
 * builds it from a writer schema) over a chunk of framed Avro payloads and returns one Python list per
 * leaf column (bytes and string leaves: a tuple of Arrow binary buffers instead), refusing the chunk
 * exactly where the generated Python decode_columns refuses it.
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

/* The program is checked once per call: opcodes known, every column written by exactly one leaf op and in
 * order (an OPTIONAL and the leaf op after it, of the same column, count as one), symbol tables present. */
static int
check_leaf(const int32_t *ops, Py_ssize_t ip, Py_ssize_t n, int32_t col, PyObject *enums)
{
    int32_t op = ip < n ? ops[ip] : 0;
    int size = op_size(op);
    if (size == 0 || op == OP_OPTIONAL || ip + size > n) {
        PyErr_Format(PyExc_ValueError, "schema program: opcode %d at %zd is not a leaf op or is cut", (int)op, ip);
        return -1;
    }
    if (ops[ip + 1] != col) {
        PyErr_Format(PyExc_ValueError, "schema program: column %d at %zd, expected column %d (each column once, "
                     "in order)", (int)ops[ip + 1], ip, (int)col);
        return -1;
    }
    if (op == OP_ENUM && (ops[ip + 2] < 0 || ops[ip + 2] >= PyTuple_GET_SIZE(enums)
                          || !PyTuple_Check(PyTuple_GET_ITEM(enums, ops[ip + 2])))) {
        PyErr_Format(PyExc_ValueError, "schema program: symbols %d at %zd is not a tuple of enums", (int)ops[ip + 2], ip);
        return -1;
    }
    return size;
}

static int
check_program(const int32_t *ops, Py_ssize_t n, Py_ssize_t width, PyObject *enums, unsigned char *nullable,
              unsigned char *kind)
{
    Py_ssize_t ip = 0;
    int32_t col = 0;
    while (ip < n) {
        if (col >= width) {
            PyErr_Format(PyExc_ValueError, "schema program: more leaf ops than its %zd columns", width);
            return -1;
        }
        if (ops[ip] == OP_OPTIONAL) {
            if (ip + 4 > n || ops[ip + 1] != col || ops[ip + 2] < 0 || ops[ip + 2] > 255 || ops[ip + 3] < 0
                || ops[ip + 3] > 255 || (ip + 4 < n && ops[ip + 4] == OP_NULL)) {
                PyErr_Format(PyExc_ValueError, "schema program: optional at %zd needs column %d, branch bytes 0..255 "
                             "and one non-null leaf op of its column after it", ip, (int)col);
                return -1;
            }
            nullable[col] = 1;
            ip += 4;
        }
        int size = check_leaf(ops, ip, n, col, enums);
        if (size < 0)
            return -1;
        kind[col] = (unsigned char)ops[ip];
        ip += size;
        col++;
    }
    if (col != width) {
        PyErr_Format(PyExc_ValueError, "schema program writes %d of %zd columns: allowed exactly the width",
                     (int)col, width);
        return -1;
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

/* A bytes or string column as Arrow's binary layout: validity bitmap (nullable columns only), int32
 * offsets, data. No Python object per value; ingest.loader.writers.column_arrays wraps the three. */
typedef struct {
    char *data;
    Py_ssize_t len, cap;
    int32_t *offsets;       /* rows + 1 */
    unsigned char *valid;   /* (rows + 7) / 8 bytes, or NULL */
} StrBuf;

static inline int
strbuf_append(StrBuf *b, Py_ssize_t row, const unsigned char *src, Py_ssize_t n, const char **why)
{
    Py_ssize_t need = b->len + n;
    if (need > INT32_MAX) {
        *why = "the chunk's bytes of one column beyond 2 GiB (int32 offsets)";
        return -1;
    }
    if (need > b->cap) {
        Py_ssize_t cap = b->cap * 2 > need ? b->cap * 2 : need;
        if (cap < 4096)
            cap = 4096;
        char *data = PyMem_Realloc(b->data, (size_t)cap);
        if (data == NULL) {
            PyErr_NoMemory();
            return -2;
        }
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, src, (size_t)n);
    b->len = need;
    b->offsets[row + 1] = (int32_t)need;
    if (b->valid != NULL)
        b->valid[row >> 3] |= (unsigned char)(1u << (row & 7));
    return 0;
}

/* One leaf op at ops[ip] for payload row `row`: value read at *pos, stored in its column. */
static inline int
leaf(const int32_t *ops, Py_ssize_t ip, const unsigned char *p, Py_ssize_t *posp, Py_ssize_t end,
     PyObject **cols, StrBuf *bufs, Py_ssize_t row, PyObject *enums, const char **whyp)
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
        {
            int rc = strbuf_append(&bufs[ops[ip + 1]], row, p + pos, (Py_ssize_t)n, &why);
            if (rc == -1)
                goto refused;
            if (rc < 0)
                return -2;
        }
        pos += (Py_ssize_t)n;
        *posp = pos;
        return 0;
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
    StrBuf *bufs = NULL;
    unsigned char *nullable = NULL, *kind = NULL;
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
    nullable = PyMem_Calloc((size_t)width, 1);
    kind = PyMem_Calloc((size_t)width, 1);
    bufs = PyMem_Calloc((size_t)width, sizeof(StrBuf));
    if (nullable == NULL || kind == NULL || bufs == NULL) {
        PyErr_NoMemory();
        goto done;
    }
    if (check_program(ops, nops, width, enums, nullable, kind) < 0)
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
        if (kind[c] == OP_BYTES || kind[c] == OP_STRING) {  /* Arrow buffers; the list slot is set at the end */
            bufs[c].offsets = PyMem_Malloc((size_t)(rows + 1) * sizeof(int32_t));
            if (bufs[c].offsets == NULL) {
                PyErr_NoMemory();
                goto fail;
            }
            bufs[c].offsets[0] = 0;
            if (nullable[c]) {
                bufs[c].valid = PyMem_Calloc((size_t)(rows + 7) / 8 + 1, 1);
                if (bufs[c].valid == NULL) {
                    PyErr_NoMemory();
                    goto fail;
                }
            }
            continue;
        }
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
                    if (bufs[col].offsets != NULL)
                        bufs[col].offsets[row + 1] = bufs[col].offsets[row];  /* validity bit stays 0 */
                    else
                        PyList_SET_ITEM(cols[col], row, Py_NewRef(Py_None));
                } else if (b == (unsigned char)ops[ip + 3]) {
                    rc = leaf(ops, next, p, &pos, end, cols, bufs, row, enums, &why);
                } else {
                    why = "union index not a one-byte branch of the union";
                    rc = -1;
                }
                ip = next + op_size(ops[next]);
            } else {
                rc = leaf(ops, ip, p, &pos, end, cols, bufs, row, enums, &why);
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
    for (Py_ssize_t c = 0; c < width; c++) {
        if (bufs[c].offsets == NULL)
            continue;
        PyObject *valid = bufs[c].valid != NULL
            ? PyBytes_FromStringAndSize((const char *)bufs[c].valid, (rows + 7) / 8) : Py_NewRef(Py_None);
        PyObject *offsets = PyBytes_FromStringAndSize((const char *)bufs[c].offsets, (rows + 1) * (Py_ssize_t)sizeof(int32_t));
        PyObject *data = PyBytes_FromStringAndSize(bufs[c].data != NULL ? bufs[c].data : "", bufs[c].len);
        PyObject *triple = (valid && offsets && data) ? PyTuple_Pack(3, valid, offsets, data) : NULL;
        Py_XDECREF(valid);
        Py_XDECREF(offsets);
        Py_XDECREF(data);
        if (triple == NULL)
            goto fail;
        PyList_SET_ITEM(result, c, triple);
    }
    goto done;
fail:
    Py_CLEAR(result);
done:
    if (bufs != NULL) {
        for (Py_ssize_t c = 0; c < width; c++) {
            PyMem_Free(bufs[c].data);
            PyMem_Free(bufs[c].offsets);
            PyMem_Free(bufs[c].valid);
        }
    }
    PyMem_Free(bufs);
    PyMem_Free(nullable);
    PyMem_Free(kind);
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
