/*
 * sim_config_gpu.c: the records of one GPU and of its MIG devices (docs/simulator.md,
 * "The machine file"): identity, PCI, memory, compute, CPU affinity, MIG mode, NVLinks,
 * fabric, the values that faults may change (health counters, supported events), and the
 * mig_* records of each MIG device. The record loop (sim_config.c) hands
 * every record after a "gpu" line here until the next machine-wide record.
 */

#include "nvmlsim.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_cpulist(sim_parse_ctx *ctx, const char *text, sim_gpu *gpu) {
    size_t words = 1;
    unsigned long *set = calloc(words, sizeof *set);
    if (set == NULL) {
        return sim_parse_fail(ctx, "out of memory");
    }
    const char *s = text;
    while (*s != '\0') {
        char *end = NULL;
        errno = 0;
        unsigned long lo = strtoul(s, &end, 10);
        if (end == s || errno != 0) {
            free(set);
            return sim_parse_fail(ctx, "cpu_affinity: '%s' is not a cpulist", text);
        }
        unsigned long hi = lo;
        s = end;
        if (*s == '-') {
            s++;
            hi = strtoul(s, &end, 10);
            if (end == s || errno != 0 || hi < lo) {
                free(set);
                return sim_parse_fail(ctx, "cpu_affinity: '%s' is not a cpulist", text);
            }
            s = end;
        }
        if (hi >= (1UL << 20)) {
            free(set);
            return sim_parse_fail(ctx, "cpu_affinity: CPU %lu is out of range", hi);
        }
        size_t need = hi / BITS_PER_WORD + 1;
        if (need > words) {
            unsigned long *grown = realloc(set, need * sizeof *set);
            if (grown == NULL) {
                free(set);
                return sim_parse_fail(ctx, "out of memory");
            }
            memset(grown + words, 0, (need - words) * sizeof *set);
            set = grown;
            words = need;
        }
        for (unsigned long cpu = lo; cpu <= hi; cpu++) {
            set[cpu / BITS_PER_WORD] |= 1UL << (cpu % BITS_PER_WORD);
        }
        if (*s == ',') {
            s++;
            if (*s == '\0') {
                free(set);
                return sim_parse_fail(ctx, "cpu_affinity: '%s' ends with a comma", text);
            }
        } else if (*s != '\0') {
            free(set);
            return sim_parse_fail(ctx, "cpu_affinity: '%s' is not a cpulist", text);
        }
    }
    free(gpu->affinity);
    gpu->affinity = set;
    gpu->affinity_words = words;
    gpu->has_affinity = 1;
    return 0;
}

/* nvlink INDEX ACTIVE REMOTE_BUS|- REMOTE_TYPE|- */
static int parse_nvlink(sim_parse_ctx *ctx, sim_gpu *gpu, const char *key, char *value) {
    char *rest = value;
    char *t_index = sim_next_token(&rest);
    char *t_active = sim_next_token(&rest);
    char *t_bus = sim_next_token(&rest);
    char *t_type = sim_next_token(&rest);
    if (t_type == NULL || sim_next_token(&rest) != NULL) {
        return sim_parse_fail(ctx, "nvlink: expected INDEX ACTIVE REMOTE_BUS|- REMOTE_TYPE|-");
    }
    unsigned index, active;
    if (sim_parse_u32(t_index, &index) != 0 || index >= NVML_NVLINK_MAX_LINKS) {
        return sim_parse_fail(ctx, "nvlink: link index '%s' is not below %d", t_index,
                              NVML_NVLINK_MAX_LINKS);
    }
    if (sim_parse_u32(t_active, &active) != 0 || active > 1) {
        return sim_parse_fail(ctx, "nvlink: ACTIVE must be 0 or 1, got '%s'", t_active);
    }
    for (size_t i = 0; i < gpu->n_links; i++) {
        if (gpu->links[i].index == (int)index) {
            return sim_parse_fail(ctx, "nvlink: link %u is listed twice", index);
        }
    }
    sim_link *links = sim_grow(gpu->links, gpu->n_links, sizeof *links);
    if (links == NULL) {
        return sim_parse_fail(ctx, "out of memory");
    }
    gpu->links = links;
    sim_link *link = &links[gpu->n_links++];
    link->index = (int)index;
    link->active = (int)active;
    link->remote_gpu = -1;
    link->down_after = -1;
    if (strcmp(t_bus, "-") != 0) {
        unsigned d, b, dv, f;
        if (sim_parse_bus_id(t_bus, &d, &b, &dv, &f) != 0) {
            return sim_parse_fail(ctx, "nvlink: '%s' is not a PCI bus id", t_bus);
        }
        link->has_remote_bus = 1;
        if (sim_copy_text(ctx, key, t_bus, link->remote_bus, sizeof link->remote_bus) != 0) {
            return -1;
        }
    }
    if (strcmp(t_type, "-") != 0) {
        if (sim_parse_u32(t_type, &link->remote_type) != 0) {
            return sim_parse_fail(ctx, "nvlink: remote type '%s' is not a number", t_type);
        }
        link->has_remote_type = 1;
    }
    if (index + 1 > gpu->link_count) {
        gpu->link_count = index + 1;
    }
    return 0;
}

