/*
 * sim_memory.c: memory, compute and the host side of a GPU. Owns
 * nvmlDeviceGetMemoryInfo*, nvmlDeviceGetCudaComputeCapability,
 * nvmlDeviceGetComputeMode, nvmlDeviceGetDisplayMode, nvmlDeviceGetNumaNodeId and
 * nvmlDeviceGetCpuAffinity.
 */

#include "nvmlsim.h"

/* ------------------------------------------------------------------------- */
/* Memory, compute capability and modes */

static int memory_of(const sim_gpu *gpu, const sim_mig *mig, unsigned long long *total) {
    if (mig != NULL) {
        *total = mig->memory;
        return mig->has_memory;
    }
    *total = gpu->memory;
    return gpu->has_memory;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t device, nvmlMemory_t *memory) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(st, __func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (memory == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    unsigned long long total;
    if (!memory_of(gpu, mig, &total)) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    /* An idle simulated GPU: nothing allocated, nothing reserved. */
    memory->total = total;
    memory->free = total;
    memory->used = 0;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(st, __func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (memory == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (memory->version != nvmlMemory_v2) {
        return sim_state_unlock(st, NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    unsigned long long total;
    if (!memory_of(gpu, mig, &total)) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    memory->total = total;
    memory->reserved = 0;
    memory->free = total;
    memory->used = 0;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(st, __func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (major == NULL || minor == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_compute) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    *major = gpu->compute_major;
    *minor = gpu->compute_minor;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (mode == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    *mode = NVML_COMPUTEMODE_DEFAULT;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (display == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    /* A VGA-class function drives a display; a 3D controller has no display engine. */
    int vga = gpu->has_pci_class && (gpu->pci_class >> 8) == 0x0300;
    *display = vga ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return sim_state_unlock(st, NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* NUMA and CPU affinity */

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (node == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_gpu_numa_id) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    *node = gpu->gpu_numa_id;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                      unsigned long *cpuSet) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (cpuSetSize == 0 || cpuSet == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_affinity) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    /* Like NVML, a set too small for the machine's CPUs is filled as far as it goes. */
    for (unsigned i = 0; i < cpuSetSize; i++) {
        cpuSet[i] = i < gpu->affinity_words ? gpu->affinity[i] : 0;
    }
    return sim_state_unlock(st, NVML_SUCCESS);
}
