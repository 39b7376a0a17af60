/* density: the minimal module of `ludus bench density`, in C. Every tick at 30 Hz
 * it moves 64 entities (x += vx/30, y += vy/30) and bounces them off the walls of
 * a 100x100 box, in integer thousandths of a unit. games/density (Go, through the
 * SDK) computes exactly the same states and hashes. No players, never ends. */
#include "ludus.h"

#define N 64
#define BOX 100000 /* 100 units, in thousandths */
#define RATE 30

static struct { int32_t x[N], y[N], vx[N], vy[N]; int64_t tick; } s;

static const char meta[] = "{\"name\":\"density\",\"tick_rate\":30,\"max_players\":1,\"frame_divisor\":30,\"view_format\":\"density-v1\"}";
static char out[256];

LUDUS_EXPORT("ludus_abi_version") int32_t abi_version(void) { return LUDUS_ABI_VERSION; }
LUDUS_EXPORT("ludus_meta") int64_t meta_(void) { return ludus_pack(meta, sizeof meta - 1); }
LUDUS_EXPORT("ludus_buffer") int32_t buffer(int32_t size) {
	return size >= 0 && size <= LUDUS_SCRATCH_SIZE ? (int32_t)(uintptr_t)ludus_scratch : 0;
}

LUDUS_EXPORT("ludus_init") int32_t init(int64_t seed, int32_t config_len) {
	uint64_t r = (uint64_t)seed;
	(void)config_len;
	for (int i = 0; i < N; i++) {
		s.x[i] = (int32_t)(ludus_rand(&r) % (BOX + 1));
		s.y[i] = (int32_t)(ludus_rand(&r) % (BOX + 1));
		s.vx[i] = (int32_t)(ludus_rand(&r) % 40001) - 20000;
		s.vy[i] = (int32_t)(ludus_rand(&r) % 40001) - 20000;
	}
	s.tick = 0;
	return 0;
}

static inline void move(int32_t *p, int32_t *v) {
	*p += *v / RATE;
	if (*p < 0) { *p = -*p; *v = -*v; }
	if (*p > BOX) { *p = 2 * BOX - *p; *v = -*v; }
}

LUDUS_EXPORT("ludus_step") int32_t step(int32_t events_len) {
	(void)events_len; /* no players */
	for (int i = 0; i < N; i++) {
		move(&s.x[i], &s.vx[i]);
		move(&s.y[i], &s.vy[i]);
	}
	s.tick++;
	return LUDUS_STEP_RUNNING;
}

/* density-v1: 64 x (x, y) as u16 hundredths of a unit, little-endian. */
LUDUS_EXPORT("ludus_view") int64_t view(int32_t slot) {
	(void)slot;
	for (int i = 0; i < N; i++) {
		uint16_t x = (uint16_t)(s.x[i] / 10), y = (uint16_t)(s.y[i] / 10);
		out[4 * i] = (char)x; out[4 * i + 1] = (char)(x >> 8);
		out[4 * i + 2] = (char)y; out[4 * i + 3] = (char)(y >> 8);
	}
	return ludus_pack(out, 4 * N);
}

LUDUS_EXPORT("ludus_state_hash") int64_t state_hash(void) {
	uint64_t h = LUDUS_FNV_OFFSET;
	for (int i = 0; i < N; i++) {
		h = ludus_hash_u32(h, (uint32_t)s.x[i]);
		h = ludus_hash_u32(h, (uint32_t)s.y[i]);
		h = ludus_hash_u32(h, (uint32_t)s.vx[i]);
		h = ludus_hash_u32(h, (uint32_t)s.vy[i]);
	}
	return (int64_t)ludus_hash_u64(h, (uint64_t)s.tick);
}

LUDUS_EXPORT("ludus_result") int64_t result(void) {
	ludus_json j = {out, 0, sizeof out};
	ludus_json_raw(&j, "{\"ended\":false,\"ticks\":");
	ludus_json_int(&j, s.tick);
	ludus_json_raw(&j, ",\"winner\":-1,\"players\":[]}");
	return ludus_pack(out, j.len);
}
