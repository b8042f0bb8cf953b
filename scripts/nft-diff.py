#!/usr/bin/env python3
"""Differential test of Freeway's nftables firewall against the Linux kernel's.

Two test beds with identical addressing run side by side:

  kernel bed:  KH1 -- KR -- KH2    KR is a Linux router (interfaces `lan`, `wan`); each
                                   ruleset is loaded with `nft flush ruleset; nft -f FILE`
  Freeway bed: FH1 -- FSW -- FH2   FSW runs `freeway run` with two AF_PACKET ports and a router
                                   whose interfaces are `lan` (VLAN 10) and `wan` (VLAN 20);
                                   each ruleset is loaded with `freeway ctl firewall load FILE`

  H1: eth0 10.1.0.2-20/24, fd01::2-20/64, default via 10.1.0.1 / fd01::1
  H2: eth0 10.2.0.2-20/24, fd02::2-20/64, default via 10.2.0.1 / fd02::1
  router: lan 10.1.0.1/24 fd01::1/64, wan 10.2.0.1/24 fd02::1/64, MAC 02:fe:00:00:00:01

For every ruleset both beds get the same traffic, in the same order, and the fate of every
packet is compared:

* crafted packets, sent with AF_PACKET from a host's eth0 to the router's MAC: TCP with many
  flag combinations (and short handshakes, so that `ct state established` is met), UDP (with
  answers and ICMP errors quoting them: `related`), ICMP/ICMPv6 of many types, SCTP, GRE, to
  many addresses and ports (the ports and addresses the ruleset names among them). Each has a
  unique tuple. Its fate: how often it was delivered at the far host (an AF_PACKET sniffer on
  the far eth0), and what came back to the sender: an ICMP error quoting it (type, code,
  source, the quoted TTL and length), a TCP reset (source, seq, ack, flags), an echo reply.
  Crafted packets carry a marker (IPv4 ID / IPv6 flow label 0xd1f0) that a table in each
  host drops at input, so the hosts' stacks never answer them (except echo requests, which
  are sent unmarked and answered).
* real flows between the hosts' stacks (10.1.0.2 <-> 10.2.0.2, fd01::2 <-> fd02::2): TCP
  connects to listening and closed ports with a request and an answer, UDP requests with and
  without a server. Their outcome (connected and answered, refused, timed out, unreachable)
  is compared.

The kernel router runs with ICMP rate limits off and a table of its own at input priority 1000
that drops what reached its local stack except echo requests and neighbour discovery: Freeway
has no local stack (it answers pings and neighbour discovery, nothing else). Conntrack sysctls stay at their
defaults, which Freeway's tracker follows (`nf_conntrack_tcp_loose` 1: an ACK picks up a
connection; `nf_conntrack_tcp_be_liberal` 0: windows are checked).

Usage:
  nft-diff.py --freeway target/debug/freeway RULESET.nft... [--random N --seed S]
  nft-diff.py --kernel-vs-kernel RULESET.nft... [--random N --seed S]   # proves the harness

Prints one line per ruleset (`FILE: N packets, M flows, K mismatches`) and every mismatch; with
`--json` a JSON summary at the end. Exit status: 0 all agree, 1 a mismatch, 2 a setup error.
Needs root, ip (iproute2), nft, conntrack, ethtool.
"""

import argparse
import ctypes
import errno
import ipaddress
import json
import os
import random
import re
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
import zlib

ROUTER_MAC = "02:fe:00:00:00:01"
HOST_MAC = {"h1": "02:00:00:00:00:01", "h2": "02:00:00:00:00:02"}
V4_NET = {"h1": "10.1.0", "h2": "10.2.0"}
V6_NET = {"h1": "fd01::", "h2": "fd02::"}
HOST_IDS = range(2, 21)
MARK = 0xD1F0
PACE = 0.001
SETTLE = 0.3
SYNC_WAIT = 0.1
ETH_P_ALL = 0x0003
PACKET_OUTGOING = 4
CLONE_NEWNET = 0x40000000
# The directories whose NAT rulesets crates/freeway/tests/netns_nat_kernel.rs compares against
# the kernel's NAT (every `type nat` ruleset in them).
_ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
NAT_COVERED = {os.path.join(_ROOT, d) for d in ("crates/freeway-firewall/tests/rulesets", "crates/freeway/tests/nft-diff",
                                                 "crates/freeway/tests/nat-diff")}

_libc = ctypes.CDLL(None, use_errno=True)


def log(msg):
    print(msg, file=sys.stderr, flush=True)


class SetupError(Exception):
    """The test bed could not be built or driven."""


def sh(cmd, check=True, ns=None, input_text=None):
    """Runs `cmd` (a list) in namespace `ns`; returns the CompletedProcess."""
    if ns:
        cmd = ["ip", "netns", "exec", ns] + cmd
    p = subprocess.run(cmd, input=input_text, capture_output=True, text=True)
    if check and p.returncode != 0:
        raise SetupError(f"{' '.join(cmd)}: exit {p.returncode}: {p.stderr.strip()}")
    return p


class InNs:
    """Moves the calling thread into network namespace `ns` for the block (sockets created
    inside stay in it)."""

    def __init__(self, ns):
        self.ns = ns

    def __enter__(self):
        self.back = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
        fd = os.open(f"/run/netns/{self.ns}", os.O_RDONLY)
        try:
            if _libc.setns(fd, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), f"setns {self.ns}")
        finally:
            os.close(fd)

    def __exit__(self, *exc):
        _libc.setns(self.back, CLONE_NEWNET)
        os.close(self.back)


# ---------------------------------------------------------------- packets


def csum(data):
    if len(data) % 2:
        data += b"\0"
    s = sum(struct.unpack(f"!{len(data) // 2}H", data))
    while s >> 16:
        s = (s & 0xFFFF) + (s >> 16)
    return (~s) & 0xFFFF


_CRC32C = []
for _i in range(256):
    _c = _i
    for _ in range(8):
        _c = (_c >> 1) ^ 0x82F63B78 if _c & 1 else _c >> 1
    _CRC32C.append(_c)


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = _CRC32C[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def mac(s):
    return bytes(int(x, 16) for x in s.split(":"))


def pseudo(src, dst, proto, length):
    if src.version == 4:
        return src.packed + dst.packed + struct.pack("!BBH", 0, proto, length)
    return src.packed + dst.packed + struct.pack("!IxxxB", length, proto)


def ip_packet(src, dst, proto, l4, marked, ttl=64):
    """An IPv4 or IPv6 packet; `l4` is the finished L4 header and payload."""
    if src.version == 4:
        ident = MARK if marked else 0x1234
        h = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(l4), ident, 0x4000, ttl, proto, 0, src.packed, dst.packed)
        h = h[:10] + struct.pack("!H", csum(h)) + h[12:]
        return h + l4
    flow = MARK if marked else 0
    return struct.pack("!IHBB16s16s", (6 << 28) | flow, len(l4), proto, ttl, src.packed, dst.packed) + l4


def with_l4_csum(src, dst, proto, l4, off):
    c = csum(pseudo(src, dst, proto, len(l4)) + l4)
    if proto == 17 and c == 0:
        c = 0xFFFF
    return l4[:off] + struct.pack("!H", c) + l4[off + 2 :]


def tcp_seg(src, dst, sport, dport, seq, ack, flags, payload=b""):
    l4 = struct.pack("!HHIIBBHHH", sport, dport, seq, ack, 5 << 4, flags, 65535, 0, 0) + payload
    return with_l4_csum(src, dst, 6, l4, 16)


def udp_dgram(src, dst, sport, dport, payload):
    l4 = struct.pack("!HHHH", sport, dport, 8 + len(payload), 0) + payload
    return with_l4_csum(src, dst, 17, l4, 6)


def icmp_msg(src, dst, typ, code, rest, payload=b""):
    if src.version == 4:
        m = struct.pack("!BBH", typ, code, 0) + rest + payload
        return m[:2] + struct.pack("!H", csum(m)) + m[4:]
    return with_l4_csum(src, dst, 58, struct.pack("!BBH", typ, code, 0) + rest + payload, 2)


