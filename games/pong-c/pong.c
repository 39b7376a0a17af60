/* pong: a two-player Pong as a Ludus game module (ABI v1, docs/ABI.md) in C — the
 * proof that the ABI is not Go-only. Built by games/build.sh with Debian's clang
 * and wasi-libc as a WASI reactor; it imports nothing at all.
 *
 * Slots 0 (left) and 1 (right). An empty slot is played by a bot, so one person
 * can play alone. Input payload: one byte, bit 0 up, bit 1 down (held buttons;
 * the latest mask applies until a new one arrives). Config (JSON, optional):
 * {"score_limit": 1..99 (default 5), "time_limit_s": 1..3600 (default 300)}.
 *
 * View format "pong-state-v1", 32 bytes, little-endian:
 *   0  "PONG"        4  u8 version (1)   5  u8 viewer slot (255 = spectator)
 *   6  u16 width     8  u16 height       (field size in pixels: 640 x 360)
 *   10 i16 ball x    12 i16 ball y       (pixels, ball centre)
 *   14 i16 left paddle y   16 i16 right paddle y   (pixels, paddle centre)
 *   18 u16 paddle height   20 u8 left score   21 u8 right score
 *   22 u8 flags: bit 0 ended, bit 1 left is human, bit 2 right is human,
 *                bit 3 serving (ball waiting)
 *   23 u8 ball size (pixels)   24 u32 tick   28 i8 winner (-1 none)  29..31 zero */
#include "ludus.h"

#define W 640
#define H 360
#define SUB 16 /* sub-pixel units per pixel */
#define PADDLE_H 64
#define PADDLE_X 24 /* distance of a paddle's face from its wall */
#define BALL 8
#define PADDLE_SPEED (6 * SUB)
#define BOT_SPEED (4 * SUB)
#define SERVE_TICKS 45
#define RATE 60
#define NAME_MAX 32

typedef struct {
	uint32_t magic; /* checkpoint validation */
	int32_t tick, time_limit, score_limit;
	int32_t paddle[2];   /* centre y, sub-pixels */
	int32_t bx, by, vx, vy;
	int32_t serve;       /* ticks until the ball moves */
	int32_t score[2];
	int32_t winner, ended;
	uint8_t human[2], input[2];
	uint8_t name_len[2];
	uint8_t name[2][NAME_MAX];
	uint64_t rng;
} state;

#define MAGIC 0x31474e50u /* "PNG1" */

static state s;
static uint8_t out[1024];

static const char meta[] = "{\"name\":\"pong\",\"tick_rate\":60,\"max_players\":2,\"frame_divisor\":2,"
                           "\"view_format\":\"pong-state-v1\",\"view_width\":640,\"view_height\":360}";

LUDUS_EXPORT("ludus_abi_version") int32_t abi_version(void) { return LUDUS_ABI_VERSION; }
LUDUS_EXPORT("ludus_meta") int64_t meta_(void) { return ludus_pack(meta, sizeof meta - 1); }
LUDUS_EXPORT("ludus_buffer") int32_t buffer(int32_t size) {
	return size >= 0 && size <= LUDUS_SCRATCH_SIZE ? (int32_t)(uintptr_t)ludus_scratch : 0;
}

static void serve(int toward) {
	s.bx = W / 2 * SUB;
	s.by = H / 2 * SUB;
	uint64_t r = ludus_rand(&s.rng);
	s.vx = (toward == 0 ? -1 : 1) * (4 * SUB + (int32_t)(r % (2 * SUB)));
	s.vy = (int32_t)((r >> 8) % (6 * SUB)) - 3 * SUB;
	s.serve = SERVE_TICKS;
}

LUDUS_EXPORT("ludus_init") int32_t init(int64_t seed, int32_t config_len) {
	if (config_len < 0 || config_len > LUDUS_SCRATCH_SIZE) return 2;
	int64_t limit = ludus_config_int(ludus_scratch, (uint32_t)config_len, "score_limit", 5);
	int64_t secs = ludus_config_int(ludus_scratch, (uint32_t)config_len, "time_limit_s", 300);
	if (limit < 1 || limit > 99 || secs < 1 || secs > 3600) return 1;
	for (size_t i = 0; i < sizeof s; i++) ((uint8_t *)&s)[i] = 0;
	s.magic = MAGIC;
	s.score_limit = (int32_t)limit;
	s.time_limit = (int32_t)(secs * RATE);
	s.paddle[0] = s.paddle[1] = H / 2 * SUB;
	s.winner = -1;
	s.rng = (uint64_t)seed;
	serve((int)(ludus_rand(&s.rng) & 1));
	return 0;
}

