/*
 * sim_health.c: a GPU's memory health as NVML reports it. Owns nvmlDeviceGetEccMode,
 * nvmlDeviceGetTotalEccErrors, nvmlDeviceGetRemappedRows, nvmlDeviceGetRetiredPages,
 * nvmlDeviceGetRetiredPages_v2 and nvmlDeviceGetRetiredPagesPendingStatus.
 *
 * Each serves the GPU's values (the machine file's "value" records as faults leave them,
 * sim_value); a value the file does not give is NOT_SUPPORTED, so which GPU reports what
 * is decided by the writer of the file (gfd/sim/gpu_health.py, which says why). Beyond the
 * values, as nvml.h documents: ECC counts need ECC enabled; remapped rows are
 * NOT_SUPPORTED on a GPU in MIG mode with MIG devices; these are physical-GPU queries, so
 * MIG device handles are NOT_SUPPORTED. Retired pages have made-up addresses (distinct,
 * page-aligned, by cause) and timestamps (one second apart): a machine file gives only how
 * many there are.
 */

#include "nvmlsim.h"

/* The first made-up retirement time (2023-11-14, seconds since the epoch). */
#define RETIRED_AT 1700000000ull

nvmlReturn_t nvmlDeviceGetEccMode(nvmlDevice_t device, nvmlEnableState_t *current,
                                  nvmlEnableState_t *pending) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (current == NULL || pending == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    unsigned long long now, next;
    if (!sim_value(st->machine, gpu, SIM_VALUE_ECC_CURRENT, &now) ||
        !sim_value(st->machine, gpu, SIM_VALUE_ECC_PENDING, &next)) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    *current = now ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    *pending = next ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t device, nvmlMemoryErrorType_t errorType,
                                         nvmlEccCounterType_t counterType,
                                         unsigned long long *eccCounts) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    int corrected = errorType == NVML_MEMORY_ERROR_TYPE_CORRECTED;
    int volatile_count = counterType == NVML_VOLATILE_ECC;
    if (eccCounts == NULL || (!corrected && errorType != NVML_MEMORY_ERROR_TYPE_UNCORRECTED) ||
        (!volatile_count && counterType != NVML_AGGREGATE_ECC)) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    unsigned long long enabled;
    if (!sim_value(st->machine, gpu, SIM_VALUE_ECC_CURRENT, &enabled) || !enabled) {
        /* nvml.h: "Requires ECC Mode to be enabled." */
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    sim_value_id counter =
        volatile_count ? (corrected ? SIM_VALUE_ECC_VOLATILE_CORRECTED
                                    : SIM_VALUE_ECC_VOLATILE_UNCORRECTED)
                       : (corrected ? SIM_VALUE_ECC_AGGREGATE_CORRECTED
                                    : SIM_VALUE_ECC_AGGREGATE_UNCORRECTED);
    if (!sim_value(st->machine, gpu, counter, eccCounts)) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    return sim_state_unlock(st, NVML_SUCCESS);
}

nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t device, unsigned int *corrRows,
                                       unsigned int *uncRows, unsigned int *isPending,
                                       unsigned int *failureOccurred) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (corrRows == NULL || uncRows == NULL || isPending == NULL || failureOccurred == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    if (gpu->has_mig_mode && gpu->mig_current && gpu->n_migs > 0) {
        /* nvml.h: not supported on MIG-enabled GPUs with active instances. */
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    unsigned long long correctable, uncorrectable, pending, failure;
    if (!sim_value(st->machine, gpu, SIM_VALUE_REMAPPED_CORRECTABLE, &correctable) ||
        !sim_value(st->machine, gpu, SIM_VALUE_REMAPPED_UNCORRECTABLE, &uncorrectable) ||
        !sim_value(st->machine, gpu, SIM_VALUE_REMAPPED_PENDING, &pending) ||
        !sim_value(st->machine, gpu, SIM_VALUE_REMAPPED_FAILURE, &failure)) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    /* The values' bounds (32-bit counts, 0/1 flags) were checked when they were read. */
    *corrRows = (unsigned)correctable;
    *uncRows = (unsigned)uncorrectable;
    *isPending = (unsigned)pending;
    *failureOccurred = (unsigned)failure;
    return sim_state_unlock(st, NVML_SUCCESS);
}

/* Both versions: the pages retired for `cause`, counted first when the buffer is short. */
static nvmlReturn_t retired_pages(sim_state *st, const char *call, nvmlDevice_t device,
                                  nvmlPageRetirementCause_t cause, unsigned int *pageCount,
                                  unsigned long long *addresses, unsigned long long *timestamps,
                                  int with_times) {
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, call, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return rc;
    }
    sim_value_id value;
    switch (cause) {
    case NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS:
        value = SIM_VALUE_RETIRED_SINGLE_BIT;
        break;
    case NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR:
        value = SIM_VALUE_RETIRED_DOUBLE_BIT;
        break;
    default:
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    if (pageCount == NULL) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    unsigned long long pages;
    if (!sim_value(st->machine, gpu, value, &pages)) {
        return NVML_ERROR_NOT_SUPPORTED;
    }
    if (*pageCount < pages) {
        /* Also the first call of the usual two, with a count of 0 and no buffer. */
        *pageCount = (unsigned)pages;
        return NVML_ERROR_INSUFFICIENT_SIZE;
    }
    if (pages > 0 && (addresses == NULL || (with_times && timestamps == NULL))) {
        return NVML_ERROR_INVALID_ARGUMENT;
    }
    for (unsigned long long i = 0; i < pages; i++) {
        addresses[i] = ((unsigned long long)(cause + 1) << 32) | ((i + 1) << 12);
        if (with_times) {
            timestamps[i] = RETIRED_AT + i;
        }
    }
    *pageCount = (unsigned)pages;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetRetiredPages(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                       unsigned int *pageCount, unsigned long long *addresses) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(
        st, retired_pages(st, __func__, device, cause, pageCount, addresses, NULL, 0));
}

nvmlReturn_t nvmlDeviceGetRetiredPages_v2(nvmlDevice_t device, nvmlPageRetirementCause_t cause,
                                          unsigned int *pageCount, unsigned long long *addresses,
                                          unsigned long long *timestamps) {
    sim_state *st = sim_state_lock();
    return sim_state_unlock(
        st, retired_pages(st, __func__, device, cause, pageCount, addresses, timestamps, 1));
}

nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t device,
                                                    nvmlEnableState_t *isPending) {
    sim_state *st = sim_state_lock();
    sim_gpu *gpu;
    nvmlReturn_t rc = sim_enter_physical(st, __func__, device, &gpu);
    if (rc != NVML_SUCCESS) {
        return sim_state_unlock(st, rc);
    }
    if (isPending == NULL) {
        return sim_state_unlock(st, NVML_ERROR_INVALID_ARGUMENT);
    }
    unsigned long long pending;
    if (!sim_value(st->machine, gpu, SIM_VALUE_RETIRED_PENDING, &pending)) {
        return sim_state_unlock(st, NVML_ERROR_NOT_SUPPORTED);
    }
    *isPending = pending ? NVML_FEATURE_ENABLED : NVML_FEATURE_DISABLED;
    return sim_state_unlock(st, NVML_SUCCESS);
}