def sctp_pkt(sport, dport, vtag, chunk):
    p = struct.pack("!HHII", sport, dport, vtag, 0) + chunk
    return p[:8] + struct.pack("<I", crc32c(p)) + p[12:]


def frame(sender, packet):
    et = 0x0800 if packet[0] >> 4 == 4 else 0x86DD
    return mac(ROUTER_MAC) + mac(HOST_MAC[sender]) + struct.pack("!H", et) + packet


TCP_FLAGS = [(0x01, "F"), (0x02, "S"), (0x04, "R"), (0x08, "P"), (0x10, "."), (0x20, "U")]


def flag_str(f):
    s = "".join(n for b, n in TCP_FLAGS if f & b)
    return s or "none"


# ---------------------------------------------------------------- parsing


def parse_ip(pkt):
    """(version, src, dst, proto, l4 bytes, ttl, ident or flow label, total length) or None."""
    if len(pkt) < 20:
        return None
    v = pkt[0] >> 4
    if v == 4:
        ihl = (pkt[0] & 15) * 4
        total = struct.unpack("!H", pkt[2:4])[0]
        ident = struct.unpack("!H", pkt[4:6])[0]
        src = ipaddress.ip_address(pkt[12:16])
        dst = ipaddress.ip_address(pkt[16:20])
        return 4, src, dst, pkt[9], pkt[ihl:total], pkt[8], ident, total
    if v == 6 and len(pkt) >= 40:
        flow = struct.unpack("!I", pkt[0:4])[0] & 0xFFFFF
        plen = struct.unpack("!H", pkt[4:6])[0]
        src = ipaddress.ip_address(pkt[8:24])
        dst = ipaddress.ip_address(pkt[24:40])
        return 6, src, dst, pkt[6], pkt[40 : 40 + plen], pkt[7], flow, 40 + plen
    return None


ICMP_ERR4 = {3, 4, 5, 11, 12}
ICMP_ERR6 = {1, 2, 3, 4}
ECHO = {1: (8, 0), 58: (128, 129)}


def pkt_key(src, dst, proto, l4):
    """The tuple that names a crafted packet; also computed for a packet quoted in an ICMP
    error (at least 8 bytes of its L4 header)."""
    if proto in (6, 17, 132) and len(l4) >= 8:
        sport, dport = struct.unpack("!HH", l4[:4])
        if proto == 6:
            seq = struct.unpack("!I", l4[4:8])[0]
            flags = l4[13] if len(l4) >= 14 else None
            return (str(src), str(dst), 6, sport, dport, seq, flags)
        return (str(src), str(dst), proto, sport, dport)
    if proto in (1, 58) and len(l4) >= 8:
        typ, code = l4[0], l4[1]
        if typ in ECHO[proto]:
            ident, seq = struct.unpack("!HH", l4[4:8])
            return (str(src), str(dst), proto, typ, ident, seq)
        inner = parse_ip(l4[8:])
        ik = pkt_key(*inner[1:5]) if inner else None
        return (str(src), str(dst), proto, typ, code, struct.unpack("!I", l4[4:8])[0], ik)
    return (str(src), str(dst), proto, l4[:8].hex())


def loose_key(k):
    """A TCP key without its flags, for quotes too short to hold them."""
    return k[:6] if k and k[2] == 6 else k


class Crafted:
    """One crafted packet of the traffic."""

    def __init__(self, sender, packet, desc, sync=False, gap=PACE):
        self.sender = sender
        self.packet = packet
        self.desc = desc
        self.gap = gap
        # Part of a conversation: the next packet waits until this one reached the far host
        # (or SYNC_WAIT passed), so that both routers see the conversation in its order.
        self.sync = sync
        ip = parse_ip(packet)
        self.version, self.src, self.dst, self.proto, self.l4 = ip[0], ip[1], ip[2], ip[3], ip[4]
        self.key = pkt_key(self.src, self.dst, self.proto, self.l4)

    def rst_expect(self):
        """The seq/ack/flags of the TCP reset a reject sends for this segment (Linux's
        nf_send_reset)."""
        seq, ack = struct.unpack("!II", self.l4[4:12])
        flags = self.l4[13]
        if flags & 0x10:
            return (ack, 0, 0x04)
        plen = len(self.l4) - (self.l4[12] >> 4) * 4
        return (0, (seq + plen + (1 if flags & 2 else 0) + (1 if flags & 1 else 0)) & 0xFFFFFFFF, 0x14)


# ---------------------------------------------------------------- traffic


def addr(host, n, v):
    return ipaddress.ip_address(f"{V4_NET[host]}.{n}" if v == 4 else f"{V6_NET[host]}{n:x}")


ROUTER = {4: [ipaddress.ip_address("10.1.0.1"), ipaddress.ip_address("10.2.0.1")],
          6: [ipaddress.ip_address("fd01::1"), ipaddress.ip_address("fd02::1")]}
BASE_PORTS = [0, 1, 21, 22, 23, 25, 53, 67, 68, 80, 123, 443, 1023, 1024, 3389, 5060, 8080, 8443, 32767, 65534, 65535]
SERVICES = {"ssh": 22, "http": 80, "https": 443, "domain": 53, "smtp": 25, "ntp": 123, "telnet": 23, "ftp": 21,
            "bootps": 67, "bootpc": 68, "imap": 143, "imaps": 993, "submission": 587, "sip": 5060}


def ruleset_hints(text):
    """Ports and host numbers the ruleset names (with their neighbours), to aim traffic at."""
    ports, hosts = set(), set()
    for m in re.finditer(r"(?:sport|dport)\s+(!=\s*)?(\{[^}]*\}|[\w.-]+)", text):
        for w in re.findall(r"[\w]+", m.group(2)):
            p = SERVICES.get(w) if not w.isdigit() else int(w)
            if p is not None and 0 <= p <= 65535:
                ports.update(q for q in (p - 1, p, p + 1) if 0 <= q <= 65535)
    for m in re.finditer(r"\b10\.[12]\.0\.(\d+)\b|\bfd0[12]::([0-9a-f]+)\b", text):
        n = int(m.group(1)) if m.group(1) else int(m.group(2), 16)
        hosts.update(h for h in (n - 1, n, n + 1) if h in HOST_IDS)
    return sorted(ports), sorted(hosts)


