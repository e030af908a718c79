/*
 * sim_device.c: device enumeration and identity. Owns nvmlDeviceGetCount*,
 * nvmlDeviceGetHandleByIndex*, ...ByPciBusId*, ...ByUUID, nvmlDeviceGetIndex,
 * nvmlDeviceGetMinorNumber, nvmlDeviceGetName, nvmlDeviceGetUUID, nvmlDeviceGetSerial,
 * nvmlDeviceGetPciInfo*, nvmlDeviceGetArchitecture and nvmlDeviceGetBrand.
 *
 * Enumeration leaves vanished GPUs out (fault_gpu_vanished): the count drops, later GPUs
 * move down an index (nvmlDeviceGetIndex agrees), and lookups by bus id or UUID return
 * NOT_FOUND. Minor numbers stay the machine file's index: /dev/nvidiaN nodes are the
 * kernel's, made when the driver loaded, and keep their numbers.
 */

#include "nvmlsim.h"

#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------- */
/* Device enumeration */

static nvmlReturn_t device_count(sim_state *st, const char *call, unsigned int *deviceCount) {
    nvmlReturn_t rc = sim_enter_system(st, call);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (deviceCount == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    *deviceCount = sim_visible_count(st->machine);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *deviceCount) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, device_count(st, __func__, deviceCount));
}

nvmlReturn_t nvmlDeviceGetCount(unsigned int *deviceCount) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, device_count(st, __func__, deviceCount));
}

static nvmlReturn_t handle_by_index(sim_state *st, const char *call, unsigned int index,
                                    nvmlDevice_t *device) {
    if (st->init_count == 0 || st->machine == NULL) {
        return NVML_ERROR_UNINITIALIZED;
    }
    sim_gpu *g = sim_visible_gpu(st->machine, index);
    if (device == NULL || g == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    int gpu = g->handle.gpu;
    nvmlReturn_t rc = sim_admit(st, call, &gpu, 1);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    *device = &g->handle;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *device) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, handle_by_index(st, __func__, index, device));
}

nvmlReturn_t nvmlDeviceGetHandleByIndex(unsigned int index, nvmlDevice_t *device) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, handle_by_index(st, __func__, index, device));
}

static nvmlReturn_t handle_by_bus_id(sim_state *st, const char *call, const char *pciBusId,
                                     nvmlDevice_t *device) {
    nvmlReturn_t rc = sim_enter_system(st, call);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    unsigned d, b, dv, f;
    if (pciBusId == NULL || device == NULL || sim_parse_bus_id(pciBusId, &d, &b, &dv, &f) != 0) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (size_t i = 0; i < st->machine->n_gpus; i++) {
        sim_gpu *g = &st->machine->gpus[i];
        if (g->domain == d && g->bus == b && g->device == dv && g->function == f &&
            !sim_vanished(g)) {
            if (g->lost) {
                return NVML_ERROR_GPU_IS_LOST;
            }
            *device = &g->handle;
            return NVML_SUCCESS;
        }
    }
    return NVML_ERROR_NOT_FOUND;
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId_v2(const char *pciBusId, nvmlDevice_t *device) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, handle_by_bus_id(st, __func__, pciBusId, device));
}

nvmlReturn_t nvmlDeviceGetHandleByPciBusId(const char *pciBusId, nvmlDevice_t *device) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, handle_by_bus_id(st, __func__, pciBusId, device));
}