/* fabric UUID_HEX32 CLIQUE STATE STATUS HEALTH_MASK|- */
static int parse_fabric(sim_parse_ctx *ctx, sim_gpu *gpu, char *value) {
    char *rest = value;
    char *t_uuid = sim_next_token(&rest);
    char *t_clique = sim_next_token(&rest);
    char *t_state = sim_next_token(&rest);
    char *t_status = sim_next_token(&rest);
    char *t_health = sim_next_token(&rest);
    if (t_health == NULL || sim_next_token(&rest) != NULL) {
        return sim_parse_fail(ctx, "fabric: expected UUID_HEX32 CLIQUE STATE STATUS HEALTH_MASK|-");
    }
    if (strlen(t_uuid) != 2 * NVML_GPU_FABRIC_UUID_LEN) {
        return sim_parse_fail(ctx, "fabric: cluster UUID '%s' is not 32 hex digits", t_uuid);
    }
    for (int i = 0; i < NVML_GPU_FABRIC_UUID_LEN; i++) {
        unsigned byte;
        char pair[3] = {t_uuid[2 * i], t_uuid[2 * i + 1], '\0'};
        if (!isxdigit((unsigned char)pair[0]) || !isxdigit((unsigned char)pair[1]) ||
            sscanf(pair, "%2x", &byte) != 1) {
            return sim_parse_fail(ctx, "fabric: cluster UUID '%s' is not 32 hex digits", t_uuid);
        }
        gpu->fabric_uuid[i] = (unsigned char)byte;
    }
    unsigned state, status, health;
    if (sim_parse_u32(t_clique, &gpu->fabric_clique) != 0 ||
        sim_parse_u32(t_state, &state) != 0 || !sim_value_fits(SIM_VALUE_FABRIC_STATE, state) ||
        sim_parse_u32(t_status, &status) != 0) {
        return sim_parse_fail(ctx, "fabric: CLIQUE, STATE and STATUS must be unsigned numbers");
    }
    gpu->values[SIM_VALUE_FABRIC_STATE] = state;
    gpu->values[SIM_VALUE_FABRIC_STATUS] = status;
    gpu->has_value[SIM_VALUE_FABRIC_STATE] = gpu->has_value[SIM_VALUE_FABRIC_STATUS] = 1;
    if (strcmp(t_health, "-") != 0) {
        if (sim_parse_u32(t_health, &health) != 0) {
            return sim_parse_fail(ctx, "fabric: health mask '%s' is not a number", t_health);
        }
        gpu->values[SIM_VALUE_FABRIC_HEALTH] = health;
        gpu->has_value[SIM_VALUE_FABRIC_HEALTH] = 1;
    }
    gpu->has_fabric = 1;
    return 0;
}

/* value NAME N: a value of the GPU that faults may change (sim_faults.c names them) */
static int parse_value(sim_parse_ctx *ctx, sim_gpu *gpu, char *value) {
    char *rest = value;
    char *t_name = sim_next_token(&rest);
    char *t_value = sim_next_token(&rest);
    if (t_value == NULL || sim_next_token(&rest) != NULL) {
        return sim_parse_fail(ctx, "value: expected NAME N");
    }
    int id = sim_value_named(t_name);
    if (id < 0) {
        return sim_parse_fail(ctx, "value: '%s' is not a GPU value", t_name);
    }
    unsigned long long v;
    if (sim_parse_ull(t_value, &v) != 0 || !sim_value_fits((sim_value_id)id, v)) {
        return sim_parse_fail(ctx, "value: '%s' is not a value of %s", t_value, t_name);
    }
    if (gpu->has_value[id]) {
        return sim_parse_fail(ctx, "value: %s is given twice", t_name);
    }
    gpu->values[id] = v;
    gpu->has_value[id] = 1;
    return 0;
}

