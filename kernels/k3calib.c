/* k3calib.c: the calibration-file writer (k3calib.h). */
#include "kernels/k3calib.h"

#include <string.h>

const char *k3_calib_path_name(enum k3_path p)
{
    return p == K3_STANDARD ? "auto" : "latency_specialized";
}

void k3_calib_gpu_name(const char *device, char *out, size_t n)
{
    /* Longest first: "GB200" contains "B200". */
    static const char *known[] = {"GB300", "GB200", "B300", "B200", "H200", "H100"};
    for (size_t i = 0; i < sizeof known / sizeof *known; i++)
        if (strstr(device, known[i])) {
            size_t j = 0;
            for (const char *p = known[i]; *p && j + 1 < n; p++)
                out[j++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
            out[j] = 0;
            return;
        }
    const char *p = strncmp(device, "NVIDIA ", 7) == 0 ? device + 7 : device;
    size_t j = 0;
    for (; *p && j + 1 < n; p++)
        if (*p != ' ' && *p != '"' && *p != '\\')
            out[j++] = (char)(*p >= 'A' && *p <= 'Z' ? *p - 'A' + 'a' : *p);
    out[j] = 0;
}

static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        if (*s == '"' || *s == '\\')
            fputc('\\', f);
        if ((unsigned char)*s >= 0x20)
            fputc(*s, f);
    }
    fputc('"', f);
}

void k3_calib_begin(FILE *f, const char *gpu, int tp, const char *source)
{
    fprintf(f, "{\n  \"format\": \"agentreplay-calibration/1\",\n  \"gpu\": ");
    put_string(f, gpu);
    fprintf(f, ",\n  \"model\": \"kimi-k3\",\n  \"tp\": %d,\n  \"source\": ", tp);
    put_string(f, source);
    fprintf(f, ",\n  \"entries\": [\n");
}

void k3_calib_entry(FILE *f, int first, const char *path, const char *kind,
                    const char *kernel, const int *batch, const int *context,
                    const double *us, int n)
{
    fprintf(f, "%s    {\"path\": \"%s\", \"layer_kind\": \"%s\", \"kernel\": ", first ? "" : ",\n",
            path, kind);
    put_string(f, kernel);
    fprintf(f, ", \"points\": [");
    for (int i = 0; i < n; i++) {
        fprintf(f, "%s{\"batch\": %d, ", i ? ", " : "", batch[i]);
        if (context)
            fprintf(f, "\"context\": %d, ", context[i]);
        fprintf(f, "\"us\": %.3f}", us[i]);
    }
    fprintf(f, "]}");
}

void k3_calib_end(FILE *f) { fprintf(f, "\n  ]\n}\n"); }
