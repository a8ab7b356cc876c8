/* Node B of the chain as a bare hop in C (benchmarks/bare_hop.py, variant "c"), and the
 * head of a one-run link frame read in C (variant "head", at the end of this file).
 *
 * Moves each frame from B's DEALER (its link to A) to C's identity on B's ROUTER, and
 * each frame C's identity sends on the ROUTER to the DEALER: no decode, no dedupe, no
 * route, no counters (frames from any other identity are read and dropped). What a chain
 * costs with this in place of B's pass is the bound a relay on libzmq's C API could
 * reach. Built by bare_hop.build_c against the libzmq pyzmq uses (no zmq.h needed: the
 * few declarations are below); called through ctypes with pyzmq's socket handles, the
 * GIL released. Returns after `limit` frames moved (0: never), or -1 if a poll failed.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* aligned as zmq.h declares it (libzmq's msg_t lives in these 64 bytes) */
typedef struct { unsigned char opaque[64]; } __attribute__((aligned(sizeof(void *)))) zmq_msg_t;
typedef struct { void *socket; int fd; short events; short revents; } zmq_pollitem_t;
int zmq_poll(zmq_pollitem_t *, int, long);
int zmq_msg_init(zmq_msg_t *);
int zmq_msg_recv(zmq_msg_t *, void *, int);
int zmq_msg_send(zmq_msg_t *, void *, int);
int zmq_msg_close(zmq_msg_t *);
void *zmq_msg_data(zmq_msg_t *);
size_t zmq_msg_size(const zmq_msg_t *);
int zmq_send(void *, const void *, size_t, int);
int zmq_errno(void);
enum { POLLIN = 1, DONTWAIT = 1, SNDMORE = 2 };

/* one frame from `in` on to `out` (after `ident` when given); 0 if none was waiting */
static int move(void *in, void *out, const char *ident, size_t n) {
    zmq_msg_t m;
    zmq_msg_init(&m);
    if (zmq_msg_recv(&m, in, DONTWAIT) < 0) {
        zmq_msg_close(&m);
        return 0;
    }
    if (ident) zmq_send(out, ident, n, SNDMORE);
    if (zmq_msg_send(&m, out, 0) < 0) zmq_msg_close(&m);
    return 1;
}

/* the identity frame waiting on the ROUTER: 1 if it is C's, 0 if another's, -1 if none */
static int from_c(void *router, const char *ident, size_t n) {
    zmq_msg_t id;
    zmq_msg_init(&id);
    if (zmq_msg_recv(&id, router, DONTWAIT) < 0) {
        zmq_msg_close(&id);
        return -1;
    }
    int same = zmq_msg_size(&id) == n && memcmp(zmq_msg_data(&id), ident, n) == 0;
    zmq_msg_close(&id);
    return same;
}

long zb_bare_hop(void *dealer, void *router, const char *ident, size_t n, long limit) {
    zmq_pollitem_t items[2] = {{dealer, 0, POLLIN, 0}, {router, 0, POLLIN, 0}};
    long moved = 0;
    for (;;) {
        if (zmq_poll(items, 2, -1) < 0) {
            if (zmq_errno() == EINTR) continue; /* a signal: poll again */
            return -1;
        }
        if (items[0].revents & POLLIN)
            while (move(dealer, router, ident, n))
                if (++moved == limit) return moved;
        if (items[1].revents & POLLIN) {
            int who;
            while ((who = from_c(router, ident, n)) >= 0) {
                if (who) {
                    move(router, dealer, NULL, 0);
                    if (++moved == limit) return moved;
                } else {
                    zmq_msg_t m; /* another peer's frame: read and dropped */
                    zmq_msg_init(&m);
                    zmq_msg_recv(&m, router, 0);
                    zmq_msg_close(&m);
                }
            }
        }
    }
}

/* -- the head of a one-run MSGR frame (variant "head") ----------------------------------
 *
 * A link frame of one run is [36, [[topic, origin, inc, path, targets, entries]]] in
 * msgpack. zb_run_head checks that shape, the head's field types and every entry
 * ([payload bin, fmt 0|1, headers nil|map, seq uint, ts float|int]), that the seqs
 * ascend by one and that nothing follows. It returns where the entries' array starts
 * (the head is everything before it) and the first and last seq, or -1 for any frame
 * that is not such a run (the caller takes it the general way). Not checked here,
 * unlike the node's own checks: a ts's range (NaN, infinities, beyond TS_MAX) and the
 * strings' UTF-8 (a head's are checked once, the general way, with its first frame: a
 * later frame with the same head bytes has the same strings; the headers' never). A
 * path built on this must add both.
 */
typedef struct { const uint8_t *b; size_t n, pos; } cur_t;

static int need(cur_t *c, size_t k) { return c->n - c->pos >= k; }

static uint64_t be(const uint8_t *p, int k) {
    uint64_t v = 0;
    for (int i = 0; i < k; i++) v = (v << 8) | p[i];
    return v;
}

/* a length that follows a type byte in k bytes */
static int len_of(cur_t *c, int k, size_t *len) {
    if (!need(c, (size_t)k)) return 0;
    *len = (size_t)be(c->b + c->pos, k);
    c->pos += (size_t)k;
    return 1;
}

static int array_of(cur_t *c, size_t *count) {
    if (!need(c, 1)) return 0;
    uint8_t t = c->b[c->pos++];
    if ((t & 0xf0) == 0x90) { *count = t & 0x0f; return 1; }
    if (t == 0xdc) return len_of(c, 2, count);
    if (t == 0xdd) return len_of(c, 4, count);
    return 0;
}

