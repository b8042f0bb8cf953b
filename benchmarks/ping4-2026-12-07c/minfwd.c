/* The least a user-space forwarder can do for a ping: two AF_PACKET sockets, each frame read
 * from one is written to the other. No tables, no batching, no copies beyond the kernel's.
 * Mode "poll": sleep in poll() on both sockets when both are empty (as a datapath that must
 * not burn a core while idle). Mode "spin": never sleep (the floor without a wake-up). Mode
 * "ring": as "poll", but frames are read from a TPACKET_V2 receive ring (no recv() per frame,
 * as Freeway's AF_PACKET ports read them) and sent from the ring slot.
 * Usage (in the switch namespace): minfwd poll|spin|ring IFACE_A IFACE_B */
#include <arpa/inet.h>
#include <linux/if_packet.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

static int open_port(const char *ifname) {
    int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
    if (fd < 0) { perror("socket"); exit(1); }
    int one = 1;
    setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one);
    struct sockaddr_ll sll = {0};
    sll.sll_family = AF_PACKET;
    sll.sll_protocol = htons(ETH_P_ALL);
    sll.sll_ifindex = if_nametoindex(ifname);
    if (!sll.sll_ifindex) { fprintf(stderr, "no interface %s\n", ifname); exit(1); }
    if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0) { perror("bind"); exit(1); }
    return fd;
}

#define FRAMES 256
#define FSIZE 2048

static unsigned char *ring_of(int fd) {
    int v = TPACKET_V2;
    if (setsockopt(fd, SOL_PACKET, PACKET_VERSION, &v, sizeof v) < 0) { perror("version"); exit(1); }
    struct tpacket_req req = {.tp_block_size = 4096, .tp_block_nr = FRAMES / 2,
                              .tp_frame_size = FSIZE, .tp_frame_nr = FRAMES};
    if (setsockopt(fd, SOL_PACKET, PACKET_RX_RING, &req, sizeof req) < 0) { perror("ring"); exit(1); }
    void *m = mmap(NULL, (size_t)FRAMES * FSIZE, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED) { perror("mmap"); exit(1); }
    return m;
}

static void ring_main(int fd[2]) {
    unsigned char *ring[2] = {ring_of(fd[0]), ring_of(fd[1])};
    unsigned cur[2] = {0, 0};
    for (;;) {
        int moved = 0;
        for (int i = 0; i < 2; i++) {
            for (;;) {
                struct tpacket2_hdr *h = (void *)(ring[i] + (size_t)cur[i] * FSIZE);
                if (!(__atomic_load_n(&h->tp_status, __ATOMIC_ACQUIRE) & TP_STATUS_USER)) break;
                send(fd[1 - i], (unsigned char *)h + h->tp_mac, h->tp_snaplen, 0);
                __atomic_store_n(&h->tp_status, TP_STATUS_KERNEL, __ATOMIC_RELEASE);
                cur[i] = (cur[i] + 1) % FRAMES;
                moved = 1;
            }
        }
        if (!moved) {
            struct pollfd p[2] = {{fd[0], POLLIN, 0}, {fd[1], POLLIN, 0}};
            poll(p, 2, -1);
        }
    }
}

int main(int argc, char **argv) {
    if (argc != 4) { fprintf(stderr, "usage: minfwd poll|spin|ring A B\n"); return 2; }
    int spin = strcmp(argv[1], "spin") == 0;
    int fd[2] = {open_port(argv[2]), open_port(argv[3])};
    if (strcmp(argv[1], "ring") == 0) ring_main(fd);
    static unsigned char buf[65536];
    for (;;) {
        int moved = 0;
        for (int i = 0; i < 2; i++) {
            for (;;) {
                ssize_t n = recv(fd[i], buf, sizeof buf, MSG_DONTWAIT);
                if (n <= 0) break;
                send(fd[1 - i], buf, (size_t)n, 0);
                moved = 1;
            }
        }
        if (!moved && !spin) {
            struct pollfd p[2] = {{fd[0], POLLIN, 0}, {fd[1], POLLIN, 0}};
            poll(p, 2, -1);
        }
    }
}