class Traffic:
    """The crafted packets and real flows of one ruleset, the same on both beds."""

    def __init__(self, seed, text, index):
        self.rng = random.Random(seed)
        self.ports, self.hosts = ruleset_hints(text)
        self.index = index
        self.items = []
        self.keys = set()
        self.ids = iter(range(1, 1 << 16))
        self.build()
        self.flows = self.build_flows()

    def port(self):
        r = self.rng.random()
        if r < 0.35 and self.ports:
            return self.rng.choice(self.ports)
        if r < 0.7:
            return self.rng.choice(BASE_PORTS)
        return self.rng.randint(0, 65535)

    def host(self):
        if self.hosts and self.rng.random() < 0.4:
            return self.rng.choice(self.hosts)
        return self.rng.choice(list(HOST_IDS))

    def pair(self, sender, v, local_ok=True):
        far = "h2" if sender == "h1" else "h1"
        src = addr(sender, self.host(), v)
        if local_ok and self.rng.random() < 0.08:
            return src, self.rng.choice(ROUTER[v])
        return src, addr(far, self.host(), v)

    def add(self, sender, packet, desc, sync=False):
        c = Crafted(sender, packet, desc, sync)
        if (c.sender, c.key) in self.keys:
            return None
        self.keys.add((c.sender, c.key))
        self.items.append(c)
        return c

    def tcp(self, sender, v, flags, local_ok=True, payload=b""):
        src, dst = self.pair(sender, v, local_ok)
        sport, dport = self.rng.randint(1024, 65535) if self.rng.random() < 0.7 else self.port(), self.port()
        seq, ack = self.rng.getrandbits(32), self.rng.getrandbits(32) if flags & 0x10 else 0
        l4 = tcp_seg(src, dst, sport, dport, seq, ack, flags, payload)
        return self.add(sender, ip_packet(src, dst, 6, l4, True),
                        f"{sender} tcp [{flag_str(flags)}] {src}.{sport} > {dst}.{dport} seq {seq} ack {ack}")

    def udp(self, sender, v, local_ok=True):
        src, dst = self.pair(sender, v, local_ok)
        sport, dport = self.rng.randint(1024, 65535) if self.rng.random() < 0.6 else self.port(), self.port()
        l4 = udp_dgram(src, dst, sport, dport, b"nft-diff")
        return self.add(sender, ip_packet(src, dst, 17, l4, True), f"{sender} udp {src}.{sport} > {dst}.{dport}")

    def echo(self, sender, v, typ_idx, marked):
        src, dst = self.pair(sender, v)
        proto = 1 if v == 4 else 58
        typ = ECHO[proto][typ_idx]
        ident = next(self.ids)
        m = icmp_msg(src, dst, typ, 0, struct.pack("!HH", ident, 1), b"nft-diff-echo")
        name = "echo-request" if typ_idx == 0 else "echo-reply"
        return self.add(sender, ip_packet(src, dst, proto, m, marked),
                        f"{sender} {'icmp' if v == 4 else 'icmpv6'} {name} {src} > {dst} id {ident}")

    def icmp_error(self, sender, v, typ, code, quote=None, sync=False):
        """An ICMP error from `sender` quoting `quote` (a packet sent by the other host, so the
        error is `related` to its connection) or a packet of an unknown flow."""
        proto = 1 if v == 4 else 58
        if quote is not None:
            q = quote.packet
            src, dst = quote.dst, quote.src
            if src in ROUTER[v]:
                return None
        else:
            src, dst = self.pair(sender, v, local_ok=False)
            inner_l4 = udp_dgram(dst, src, self.rng.randint(1024, 65535), self.port(), b"x")
            q = ip_packet(dst, src, 17, inner_l4, False)
        body = q[: (28 if v == 4 else 48)] if v == 4 else q[:48]
        m = icmp_msg(src, dst, typ, code, b"\0\0\0\0", body)
        return self.add(sender, ip_packet(src, dst, proto, m, True),
                        f"{sender} {'icmp' if v == 4 else 'icmpv6'} type {typ} code {code} {src} > {dst}"
                        + (f" quoting [{quote.desc}]" if quote else " quoting an unknown flow"), sync)

    def icmp_other(self, sender, v, typ, code=0):
        src, dst = self.pair(sender, v)
        proto = 1 if v == 4 else 58
        rest = struct.pack("!HH", next(self.ids), 7)
        m = icmp_msg(src, dst, typ, code, rest, b"\0" * 12)
        return self.add(sender, ip_packet(src, dst, proto, m, True),
                        f"{sender} {'icmp' if v == 4 else 'icmpv6'} type {typ} code {code} {src} > {dst}")

    def sctp(self, sender, v, init):
        src, dst = self.pair(sender, v, local_ok=False)
        sport, dport = self.rng.randint(1024, 65535), self.port()
        if init:
            chunk = struct.pack("!BBHIIHHI", 1, 0, 20, self.rng.getrandbits(31) | 1, 65535, 1, 1, 1)
            vtag = 0
        else:
            chunk = struct.pack("!BBHIHHI", 0, 3, 20, 1, 0, 0, 0) + b"data"
            vtag = self.rng.getrandbits(32)
        l4 = sctp_pkt(sport, dport, vtag, chunk)
        return self.add(sender, ip_packet(src, dst, 132, l4, True),
                        f"{sender} sctp {'INIT' if init else 'DATA'} {src}.{sport} > {dst}.{dport}")

    def gre(self, sender, v):
        src, dst = self.pair(sender, v, local_ok=False)
        tag = self.rng.getrandbits(32)
        l4 = struct.pack("!HHI", 0, 0x88B5, tag) + b"nft-diff"
        return self.add(sender, ip_packet(src, dst, 47, l4, True), f"{sender} gre {src} > {dst} tag {tag:#x}")

    def tcp_conversation(self, a, v, close):
        """A handshake and some data between two hosts, `a` opening: the later segments are
        `established` (or refused, when the ruleset keeps the SYN out)."""
        b = "h2" if a == "h1" else "h1"
        ca, cb = addr(a, self.host(), v), addr(b, self.host(), v)
        pa, pb = self.rng.randint(1024, 65535), self.port()
        x, y = self.rng.getrandbits(32), self.rng.getrandbits(32)
        m = lambda k: (k + 0) & 0xFFFFFFFF  # noqa: E731
        steps = [
            (a, x, 0, 0x02, b""),
            (b, y, m(x + 1), 0x12, b""),
            (a, m(x + 1), m(y + 1), 0x10, b""),
            (a, m(x + 1), m(y + 1), 0x18, b"hello"),
            (b, m(y + 1), m(x + 6), 0x18, b"world!"),
            (a, m(x + 6), m(y + 7), 0x10, b""),
        ]
        if close == "fin":
            steps += [(a, m(x + 6), m(y + 7), 0x11, b""), (b, m(y + 7), m(x + 7), 0x11, b""),
                      (a, m(x + 7), m(y + 8), 0x10, b"")]
        elif close == "rst":
            steps += [(b, m(y + 7), 0, 0x04, b"")]
        for s, seq, ack, flags, data in steps:
            src, dst, sp, dp = (ca, cb, pa, pb) if s == a else (cb, ca, pb, pa)
            l4 = tcp_seg(src, dst, sp, dp, seq, ack, flags, data)
            self.add(s, ip_packet(src, dst, 6, l4, True),
                     f"{s} tcp [{flag_str(flags)}] {src}.{sp} > {dst}.{dp} seq {seq} ack {ack} len {len(data)}"
                     " (conversation)", sync=True)

    def udp_conversation(self, a, v, err):
        b = "h2" if a == "h1" else "h1"
        ca, cb = addr(a, self.host(), v), addr(b, self.host(), v)
        pa, pb = self.rng.randint(1024, 65535), self.port()
        q = self.add(a, ip_packet(ca, cb, 17, udp_dgram(ca, cb, pa, pb, b"question"), True),
                     f"{a} udp {ca}.{pa} > {cb}.{pb} (conversation)", sync=True)
        if err and q:
            code = 3 if v == 4 else 4
            self.icmp_error(b, v, 3 if v == 4 else 1, code, quote=q, sync=True)
        else:
            self.add(b, ip_packet(cb, ca, 17, udp_dgram(cb, ca, pb, pa, b"answer"), True),
                     f"{b} udp {cb}.{pb} > {ca}.{pa} (answer)", sync=True)

    def build(self):
        r = self.rng
        flag_sets = [0x02, 0x12, 0x10, 0x18, 0x11, 0x04, 0x14, 0x03, 0x00, 0x01, 0x29, 0x06]
        for sender in ("h1", "h2"):
            for v in (4, 6):
                for _ in range(2):
                    self.tcp_conversation(sender, v, r.choice(["fin", "rst", None]))
                for f in flag_sets:
                    for _ in range(2):
                        self.tcp(sender, v, f)
                for _ in range(10):
                    self.tcp(sender, v, 0x02)
                for _ in range(12):
                    self.udp(sender, v)
                for err in (False, True):
                    self.udp_conversation(sender, v, err)
                for _ in range(3):
                    self.echo(sender, v, 0, marked=False)
                self.echo(sender, v, 1, marked=True)
                if v == 4:
                    for typ, code in ((3, 1), (3, 3), (3, 13), (11, 0), (12, 0), (4, 0), (5, 1)):
                        self.icmp_error(sender, v, typ, code)
                    for typ in (13, 15, 9, 10, 17):
                        self.icmp_other(sender, v, typ)
                else:
                    for typ, code in ((1, 0), (1, 1), (1, 4), (2, 0), (3, 0), (4, 0)):
                        self.icmp_error(sender, v, typ, code)
                    for typ in (130, 133, 134, 135, 136, 139, 200):
                        self.icmp_other(sender, v, typ)
                for init in (True, True, False):
                    self.sctp(sender, v, init)
                for _ in range(2):
                    self.gre(sender, v)
        # The conversations stay in order; everything else is shuffled around them.
        conv = [c for c in self.items if c.sync]
        rest = [c for c in self.items if not c.sync]
        r.shuffle(rest)
        out, ci = [], 0
        for i, c in enumerate(rest):
            out.append(c)
            while ci < len(conv) and r.random() < len(conv) / (len(rest) + 1) * 2:
                out.append(conv[ci])
                ci += 1
        out.extend(conv[ci:])
        self.items = out

    def build_flows(self):
        flows = []
        r = self.rng
        base = 20000 + (self.index * 40) % 40000
        i = 0
        for a in ("h1", "h2"):
            b = "h2" if a == "h1" else "h1"
            for v in (4, 6):
                for proto in ("tcp", "udp"):
                    for _ in range(4):
                        dport = r.choice([22, 53, 80, 443, 8080] + self.ports[:20]) or 9
                        flows.append({"proto": proto, "v": v, "from": a, "to": b, "src": str(addr(a, 2, v)),
                                      "dst": str(addr(b, 2, v)), "sport": base + i, "dport": dport,
                                      "open": r.random() < 0.75})
                        i += 1
        # One server per (host, proto, v, port): a port is open if any flow says so.
        seen = {}
        for f in flows:
            k = (f["to"], f["proto"], f["v"], f["dport"])
            seen[k] = seen.get(k, False) or f["open"]
        for f in flows:
            f["open"] = seen[(f["to"], f["proto"], f["v"], f["dport"])]
        return flows