/* mig INDEX: a new MIG device of the GPU */
static int parse_mig(sim_parse_ctx *ctx, sim_gpu *gpu, const char *key, char *value) {
    unsigned index;
    if (sim_parse_numbers(ctx, key, value, &index, 1) != 0) {
        return -1;
    }
    if (index >= SIM_MAX_MIG_DEVICES) {
        return sim_parse_fail(ctx, "mig: MIG index %u is not below the limit of %d", index,
                              SIM_MAX_MIG_DEVICES);
    }
    for (size_t i = 0; i < gpu->n_migs; i++) {
        if (gpu->migs[i].index == index) {
            return sim_parse_fail(ctx, "mig: MIG device %u is listed twice", index);
        }
    }
    sim_mig *migs = sim_grow(gpu->migs, gpu->n_migs, sizeof *migs);
    if (migs == NULL) {
        return sim_parse_fail(ctx, "out of memory");
    }
    gpu->migs = migs;
    migs[gpu->n_migs].index = index;
    gpu->n_migs++;
    return 0;
}

/* A mig_* record of the GPU's last MIG device. */
static int parse_mig_record(sim_parse_ctx *ctx, sim_gpu *gpu, const char *key, char *value) {
    unsigned n[5];
    if (gpu->n_migs == 0) {
        return sim_parse_fail(ctx, "%s: comes before any 'mig' line", key);
    }
    sim_mig *mig = &gpu->migs[gpu->n_migs - 1];
    if (strcmp(key, "mig_uuid") == 0) {
        return sim_copy_text(ctx, key, value, mig->uuid, sizeof mig->uuid);
    }
    if (strcmp(key, "mig_name") == 0) {
        return sim_copy_text(ctx, key, value, mig->name, sizeof mig->name);
    }
    if (strcmp(key, "mig_memory_total_bytes") == 0) {
        mig->has_memory = 1;
        if (sim_parse_ull(value, &mig->memory) != 0) {
            return sim_parse_fail(ctx, "%s: '%s' is not an unsigned number", key, value);
        }
        return 0;
    }
    if (strcmp(key, "mig_instance") == 0) {
        if (sim_parse_numbers(ctx, key, value, n, 2) != 0) {
            return -1;
        }
        mig->gi_id = n[0];
        mig->ci_id = n[1];
        return 0;
    }
    if (strcmp(key, "mig_gi_profile") == 0) {
        if (sim_parse_numbers(ctx, key, value, n, 4) != 0) {
            return -1;
        }
        if (n[1] >= NVML_GPU_INSTANCE_PROFILE_COUNT) {
            return sim_parse_fail(ctx, "%s: profile index %u is not below %d", key, n[1],
                                  NVML_GPU_INSTANCE_PROFILE_COUNT);
        }
        mig->gi_profile_id = n[0];
        mig->gi_profile_index = n[1];
        mig->gi_slices = n[2];
        mig->gi_memory_mib = n[3];
        return 0;
    }
    if (strcmp(key, "mig_ci_profile") == 0) {
        if (sim_parse_numbers(ctx, key, value, n, 2) != 0) {
            return -1;
        }
        mig->ci_slices = n[0];
        mig->multiprocessors = n[1];
        return 0;
    }
    if (strcmp(key, "mig_engines") == 0) {
        if (sim_parse_numbers(ctx, key, value, n, 5) != 0) {
            return -1;
        }
        mig->copy_engines = n[0];
        mig->decoders = n[1];
        mig->encoders = n[2];
        mig->jpeg = n[3];
        mig->ofa = n[4];
        return 0;
    }
    if (strcmp(key, "mig_media_extensions") == 0) {
        unsigned me;
        if (sim_parse_numbers(ctx, key, value, &me, 1) != 0) {
            return -1;
        }
        mig->media_extensions = me != 0;
        return 0;
    }
    return sim_parse_fail(ctx, "unknown key '%s'", key);
}