static void apply(const ludus_event *ev) {
	if (ev->slot > 1) return;
	int p = ev->slot;
	switch (ev->kind) {
	case LUDUS_EVENT_JOIN:
		s.human[p] = 1;
		s.input[p] = 0;
		s.name_len[p] = (uint8_t)(ev->len < NAME_MAX ? ev->len : NAME_MAX);
		for (int i = 0; i < s.name_len[p]; i++) s.name[p][i] = ev->payload[i];
		break;
	case LUDUS_EVENT_LEAVE:
		s.human[p] = 0;
		s.input[p] = 0;
		s.name_len[p] = 0;
		break;
	case LUDUS_EVENT_INPUT:
		if (s.human[p] && ev->len >= 1) s.input[p] = ev->payload[0] & 3;
		break;
	}
}

static int32_t clamp(int32_t v, int32_t lo, int32_t hi) { return v < lo ? lo : v > hi ? hi : v; }

static void move_paddle(int p) {
	int32_t dy = 0;
	if (s.human[p]) {
		if (s.input[p] & 1) dy -= PADDLE_SPEED;
		if (s.input[p] & 2) dy += PADDLE_SPEED;
	} else {
		int32_t target = s.serve > 0 ? H / 2 * SUB : s.by;
		dy = clamp(target - s.paddle[p], -BOT_SPEED, BOT_SPEED);
	}
	s.paddle[p] = clamp(s.paddle[p] + dy, PADDLE_H / 2 * SUB, (H - PADDLE_H / 2) * SUB);
}

/* bounce off paddle p if the ball reaches its face */
static void hit(int p) {
	int32_t face = p == 0 ? (PADDLE_X + BALL / 2) * SUB : (W - PADDLE_X - BALL / 2) * SUB;
	int crossing = p == 0 ? (s.vx < 0 && s.bx <= face && s.bx - s.vx > face)
	                      : (s.vx > 0 && s.bx >= face && s.bx - s.vx < face);
	if (!crossing) return;
	int32_t off = s.by - s.paddle[p];
	if (off < -(PADDLE_H / 2 + BALL / 2) * SUB || off > (PADDLE_H / 2 + BALL / 2) * SUB) return;
	s.bx = 2 * face - s.bx;
	s.vx = -s.vx;
	if (s.vx > 0 && s.vx < 12 * SUB) s.vx += SUB / 4;
	if (s.vx < 0 && s.vx > -12 * SUB) s.vx -= SUB / 4;
	s.vy = clamp(s.vy + off / 8, -8 * SUB, 8 * SUB); /* the paddle's edge angles the ball */
}

static void finish(void) {
	s.ended = 1;
	s.winner = s.score[0] > s.score[1] ? 0 : s.score[1] > s.score[0] ? 1 : -1;
}

LUDUS_EXPORT("ludus_step") int32_t step(int32_t events_len) {
	if (events_len > 0 && events_len <= LUDUS_SCRATCH_SIZE) {
		const uint8_t *p = ludus_scratch, *end = ludus_scratch + events_len;
		ludus_event ev;
		while (ludus_next_event(&p, end, &ev)) apply(&ev);
	}
	if (s.ended) return LUDUS_STEP_ENDED;
	s.tick++;
	move_paddle(0);
	move_paddle(1);
	if (s.serve > 0) {
		s.serve--;
	} else {
		s.bx += s.vx;
		s.by += s.vy;
		if (s.by < BALL / 2 * SUB) { s.by = BALL * SUB - s.by; s.vy = -s.vy; }
		if (s.by > (H - BALL / 2) * SUB) { s.by = 2 * (H - BALL / 2) * SUB - s.by; s.vy = -s.vy; }
		hit(0);
		hit(1);
		if (s.bx < 0) { s.score[1]++; serve(0); }
		if (s.bx > W * SUB) { s.score[0]++; serve(1); }
	}
	if (s.score[0] >= s.score_limit || s.score[1] >= s.score_limit || s.tick >= s.time_limit) finish();
	return s.ended ? LUDUS_STEP_ENDED : LUDUS_STEP_RUNNING;
}

