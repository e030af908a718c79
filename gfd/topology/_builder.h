/*
 * Shared by the C files of gfd.topology._builder: _builder.c (the builder and the module),
 * _encode.c (facts -> compact input) and _cells.c (matrix cells and annotation rows).
 */
#ifndef GFD_TOPOLOGY_BUILDER_H
#define GFD_TOPOLOGY_BUILDER_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define MAX_GPUS 4096
#define MAX_ACTIVE_LINKS 255
#define LINK_FIELDS 4
#define P2P_FIELDS 2
#define BUS_KEY_LIMIT ((int64_t)1 << 52)

/* gfd.base.errors.TopologyError, looked up once at import (in _builder.c). */
extern PyObject *gfd_topology_error;

/* _encode.c: encode(gpus, pci_pairs, pci_levels, remote_codes). */
PyObject *gfd_encode(PyObject *module, PyObject *args);
int gfd_encode_init(void);

/* _cells.c: matrix_rows(gpu_count, levels, nvlinks), run_length_rows(...). */
PyObject *gfd_matrix_rows(PyObject *module, PyObject *args);
PyObject *gfd_run_length_rows(PyObject *module, PyObject *args);
int gfd_cells_init(void);

#endif
