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
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(__func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (memory == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    unsigned long long total;
    if (!memory_of(gpu, mig, &total)) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    /* An idle simulated GPU: nothing allocated, nothing reserved. */
    memory->total = total;
    memory->free = total;
    memory->used = 0;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetMemoryInfo_v2(nvmlDevice_t device, nvmlMemory_v2_t *memory) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(__func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (memory == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (memory->version != nvmlMemory_v2) {
        RETURN(NVML_ERROR_ARGUMENT_VERSION_MISMATCH);
    }
    unsigned long long total;
    if (!memory_of(gpu, mig, &total)) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    memory->total = total;
    memory->reserved = 0;
    memory->free = total;
    memory->used = 0;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCudaComputeCapability(nvmlDevice_t device, int *major, int *minor) {
    LOCK();
    sim_gpu *gpu;
    sim_mig *mig;
    nvmlReturn_t rc = sim_enter_device(__func__, device, &gpu, &mig);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (major == NULL || minor == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_compute) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    *major = gpu->compute_major;
    *minor = gpu->compute_minor;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetComputeMode(nvmlDevice_t device, nvmlComputeMode_t *mode) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (mode == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    *mode = NVML_COMPUTEMODE_DEFAULT;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetDisplayMode(nvmlDevice_t device, nvmlEnableState_t *display) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (display == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    /* A VGA-class function drives a display; a 3D controller has no display engine. */
    int vga = gpu->has_pci_class && (gpu->pci_class >> 8) == 0x0300;
    *display = vga ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    RETURN(NVML_SUCCESS);
}

/* ------------------------------------------------------------------------- */
/* NUMA and CPU affinity */

nvmlReturn_t nvmlDeviceGetNumaNodeId(nvmlDevice_t device, unsigned int *node) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (node == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_gpu_numa_id) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    *node = gpu->gpu_numa_id;
    RETURN(NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetCpuAffinity(nvmlDevice_t device, unsigned int cpuSetSize,
                                      unsigned long *cpuSet) {
    LOCK();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(__func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        RETURN(rc);
    }
    if (cpuSetSize == 0 || cpuSet == NULL) {
        RETURN(NVML_ERROR_INVALID_ARGUMENT);
    }
    if (!gpu->has_affinity) {
        RETURN(NVML_ERROR_NOT_SUPPORTED);
    }
    /* Like NVML, a set too small for the machine's CPUs is filled as far as it goes. */
    for (unsigned i = 0; i < cpuSetSize; i++) {
        cpuSet[i] = i < gpu->affinity_words ? gpu->affinity[i] : 0;
    }
    RETURN(NVML_SUCCESS);
}
