/*
 * sim_fabric.c: the GPU fabric and virtualization. Owns nvmlDeviceGetGpuFabricInfoV,
 * nvmlDeviceGetGpuFabricInfo and nvmlDeviceGetVirtualizationMode. The fabric's state,
 * status and health mask are GPU values (SIM_VALUE_FABRIC_*), which faults may change.
 */

#include "nvmlsim.h"

#include <string.h>

/* ------------------------------------------------------------------------- */
/* Fabric */

nvmlReturn_t nvmlDeviceGetGpuFabricInfoV(nvmlDevice_t device, nvmlGpuFabricInfoV_t *gpuFabricInfo) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (gpuFabricInfo == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    unsigned version = gpuFabricInfo->version;
    if (version != nvmlGpuFabricInfo_v2 && version != nvmlGpuFabricInfo_v3) {
        return sim_state_unlock(st, NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    if (!gpu->has_fabric) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    /* v2 is a prefix of v3: fill the shared fields through the v2 layout only. */
    nvmlGpuFabricInfo_v2_t *v2 = (nvmlGpuFabricInfo_v2_t *)gpuFabricInfo;
    unsigned long long state, status, health;
    sim_value(st->machine, gpu, SIM_VALUE_FABRIC_STATE, &state);
    sim_value(st->machine, gpu, SIM_VALUE_FABRIC_STATUS, &status);
    /* A fabric record without a health mask (a driver of the v1 call) answers 0. */
    sim_value(st->machine, gpu, SIM_VALUE_FABRIC_HEALTH, &health);
    memcpy(v2->clusterUuid, gpu->fabric_uuid, sizeof v2->clusterUuid);
    v2->status = (nvmlReturn_t)status;
    v2->cliqueId = gpu->fabric_clique;
    v2->state = (nvmlGpuFabricState_t)state;
    v2->healthMask = (unsigned)health;
    if (version == nvmlGpuFabricInfo_v3) {
        gpuFabricInfo->healthSummary = NVML_GPU_FABRIC_HEALTH_SUMMARY_NOT_SUPPORTED;
    }
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetGpuFabricInfo(nvmlDevice_t device, nvmlGpuFabricInfo_t *gpuFabricInfo) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (gpuFabricInfo == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_fabric) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    unsigned long long state, status;
    sim_value(st->machine, gpu, SIM_VALUE_FABRIC_STATE, &state);
    sim_value(st->machine, gpu, SIM_VALUE_FABRIC_STATUS, &status);
    memcpy(gpuFabricInfo->clusterUuid, gpu->fabric_uuid, sizeof gpuFabricInfo->clusterUuid);
    gpuFabricInfo->status = (nvmlReturn_t)status;
    gpuFabricInfo->cliqueId = gpu->fabric_clique;
    gpuFabricInfo->state = (nvmlGpuFabricState_t)state;
    return sim_state_unlock(st, NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* Virtualization: the machine file's virtualization_mode, NOT_SUPPORTED without one (as a
 * driver that cannot tell; facts read from such a driver have none). */

nvmlReturn_t nvmlDeviceGetVirtualizationMode(nvmlDevice_t device,
                                             nvmlGpuVirtualizationMode_t *pVirtualMode) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (pVirtualMode == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_virtualization_mode) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    *pVirtualMode = (nvmlGpuVirtualizationMode_t)gpu->virtualization_mode;
    return sim_state_unlock(st, NVML_SUCCESS);
}
