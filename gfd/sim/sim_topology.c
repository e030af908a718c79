/*
 * sim_topology.c: how GPUs reach each other and the CPUs. Owns
 * nvmlSystemGetTopologyGpuSet, nvmlDeviceGetTopologyCommonAncestor,
 * nvmlDeviceGetTopologyNearestGpus, nvmlDeviceGetP2PStatus, the per-link
 * nvmlDeviceGetNvLink* calls and nvmlDeviceGetFieldValues (NVLink link count).
 *
 * Faults: a vanished GPU (fault_gpu_vanished) is no longer in any GPU set or nearest-GPU
 * list, and calls naming its old handle return GPU_IS_LOST (call admission). A link cut
 * by a fault (fault_nvlink_down, or a link whose far end is a vanished GPU) reads as an
 * inactive link as the reader records one: state DISABLED, no remote PCI info or device
 * type (NOT_SUPPORTED); its version and the link count stay. NVLink P2P is then derived
 * from the links left: an nvlink_p2p status given for a pair no longer holds once a link
 * of either GPU is cut; the NVSwitch fabrics and their trunks stay as loaded (switches do
 * not vanish with a GPU), and a GPU with no switch link left is on none of them.
 */

#include "nvmlsim.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ------------------------------------------------------------------------- */
/* Topology */

static int affinity_has_cpu(const sim_gpu *gpu, unsigned cpu) {
    size_t word = cpu / BITS_PER_WORD;
    return gpu->has_affinity && word < gpu->affinity_words &&
           (gpu->affinity[word] >> (cpu % BITS_PER_WORD)) & 1UL;
}

