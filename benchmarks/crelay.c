/* One hop of the C relays (benchmarks/peer_relays.py, "crelays"): libzmq's floor.
 *
 * The same hop as bench_network.relay_hop_main without Python: PULL (first hop) or SUB
 * (connected to the previous hop's PUB, every topic) -> PUB, a frame in, the same frame
 * out, with a blocking zmq_msg_recv on the one input (no poll). What a chain of these
 * costs at a low rate is what libzmq's threads cost on this machine; the Python relays
 * beside it add a Python loop per hop. Built by peer_relays.build_crelay against the
 * libzmq pyzmq uses (no zmq.h needed: the few declarations are below).
 *
 *   crelay pull HWM        bind a PULL and a PUB on 127.0.0.1, print "IN_PORT OUT_PORT"
 *   crelay PORT HWM        SUB to 127.0.0.1:PORT, bind a PUB, print "PORT OUT_PORT"
 *
 * Runs until a signal ends it (SIGTERM: its PID, from the benchmark).
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* aligned as zmq.h declares it (libzmq's msg_t lives in these 64 bytes) */
typedef struct { unsigned char opaque[64]; } __attribute__((aligned(sizeof(void *)))) zmq_msg_t;
void *zmq_ctx_new(void);
void *zmq_socket(void *, int);
int zmq_bind(void *, const char *);
int zmq_connect(void *, const char *);
int zmq_setsockopt(void *, int, const void *, size_t);
int zmq_getsockopt(void *, int, void *, size_t *);
int zmq_msg_init(zmq_msg_t *);
int zmq_msg_recv(zmq_msg_t *, void *, int);
int zmq_msg_send(zmq_msg_t *, void *, int);
int zmq_msg_close(zmq_msg_t *);
enum { PUB = 1, SUB = 2, PULL = 7, SUBSCRIBE = 6, LAST_ENDPOINT = 32, SNDHWM = 23, RCVHWM = 24 };

static const char *port_of(void *sock, char *buf, size_t size) {
    zmq_getsockopt(sock, LAST_ENDPOINT, buf, &size);
    const char *colon = strrchr(buf, ':');
    return colon ? colon + 1 : "?";
}

int main(int argc, char **argv) {
    if (argc != 3) {
        fprintf(stderr, "usage: crelay pull|UPSTREAM_PORT HWM\n");
        return 2;
    }
    int hwm = atoi(argv[2]);
    void *ctx = zmq_ctx_new();
    void *in;
    if (strcmp(argv[1], "pull") == 0) {
        in = zmq_socket(ctx, PULL);
        zmq_setsockopt(in, RCVHWM, &hwm, sizeof hwm);
        if (zmq_bind(in, "tcp://127.0.0.1:*") != 0) return 1;
    } else {
        char upstream[64];
        in = zmq_socket(ctx, SUB);
        zmq_setsockopt(in, RCVHWM, &hwm, sizeof hwm);
        zmq_setsockopt(in, SUBSCRIBE, "", 0);
        snprintf(upstream, sizeof upstream, "tcp://127.0.0.1:%s", argv[1]);
        if (zmq_connect(in, upstream) != 0) return 1;
    }
    void *out = zmq_socket(ctx, PUB);
    zmq_setsockopt(out, SNDHWM, &hwm, sizeof hwm);
    if (zmq_bind(out, "tcp://127.0.0.1:*") != 0) return 1;
    char a[256], b[256];
    printf("%s %s\n", port_of(in, a, sizeof a), port_of(out, b, sizeof b));
    fflush(stdout);
    for (;;) {
        zmq_msg_t msg;
        zmq_msg_init(&msg);
        if (zmq_msg_recv(&msg, in, 0) < 0 || zmq_msg_send(&msg, out, 0) < 0)
            zmq_msg_close(&msg); /* (a sent message belongs to libzmq) */
    }
}