def flow_desc(f):
    return (f"flow {f['proto']}{'' if f['v'] == 4 else '6'} {f['src']}.{f['sport']} > {f['dst']}.{f['dport']}"
            f" ({'listening' if f['open'] else 'closed'})")


# ---------------------------------------------------------------- beds


def host_setup(ns, host, peer_ns, peer_name, ethtool_ok):
    """Creates host namespace `ns`'s eth0 as a veth to `peer_name` in `peer_ns`."""
    sh(["ip", "link", "add", "eth0", "netns", ns, "address", HOST_MAC[host], "type", "veth",
        "peer", "name", peer_name, "netns", peer_ns])
    for n, d in ((ns, "eth0"), (peer_ns, peer_name)):
        if ethtool_ok:
            p = sh(["ethtool", "-K", d, "tx", "off", "rx", "off", "sg", "off", "tso", "off", "gso", "off", "gro",
                    "off"], check=False, ns=n)
            if p.returncode != 0:
                sh(["ethtool", "-K", d, "tx", "off", "sg", "off", "tso", "off", "gso", "off", "gro", "off"], ns=n)
    sysctls = ["net.ipv6.conf.eth0.accept_dad=0", "net.ipv6.conf.all.accept_dad=0", "net.ipv4.icmp_ratelimit=0",
               "net.ipv6.icmp.ratelimit=0", "net.ipv4.icmp_ratemask=0", "net.ipv4.icmp_msgs_per_sec=100000",
               "net.ipv4.icmp_msgs_burst=100000", "net.ipv4.conf.all.rp_filter=0", "net.ipv4.conf.eth0.rp_filter=0"]
    sh(["sysctl", "-q", "-w"] + sysctls, ns=ns)
    for n in HOST_IDS:
        sh(["ip", "addr", "add", f"{V4_NET[host]}.{n}/24", "dev", "eth0"], ns=ns)
        sh(["ip", "addr", "add", f"{V6_NET[host]}{n:x}/64", "dev", "eth0", "nodad"], ns=ns)
    sh(["ip", "link", "set", "eth0", "up"], ns=ns)
    sh(["ip", "route", "add", "default", "via", f"{V4_NET[host]}.1"], ns=ns)
    sh(["ip", "-6", "route", "add", "default", "via", f"{V6_NET[host]}1"], ns=ns)
    # Crafted packets carry the marker: the host's stack never sees them.
    rules = (f"table inet nftdiff_host {{\n\tchain input {{\n\t\ttype filter hook input priority -400;\n"
             f"\t\tip id {MARK} drop\n\t\tip6 flowlabel {MARK} drop\n\t}}\n}}\n")
    sh(["nft", "-f", "-"], ns=ns, input_text=rules)


def wait_ready(ns):
    deadline = time.time() + 10
    while time.time() < deadline:
        p = sh(["ip", "-6", "addr", "show", "dev", "eth0", "tentative"], ns=ns, check=False)
        q = sh(["ip", "-6", "addr", "show", "dev", "eth0", "scope", "link"], ns=ns, check=False)
        if not p.stdout.strip() and "inet6" in q.stdout:
            return
        time.sleep(0.05)
    raise SetupError(f"{ns}: IPv6 addresses not ready")


ROUTER_SYSCTLS = ["net.ipv4.ip_forward=1", "net.ipv6.conf.all.forwarding=1", "net.ipv4.conf.all.rp_filter=0",
                  "net.ipv4.conf.default.rp_filter=0", "net.ipv4.icmp_ratelimit=0", "net.ipv6.icmp.ratelimit=0",
                  "net.ipv4.icmp_ratemask=0", "net.ipv4.icmp_msgs_per_sec=100000", "net.ipv4.icmp_msgs_burst=100000",
                  "net.ipv6.conf.all.accept_dad=0", "net.ipv6.conf.default.accept_dad=0"]
# Kernel defaults, set in case the machine changed them: Freeway's tracker behaves like these.
CT_SYSCTLS = ["net.netfilter.nf_conntrack_tcp_loose=1", "net.netfilter.nf_conntrack_tcp_be_liberal=0",
              "net.netfilter.nf_conntrack_tcp_ignore_invalid_rst=0", "net.netfilter.nf_conntrack_checksum=1"]
HARNESS = """table inet nftdiff_harness {
	chain input {
		type filter hook input priority 1000; policy accept;
		icmp type echo-request accept
		icmpv6 type { echo-request, nd-router-solicit, nd-router-advert, nd-neighbor-solicit, nd-neighbor-advert, mld-listener-query, mld-listener-report, mld-listener-done, mld2-listener-report } accept
		drop
	}
}
"""


class Bed:
    """Two hosts and a router in three namespaces; subclasses make the router."""

    kind = "?"

    def __init__(self, tag, workdir):
        self.tag = tag
        self.dir = workdir
        self.ns = {n: f"nftdiff-{os.getpid()}-{tag}-{n}" for n in ("h1", "r", "h2")}
        self.made = []

    def up(self, ethtool_ok):
        try:
            for n in ("h1", "r", "h2"):
                sh(["ip", "netns", "add", self.ns[n]])
                self.made.append(self.ns[n])
                sh(["ip", "link", "set", "lo", "up"], ns=self.ns[n])
            self.router_up(ethtool_ok)
            for h in ("h1", "h2"):
                wait_ready(self.ns[h])
        except Exception:
            self.down()
            raise

    def down(self):
        for n in self.made:
            sh(["ip", "netns", "del", n], check=False)
        self.made = []

    def ping_router(self):
        """Hosts learn the router's address; errors are fine (the ruleset may refuse them)."""
        for h in ("h1", "h2"):
            for a in (f"{V4_NET[h]}.1", f"{V6_NET[h]}1"):
                sh(["ping", "-c", "1", "-W", "1", "-I", "eth0", a], ns=self.ns[h], check=False)