/* Shared by the two "count 0 first, then the array" calls. */
static nvmlReturn_t fill_device_array(nvmlDevice_t *matches, unsigned found, unsigned *count,
                                      nvmlDevice_t *deviceArray) {
    if (*count == 0) {
        *count = found;
        return NVML_SUCCESS;
    }
    if (deviceArray == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (*count < found) {
        *count = found;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    for (unsigned i = 0; i < found; i++) {
        deviceArray[i] = matches[i];
    }
    *count = found;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetTopologyGpuSet(unsigned int cpuNumber, unsigned int *count,
                                         nvmlDevice_t *deviceArray) {
    sim_state *st = sim_state_lock();
    nvmlReturn_t rc = sim_enter_system(st, __func__);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (count == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    nvmlDevice_t *matches = calloc(st->machine->n_gpus + 1, sizeof *matches);
    if (matches == NULL) {
        return sim_state_unlock(st, NVML_ERROR_MEMORY);
    }
    unsigned found = 0;
    for (size_t i = 0; i < st->machine->n_gpus; i++) {
        const sim_gpu *g = &st->machine->gpus[i];
        if (!sim_vanished(g) && affinity_has_cpu(g, cpuNumber)) {
            matches[found++] = &st->machine->gpus[i].handle;
        }
    }
    rc = fill_device_array(matches, found, count, deviceArray);
    free(matches);
    return sim_state_unlock(st, rc);
}

static int level_of(const sim_machine *m, const sim_gpu *a, const sim_gpu *b) {
    return m->levels[(size_t)a->handle.gpu * m->n_gpus + (size_t)b->handle.gpu];
}

nvmlReturn_t nvmlDeviceGetTopologyCommonAncestor(nvmlDevice_t device1, nvmlDevice_t device2,
                                                 nvmlGpuTopologyLevel_t *pathInfo) {
    sim_state *st = sim_state_lock();
    sim_gpu *a, *b;
    nvmlReturn_t rc = sim_enter_pair(st, __func__, device1, device2, &a, &b);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (pathInfo == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    int level = level_of(st->machine, a, b);
    if (level < 0) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    *pathInfo = (nvmlGpuTopologyLevel_t)level;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTopologyNearestGpus(nvmlDevice_t device, nvmlGpuTopologyLevel_t level,
                                              unsigned int *count, nvmlDevice_t *deviceArray) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (count == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    switch (level) {
    case NVML_TOPOLOGY_INTERNAL:
    case NVML_TOPOLOGY_SINGLE:
    case NVML_TOPOLOGY_MULTIPLE:
    case NVML_TOPOLOGY_HOSTBRIDGE:
    case NVML_TOPOLOGY_NODE:
    case NVML_TOPOLOGY_SYSTEM:
        break;
    default:
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    nvmlDevice_t *matches = calloc(st->machine->n_gpus + 1, sizeof *matches);
    if (matches == NULL) {
        return sim_state_unlock(st, NVML_ERROR_MEMORY);
    }
    unsigned found = 0;
    for (size_t i = 0; i < st->machine->n_gpus; i++) {
        sim_gpu *other = &st->machine->gpus[i];
        int l = level_of(st->machine, gpu, other);
        if (other != gpu && !sim_vanished(other) && l >= 0 && l <= (int)level) {
            matches[found++] = &other->handle;
        }
    }
    rc = fill_device_array(matches, found, count, deviceArray);
    free(matches);
    return sim_state_unlock(st, rc);
}

/* Two GPUs share NVLink when a link of one ends at the other, or both reach one switch. */
static int nvlink_connected(const sim_machine *m, const sim_gpu *a, const sim_gpu *b) {
    for (size_t i = 0; i < a->n_links; i++) {
        const sim_link *la = &a->links[i];
        if (!sim_link_active(m, a, la) || !la->has_remote_bus) {
            continue;
        }
        if (strcmp(la->remote_bus, b->bus_id) == 0) {
            return 1;
        }
        if (!la->has_remote_type || la->remote_type != NVML_NVLINK_DEVICE_TYPE_SWITCH) {
            continue;
        }
        for (size_t j = 0; j < b->n_links; j++) {
            const sim_link *lb = &b->links[j];
            if (sim_link_active(m, b, lb) && lb->has_remote_bus &&
                strcmp(la->remote_bus, lb->remote_bus) == 0) {
                return 1;
            }
        }
    }
    return 0;
}

/* A link to an NVSwitch is still up: the GPU is on its switch fabric. */
static int on_switch_fabric(const sim_machine *m, const sim_gpu *gpu) {
    for (size_t i = 0; i < gpu->n_links; i++) {
        const sim_link *l = &gpu->links[i];
        if (sim_link_active(m, gpu, l) && l->has_remote_bus && l->has_remote_type &&
            l->remote_type == NVML_NVLINK_DEVICE_TYPE_SWITCH) {
            return 1;
        }
    }
    return 0;
}

static int any_link_cut(const sim_machine *m, const sim_gpu *gpu) {
    for (size_t i = 0; i < gpu->n_links; i++) {
        if (sim_link_cut(m, gpu, &gpu->links[i])) {
            return 1;
        }
    }
    return 0;
}

nvmlReturn_t nvmlDeviceGetP2PStatus(nvmlDevice_t device1, nvmlDevice_t device2,
                                    nvmlGpuP2PCapsIndex_t p2pIndex,
                                    nvmlGpuP2PStatus_t *p2pStatus) {
    sim_state *st = sim_state_lock();
    sim_gpu *a, *b;
    nvmlReturn_t rc = sim_enter_pair(st, __func__, device1, device2, &a, &b);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    const sim_machine *m = st->machine;
    if (p2pStatus == NULL || a == b || p2pIndex >= NVML_P2P_CAPS_INDEX_UNKNOWN) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    /* NVLink P2P as the machine file gives it, else derived: direct links, a shared switch,
     * or switches joined by trunks (see switch_group). */
    int cut = any_link_cut(m, a) || any_link_cut(m, b);
    int given =
        cut ? -1 : m->p2p_nvlink[(size_t)a->handle.gpu * m->n_gpus + (size_t)b->handle.gpu];
    int trunked = a->handle.gpu != b->handle.gpu && m->switch_group[a->handle.gpu] >= 0 &&
                  m->switch_group[a->handle.gpu] == m->switch_group[b->handle.gpu] &&
                  on_switch_fabric(m, a) && on_switch_fabric(m, b);
    int nvlink = given >= 0 ? given == NVML_P2P_STATUS_OK
                            : trunked || nvlink_connected(m, a, b) || nvlink_connected(m, b, a);
    int level = level_of(m, a, b);
    /* GeForce boards have PCIe peer-to-peer disabled by the driver. */
    int geforce = (a->has_brand && a->brand == NVML_BRAND_GEFORCE) ||
                  (b->has_brand && b->brand == NVML_BRAND_GEFORCE);
    nvmlGpuP2PStatus_t status;
    switch (p2pIndex) {
    case NVML_P2P_CAPS_INDEX_NVLINK:
        status = given >= 0 ? (nvmlGpuP2PStatus_t)given
                 : nvlink   ? NVML_P2P_STATUS_OK
                            : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
    case NVML_P2P_CAPS_INDEX_ATOMICS:
        status = nvlink ? NVML_P2P_STATUS_OK : NVML_P2P_STATUS_NOT_SUPPORTED;
        break;
    default:
        if (nvlink && p2pIndex != NVML_P2P_CAPS_INDEX_PCI) {
            status = NVML_P2P_STATUS_OK;
        } else if (geforce) {
            status = NVML_P2P_STATUS_GPU_NOT_SUPPORTED;
        } else if (level < 0) {
            status = NVML_P2P_STATUS_UNKNOWN;
        } else if (level >= NVML_TOPOLOGY_SYSTEM) {
            /* PCIe peer traffic does not cross the inter-socket link. */
            status = NVML_P2P_STATUS_IOH_TOPOLOGY_NOT_SUPPORTED;
        } else {
            status = NVML_P2P_STATUS_OK;
        }
        break;
    }
    *p2pStatus = status;
    return sim_state_unlock(st, NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* NVLink */

static const sim_link *find_link(const sim_gpu *gpu, unsigned link) {
    for (size_t i = 0; i < gpu->n_links; i++) {
        if (gpu->links[i].index == (int)link) {
            return &gpu->links[i];
        }
    }
    return NULL;
}

/* Resolve the GPU and link for a per-link query; *out is NULL for an unlisted link. */
static nvmlReturn_t enter_link(sim_state *st, const char *call, nvmlDevice_t device, unsigned link,
                               const void *result, sim_gpu **gpu, const sim_link **out) {
    nvmlReturn_t rc = sim_enter_physical(st, call, device, gpu);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (result == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if ((*gpu)->link_count == 0) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (link >= (*gpu)->link_count) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *out = find_link(*gpu, link);
    return *out != NULL ? NVML_SUCCESS : NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t nvmlDeviceGetNvLinkState(nvmlDevice_t device, unsigned int link,
                                      nvmlEnableState_t *isActive) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    const sim_link *l = NULL;
    nvmlReturn_t rc = enter_link(st, __func__, device, link, isActive, &gpu, &l);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    *isActive = sim_link_active(st->machine, gpu, l) ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetNvLinkVersion(nvmlDevice_t device, unsigned int link,
                                        unsigned int *version) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    const sim_link *l = NULL;
    nvmlReturn_t rc = enter_link(st, __func__, device, link, version, &gpu, &l);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (!gpu->has_nvlink_version) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    *version = gpu->nvlink_version;
    return sim_state_unlock(st, NVML_SUCCESS);
}

static nvmlReturn_t remote_pci(sim_state *st, const char *call, nvmlDevice_t device,
                               unsigned int link, nvmlPciInfo_t *pci) {
    sim_gpu *gpu;
    const sim_link *l = NULL;
    nvmlReturn_t rc = enter_link(st, call, device, link, pci, &gpu, &l);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (!l->has_remote_bus || sim_link_cut(st->machine, gpu, l)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    sim_gpu remote;
    memset(&remote, 0, sizeof remote);
    sim_parse_bus_id(l->remote_bus, &remote.domain, &remote.bus, &remote.device, &remote.function);
    /* The peer's device id is known when the peer is a GPU of this machine. */
    for (size_t i = 0; i < st->machine->n_gpus; i++) {
        const sim_gpu *g = &st->machine->gpus[i];
        if (g->domain == remote.domain && g->bus == remote.bus && g->device == remote.device &&
            g->function == remote.function) {
            remote.has_pci_device_id = g->has_pci_device_id;
            remote.pci_device_id = g->pci_device_id;
        }
    }
    sim_fill_pci(&remote, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo_v2(nvmlDevice_t device, unsigned int link,
                                                 nvmlPciInfo_t *pci) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, remote_pci(st, __func__, device, link, pci));
}

nvmlReturn_t nvmlDeviceGetNvLinkRemotePciInfo(nvmlDevice_t device, unsigned int link,
                                              nvmlPciInfo_t *pci) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, remote_pci(st, __func__, device, link, pci));
}

nvmlReturn_t nvmlDeviceGetNvLinkRemoteDeviceType(nvmlDevice_t device, unsigned int link,
                                                 nvmlIntNvLinkDeviceType_t *pNvLinkDeviceType) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    const sim_link *l = NULL;
    nvmlReturn_t rc = enter_link(st, __func__, device, link, pNvLinkDeviceType, &gpu, &l);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (!l->has_remote_type || sim_link_cut(st->machine, gpu, l)) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    *pNvLinkDeviceType = (nvmlIntNvLinkDeviceType_t)l->remote_type;
    return sim_state_unlock(st, NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* Field values */

static long long now_usec(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (long long)ts.tv_sec * 1000000LL + ts.tv_nsec / 1000;
}

nvmlReturn_t nvmlDeviceGetFieldValues(nvmlDevice_t device, int valuesCount,
                                      nvmlFieldValue_t *values) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(st, __func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (values == NULL || valuesCount <= 0) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    long long stamp = now_usec();
    for (int i = 0; i < valuesCount; i++) {
        nvmlFieldValue_t *v = &values[i];
        v->timestamp = stamp;
        v->latencyUsec = 0;
        memset(&v->value, 0, sizeof v->value);
        if (v->fieldId == NVML_FI_DEV_NVLINK_LINK_COUNT && mig == NULL && gpu->link_count > 0) {
            v->valueType = NVML_VALUE_TYPE_UNSIGNED_INT;
            v->value.uiVal = gpu->link_count;
            v->nvmlReturn = NVML_SUCCESS;
        } else {
            v->nvmlReturn = NVML_ERROR_NOT_SUPPORTED;
        }
    }
    return sim_state_unlock(st, NVML_SUCCESS);
}
