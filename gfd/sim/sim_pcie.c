/*
 * sim_pcie.c: a GPU's PCIe link as NVML reports it. Owns nvmlDeviceGetCurrPcieLinkGeneration,
 * nvmlDeviceGetCurrPcieLinkWidth, nvmlDeviceGetMaxPcieLinkGeneration,
 * nvmlDeviceGetMaxPcieLinkWidth, nvmlDeviceGetGpuMaxPcieLinkGeneration,
 * nvmlDeviceGetPcieReplayCounter and nvmlDeviceGetUtilizationRates.
 *
 * Each serves one of the GPU's values (the machine file's "value" records as faults leave
 * them, sim_value): a value the file does not give is NOT_SUPPORTED, so which GPU reports
 * what is decided by the writer of the file (gfd/sim/pcie_link.py). Beyond the values, as
 * nvml.h documents: these are physical-GPU queries (a MIG device handle is NOT_SUPPORTED),
 * and utilisation is "not currently supported" on a MIG-enabled GPU. The utilisation's
 * memory part is served as 0: nothing on a simulated GPU reads or writes its memory.
 */

#include "nvmlsim.h"

/* One unsigned value of a physical GPU, NOT_SUPPORTED where the machine file gives none. */
static nvmlReturn_t link_value(sim_state *st, const char *call, nvmlDevice_t device,
                               sim_value_id id, unsigned int *out) {
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, call, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    if (out == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned long long value;
    if (!sim_value(st->machine, gpu, id, &value)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    /* Levels and the replay count were bounded to 32 bits when they were read. */
    *out = (unsigned)value;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkGeneration(nvmlDevice_t device, unsigned int *currLinkGen) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(
        st, link_value(st, __func__, device, SIM_VALUE_PCIE_CURRENT_GENERATION, currLinkGen));
}

nvmlReturn_t nvmlDeviceGetCurrPcieLinkWidth(nvmlDevice_t device, unsigned int *currLinkWidth) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(
        st, link_value(st, __func__, device, SIM_VALUE_PCIE_CURRENT_WIDTH, currLinkWidth));
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkGeneration(nvmlDevice_t device, unsigned int *maxLinkGen) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(
        st, link_value(st, __func__, device, SIM_VALUE_PCIE_MAX_GENERATION, maxLinkGen));
}

nvmlReturn_t nvmlDeviceGetMaxPcieLinkWidth(nvmlDevice_t device, unsigned int *maxLinkWidth) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(
        st, link_value(st, __func__, device, SIM_VALUE_PCIE_MAX_WIDTH, maxLinkWidth));
}

nvmlReturn_t nvmlDeviceGetGpuMaxPcieLinkGeneration(nvmlDevice_t device,
                                                   unsigned int *maxLinkGenDevice) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(
        st, link_value(st, __func__, device, SIM_VALUE_PCIE_GPU_MAX_GENERATION, maxLinkGenDevice));
}

nvmlReturn_t nvmlDeviceGetPcieReplayCounter(nvmlDevice_t device, unsigned int *value) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(
        st, link_value(st, __func__, device, SIM_VALUE_PCIE_REPLAY_COUNTER, value));
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t device, nvmlUtilization_t *utilization) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (utilization == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (gpu->has_mig_mode && gpu->mig_current) {
        /* nvml.h: "On MIG-enabled GPUs, querying device utilization rates is not currently
         * supported." */
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    unsigned long long busy;
    if (!sim_value(st->machine, gpu, SIM_VALUE_GPU_UTILIZATION, &busy)) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    utilization->gpu = (unsigned)busy;
    utilization->memory = 0;
    return sim_state_unlock(st, NVML_SUCCESS);
}