class KernelBed(Bed):
    kind = "kernel"

    def router_up(self, ethtool_ok):
        r = self.ns["r"]
        sh(["sysctl", "-q", "-w"] + ROUTER_SYSCTLS, ns=r)
        for h, name, net4, net6 in (("h1", "lan", "10.1.0.1/24", "fd01::1/64"),
                                    ("h2", "wan", "10.2.0.1/24", "fd02::1/64")):
            host_setup(self.ns[h], h, r, name, ethtool_ok)
            sh(["ip", "link", "set", name, "address", ROUTER_MAC], ns=r)
            sh(["sysctl", "-q", "-w", f"net.ipv4.conf.{name}.rp_filter=0", f"net.ipv6.conf.{name}.accept_dad=0"],
               ns=r)
            sh(["ip", "addr", "add", net4, "dev", name], ns=r)
            sh(["ip", "addr", "add", net6, "dev", name, "nodad"], ns=r)
            sh(["ip", "link", "set", name, "up"], ns=r)

    def load(self, path):
        r = self.ns["r"]
        sh(["nft", "flush", "ruleset"], ns=r)
        p = sh(["nft", "-f", path], ns=r, check=False)
        if p.returncode != 0:
            return p.stderr.strip() or f"nft -f exit {p.returncode}"
        sh(["nft", "-f", "-"], ns=r, input_text=HARNESS)
        for s in CT_SYSCTLS:
            sh(["sysctl", "-q", "-w", s], ns=r, check=False)
        return None

    def check(self, path):
        p = sh(["nft", "-c", "-f", path], ns=self.ns["r"], check=False)
        return p.returncode == 0, p.stderr.strip()

    def flush_ct(self):
        sh(["conntrack", "-F"], ns=self.ns["r"], check=False)

    def flush_neigh(self):
        sh(["ip", "neigh", "flush", "all"], ns=self.ns["r"], check=False)


PERMISSIVE = "table inet nftdiff_open {\n\tchain forward {\n\t\ttype filter hook forward priority filter; policy accept;\n\t}\n}\n"


