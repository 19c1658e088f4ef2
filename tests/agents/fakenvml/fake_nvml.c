/* A fake libnvidia-ml.so.1 for tests on machines without a GPU (a mock of what cannot run here).

   It exports the NVML entry points the agent calls, with NVML's signatures and return codes, and
   answers from a key=value state file named by $FAKE_NVML_STATE, read again on every call so a
   test can inject faults while the agent runs:

     count=4                      GPUs (at most 8)
     epoch=1767225600.0           unix time the energy counters started from
     driver_version=550.54.15
     cuda_driver_version=12040    (12.4)
     gpu.N.name=... gpu.N.uuid=GPU-...
     gpu.N.memory_total=BYTES gpu.N.memory_used=BYTES
     gpu.N.utilization=PERCENT gpu.N.power_mw=MILLIWATTS
     gpu.N.energy=1               0: the counter is not supported
     gpu.N.ecc_uncorrected=K      volatile uncorrected ECC errors; -1: not supported
     gpu.N.retired_pending=0|1    -1: not supported
     gpu.N.remapped_pending=0|1 gpu.N.remapped_failure=0|1 gpu.N.remapped=-1 (not supported)
     gpu.N.throttle=MASK          clocks throttle reasons (decimal or 0x...)
     gpu.N.lost=1                 every call on the device answers NVML_ERROR_GPU_IS_LOST

   The energy counter is power_mw x (now - epoch) in mJ: a test reading the clock knows what any
   reading was. Build with -DOMIT_<function> to leave an entry point out (an older driver). */

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <pthread.h>

typedef int nvmlReturn_t;
#define NVML_SUCCESS 0
#define NVML_ERROR_UNINITIALIZED 1
#define NVML_ERROR_INVALID_ARGUMENT 2
#define NVML_ERROR_NOT_SUPPORTED 3
#define NVML_ERROR_INSUFFICIENT_SIZE 7
#define NVML_ERROR_GPU_IS_LOST 15
#define NVML_ERROR_UNKNOWN 999

#define MAX_GPUS 8

typedef struct {
    unsigned int gpu;
    unsigned int memory;
} nvmlUtilization_t;

typedef struct {
    unsigned long long total;
    unsigned long long free;
    unsigned long long used;
} nvmlMemory_t;

struct fake_gpu {
    int index;
    char name[96];
    char uuid[96];
    unsigned long long memory_total, memory_used;
    unsigned int utilization, power_mw;
    int energy;
    long long ecc_uncorrected;
    int retired_pending;
    int remapped, remapped_pending, remapped_failure;
    unsigned long long throttle;
    int lost;
};

typedef struct fake_gpu *nvmlDevice_t;

