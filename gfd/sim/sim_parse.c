/*
 * sim_parse.c: the machine file's lexical layer, shared by the files that read its
 * records (sim_config*.c, sim_faults.c): space-separated tokens, C integers, text values,
 * PCI bus ids, growing arrays, and the one error message format
 * ("<file>: line N: <problem>").
 */

#include "nvmlsim.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int sim_parse_fail(sim_parse_ctx *ctx, const char *fmt, ...) {
    char detail[512];
    va_list args;
    va_start(args, fmt);
    vsnprintf(detail, sizeof detail, fmt, args);
    va_end(args);
    if (ctx->line > 0) {
        snprintf(ctx->error, ctx->error_size, "%s: line %u: %s", ctx->path, ctx->line, detail);
    } else {
        snprintf(ctx->error, ctx->error_size, "%s: %s", ctx->path, detail);
    }
    return -1;
}

char *sim_next_token(char **cursor) {
    char *s = *cursor;
    while (*s == ' ') {
        s++;
    }
    if (*s == '\0') {
        *cursor = s;
        return NULL;
    }
    char *start = s;
    while (*s != '\0' && *s != ' ') {
        s++;
    }
    if (*s == ' ') {
        *s++ = '\0';
    }
    *cursor = s;
    return start;
}

int sim_parse_ull(const char *token, unsigned long long *out) {
    if (token == NULL || *token == '\0' || *token == '-') {
        return -1;
    }
    char *end = NULL;
    errno = 0;
    unsigned long long v = strtoull(token, &end, 0);
    if (errno != 0 || *end != '\0') {
        return -1;
    }
    *out = v;
    return 0;
}

int sim_parse_u32(const char *token, unsigned *out) {
    unsigned long long v;
    if (sim_parse_ull(token, &v) != 0 || v > UINT_MAX) {
        return -1;
    }
    *out = (unsigned)v;
    return 0;
}

int sim_parse_numbers(sim_parse_ctx *ctx, const char *key, char *rest, unsigned *out, int count) {
    for (int i = 0; i < count; i++) {
        char *token = sim_next_token(&rest);
        if (token == NULL) {
            return sim_parse_fail(ctx, "%s: expected %d numbers, got %d", key, count, i);
        }
        if (sim_parse_u32(token, &out[i]) != 0) {
            return sim_parse_fail(ctx, "%s: '%s' is not an unsigned number", key, token);
        }
    }
    if (sim_next_token(&rest) != NULL) {
        return sim_parse_fail(ctx, "%s: expected %d numbers, got more", key, count);
    }
    return 0;
}

int sim_copy_text(sim_parse_ctx *ctx, const char *key, const char *value, char *dest,
                  size_t size) {
    size_t len = strlen(value);
    if (len + 1 > size) {
        return sim_parse_fail(ctx, "%s: '%s' is longer than %zu bytes", key, value, size - 1);
    }
    memcpy(dest, value, len + 1);
    return 0;
}

int sim_parse_bus_id(const char *text, unsigned *domain, unsigned *bus, unsigned *device,
                     unsigned *function) {
    unsigned d = 0, b = 0, dev = 0, fn = 0;
    int consumed = 0;
    if (sscanf(text, "%x:%x:%x.%x%n", &d, &b, &dev, &fn, &consumed) == 4 &&
        text[consumed] == '\0') {
        *domain = d;
        *bus = b;
        *device = dev;
        *function = fn;
        return 0;
    }
    consumed = 0;
    if (sscanf(text, "%x:%x:%x%n", &d, &b, &dev, &consumed) == 3 && text[consumed] == '\0') {
        *domain = d;
        *bus = b;
        *device = dev;
        *function = 0;
        return 0;
    }
    consumed = 0;
    if (sscanf(text, "%x:%x.%x%n", &b, &dev, &fn, &consumed) == 3 && text[consumed] == '\0') {
        *domain = 0;
        *bus = b;
        *device = dev;
        *function = fn;
        return 0;
    }
    return -1;
}

void *sim_grow(void *array, size_t count, size_t size) {
    void *grown = realloc(array, (count + 1) * size);
    if (grown != NULL) {
        memset((char *)grown + count * size, 0, size);
    }
    return grown;
}
