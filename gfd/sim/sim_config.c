/*
 * sim_config.c: reading a machine file. Owns the record loop (the format is documented
 * once, in docs/simulator.md, "The machine file"), the machine-wide records
 * (driver_version, cuda_driver_version, gpu), the order records are read in (those that
 * name GPUs by index once every GPU is known), the machine's lifetime, and the two
 * configuration entry points. The records of a GPU are sim_config_gpu.c's, those of the
 * topology sim_config_topology.c's, the fault records sim_faults.c's. The machine it
 * builds (sim_machine, see nvmlsim.h) is what every NVML call serves.
 *
 * Configuration
 * -------------
 *   int gfdsim_configure(const char *config_path)
 *       Load a machine description; 0 on success, -1 on error (then
 *       gfdsim_last_error() says which file, line and problem). NULL unloads the
 *       machine. Callable again at any time: handles from the previous machine
 *       become invalid, call counters and fault state start from zero, and the
 *       init reference count is kept.
 *   const char *gfdsim_last_error(void)
 *       The message of the last failed gfdsim_configure ("" when none).
 *   Environment: when nothing was configured, nvmlInit* reads the file named by
 *       GFD_SIM_CONFIG. Without either, nvmlInit* returns
 *       NVML_ERROR_DRIVER_NOT_LOADED, like a machine without the driver.
 *
 * Bounds: at most SIM_MAX_GPUS GPUs and, per GPU, MIG indices below SIM_MAX_MIG_DEVICES
 * (and max_mig_devices at most that) and link indices below NVML_NVLINK_MAX_LINKS.
 */

#include "nvmlsim.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CONFIG_MAGIC "gfdsim-config 1"
#define MAX_LINE 65536 /* a cpulist of 4096 lone CPUs is about 20 KB */

/* ------------------------------------------------------------------------- */
/* Machine lifetime */

static void free_machine(sim_machine *m) {
    if (m == NULL) {
        return;
    }
    for (size_t i = 0; i < m->n_gpus; i++) {
        free(m->gpus[i].affinity);
        free(m->gpus[i].migs);
        free(m->gpus[i].links);
    }
    free(m->gpus);
    free(m->levels);
    free(m->p2p_nvlink);
    free(m->switch_group);
    free(m->faults);
    free(m->changes);
    free(m);
}

/* ------------------------------------------------------------------------- */
/* Records */

static int parse_line(sim_parse_ctx *ctx, sim_machine *m, char *line) {
    char *rest = line;
    char *key = sim_next_token(&rest);
    char *value = rest;
    unsigned n[3];
    sim_gpu *current = m->n_gpus > 0 ? &m->gpus[m->n_gpus - 1] : NULL;

    if (strcmp(key, "driver_version") == 0) {
        m->has_driver = 1;
        return sim_copy_text(ctx, key, value, m->driver, sizeof m->driver);
    }
    if (strcmp(key, "cuda_driver_version") == 0) {
        if (sim_parse_numbers(ctx, key, value, n, 1) != 0) {
            return -1;
        }
        if (n[0] > INT_MAX) {
            return sim_parse_fail(ctx, "%s: %u is too large", key, n[0]);
        }
        m->has_cuda = 1;
        m->cuda = (int)n[0];
        return 0;
    }
    if (strcmp(key, "gpu") == 0) {
        if (sim_parse_numbers(ctx, key, value, n, 1) != 0) {
            return -1;
        }
        if (n[0] != m->n_gpus) {
            return sim_parse_fail(ctx, "gpu: expected GPU %zu next, got %u", m->n_gpus, n[0]);
        }
        if (m->n_gpus >= SIM_MAX_GPUS) {
            /* Before anything per GPU pair is allocated (two n x n tables). */
            return sim_parse_fail(ctx, "gpu: more than the limit of %d GPUs", SIM_MAX_GPUS);
        }
        sim_gpu *gpus = sim_grow(m->gpus, m->n_gpus, sizeof *gpus);
        if (gpus == NULL) {
            return sim_parse_fail(ctx, "out of memory");
        }
        m->gpus = gpus;
        gpus[m->n_gpus].lost_after = -1;
        gpus[m->n_gpus].vanish_after = -1;
        m->n_gpus++;
        return 0;
    }
    if (current == NULL) {
        static const char *const gpu_keys[] = {
            "name", "uuid", "bus_id", "pci_device_id", "pci_class", "memory_total_bytes",
            "compute_capability", "architecture", "brand", "gpu_numa_id", "cpu_affinity",
            "mig_mode", "max_mig_devices", "nvlink_version", "nvlink", "fabric", "mig",
            "value"};
        for (size_t i = 0; i < sizeof gpu_keys / sizeof gpu_keys[0]; i++) {
            if (strcmp(key, gpu_keys[i]) == 0 || strncmp(key, "mig_", 4) == 0) {
                return sim_parse_fail(ctx, "'%s' comes before any 'gpu' line", key);
            }
        }
        return sim_parse_fail(ctx, "unknown key '%s'", key);
    }
    return sim_parse_gpu_record(ctx, current, key, value);
}

