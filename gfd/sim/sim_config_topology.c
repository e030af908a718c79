/*
 * sim_config_topology.c: how the machine file's GPUs reach each other, as loaded: the
 * pair (PCIe common ancestor) and nvlink_p2p records (docs/simulator.md, "The machine
 * file"), which GPU each NVLink ends at, and the NVSwitch fabrics (GPUs that share a
 * switch, joined further by trunks that an nvlink_p2p "ok" between two fabrics stands
 * for). What faults leave of these links is sim_core.c's (sim_link_cut).
 */

#include "nvmlsim.h"

#include <stdlib.h>
#include <string.h>

int sim_parse_topology_record(sim_parse_ctx *ctx, sim_machine *m, const char *key, char *value) {
    unsigned n[3];
    if (strcmp(key, "pair") == 0) {
        if (sim_parse_numbers(ctx, key, value, n, 3) != 0) {
            return -1;
        }
        if (!(n[0] < n[1] && n[1] < m->n_gpus)) {
            return sim_parse_fail(ctx, "pair: %u %u must be two GPU indices a < b below %zu", n[0],
                                  n[1], m->n_gpus);
        }
        switch (n[2]) {
        case NVML_TOPOLOGY_INTERNAL:
        case NVML_TOPOLOGY_SINGLE:
        case NVML_TOPOLOGY_MULTIPLE:
        case NVML_TOPOLOGY_HOSTBRIDGE:
        case NVML_TOPOLOGY_NODE:
        case NVML_TOPOLOGY_SYSTEM:
            break;
        default:
            return sim_parse_fail(ctx, "pair: %u is not an nvmlGpuTopologyLevel_t", n[2]);
        }
        m->levels[n[0] * m->n_gpus + n[1]] = (int)n[2];
        m->levels[n[1] * m->n_gpus + n[0]] = (int)n[2];
        return 0;
    }
    if (strcmp(key, "nvlink_p2p") == 0) {
        if (sim_parse_numbers(ctx, key, value, n, 3) != 0) {
            return -1;
        }
        if (!(n[0] < n[1] && n[1] < m->n_gpus)) {
            return sim_parse_fail(ctx, "nvlink_p2p: %u %u must be two GPU indices a < b below %zu",
                                  n[0], n[1], m->n_gpus);
        }
        if (n[2] > NVML_P2P_STATUS_UNKNOWN) {
            return sim_parse_fail(ctx, "nvlink_p2p: %u is not an nvmlGpuP2PStatus_t", n[2]);
        }
        if (m->p2p_nvlink[n[0] * m->n_gpus + n[1]] >= 0) {
            return sim_parse_fail(ctx, "nvlink_p2p: pair %u %u is listed twice", n[0], n[1]);
        }
        m->p2p_nvlink[n[0] * m->n_gpus + n[1]] = (signed char)n[2];
        m->p2p_nvlink[n[1] * m->n_gpus + n[0]] = (signed char)n[2];
        return 0;
    }
    return sim_parse_fail(ctx, "unknown key '%s'", key);
}

void sim_find_link_peers(sim_machine *m) {
    for (size_t i = 0; i < m->n_gpus; i++) {
        for (size_t k = 0; k < m->gpus[i].n_links; k++) {
            sim_link *l = &m->gpus[i].links[k];
            unsigned d, b, dv, f;
            l->remote_gpu = -1;
            if (!l->has_remote_bus || sim_parse_bus_id(l->remote_bus, &d, &b, &dv, &f) != 0) {
                continue;
            }
            for (size_t j = 0; j < m->n_gpus; j++) {
                const sim_gpu *g = &m->gpus[j];
                if (j != i && g->domain == d && g->bus == b && g->device == dv &&
                    g->function == f) {
                    l->remote_gpu = (int)j;
                }
            }
        }
    }
}

/* ------------------------------------------------------------------------- */
/* NVSwitch fabrics */

typedef struct {
    const char *bus;
    int gpu;
} switch_end;

static int compare_switch_ends(const void *left, const void *right) {
    const switch_end *a = left, *b = right;
    int order = strcmp(a->bus, b->bus);
    return order != 0 ? order : (a->gpu > b->gpu) - (a->gpu < b->gpu);
}

static int find_group(int *parent, int node) {
    while (parent[node] != node) {
        parent[node] = parent[parent[node]];
        node = parent[node];
    }
    return node;
}

static void join_groups(int *parent, int a, int b) {
    int ra = find_group(parent, a), rb = find_group(parent, b);
    if (ra < rb) {
        parent[rb] = ra;
    } else if (rb < ra) {
        parent[ra] = rb;
    }
}

/* switch_group: GPUs that share a switch, joined further by NVLink P2P "ok" between GPUs
 * that both have switch links (the trunks of a two-board machine); -1 without switch links. */
int sim_group_switches(sim_machine *m) {
    size_t ends = 0;
    for (size_t i = 0; i < m->n_gpus; i++) {
        ends += m->gpus[i].n_links;
    }
    switch_end *end = malloc((ends > 0 ? ends : 1) * sizeof *end);
    if (end == NULL) {
        return -1;
    }
    size_t count = 0;
    for (size_t i = 0; i < m->n_gpus; i++) {
        const sim_gpu *gpu = &m->gpus[i];
        m->switch_group[i] = (int)i;
        for (size_t k = 0; k < gpu->n_links; k++) {
            const sim_link *l = &gpu->links[k];
            if (l->active && l->has_remote_bus && l->has_remote_type &&
                l->remote_type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
                end[count].bus = l->remote_bus;
                end[count].gpu = (int)i;
                count++;
            }
        }
    }
    qsort(end, count, sizeof *end, compare_switch_ends);
    for (size_t k = 1; k < count; k++) {
        if (strcmp(end[k].bus, end[k - 1].bus) == 0) {
            join_groups(m->switch_group, end[k - 1].gpu, end[k].gpu);
        }
    }
    unsigned char *attached = calloc(m->n_gpus > 0 ? m->n_gpus : 1, 1);
    if (attached == NULL) {
        free(end);
        return -1;
    }
    for (size_t k = 0; k < count; k++) {
        attached[end[k].gpu] = 1;
    }
    free(end);
    for (size_t a = 0; a < m->n_gpus; a++) {
        for (size_t b = a + 1; b < m->n_gpus && attached[a]; b++) {
            if (attached[b] && m->p2p_nvlink[a * m->n_gpus + b] == NVML_P2P_STATUS_OK) {
                join_groups(m->switch_group, (int)a, (int)b);
            }
        }
    }
    for (size_t i = 0; i < m->n_gpus; i++) {
        m->switch_group[i] = attached[i] ? find_group(m->switch_group, (int)i) : -1;
    }
    free(attached);
    return 0;
}