class FreewayBed(Bed):
    kind = "freeway"

    def __init__(self, tag, workdir, binary):
        super().__init__(tag, workdir)
        self.binary = os.path.abspath(binary)
        self.proc = None
        self.sock = os.path.join(workdir, f"{tag}.sock")

    def router_up(self, ethtool_ok):
        r = self.ns["r"]
        for h in ("h1", "h2"):
            host_setup(self.ns[h], h, r, h, ethtool_ok)
            sh(["sysctl", "-q", "-w", f"net.ipv6.conf.{h}.disable_ipv6=1"], ns=r)
            sh(["ip", "link", "set", h, "addrgenmode", "none"], ns=r)
            sh(["ip", "link", "set", h, "up"], ns=r)
        first = os.path.join(self.dir, f"{self.tag}-open.nft")
        with open(first, "w") as f:
            f.write(PERMISSIVE)
        cfg = "workers = 1\n"
        for h, vlan in (("h1", 10), ("h2", 20)):
            cfg += (f'\n[[port]]\nname = "{h}"\nkind = "afpacket"\nafpacket = {{ iface = "{h}" }}\n'
                    f'vlan = {{ mode = "access", vlan = {vlan} }}\n')
        cfg += f'\n[router]\nmac = "{ROUTER_MAC}"\nicmp_rate = 100000\nicmp_burst = 100000\n'
        for name, vlan, a4, a6 in (("lan", 10, "10.1.0.1/24", "fd01::1/64"), ("wan", 20, "10.2.0.1/24", "fd02::1/64")):
            cfg += f'\n[[interface]]\nname = "{name}"\nvlan = {vlan}\naddr = ["{a4}", "{a6}"]\n'
        cfg += f'\n[conntrack]\nmax = 100000\n\n[firewall]\nruleset = "{first}"\n'
        path = os.path.join(self.dir, f"{self.tag}.toml")
        with open(path, "w") as f:
            f.write(cfg)
        self.log = open(os.path.join(self.dir, f"{self.tag}.log"), "w")
        self.proc = subprocess.Popen(["ip", "netns", "exec", r, self.binary, "run", "-q", "--config", path,
                                      "--ctl", self.sock], stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.time() + 20
        while not os.path.exists(self.sock):
            if self.proc.poll() is not None or time.time() > deadline:
                raise SetupError(f"freeway did not start: see {self.log.name}:\n" + open(self.log.name).read()[-2000:])
            time.sleep(0.05)

    def down(self):
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        super().down()

    def ctl(self, *words):
        p = sh([self.binary, "ctl", "--socket", self.sock] + list(words), check=False)
        return None if p.returncode == 0 else (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}")

    def load(self, path):
        if self.proc.poll() is not None:
            raise SetupError(f"freeway exited: see {self.log.name}")
        return self.ctl("firewall", "load", os.path.abspath(path))

    def flush_neigh(self):
        err = self.ctl("neigh", "flush")
        if err:
            raise SetupError(f"freeway ctl neigh flush: {err}")

    def flush_ct(self):
        err = self.ctl("conntrack", "flush")
        if err:
            raise SetupError(f"freeway ctl conntrack flush: {err}")


# ---------------------------------------------------------------- one run


def open_sniffer(ns):
    with InNs(ns):
        s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    s.setsockopt(socket.SOL_SOCKET, 33, 16 << 20)  # SO_RCVBUFFORCE
    s.bind(("eth0", 0))
    s.setblocking(False)
    return s


def drain(s):
    out = []
    while True:
        try:
            data, a = s.recvfrom(65535)
        except BlockingIOError:
            return out
        if a[2] != PACKET_OUTGOING and len(data) > 14:
            out.append(data)


def strip_l2(data):
    et = struct.unpack("!H", data[12:14])[0]
    off = 14
    if et == 0x8100:
        et, off = struct.unpack("!H", data[16:18])[0], 18
    return et, data[off:]


def send_all(bed, items, sniff=None, captured=None):
    """Sends `items` in order; with sniffers (and `captured`, where what they read is kept), a
    packet of a conversation is followed by a wait until it reached the far host."""
    socks = {}
    for h in ("h1", "h2"):
        with InNs(bed.ns[h]):
            s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
        s.bind(("eth0", 0))
        socks[h] = s
    try:
        for c in items:
            socks[c.sender].send(frame(c.sender, c.packet))
            if c.sync and sniff:
                far = "h2" if c.sender == "h1" else "h1"
                deadline = time.time() + SYNC_WAIT
                while time.time() < deadline:
                    got = drain(sniff[far])
                    captured[far].extend(got)
                    if any(delivered_key(d) == c.key for d in got):
                        break
                    time.sleep(0.0005)
            time.sleep(c.gap)
    finally:
        for s in socks.values():
            s.close()


def delivered_key(data):
    et, pkt = strip_l2(data)
    ip = parse_ip(pkt) if et in (0x0800, 0x86DD) else None
    return pkt_key(*ip[1:5]) if ip else None


def warm_up(bed):
    """Starts the neighbour tables over (a ruleset that kept neighbour discovery out leaves
    failed entries) and has the router resolve every host address (a marked echo to each,
    which the far host drops) and the hosts the router."""
    bed.flush_neigh()
    for h in ("h1", "h2"):
        sh(["ip", "neigh", "flush", "all"], ns=bed.ns[h], check=False)
    bed.ping_router()
    pkts = []
    for sender, far in (("h1", "h2"), ("h2", "h1")):
        for v in (4, 6):
            src = addr(sender, 2, v)
            for n in HOST_IDS:
                dst = addr(far, n, v)
                proto = 1 if v == 4 else 58
                m = icmp_msg(src, dst, ECHO[proto][0], 0, struct.pack("!HH", 0xFFFF, n))
                pkts.append(Crafted(sender, ip_packet(src, dst, proto, m, True), "warm-up", gap=0.0005))
    send_all(bed, pkts)
    time.sleep(SETTLE)


def attribute(traffic, captured):
    """The fate of every crafted packet, from the frames each host received."""
    fates = [{"delivered": [], "replies": []} for _ in traffic.items]
    by_key, by_loose, by_tuple = {}, {}, {}
    for i, c in enumerate(traffic.items):
        by_key[(c.sender, c.key)] = i
        by_loose.setdefault((c.sender, loose_key(c.key)), []).append(i)
        if c.proto == 6:
            by_tuple.setdefault((c.sender, c.key[1], c.key[0], c.key[4], c.key[3]), []).append(i)
    other = []
    for host, frames in captured.items():
        far = "h2" if host == "h1" else "h1"
        for data in frames:
            et, pkt = strip_l2(data)
            if et not in (0x0800, 0x86DD):
                continue
            ip = parse_ip(pkt)
            if not ip:
                continue
            v, src, dst, proto, l4, ttl, mark, total = ip
            k = pkt_key(src, dst, proto, l4)
            if (far, k) in by_key:
                fates[by_key[(far, k)]]["delivered"].append(f"ttl {ttl} len {total}")
                continue
            if proto in (1, 58) and len(l4) >= 8:
                typ, code = l4[0], l4[1]
                if (proto == 1 and typ in ICMP_ERR4) or (proto == 58 and typ in ICMP_ERR6):
                    inner = parse_ip(l4[8:])
                    if inner:
                        ik = pkt_key(*inner[1:5])
                        idx = by_key.get((host, ik))
                        if idx is None:
                            cands = by_loose.get((host, loose_key(ik)), [])
                            idx = cands[0] if len(cands) == 1 else None
                        if idx is None and inner[3] == proto and len(inner[4]) >= 8 and inner[4][0] == ECHO[proto][1]:
                            # An error about the far host's echo reply, sent back to the far host.
                            ident, seq = struct.unpack("!HH", inner[4][4:8])
                            req = by_key.get((far, (str(inner[2]), str(inner[1]), proto, ECHO[proto][0], ident, seq)))
                            if req is not None:
                                fates[req]["replies"].append(
                                    f"the echo-reply drew icmp{'' if v == 4 else 'v6'} type {typ} code {code} from {src}")
                                continue
                        if idx is not None:
                            quoted = len(l4) - 8
                            sent = len(traffic.items[idx].packet)
                            fates[idx]["replies"].append(
                                f"icmp{'' if v == 4 else 'v6'} type {typ} code {code} from {src} quoting ttl "
                                f"{inner[5]} {'all' if quoted >= sent else f'{quoted} of {sent} bytes'}")
                            continue
                if typ == ECHO[proto][1]:
                    ident, seq = struct.unpack("!HH", l4[4:8])
                    idx = by_key.get((host, (str(dst), str(src), proto, ECHO[proto][0], ident, seq)))
                    if idx is not None:
                        fates[idx]["replies"].append(f"echo-reply from {src} ttl {ttl}")
                        continue
            if proto == 6 and len(l4) >= 14 and l4[13] & 0x04:
                sport, dport, seq, ack = struct.unpack("!HHII", l4[:12])
                cands = by_tuple.get((host, str(src), str(dst), sport, dport), [])
                hit = [i for i in cands if traffic.items[i].rst_expect() == (seq, ack if l4[13] & 0x10 else 0,
                                                                               l4[13] & 0x14)]
                pick = hit[0] if hit else (cands[-1] if cands else None)
                if pick is not None:
                    fates[pick]["replies"].append(f"tcp [{flag_str(l4[13])}] from {src} seq {seq} ack {ack} ttl {ttl}")
                    continue
            if proto == 58 and len(l4) >= 1 and 130 <= l4[0] <= 137:
                continue  # neighbour discovery, MLD
            other.append(f"{host}: {src} > {dst} proto {proto} {l4[:8].hex()} key {k}")
    for f in fates:
        f["replies"].sort()
    return fates, other


def run_flows(bed, flows):
    """Runs the real flows, all at once (each on its own ports); returns their outcomes."""
    servers, stop = [], threading.Event()
    outcomes = [None] * len(flows)
    opened = set()
    try:
        for f in flows:
            key = (f["to"], f["proto"], f["v"], f["dst"], f["dport"])
            if not f["open"] or key in opened:
                continue
            opened.add(key)
            fam = socket.AF_INET if f["v"] == 4 else socket.AF_INET6
            with InNs(bed.ns[f["to"]]):
                s = socket.socket(fam, socket.SOCK_STREAM if f["proto"] == "tcp" else socket.SOCK_DGRAM)
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            s.bind((f["dst"], f["dport"]))
            if f["proto"] == "tcp":
                s.listen(64)
            s.settimeout(0.1)
            servers.append(s)
        threads = [threading.Thread(target=serve, args=(s, stop)) for s in servers]
        threads += [threading.Thread(target=client, args=(bed, f, outcomes, i)) for i, f in enumerate(flows)]
        for t in threads:
            t.start()
        for t in threads[len(servers):]:
            t.join()
        stop.set()
        for t in threads[: len(servers)]:
            t.join()
    finally:
        for s in servers:
            s.close()
    return outcomes


def serve(s, stop):
    while not stop.is_set():
        try:
            if s.type == socket.SOCK_STREAM:
                c, _ = s.accept()
                c.settimeout(1.0)
                try:
                    if c.recv(16) == b"ping":
                        c.sendall(b"pong")
                except OSError:
                    pass
                c.close()
            else:
                data, a = s.recvfrom(64)
                s.sendto(b"answer:" + data, a)
        except (socket.timeout, BlockingIOError):
            continue
        except OSError:
            continue


def err_name(e):
    if isinstance(e, socket.timeout):
        return "timeout"
    return errno.errorcode.get(e.errno, str(e.errno)) if getattr(e, "errno", None) else type(e).__name__


def client(bed, f, outcomes, i):
    fam = socket.AF_INET if f["v"] == 4 else socket.AF_INET6
    with InNs(bed.ns[f["from"]]):
        s = socket.socket(fam, socket.SOCK_STREAM if f["proto"] == "tcp" else socket.SOCK_DGRAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((f["src"], f["sport"]))
        # Past the first SYN retransmission (1 s).
        s.settimeout(2.5)
        if f["proto"] == "tcp":
            try:
                s.connect((f["dst"], f["dport"]))
            except OSError as e:
                outcomes[i] = "connect: " + err_name(e)
                return
            try:
                s.sendall(b"ping")
                got = s.recv(16)
                outcomes[i] = "connected, answered" if got == b"pong" else f"connected, got {got!r}"
            except OSError as e:
                outcomes[i] = "connected, then " + err_name(e)
        else:
            s.connect((f["dst"], f["dport"]))
            # Three tries: one lost datagram must not decide the outcome.
            s.settimeout(0.6)
            for _ in range(3):
                try:
                    s.send(b"q")
                    got = s.recv(64)
                    outcomes[i] = "answered" if got == b"answer:q" else f"got {got!r}"
                except OSError as e:
                    outcomes[i] = err_name(e)
                if outcomes[i] != "timeout":
                    break
    finally:
        s.close()


def run_bed(bed, path, traffic, result):
    """Loads the ruleset into `bed` and runs the traffic; fills `result`."""
    try:
        err = bed.load(os.path.join(bed.dir, "permissive.nft"))
        if err:
            raise SetupError(f"{bed.kind}: the permissive ruleset did not load: {err}")
        warm_up(bed)
        err = bed.load(path)
        if err:
            result["load_error"] = err
            return
        bed.flush_ct()
        sniff = {h: open_sniffer(bed.ns[h]) for h in ("h1", "h2")}
        captured = {"h1": [], "h2": []}
        try:
            send_all(bed, traffic.items, sniff, captured)
            time.sleep(SETTLE)
            for h, s in sniff.items():
                captured[h].extend(drain(s))
        finally:
            for s in sniff.values():
                s.close()
        result["fates"], result["other"] = attribute(traffic, captured)
        result["flows"] = run_flows(bed, traffic.flows)
    except Exception as e:  # reported by the caller
        result["error"] = f"{type(e).__name__}: {e}"


def fate_str(f):
    parts = [f"delivered {len(f['delivered'])}x" + (f" ({', '.join(sorted(set(f['delivered'])))})"
                                                    if f["delivered"] else "")]
    parts += f["replies"]
    return "; ".join(parts)


def compare(name, beds, traffic, results, max_print, trace=None, skip_unsupported=False):
    a, b = results
    mism = []
    if "error" in a or "error" in b:
        raise SetupError(f"{name}: {a.get('error') or b.get('error')}")
    if "load_error" in a or "load_error" in b:
        if "load_error" in a and "load_error" in b:
            return [], "both refuse the ruleset"
        if skip_unsupported and "not run by Freeway yet" in b.get("load_error", ""):
            return [], "*** SKIPPED: " + b["load_error"].splitlines()[0] + " ***"
        mism.append({"packet": "(the ruleset itself)", "a": "load: " + a.get("load_error", "ok"),
                     "b": "load: " + b.get("load_error", "ok")})
        print(f"MISMATCH {name}: {mism[0]['packet']}\n    {beds[0].kind:8} {mism[0]['a']}\n    {beds[1].kind:8} {mism[0]['b']}")
        return mism, None
    for i, c in enumerate(traffic.items):
        fa, fb = fate_str(a["fates"][i]), fate_str(b["fates"][i])
        if fa != fb:
            mism.append({"packet": c.desc, "a": fa, "b": fb})
    for i, f in enumerate(traffic.flows):
        if a["flows"][i] != b["flows"][i]:
            mism.append({"packet": flow_desc(f), "a": a["flows"][i], "b": b["flows"][i]})
    if trace:
        for i, c in enumerate(traffic.items):
            if trace in c.desc:
                print(f"TRACE {name}: #{i} {c.desc}\n    {beds[0].kind:8} {fate_str(a['fates'][i])}\n"
                      f"    {beds[1].kind:8} {fate_str(b['fates'][i])}")
    for m in mism[:max_print]:
        print(f"MISMATCH {name}: {m['packet']}\n    {beds[0].kind:8} {m.get('a')}\n    {beds[1].kind:8} {m.get('b')}")
    if len(mism) > max_print:
        print(f"MISMATCH {name}: ... and {len(mism) - max_print} more")
    return mism, None


# ---------------------------------------------------------------- random rulesets


def rand_addr(r, v):
    """An address, a prefix, a range or a set of one side's IPv4 (`v` 4) or IPv6 addresses."""
    side = r.choice(["h1", "h2"])
    host = lambda n: str(addr(side, n, v))  # noqa: E731
    k = r.random()
    if k < 0.4:
        return host(r.randint(1, 21))
    if k < 0.6:
        if v == 6 and r.random() < 0.3:
            return f"{V6_NET[side]}/64"
        bits = r.choice([0, 1, 2, 3, 4, 6, 7, 8])
        return f"{host(r.randint(0, 255) & ~((1 << bits) - 1))}/{(32 if v == 4 else 128) - bits}"
    if k < 0.8:
        lo = r.randint(1, 20)
        return f"{host(lo)}-{host(r.randint(lo, 21))}"
    return "{ " + ", ".join(sorted({host(r.randint(2, 20)) for _ in range(r.randint(1, 4))})) + " }"


def rand_ports(r):
    k = r.random()
    pick = lambda: r.choice(BASE_PORTS + [r.randint(0, 65535)])  # noqa: E731
    if k < 0.45:
        return str(pick())
    if k < 0.7:
        lo = pick()
        return f"{lo}-{r.randint(lo, min(65535, lo + r.choice([1, 10, 1000, 65535])))}"
    items = set()
    for _ in range(r.randint(1, 4)):
        lo = pick()
        items.add(str(lo) if r.random() < 0.7 else f"{lo}-{min(65535, lo + r.randint(1, 100))}")
    # Overlapping intervals are refused by nft: keep single values then.
    if any("-" in x for x in items) and len(items) > 1:
        items = {x for x in items if "-" not in x} or {"22"}
    return "{ " + ", ".join(sorted(items, key=lambda x: int(x.split("-")[0]))) + " }"


ICMP4_TYPES = ["echo-request", "echo-reply", "destination-unreachable", "time-exceeded", "parameter-problem",
               "timestamp-request", "redirect", "source-quench", "router-advertisement"]
ICMP6_TYPES = ["echo-request", "echo-reply", "destination-unreachable", "time-exceeded", "packet-too-big",
               "parameter-problem", "nd-neighbor-solicit", "nd-neighbor-advert", "nd-router-advert",
               "mld-listener-query"]
CT_STATES = ["new", "established", "related", "invalid", "untracked"]


def rand_match(r, fam):
    kinds = ["iif", "oif", "l4", "tport", "tflags", "ct", "icmp"]
    if fam in ("inet", "ip"):
        kinds += ["v4", "v4"]
    if fam in ("inet", "ip6"):
        kinds += ["v6", "v6"]
    k = r.choice(kinds)
    neg = "!= " if r.random() < 0.15 else ""
    if k == "iif":
        return f'iifname {neg}"{r.choice(["lan", "wan"])}"'
    if k == "oif":
        return f'oifname {neg}"{r.choice(["lan", "wan"])}"'
    if k == "v4":
        return f"ip {r.choice(['saddr', 'daddr'])} {neg}{rand_addr(r, 4)}"
    if k == "v6":
        return f"ip6 {r.choice(['saddr', 'daddr'])} {neg}{rand_addr(r, 6)}"
    if k == "l4":
        protos = ["tcp", "udp", "sctp", "gre"] + (["icmp"] if fam != "ip6" else []) + (["ipv6-icmp"] if fam != "ip" else [])
        if r.random() < 0.3:
            return "meta l4proto { " + ", ".join(sorted(set(r.sample(protos, 2)))) + " }"
        return f"meta l4proto {neg}{r.choice(protos)}"
    if k == "tport":
        return f"{r.choice(['tcp', 'udp', 'tcp', 'udp', 'th'])} {r.choice(['sport', 'dport'])} {neg}{rand_ports(r)}"
    if k == "tflags":
        return r.choice(["tcp flags syn", "tcp flags & (syn|ack) == syn", "tcp flags & (fin|syn|rst|ack) == syn",
                         "tcp flags & (syn|ack) == syn|ack", "tcp flags rst", "tcp flags & (fin|syn) == fin|syn",
                         "tcp flags == 0x0", "tcp flags & ack == ack", "tcp flags != syn", "tcp flags fin"])
    if k == "ct":
        st = sorted(set(r.sample(CT_STATES, r.randint(1, 2))), key=CT_STATES.index)
        return f"ct state {neg if len(st) == 1 else ''}{','.join(st) if len(st) == 1 else '{ ' + ', '.join(st) + ' }'}"
    if fam == "ip" or (fam == "inet" and r.random() < 0.5):
        t = sorted(set(r.sample(ICMP4_TYPES, r.randint(1, 3))))
        return f"icmp type {t[0] if len(t) == 1 else '{ ' + ', '.join(t) + ' }'}"
    t = sorted(set(r.sample(ICMP6_TYPES, r.randint(1, 3))))
    return f"icmpv6 type {t[0] if len(t) == 1 else '{ ' + ', '.join(t) + ' }'}"


def rand_verdict(r, fam, users, in_user):
    opts = ["accept", "accept", "drop", "reject", "counter", "counter accept", "counter drop"]
    if users:
        opts += ["jump", "goto"]
    if in_user:
        opts += ["return"]
    v = r.choice(opts)
    if v in ("jump", "goto"):
        return f"{v} {r.choice(users)}"
    if v == "reject":
        rej = ["reject", "reject with icmpx type port-unreachable", "reject with icmpx type admin-prohibited",
               "reject with icmpx type host-unreachable", "reject with icmpx type no-route", "reject with tcp reset"]
        if fam == "ip":
            rej += ["reject with icmp type host-prohibited", "reject with icmp type net-unreachable"]
        if fam == "ip6":
            rej += ["reject with icmpv6 type admin-prohibited", "reject with icmpv6 type addr-unreachable"]
        v = r.choice(rej)
        if v.endswith("tcp reset"):
            return "meta l4proto tcp " + v
    return v


def gen_ruleset(r):
    fam = r.choice(["inet", "inet", "ip", "ip6"])
    users = [f"user{i}" for i in range(r.randint(0, 2))]
    lines = [f"table {fam} nftdiff_rand {{"]
    # User chains jump only to chains defined after them (no loops).
    for i, u in enumerate(users):
        lines.append(f"\tchain {u} {{")
        later = users[i + 1 :]
        for _ in range(r.randint(1, 5)):
            ms = " ".join(rand_match(r, fam) for _ in range(r.randint(1, 2)))
            lines.append(f"\t\t{ms} {rand_verdict(r, fam, later, True)}")
        lines.append("\t}")
    hooks = ["forward"] + (["input"] if r.random() < 0.3 else [])
    for hook in hooks:
        pol = r.choice(["accept", "accept", "drop"])
        lines.append(f"\tchain {hook} {{\n\t\ttype filter hook {hook} priority filter; policy {pol};")
        for _ in range(r.randint(5, 30) if hook == "forward" else r.randint(1, 6)):
            ms = " ".join(rand_match(r, fam) for _ in range(r.randint(0, 3)))
            lines.append(f"\t\t{ms} {rand_verdict(r, fam, users, False)}".replace("\t\t ", "\t\t"))
        lines.append("\t}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def random_rulesets(n, seed, checker, workdir):
    r = random.Random(seed)
    out = []
    for i in range(n):
        for attempt in range(200):
            text = gen_ruleset(r)
            path = os.path.join(workdir, f"random-{seed}-{i:03}.nft")
            with open(path, "w") as f:
                f.write(text)
            ok, _ = checker.check(path)
            if ok:
                out.append(path)
                break
        else:
            raise SetupError(f"no random ruleset the kernel accepts after 200 tries (seed {seed}, #{i})")
    return out


# ---------------------------------------------------------------- main


def main():
    ap = argparse.ArgumentParser(description="Freeway's nftables firewall against the kernel's.",
                                 formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    ap.add_argument("rulesets", nargs="*", help="nft ruleset files")
    ap.add_argument("--freeway", help="the freeway binary (kernel against Freeway)")
    ap.add_argument("--kernel-vs-kernel", action="store_true", help="two kernel beds (proves the harness)")
    ap.add_argument("--random", type=int, default=0, metavar="N", help="also N random rulesets")
    ap.add_argument("--seed", type=int, default=1, help="seed of the random rulesets and of the traffic")
    ap.add_argument("--json", action="store_true", help="print a JSON summary at the end")
    ap.add_argument("--max-print", type=int, default=40, help="mismatches printed per ruleset")
    ap.add_argument("-v", "--verbose", action="store_true", help="per ruleset, what the first bed saw")
    ap.add_argument("--trace", metavar="TEXT", help="print the fates of the packets whose description has TEXT")
    ap.add_argument("--only", metavar="TEXT", help="send only the crafted packets whose description has TEXT")
    ap.add_argument("--skip-unsupported", action="store_true",
                    help="a ruleset Freeway refuses as using what it does not run yet (a hook, NAT, bridge "
                    "tables) is skipped, loudly, rather than a mismatch")
    ap.add_argument("--keep", action="store_true", help="keep the work directory (rulesets, logs)")
    a = ap.parse_args()
    if bool(a.freeway) == a.kernel_vs_kernel:
        ap.error("give exactly one of --freeway BINARY and --kernel-vs-kernel")
    if os.geteuid() != 0:
        log("nft-diff: must run as root (namespaces, veths, AF_PACKET)")
        return 2
    for tool in ("ip", "nft", "conntrack"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode != 0:
            log(f"nft-diff: {tool} is not installed")
            return 2
    ethtool_ok = subprocess.run(["sh", "-c", "command -v ethtool"], capture_output=True).returncode == 0
    if not ethtool_ok:
        log("nft-diff: warning: ethtool not installed, veth offloads stay on")
    workdir = tempfile.mkdtemp(prefix="nft-diff-")
    with open(os.path.join(workdir, "permissive.nft"), "w") as f:
        f.write(PERMISSIVE)
    beds = [KernelBed("k", workdir)]
    beds.append(KernelBed("k2", workdir) if a.kernel_vs_kernel else FreewayBed("fw", workdir, a.freeway))
    summary = {"mode": "kernel-vs-kernel" if a.kernel_vs_kernel else "kernel-vs-freeway", "rulesets": []}
    total = 0
    try:
        for b in beds:
            b.up(ethtool_ok)
        files = list(a.rulesets)
        if a.random:
            files += random_rulesets(a.random, a.seed, beds[0], workdir)
        for idx, path in enumerate(files):
            with open(path) as f:
                text = f.read()
            if a.skip_unsupported and re.search(r"\btype\s+nat\b", text):
                # Fates are compared by the packets' original addresses and ports; a translated
                # packet arrives with others (and each side picks its own ports), so NAT
                # rulesets are compared by the far host's view in another harness, which takes
                # every `type nat` ruleset of the corpus directories. One elsewhere is not
                # compared at all: skipped loudly, and a failure under CI.
                if os.path.dirname(os.path.realpath(path)) in NAT_COVERED:
                    print(f"{path}: a NAT ruleset: compared against the kernel's NAT by "
                          "crates/freeway/tests/netns_nat_kernel.rs", flush=True)
                    continue
                print(f"{path}: *** SKIPPED: a NAT ruleset outside the corpus that "
                      "netns_nat_kernel.rs compares ***", flush=True)
                if os.environ.get("CI"):
                    log("nft-diff: CI is set: an uncompared NAT ruleset is a failure")
                    total += 1
                continue
            # The traffic depends on the seed and the file's name, not on its place in the list.
            traffic = Traffic(a.seed * 1_000_003 + zlib.crc32(os.path.basename(path).encode()), text, idx)
            if a.only:
                traffic.items = [c for c in traffic.items if a.only in c.desc]
            results = [{}, {}]
            threads = [threading.Thread(target=run_bed, args=(b, path, traffic, res)) for b, res in zip(beds, results)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            shown = path if not path.startswith(workdir) else os.path.basename(path)
            mism, note = compare(shown, beds, traffic, results, a.max_print, a.trace, a.skip_unsupported)
            total += len(mism)
            line = f"{shown}: {len(traffic.items)} packets, {len(traffic.flows)} flows, {len(mism)} mismatches"
            if a.verbose and "fates" in results[0]:
                fa = results[0]["fates"]
                line += (f" [{beds[0].kind}: {sum(1 for f in fa if f['delivered'])} delivered, "
                         f"{sum(len(f['replies']) for f in fa)} replies, flows {sorted(set(results[0]['flows']))}, "
                         f"{len(results[0]['other'])} unattributed]")
                for x in results[0]["other"][:10]:
                    line += "\n    unattributed " + x
            print(line + (f" ({note})" if note else ""), flush=True)
            if mism and path.startswith(workdir):
                print("    the ruleset:\n" + "".join("    | " + x + "\n" for x in text.splitlines()), flush=True)
            summary["rulesets"].append({"file": shown, "packets": len(traffic.items), "flows": len(traffic.flows),
                                        "mismatches": mism, "ruleset": text if path.startswith(workdir) else None,
                                        "note": note})
    except SetupError as e:
        log(f"nft-diff: {e}")
        return 2
    finally:
        for b in beds:
            b.down()
        if a.keep:
            log(f"nft-diff: work directory kept: {workdir}")
        else:
            subprocess.run(["rm", "-rf", workdir])
    summary["total_mismatches"] = total
    if a.json:
        print(json.dumps(summary, indent=1))
    print(f"nft-diff: {len(summary['rulesets'])} rulesets, {total} mismatches")
    return 1 if total else 0


if __name__ == "__main__":
    sys.exit(main())