/* NVML is thread-safe (the agent reads from its monitor and heartbeat threads): the state is
   reloaded and copied out under one lock. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static struct fake_gpu gpus[MAX_GPUS];
static unsigned int gpu_count;
static int initialized;
static double epoch;
static char driver_version[80];
static int cuda_driver_version;

static void defaults(void) {
    gpu_count = 0;
    epoch = 0.0;
    snprintf(driver_version, sizeof driver_version, "550.54.15");
    cuda_driver_version = 12040;
    for (int i = 0; i < MAX_GPUS; i++) {
        struct fake_gpu *g = &gpus[i];
        memset(g, 0, sizeof *g);
        g->index = i;
        snprintf(g->name, sizeof g->name, "Fake GPU");
        snprintf(g->uuid, sizeof g->uuid, "GPU-fa4e0000-0000-4000-8000-%012d", i);
        g->memory_total = 80ULL << 30;
        g->power_mw = 100000;
        g->energy = 1;
        g->remapped = 1;
    }
}

static void set(const char *key, const char *value) {
    if (strcmp(key, "count") == 0) {
        long n = strtol(value, NULL, 10);
        gpu_count = n < 0 ? 0 : (n > MAX_GPUS ? MAX_GPUS : (unsigned int)n);
    } else if (strcmp(key, "epoch") == 0) {
        epoch = strtod(value, NULL);
    } else if (strcmp(key, "driver_version") == 0) {
        snprintf(driver_version, sizeof driver_version, "%s", value);
    } else if (strcmp(key, "cuda_driver_version") == 0) {
        cuda_driver_version = (int)strtol(value, NULL, 10);
    } else if (strncmp(key, "gpu.", 4) == 0) {
        char *rest;
        long i = strtol(key + 4, &rest, 10);
        if (rest == key + 4 || *rest != '.' || i < 0 || i >= MAX_GPUS)
            return;
        struct fake_gpu *g = &gpus[i];
        const char *field = rest + 1;
        if (strcmp(field, "name") == 0) snprintf(g->name, sizeof g->name, "%s", value);
        else if (strcmp(field, "uuid") == 0) snprintf(g->uuid, sizeof g->uuid, "%s", value);
        else if (strcmp(field, "memory_total") == 0) g->memory_total = strtoull(value, NULL, 0);
        else if (strcmp(field, "memory_used") == 0) g->memory_used = strtoull(value, NULL, 0);
        else if (strcmp(field, "utilization") == 0) g->utilization = (unsigned int)strtoul(value, NULL, 0);
        else if (strcmp(field, "power_mw") == 0) g->power_mw = (unsigned int)strtoul(value, NULL, 0);
        else if (strcmp(field, "energy") == 0) g->energy = (int)strtol(value, NULL, 0);
        else if (strcmp(field, "ecc_uncorrected") == 0) g->ecc_uncorrected = strtoll(value, NULL, 0);
        else if (strcmp(field, "retired_pending") == 0) g->retired_pending = (int)strtol(value, NULL, 0);
        else if (strcmp(field, "remapped") == 0) g->remapped = (int)strtol(value, NULL, 0);
        else if (strcmp(field, "remapped_pending") == 0) g->remapped_pending = (int)strtol(value, NULL, 0);
        else if (strcmp(field, "remapped_failure") == 0) g->remapped_failure = (int)strtol(value, NULL, 0);
        else if (strcmp(field, "throttle") == 0) g->throttle = strtoull(value, NULL, 0);
        else if (strcmp(field, "lost") == 0) g->lost = (int)strtol(value, NULL, 0);
    }
}

/* Read the state file again; a file being replaced (tests write and rename) keeps the last state. */
static void load(void) {
    const char *path = getenv("FAKE_NVML_STATE");
    FILE *fh = path ? fopen(path, "r") : NULL;
    if (fh == NULL)
        return;
    defaults();
    char line[512];
    while (fgets(line, sizeof line, fh) != NULL) {
        line[strcspn(line, "\r\n")] = '\0';
        char *eq = strchr(line, '=');
        if (line[0] == '#' || eq == NULL)
            continue;
        *eq = '\0';
        set(line, eq + 1);
    }
    fclose(fh);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A copy of the device behind a handle, state reloaded; NVML_SUCCESS or why it cannot answer. */
static nvmlReturn_t device(nvmlDevice_t handle, struct fake_gpu *out) {
    if (handle < &gpus[0] || handle >= &gpus[MAX_GPUS])
        return NVML_ERROR_INVALID_ARGUMENT;
    nvmlReturn_t rc = NVML_SUCCESS;
    pthread_mutex_lock(&lock);
    if (!initialized) {
        rc = NVML_ERROR_UNINITIALIZED;
    } else {
        load();
        *out = *handle;
        if ((unsigned int)(handle - &gpus[0]) >= gpu_count || out->lost)
            rc = NVML_ERROR_GPU_IS_LOST;
    }
    pthread_mutex_unlock(&lock);
    return rc;
}

static nvmlReturn_t copy_string(char *out, unsigned int length, const char *value) {
    if (out == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (strlen(value) + 1 > length)
        return NVML_ERROR_INSUFFICIENT_SIZE;
    memcpy(out, value, strlen(value) + 1);
    return NVML_SUCCESS;
}

/* Counts, handles and versions: the state reloaded under the lock. */
static unsigned int loaded_count(char *driver, unsigned int driver_length, int *cuda) {
    pthread_mutex_lock(&lock);
    load();
    unsigned int count = gpu_count;
    if (driver != NULL)
        snprintf(driver, driver_length, "%s", driver_version);
    if (cuda != NULL)
        *cuda = cuda_driver_version;
    pthread_mutex_unlock(&lock);
    return count;
}

nvmlReturn_t nvmlInit_v2(void) {
    if (getenv("FAKE_NVML_STATE") == NULL)
        return NVML_ERROR_UNKNOWN;
    pthread_mutex_lock(&lock);
    defaults();
    load();
    initialized = 1;
    pthread_mutex_unlock(&lock);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlShutdown(void) {
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    initialized = 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetCount_v2(unsigned int *count) {
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (count == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *count = loaded_count(NULL, 0, NULL);
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetHandleByIndex_v2(unsigned int index, nvmlDevice_t *handle) {
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    if (handle == NULL || index >= loaded_count(NULL, 0, NULL))
        return NVML_ERROR_INVALID_ARGUMENT;
    *handle = &gpus[index];
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlSystemGetDriverVersion(char *version, unsigned int length) {
    char driver[sizeof driver_version];
    if (!initialized)
        return NVML_ERROR_UNINITIALIZED;
    loaded_count(driver, sizeof driver, NULL);
    return copy_string(version, length, driver);
}

#ifndef OMIT_nvmlSystemGetCudaDriverVersion_v2
nvmlReturn_t nvmlSystemGetCudaDriverVersion_v2(int *version) {
    if (version == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    loaded_count(NULL, 0, version);
    return NVML_SUCCESS;
}
#endif

nvmlReturn_t nvmlDeviceGetName(nvmlDevice_t handle, char *name, unsigned int length) {
    struct fake_gpu g;
    nvmlReturn_t rc = device(handle, &g);
    return rc == NVML_SUCCESS ? copy_string(name, length, g.name) : rc;
}

nvmlReturn_t nvmlDeviceGetUUID(nvmlDevice_t handle, char *uuid, unsigned int length) {
    struct fake_gpu g;
    nvmlReturn_t rc = device(handle, &g);
    return rc == NVML_SUCCESS ? copy_string(uuid, length, g.uuid) : rc;
}

nvmlReturn_t nvmlDeviceGetMemoryInfo(nvmlDevice_t handle, nvmlMemory_t *memory) {
    struct fake_gpu g;
    nvmlReturn_t rc = device(handle, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (memory == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    memory->total = g.memory_total;
    memory->used = g.memory_used;
    memory->free = g.memory_total > g.memory_used ? g.memory_total - g.memory_used : 0;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetUtilizationRates(nvmlDevice_t handle, nvmlUtilization_t *utilization) {
    struct fake_gpu g;
    nvmlReturn_t rc = device(handle, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (utilization == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    utilization->gpu = g.utilization;
    utilization->memory = g.utilization / 2;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetPowerUsage(nvmlDevice_t handle, unsigned int *power) {
    struct fake_gpu g;
    nvmlReturn_t rc = device(handle, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (power == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *power = g.power_mw;
    return NVML_SUCCESS;
}

nvmlReturn_t nvmlDeviceGetTotalEnergyConsumption(nvmlDevice_t handle, unsigned long long *energy) {
    struct fake_gpu g;
    nvmlReturn_t rc = device(handle, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (!g.energy)
        return NVML_ERROR_NOT_SUPPORTED;
    if (energy == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    double elapsed = now_s() - epoch;
    *energy = (unsigned long long)((double)g.power_mw * (elapsed > 0 ? elapsed : 0.0));
    return NVML_SUCCESS;
}

/* errorType 1 = NVML_MEMORY_ERROR_TYPE_UNCORRECTED, counterType 0 = NVML_VOLATILE_ECC. */
nvmlReturn_t nvmlDeviceGetTotalEccErrors(nvmlDevice_t handle, int errorType, int counterType, unsigned long long *eccCounts) {
    struct fake_gpu g;
    nvmlReturn_t rc = device(handle, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (eccCounts == NULL || errorType < 0 || errorType > 1 || counterType < 0 || counterType > 1)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g.ecc_uncorrected < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *eccCounts = errorType == 1 ? (unsigned long long)g.ecc_uncorrected : 0;
    return NVML_SUCCESS;
}

#ifndef OMIT_nvmlDeviceGetRetiredPagesPendingStatus
nvmlReturn_t nvmlDeviceGetRetiredPagesPendingStatus(nvmlDevice_t handle, int *isPending) {
    struct fake_gpu g;
    nvmlReturn_t rc = device(handle, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (isPending == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g.retired_pending < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *isPending = g.retired_pending ? 1 : 0;
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlDeviceGetRemappedRows
nvmlReturn_t nvmlDeviceGetRemappedRows(nvmlDevice_t handle, unsigned int *corrRows, unsigned int *uncRows,
                                       unsigned int *isPending, unsigned int *failureOccurred) {
    struct fake_gpu g;
    nvmlReturn_t rc = device(handle, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (corrRows == NULL || uncRows == NULL || isPending == NULL || failureOccurred == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    if (g.remapped < 0)
        return NVML_ERROR_NOT_SUPPORTED;
    *corrRows = 0;
    *uncRows = g.remapped_pending || g.remapped_failure ? 1 : 0;
    *isPending = g.remapped_pending ? 1 : 0;
    *failureOccurred = g.remapped_failure ? 1 : 0;
    return NVML_SUCCESS;
}
#endif

#ifndef OMIT_nvmlDeviceGetCurrentClocksThrottleReasons
nvmlReturn_t nvmlDeviceGetCurrentClocksThrottleReasons(nvmlDevice_t handle, unsigned long long *clocksThrottleReasons) {
    struct fake_gpu g;
    nvmlReturn_t rc = device(handle, &g);
    if (rc != NVML_SUCCESS)
        return rc;
    if (clocksThrottleReasons == NULL)
        return NVML_ERROR_INVALID_ARGUMENT;
    *clocksThrottleReasons = g.throttle;
    return NVML_SUCCESS;
}
#endif

const char *nvmlErrorString(nvmlReturn_t result) {
    switch (result) {
    case NVML_SUCCESS: return "Success";
    case NVML_ERROR_UNINITIALIZED: return "Uninitialized";
    case NVML_ERROR_INVALID_ARGUMENT: return "Invalid Argument";
    case NVML_ERROR_NOT_SUPPORTED: return "Not Supported";
    case NVML_ERROR_INSUFFICIENT_SIZE: return "Insufficient Size";
    case NVML_ERROR_GPU_IS_LOST: return "GPU is lost";
    default: return "Unknown Error";
    }
}
