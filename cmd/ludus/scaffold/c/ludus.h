/* ludus.h: a tiny, dependency-free C helper for Ludus game modules (ABI v1,
 * docs/ABI.md). A game written in C defines the ludus_* exports itself with
 * LUDUS_EXPORT; this header gives it the scratch buffer, packed slices, the event
 * decoder, a deterministic PRNG (SplitMix64, the same as the Go SDK's sdk.Rand),
 * FNV-1a hashing (the same as sdk.Hash) and a small JSON writer.
 *
 * Build as a WASI reactor, e.g.
 *   clang --target=wasm32-wasi -O2 -mexec-model=reactor -Igames/c -o game.wasm game.c
 * Use no libc function that needs a WASI import beyond docs/ABI.md's list (the
 * samples use none at all). */
#ifndef LUDUS_H
#define LUDUS_H

#include <stddef.h>
#include <stdint.h>

#define LUDUS_EXPORT(name) __attribute__((export_name(name)))

enum { LUDUS_ABI_VERSION = 1, LUDUS_STEP_RUNNING = 0, LUDUS_STEP_ENDED = 1, LUDUS_SPECTATOR = -1 };
enum { LUDUS_EVENT_JOIN = 1, LUDUS_EVENT_LEAVE = 2, LUDUS_EVENT_INPUT = 3 };

#ifndef LUDUS_SCRATCH_SIZE
#define LUDUS_SCRATCH_SIZE 65536
#endif

/* The scratch buffer the host writes configs, events and checkpoints into. */
static uint8_t ludus_scratch[LUDUS_SCRATCH_SIZE];

/* ludus_pack returns a packed slice: pointer in the high 32 bits, length low. */
static inline int64_t ludus_pack(const void *p, uint32_t n) {
	return (int64_t)(((uint64_t)(uintptr_t)p << 32) | (uint64_t)n);
}

typedef struct {
	uint8_t kind, slot;
	uint16_t len;
	const uint8_t *payload;
} ludus_event;

/* ludus_next_event decodes the event at *p (advancing it); 0 at the end or on a
 * damaged tail, which the ABI says to ignore. */
static inline int ludus_next_event(const uint8_t **p, const uint8_t *end, ludus_event *ev) {
	if (end - *p < 4) return 0;
	const uint8_t *b = *p;
	ev->kind = b[0];
	ev->slot = b[1];
	ev->len = (uint16_t)(b[2] | (b[3] << 8));
	if (end - b - 4 < ev->len) return 0;
	ev->payload = b + 4;
	*p = b + 4 + ev->len;
	return 1;
}

/* SplitMix64, identical to the Go SDK's sdk.Rand. */
static inline uint64_t ludus_rand(uint64_t *state) {
	uint64_t z = (*state += 0x9E3779B97F4A7C15ull);
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
	return z ^ (z >> 31);
}

/* FNV-1a 64, identical to the Go SDK's sdk.Hash. */
#define LUDUS_FNV_OFFSET 0xcbf29ce484222325ull
static inline uint64_t ludus_hash_bytes(uint64_t h, const void *p, size_t n) {
	const uint8_t *b = (const uint8_t *)p;
	for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
	return h;
}
static inline uint64_t ludus_hash_u32(uint64_t h, uint32_t v) {
	for (int i = 0; i < 4; i++) h = (h ^ (uint8_t)(v >> (8 * i))) * 0x100000001b3ull;
	return h;
}
static inline uint64_t ludus_hash_u64(uint64_t h, uint64_t v) {
	for (int i = 0; i < 8; i++) h = (h ^ (uint8_t)(v >> (8 * i))) * 0x100000001b3ull;
	return h;
}

/* A minimal JSON writer into a fixed buffer (output is truncated, never overrun). */
typedef struct {
	char *buf;
	uint32_t len, cap;
} ludus_json;

static inline void ludus_json_raw(ludus_json *j, const char *s) {
	while (*s && j->len < j->cap) j->buf[j->len++] = *s++;
}
static inline void ludus_json_int(ludus_json *j, int64_t v) {
	char tmp[24];
	int n = 0;
	uint64_t u = v < 0 ? (uint64_t)(-(v + 1)) + 1 : (uint64_t)v;
	do { tmp[n++] = (char)('0' + u % 10); u /= 10; } while (u);
	if (v < 0 && j->len < j->cap) j->buf[j->len++] = '-';
	while (n > 0 && j->len < j->cap) j->buf[j->len++] = tmp[--n];
}
/* ludus_json_str writes a quoted string, replacing anything but printable ASCII
 * (and the quote and backslash) with '?': names come from untrusted clients. */
static inline void ludus_json_str(ludus_json *j, const uint8_t *s, uint32_t n) {
	ludus_json_raw(j, "\"");
	for (uint32_t i = 0; i < n && j->len < j->cap; i++) {
		uint8_t c = s[i];
		j->buf[j->len++] = (c >= 0x20 && c < 0x7f && c != '"' && c != '\\') ? (char)c : '?';
	}
	ludus_json_raw(j, "\"");
}

/* ludus_config_int finds "key": <integer> in a flat JSON object; def if absent. */
static inline int64_t ludus_config_int(const uint8_t *cfg, uint32_t n, const char *key, int64_t def) {
	uint32_t kl = 0;
	while (key[kl]) kl++;
	for (uint32_t i = 0; i + kl + 2 < n; i++) {
		if (cfg[i] != '"') continue;
		uint32_t k = 0;
		while (k < kl && cfg[i + 1 + k] == (uint8_t)key[k]) k++;
		if (k < kl || cfg[i + 1 + kl] != '"') continue;
		uint32_t p = i + kl + 2;
		while (p < n && (cfg[p] == ' ' || cfg[p] == ':')) p++;
		int neg = p < n && cfg[p] == '-';
		if (neg) p++;
		int64_t v = 0;
		int digits = 0;
		while (p < n && cfg[p] >= '0' && cfg[p] <= '9' && digits < 12) { v = v * 10 + (cfg[p++] - '0'); digits++; }
		return digits ? (neg ? -v : v) : def;
	}
	return def;
}

#endif