static int str_of(cur_t *c) {
    if (!need(c, 1)) return 0;
    uint8_t t = c->b[c->pos++];
    size_t len;
    if ((t & 0xe0) == 0xa0) len = t & 0x1f;
    else if (t == 0xd9) { if (!len_of(c, 1, &len)) return 0; }
    else if (t == 0xda) { if (!len_of(c, 2, &len)) return 0; }
    else if (t == 0xdb) { if (!len_of(c, 4, &len)) return 0; }
    else return 0;
    if (!need(c, len)) return 0;
    c->pos += len;
    return 1;
}

static int uint_of(cur_t *c, uint64_t *v) {
    if (!need(c, 1)) return 0;
    uint8_t t = c->b[c->pos++];
    if (t <= 0x7f) { *v = t; return 1; }
    int k = t == 0xcc ? 1 : t == 0xcd ? 2 : t == 0xce ? 4 : t == 0xcf ? 8 : 0;
    if (!k || !need(c, (size_t)k)) return 0;
    *v = be(c->b + c->pos, k);
    c->pos += (size_t)k;
    return *v < ((uint64_t)1 << 63); /* (the node's i64 range) */
}

/* skip any one value (maps and arrays nested at most 8 deep) */
static int skip(cur_t *c, int depth) {
    if (depth > 8 || !need(c, 1)) return 0;
    uint8_t t = c->b[c->pos++];
    size_t len = 0, items = 0;
    if (t <= 0x7f || t >= 0xe0 || t == 0xc0 || t == 0xc2 || t == 0xc3) return 1;
    if ((t & 0xe0) == 0xa0) len = t & 0x1f;
    else if ((t & 0xf0) == 0x90) items = t & 0x0f;
    else if ((t & 0xf0) == 0x80) items = 2 * (size_t)(t & 0x0f);
    else switch (t) {
        case 0xc4: case 0xd9: if (!len_of(c, 1, &len)) return 0; break;
        case 0xc5: case 0xda: if (!len_of(c, 2, &len)) return 0; break;
        case 0xc6: case 0xdb: if (!len_of(c, 4, &len)) return 0; break;
        case 0xca: len = 4; break;
        case 0xcb: len = 8; break;
        case 0xcc: case 0xd0: len = 1; break;
        case 0xcd: case 0xd1: len = 2; break;
        case 0xce: case 0xd2: len = 4; break;
        case 0xcf: case 0xd3: len = 8; break;
        case 0xdc: if (!len_of(c, 2, &items)) return 0; break;
        case 0xdd: if (!len_of(c, 4, &items)) return 0; break;
        case 0xde: if (!len_of(c, 2, &items)) return 0; items *= 2; break;
        case 0xdf: if (!len_of(c, 4, &items)) return 0; items *= 2; break;
        default: return 0; /* ext types: none of the node's */
    }
    if (!need(c, len)) return 0;
    c->pos += len;
    for (size_t i = 0; i < items; i++)
        if (!skip(c, depth + 1)) return 0;
    return 1;
}

static int entry_of(cur_t *c, uint64_t *seq) {
    size_t k;
    if (!array_of(c, &k) || k != 5 || !need(c, 1)) return 0;
    uint8_t t = c->b[c->pos];
    if (t != 0xc4 && t != 0xc5 && t != 0xc6) return 0; /* payload: bin */
    if (!skip(c, 0) || !need(c, 1)) return 0;
    t = c->b[c->pos++];
    if (t != 0x00 && t != 0x01) return 0; /* fmt */
    if (!need(c, 1)) return 0;
    t = c->b[c->pos];
    if (t != 0xc0 && (t & 0xf0) != 0x80 && t != 0xde && t != 0xdf) return 0; /* headers */
    if (!skip(c, 0) || !uint_of(c, seq) || !need(c, 1)) return 0;
    t = c->b[c->pos];
    if (t != 0xca && t != 0xcb && !(t <= 0x7f || t >= 0xe0 || (t >= 0xcc && t <= 0xd3)))
        return 0; /* ts: a number (its range unchecked: see above) */
    return skip(c, 0);
}

long zb_run_head(const uint8_t *b, size_t n, long long *first, long long *last) {
    cur_t c = {b, n, 0};
    size_t k;
    uint64_t op, inc, seq;
    if (!array_of(&c, &k) || k != 2 || !uint_of(&c, &op) || op != 36) return -1;
    if (!array_of(&c, &k) || k != 1 || !array_of(&c, &k) || k != 6) return -1;
    if (!str_of(&c) || !str_of(&c) || !uint_of(&c, &inc) || !array_of(&c, &k)) return -1;
    for (size_t i = 0; i < k; i++)
        if (!str_of(&c)) return -1;
    if (!need(&c, 1)) return -1;
    if (c.b[c.pos] == 0xc0) c.pos++;
    else {
        if (!array_of(&c, &k)) return -1;
        for (size_t i = 0; i < k; i++)
            if (!str_of(&c)) return -1;
    }
    long head = (long)c.pos;
    if (!array_of(&c, &k) || k == 0) return -1;
    for (size_t i = 0; i < k; i++) {
        if (!entry_of(&c, &seq)) return -1;
        if (i == 0) *first = (long long)seq;
        else if ((long long)seq != *last + 1) return -1;
        *last = (long long)seq;
    }
    return c.pos == n ? head : -1;
}