nvmlReturn_t nvmlDeviceGetHandleByUUID(const char *uuid, nvmlDevice_t *device) {
    sim_state *st = sim_state_lock();
    nvmlReturn_t rc = sim_enter_system(st, __func__);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (uuid == NULL || device == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    for (size_t i = 0; i < st->machine->n_gpus; i++) {
        sim_gpu *g = &st->machine->gpus[i];
        if (sim_vanished(g)) {
            continue;
        }
        if (g->has_uuid && strcmp(g->uuid, uuid) == 0) {
            if (g->lost) {
                return sim_state_unlock(st, NVML_ERROR_GPU_IS_LOST);
            }
            *device = &g->handle;
            return sim_state_unlock(st, NVML_SUCCESS);
        }
        for (size_t j = 0; j < g->n_migs; j++) {
            if (g->migs[j].uuid[0] != '\0' && strcmp(g->migs[j].uuid, uuid) == 0) {
                if (g->lost) {
                    return sim_state_unlock(st, NVML_ERROR_GPU_IS_LOST);
                }
                *device = &g->migs[j].handle;
                return sim_state_unlock(st, NVML_SUCCESS);
            }
        }
    }
    return sim_state_unlock(st, NVML_ERROR_NOT_FOUND);
}

nvmlReturn_t nvmlDeviceGetIndex(nvmlDevice_t device, unsigned int *index) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (index == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    *index = sim_visible_index(st->machine, gpu);
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMinorNumber(nvmlDevice_t device, unsigned int *minorNumber) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (minorNumber == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    /* /dev/nvidiaN numbering follows the machine file's order (also past a vanished GPU). */
    *minorNumber = (unsigned)gpu->handle.gpu;
    return sim_state_unlock(st, NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* Identity */

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t device, char *name, unsigned int length) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(st, __func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (name == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (mig != NULL) {
        return sim_state_unlock(st, mig->name[0] != '\0' ? sim_copy_string(mig->name, name, length)
                                                         : NVML_ERROR_NOT_SUPPORTED);
    }
    return sim_state_unlock(
        st, gpu->has_name ? sim_copy_string(gpu->name, name, length) : NVML_ERROR_NOT_SUPPORTED);
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t device, char *uuid, unsigned int length) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(st, __func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (uuid == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (mig != NULL) {
        return sim_state_unlock(st, mig->uuid[0] != '\0' ? sim_copy_string(mig->uuid, uuid, length)
                                                         : NVML_ERROR_NOT_SUPPORTED);
    }
    return sim_state_unlock(
        st, gpu->has_uuid ? sim_copy_string(gpu->uuid, uuid, length) : NVML_ERROR_NOT_SUPPORTED);
}

/* The board's serial: GPUs without an inforom (GeForce) answer NOT_SUPPORTED. */
nvmlReturn_t nvmlDeviceGetSerial(nvmlDevice_t device, char *serial, unsigned int length) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (serial == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    return sim_state_unlock(st, gpu->has_serial ? sim_copy_string(gpu->serial, serial, length)
                                                : NVML_ERROR_NOT_SUPPORTED);
}

void sim_fill_pci(const sim_gpu *gpu, nvmlPciInfo_t *pci) {
    memset(pci, 0, sizeof *pci);
    pci->domain = gpu->domain;
    pci->bus = gpu->bus;
    pci->device = gpu->device;
    pci->pciDeviceId = gpu->has_pci_device_id ? gpu->pci_device_id : 0;
    pci->pciSubSystemId = 0;
    snprintf(pci->busId, sizeof pci->busId, "%08X:%02X:%02X.%X", gpu->domain, gpu->bus,
             gpu->device, gpu->function);
    snprintf(pci->busIdLegacy, sizeof pci->busIdLegacy, "%04X:%02X:%02X.%X",
             gpu->domain & 0xFFFFu, gpu->bus & 0xFFu, gpu->device & 0xFFu,
             gpu->function & 0xFu);
}

static nvmlReturn_t pci_info(sim_state *st, const char *call, nvmlDevice_t device,
                             nvmlPciInfo_t *pci) {
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, call, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (pci == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    sim_fill_pci(gpu, pci);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPciInfo_v3(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, pci_info(st, __func__, device, pci));
}

nvmlReturn_t nvmlDeviceGetPciInfo_v2(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, pci_info(st, __func__, device, pci));
}

nvmlReturn_t nvmlDeviceGetPciInfo(nvmlDevice_t device, nvmlPciInfo_t *pci) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(st, pci_info(st, __func__, device, pci));
}

/* ------------------------------------------------------------------------- */
/* Architecture and brand */

nvmlReturn_t nvmlDeviceGetArchitecture(nvmlDevice_t device, nvmlDeviceArchitecture_t *arch) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(st, __func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (arch == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_architecture) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    *arch = gpu->architecture;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetBrand(nvmlDevice_t device, nvmlBrandType_t *type) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(st, __func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (type == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_brand) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    *type = (nvmlBrandType_t)gpu->brand;
    return sim_state_unlock(st, NVML_SUCCESS);
}
