/*
 * gfd.topology._builder.matrix_rows and run_length_rows: the matrix cells, in C.
 *
 * Twins of Topology.matrix() and of the annotation's run-length rows in
 * gfd/topology/render.py (see there for the format): same cells from the same two
 * planes, so a 1024-GPU matrix costs no per-cell bytecode. Every cell of
 * matrix_rows is one of 262 shared str objects made at import, so the N^2 list slots
 * cost a reference each, not a string each.
 */
#include "_builder.h"

#include <string.h>

/* Model codes 0..6 (gfd.topology.model.LEVEL_NAMES), then NV1..NV255 at 6 + links. */
#define LEVEL_CODES 7
#define CELL_KINDS (LEVEL_CODES + 255)
/* Longest token: "NODE*4096" or "NV255*4096", plus the separating space. */
#define TOKEN_MAX 12

static const char *const level_names[LEVEL_CODES] = {"X", "PIX", "PXB", "PHB", "NODE", "SYS",
                                                     "N/A"};
static PyObject *cell_objects[CELL_KINDS];
static char cell_text[CELL_KINDS][8];
static unsigned char cell_length[CELL_KINDS];

int gfd_cells_init(void)
{
    for (int kind = 0; kind < CELL_KINDS; kind++) {
        if (kind < LEVEL_CODES)
            strcpy(cell_text[kind], level_names[kind]);
        else
            PyOS_snprintf(cell_text[kind], sizeof cell_text[kind], "NV%d", kind - LEVEL_CODES + 1);
        cell_length[kind] = (unsigned char)strlen(cell_text[kind]);
        cell_objects[kind] = PyUnicode_InternFromString(cell_text[kind]);
        if (!cell_objects[kind])
            return -1;
    }
    return 0;
}

/* Parse (gpu_count, levels, nvlinks); 1 when n <= 0 (no rows), -1 on error. */
static int parse_planes(PyObject *args, const char *format, Py_ssize_t *n, Py_buffer *levels,
                        Py_buffer *nvlinks)
{
    if (!PyArg_ParseTuple(args, format, n, levels, nvlinks))
        return -1;
    if (*n > MAX_GPUS) {
        PyErr_Format(PyExc_ValueError, "a topology has 0 to %d GPUs, got %zd", MAX_GPUS, *n);
        goto fail;
    }
    if (*n <= 0)
        return 1;
    /* Topology.cell reads the planes by offset: a short plane is an IndexError there too. */
    if (levels->len < *n * *n || nvlinks->len < *n * *n) {
        PyErr_SetString(PyExc_IndexError, "index out of range");
        goto fail;
    }
    return 0;
fail:
    PyBuffer_Release(levels);
    PyBuffer_Release(nvlinks);
    return -1;
}

/* Kind of every cell of row `a` into `kinds`; -1 (IndexError) on a level code no name has. */
static int row_kinds(Py_ssize_t n, Py_ssize_t a, const unsigned char *levels,
                     const unsigned char *nvlinks, unsigned short *kinds)
{
    const unsigned char *level_row = levels + a * n, *link_row = nvlinks + a * n;
    for (Py_ssize_t b = 0; b < n; b++) {
        unsigned char links = link_row[b];
        if (links && a != b) {
            kinds[b] = (unsigned short)(LEVEL_CODES - 1 + links);
        } else if (level_row[b] < LEVEL_CODES) {
            kinds[b] = level_row[b];
        } else {
            PyErr_SetString(PyExc_IndexError, "tuple index out of range");
            return -1;
        }
    }
    return 0;
}

PyObject *gfd_matrix_rows(PyObject *module, PyObject *args)
{
    (void)module;
    Py_ssize_t n;
    Py_buffer levels, nvlinks;
    int parsed = parse_planes(args, "ny*y*:matrix_rows", &n, &levels, &nvlinks);
    if (parsed < 0)
        return NULL;
    PyObject *rows = PyList_New(parsed ? 0 : n);
    unsigned short *kinds = parsed ? NULL : PyMem_Malloc((size_t)n * sizeof(unsigned short));
    if (!rows || (!parsed && !kinds)) {
        if (rows && !kinds)
            PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t a = 0; !parsed && a < n; a++) {
        if (row_kinds(n, a, levels.buf, nvlinks.buf, kinds) < 0)
            goto fail;
        PyObject *row = PyList_New(n);
        if (!row)
            goto fail;
        for (Py_ssize_t b = 0; b < n; b++) {
            PyObject *cell = cell_objects[kinds[b]];
            Py_INCREF(cell);
            PyList_SET_ITEM(row, b, cell);
        }
        PyList_SET_ITEM(rows, a, row);
    }
    PyMem_Free(kinds);
    PyBuffer_Release(&levels);
    PyBuffer_Release(&nvlinks);
    return rows;
fail:
    Py_XDECREF(rows);
    PyMem_Free(kinds);
    PyBuffer_Release(&levels);
    PyBuffer_Release(&nvlinks);
    return NULL;
}

static char *write_count(char *out, Py_ssize_t count)
{
    char digits[24];
    int length = 0;
    do {
        digits[length++] = (char)('0' + count % 10);
        count /= 10;
    } while (count);
    while (length)
        *out++ = digits[--length];
    return out;
}

PyObject *gfd_run_length_rows(PyObject *module, PyObject *args)
{
    (void)module;
    Py_ssize_t n;
    Py_buffer levels, nvlinks;
    int parsed = parse_planes(args, "ny*y*:run_length_rows", &n, &levels, &nvlinks);
    if (parsed < 0)
        return NULL;
    PyObject *rows = PyList_New(parsed ? 0 : n);
    unsigned short *kinds = parsed ? NULL : PyMem_Malloc((size_t)n * sizeof(unsigned short));
    /* n <= MAX_GPUS, so a row's text is at most 12 * 4096 bytes. */
    char *text = parsed ? NULL : PyMem_Malloc((size_t)n * TOKEN_MAX);
    if (!rows || (!parsed && (!kinds || !text))) {
        if (rows)
            PyErr_NoMemory();
        goto fail;
    }
    for (Py_ssize_t a = 0; !parsed && a < n; a++) {
        if (row_kinds(n, a, levels.buf, nvlinks.buf, kinds) < 0)
            goto fail;
        char *out = text;
        for (Py_ssize_t start = 0, end; start < n; start = end) {
            for (end = start + 1; end < n && kinds[end] == kinds[start]; end++)
                ;
            if (start)
                *out++ = ' ';
            memcpy(out, cell_text[kinds[start]], cell_length[kinds[start]]);
            out += cell_length[kinds[start]];
            if (end - start > 1) {
                *out++ = '*';
                out = write_count(out, end - start);
            }
        }
        PyObject *row = PyUnicode_DecodeASCII(text, out - text, NULL);
        if (!row)
            goto fail;
        PyList_SET_ITEM(rows, a, row);
    }
    PyMem_Free(kinds);
    PyMem_Free(text);
    PyBuffer_Release(&levels);
    PyBuffer_Release(&nvlinks);
    return rows;
fail:
    Py_XDECREF(rows);
    PyMem_Free(kinds);
    PyMem_Free(text);
    PyBuffer_Release(&levels);
    PyBuffer_Release(&nvlinks);
    return NULL;
}