/* Records that name GPUs by index: read once every GPU is known. */
static int parse_late_line(sim_parse_ctx *ctx, sim_machine *m, char *line) {
    char *rest = line;
    char *key = sim_next_token(&rest);
    char *value = rest;
    if (strncmp(key, "fault_", 6) == 0) {
        return sim_parse_fault_record(ctx, m, key, value);
    }
    return sim_parse_topology_record(ctx, m, key, value);
}

/* Read a whole config file into lines; return a machine or NULL with ctx->error set. */
sim_machine *sim_load_machine(const char *path, char *error, size_t error_size) {
    sim_parse_ctx ctx = {path, 0, error, error_size};
    FILE *file = fopen(path, "r");
    if (file == NULL) {
        sim_parse_fail(&ctx, "cannot open: %s", strerror(errno));
        return NULL;
    }
    sim_machine *m = calloc(1, sizeof *m);
    char **late = NULL;
    unsigned *late_lines = NULL;
    size_t n_late = 0;
    char *buffer = malloc(MAX_LINE);
    int ok = m != NULL && buffer != NULL ? 0 : sim_parse_fail(&ctx, "out of memory");
    int seen_magic = 0;
    while (ok == 0 && fgets(buffer, MAX_LINE, file) != NULL) {
        ctx.line++;
        size_t len = strlen(buffer);
        if (len > 0 && buffer[len - 1] != '\n' && !feof(file)) {
            ok = sim_parse_fail(&ctx, "line is longer than %d bytes", MAX_LINE - 2);
            break;
        }
        while (len > 0 && (buffer[len - 1] == '\n' || buffer[len - 1] == '\r')) {
            buffer[--len] = '\0';
        }
        if (len == 0 || buffer[0] == '#') {
            continue;
        }
        if (!seen_magic) {
            if (strcmp(buffer, CONFIG_MAGIC) != 0) {
                ok = sim_parse_fail(&ctx, "expected '%s' as the first record", CONFIG_MAGIC);
                break;
            }
            seen_magic = 1;
            continue;
        }
        /* pair and fault records name GPUs: read them once all GPUs are known. */
        int late_record = strncmp(buffer, "pair ", 5) == 0 || strncmp(buffer, "fault_", 6) == 0 ||
                          strncmp(buffer, "nvlink_p2p ", 11) == 0;
        if (!late_record) {
            ok = parse_line(&ctx, m, buffer);
        } else {
            char **grown = realloc(late, (n_late + 1) * sizeof *late);
            unsigned *grown_lines = realloc(late_lines, (n_late + 1) * sizeof *late_lines);
            if (grown != NULL) {
                late = grown;
            }
            if (grown_lines != NULL) {
                late_lines = grown_lines;
            }
            if (grown == NULL || grown_lines == NULL || (late[n_late] = strdup(buffer)) == NULL) {
                ok = sim_parse_fail(&ctx, "out of memory");
            } else {
                late_lines[n_late++] = ctx.line;
            }
        }
    }
    if (ok == 0 && ferror(file)) {
        ok = sim_parse_fail(&ctx, "read error: %s", strerror(errno));
    }
    fclose(file);
    if (ok == 0 && !seen_magic) {
        ctx.line = 0;
        ok = sim_parse_fail(&ctx, "empty file; expected '%s' as the first record", CONFIG_MAGIC);
    }
    if (ok == 0) {
        size_t cells = m->n_gpus * m->n_gpus;
        m->levels = malloc((cells > 0 ? cells : 1) * sizeof *m->levels);
        m->p2p_nvlink = malloc(cells > 0 ? cells : 1);
        m->switch_group = malloc((m->n_gpus > 0 ? m->n_gpus : 1) * sizeof *m->switch_group);
        if (m->levels == NULL || m->p2p_nvlink == NULL || m->switch_group == NULL) {
            ok = sim_parse_fail(&ctx, "out of memory");
        } else {
            memset(m->p2p_nvlink, -1, cells);
            for (size_t i = 0; i < cells; i++) {
                m->levels[i] = -1;
            }
            for (size_t i = 0; i < m->n_gpus; i++) {
                m->levels[i * m->n_gpus + i] = NVML_TOPOLOGY_INTERNAL;
            }
        }
    }
    for (size_t i = 0; ok == 0 && i < n_late; i++) {
        ctx.line = late_lines[i];
        ok = parse_late_line(&ctx, m, late[i]);
    }
    if (ok == 0) {
        sim_find_link_peers(m);
    }
    if (ok == 0 && sim_group_switches(m) != 0) {
        ctx.line = 0;
        ok = sim_parse_fail(&ctx, "out of memory");
    }
    for (size_t i = 0; ok == 0 && i < m->n_gpus; i++) {
        sim_gpu *gpu = &m->gpus[i];
        ctx.line = 0;
        if (gpu->bus_id[0] == '\0') {
            ok = sim_parse_fail(&ctx, "GPU %zu has no bus_id", i);
        }
        gpu->handle.gpu = (int)i;
        gpu->handle.mig = -1;
        for (size_t j = 0; j < gpu->n_migs; j++) {
            sim_mig *mig = &gpu->migs[j];
            mig->handle = (struct nvmlDevice_st){(int)i, (int)j};
            mig->gi_handle = (struct nvmlGpuInstance_st){(int)i, (int)j};
            mig->ci_handle = (struct nvmlComputeInstance_st){(int)i, (int)j};
        }
    }
    free(buffer);
    for (size_t i = 0; i < n_late; i++) {
        free(late[i]);
    }
    free(late);
    free(late_lines);
    if (ok != 0) {
        free_machine(m);
        return NULL;
    }
    return m;
}

/* ------------------------------------------------------------------------- */
/* Configuration entry points (exported) */

GFDSIM_API int gfdsim_configure(const char *config_path) {
    sim_state *st = sim_state_lock();
    sim_machine *m = NULL;
    if (config_path != NULL) {
        char error[sizeof st->last_error];
        m = sim_load_machine(config_path, error, sizeof error);
        if (m == NULL) {
            memcpy(st->last_error, error, sizeof st->last_error);
            sim_state_unlock(st, NVML_SUCCESS);
            return -1;
        }
    }
    /* Event sets record GPUs of the old machine: they go with it. */
    sim_release_event_sets(st);
    /* The machine replaced is kept until the next configuration (see sim_state.retired). */
    free_machine(st->retired);
    st->retired = st->machine;
    st->machine = m;
    st->configured = config_path != NULL;
    st->last_error[0] = '\0';
    sim_state_unlock(st, NVML_SUCCESS);
    return 0;
}

GFDSIM_API const char *gfdsim_last_error(void) {
    return sim_state_last_error();
}
