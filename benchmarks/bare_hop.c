/* Node B of the chain as a bare hop in C (benchmarks/bare_hop.py, variant "c").
 *
 * Moves each frame from B's DEALER (its link to A) to C's identity on B's ROUTER, and
 * each frame C's identity sends on the ROUTER to the DEALER: no decode, no dedupe, no
 * route, no counters (frames from any other identity are read and dropped). What a chain
 * costs with this in place of B's pass is the bound a relay on libzmq's C API could
 * reach. Built by bare_hop.build_c against the libzmq pyzmq uses (no zmq.h needed: the
 * few declarations are below); called through ctypes with pyzmq's socket handles, the
 * GIL released. Returns after `limit` frames moved (0: never), or -1 if a poll failed.
 */
#include <stddef.h>
#include <string.h>

typedef struct { unsigned char opaque[64]; } zmq_msg_t;
typedef struct { void *socket; int fd; short events; short revents; } zmq_pollitem_t;
int zmq_poll(zmq_pollitem_t *, int, long);
int zmq_msg_init(zmq_msg_t *);
int zmq_msg_recv(zmq_msg_t *, void *, int);
int zmq_msg_send(zmq_msg_t *, void *, int);
int zmq_msg_close(zmq_msg_t *);
void *zmq_msg_data(zmq_msg_t *);
size_t zmq_msg_size(const zmq_msg_t *);
int zmq_send(void *, const void *, size_t, int);
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
        if (zmq_poll(items, 2, -1) < 0) return -1;
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