static void put16(uint8_t *p, int32_t v) { p[0] = (uint8_t)v; p[1] = (uint8_t)(v >> 8); }

LUDUS_EXPORT("ludus_view") int64_t view(int32_t slot) {
	for (int i = 0; i < 32; i++) out[i] = 0;
	out[0] = 'P'; out[1] = 'O'; out[2] = 'N'; out[3] = 'G';
	out[4] = 1;
	out[5] = slot == 0 || slot == 1 ? (uint8_t)slot : 255;
	put16(out + 6, W);
	put16(out + 8, H);
	put16(out + 10, s.bx / SUB);
	put16(out + 12, s.by / SUB);
	put16(out + 14, s.paddle[0] / SUB);
	put16(out + 16, s.paddle[1] / SUB);
	put16(out + 18, PADDLE_H);
	out[20] = (uint8_t)s.score[0];
	out[21] = (uint8_t)s.score[1];
	out[22] = (uint8_t)(s.ended | s.human[0] << 1 | s.human[1] << 2 | (s.serve > 0) << 3);
	out[23] = BALL;
	put16(out + 24, s.tick);
	put16(out + 26, s.tick >> 16);
	out[28] = (uint8_t)(int8_t)s.winner;
	return ludus_pack(out, 32);
}

LUDUS_EXPORT("ludus_state_hash") int64_t state_hash(void) {
	return (int64_t)ludus_hash_bytes(LUDUS_FNV_OFFSET, &s, sizeof s);
}

LUDUS_EXPORT("ludus_result") int64_t result(void) {
	ludus_json j = {(char *)out, 0, sizeof out};
	ludus_json_raw(&j, "{\"ended\":");
	ludus_json_raw(&j, s.ended ? "true" : "false");
	ludus_json_raw(&j, ",\"ticks\":");
	ludus_json_int(&j, s.tick);
	ludus_json_raw(&j, ",\"winner\":");
	ludus_json_int(&j, s.winner);
	ludus_json_raw(&j, ",\"players\":[");
	int first = 1;
	for (int p = 0; p < 2; p++) {
		if (!s.human[p]) continue;
		if (!first) ludus_json_raw(&j, ",");
		first = 0;
		ludus_json_raw(&j, "{\"slot\":");
		ludus_json_int(&j, p);
		ludus_json_raw(&j, ",\"name\":");
		ludus_json_str(&j, s.name[p], s.name_len[p]);
		ludus_json_raw(&j, ",\"score\":");
		ludus_json_int(&j, s.score[p]);
		ludus_json_raw(&j, "}");
	}
	ludus_json_raw(&j, "]}");
	return ludus_pack(out, j.len);
}

LUDUS_EXPORT("ludus_save") int64_t save(void) { return ludus_pack(&s, sizeof s); }

LUDUS_EXPORT("ludus_load") int32_t load(int32_t len) {
	if (len != (int32_t)sizeof s) return 2;
	state t;
	for (size_t i = 0; i < sizeof t; i++) ((uint8_t *)&t)[i] = ludus_scratch[i];
	if (t.magic != MAGIC || t.score_limit < 1 || t.score_limit > 99 || t.time_limit < 1 ||
	    t.name_len[0] > NAME_MAX || t.name_len[1] > NAME_MAX || t.human[0] > 1 || t.human[1] > 1 ||
	    t.tick < 0 || t.score[0] < 0 || t.score[1] < 0 || t.serve < 0 || t.ended < 0 || t.ended > 1)
		return 1;
	t.paddle[0] = clamp(t.paddle[0], PADDLE_H / 2 * SUB, (H - PADDLE_H / 2) * SUB);
	t.paddle[1] = clamp(t.paddle[1], PADDLE_H / 2 * SUB, (H - PADDLE_H / 2) * SUB);
	t.input[0] &= 3;
	t.input[1] &= 3;
	s = t;
	return 0;
}