int sim_parse_gpu_record(sim_parse_ctx *ctx, sim_gpu *gpu, const char *key, char *value) {
    unsigned n[5];
    if (strcmp(key, "name") == 0) {
        gpu->has_name = 1;
        return sim_copy_text(ctx, key, value, gpu->name, sizeof gpu->name);
    }
    if (strcmp(key, "uuid") == 0) {
        gpu->has_uuid = 1;
        return sim_copy_text(ctx, key, value, gpu->uuid, sizeof gpu->uuid);
    }
    if (strcmp(key, "serial") == 0) {
        gpu->has_serial = 1;
        return sim_copy_text(ctx, key, value, gpu->serial, sizeof gpu->serial);
    }
    if (strcmp(key, "bus_id") == 0) {
        if (sim_copy_text(ctx, key, value, gpu->bus_id, sizeof gpu->bus_id) != 0) {
            return -1;
        }
        if (sim_parse_bus_id(value, &gpu->domain, &gpu->bus, &gpu->device, &gpu->function) != 0) {
            return sim_parse_fail(ctx, "bus_id: '%s' is not a PCI bus id", value);
        }
        return 0;
    }
    if (strcmp(key, "pci_device_id") == 0) {
        gpu->has_pci_device_id = 1;
        return sim_parse_numbers(ctx, key, value, &gpu->pci_device_id, 1);
    }
    if (strcmp(key, "pci_class") == 0) {
        gpu->has_pci_class = 1;
        return sim_parse_numbers(ctx, key, value, &gpu->pci_class, 1);
    }
    if (strcmp(key, "memory_total_bytes") == 0) {
        gpu->has_memory = 1;
        if (sim_parse_ull(value, &gpu->memory) != 0) {
            return sim_parse_fail(ctx, "%s: '%s' is not an unsigned number", key, value);
        }
        return 0;
    }
    if (strcmp(key, "compute_capability") == 0) {
        if (sim_parse_numbers(ctx, key, value, n, 2) != 0) {
            return -1;
        }
        gpu->has_compute = 1;
        gpu->compute_major = (int)n[0];
        gpu->compute_minor = (int)n[1];
        return 0;
    }
    if (strcmp(key, "architecture") == 0) {
        gpu->has_architecture = 1;
        return sim_parse_numbers(ctx, key, value, &gpu->architecture, 1);
    }
    if (strcmp(key, "brand") == 0) {
        gpu->has_brand = 1;
        return sim_parse_numbers(ctx, key, value, &gpu->brand, 1);
    }
    if (strcmp(key, "virtualization_mode") == 0) {
        gpu->has_virtualization_mode = 1;
        return sim_parse_numbers(ctx, key, value, &gpu->virtualization_mode, 1);
    }
    if (strcmp(key, "gpu_numa_id") == 0) {
        gpu->has_gpu_numa_id = 1;
        return sim_parse_numbers(ctx, key, value, &gpu->gpu_numa_id, 1);
    }
    if (strcmp(key, "cpu_affinity") == 0) {
        return parse_cpulist(ctx, value, gpu);
    }
    if (strcmp(key, "mig_mode") == 0) {
        if (sim_parse_numbers(ctx, key, value, n, 2) != 0) {
            return -1;
        }
        gpu->has_mig_mode = 1;
        gpu->mig_current = n[0] != 0;
        gpu->mig_pending = n[1] != 0;
        return 0;
    }
    if (strcmp(key, "max_mig_devices") == 0) {
        if (sim_parse_numbers(ctx, key, value, &gpu->max_mig_devices, 1) != 0) {
            return -1;
        }
        if (gpu->max_mig_devices > SIM_MAX_MIG_DEVICES) {
            return sim_parse_fail(ctx, "max_mig_devices: %u is more than the limit of %d",
                                  gpu->max_mig_devices, SIM_MAX_MIG_DEVICES);
        }
        return 0;
    }
    if (strcmp(key, "nvlink_version") == 0) {
        gpu->has_nvlink_version = 1;
        return sim_parse_numbers(ctx, key, value, &gpu->nvlink_version, 1);
    }
    if (strcmp(key, "nvlink") == 0) {
        return parse_nvlink(ctx, gpu, key, value);
    }
    if (strcmp(key, "value") == 0) {
        return parse_value(ctx, gpu, value);
    }
    if (strcmp(key, "fabric") == 0) {
        return parse_fabric(ctx, gpu, value);
    }
    if (strcmp(key, "mig") == 0) {
        return parse_mig(ctx, gpu, key, value);
    }
    if (strncmp(key, "mig_", 4) == 0) {
        return parse_mig_record(ctx, gpu, key, value);
    }
    return sim_parse_fail(ctx, "unknown key '%s'", key);
}
