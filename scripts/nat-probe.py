#!/usr/bin/env python3
"""Traffic and observations for the NAT tests (crates/freeway/tests/netns_nat_kernel.rs).

Two roles, each run inside a host's network namespace:

  nat-probe.py serve --tcp 22,80 --udp 53
      A far host: answers every TCP connection and UDP datagram with its peer's address, and
      prints one JSON line per thing it saw, as it sees it: {"proto", "tag", "src", "sport",
      "dst", "dport"} (the source as it arrived, so after any translation), and for ICMP echo
      requests carrying a tag (a raw socket) {"proto": "icmp", "tag", "src", "id"}. Runs until
      killed; opens every socket before the last TCP listen, so that port listening means
      ready.

  nat-probe.py syn-flood SRC DST DPORT FIRST_SPORT COUNT
      COUNT TCP SYNs from SRC (a raw socket: any address), source ports FIRST_SPORT up.

  nat-probe.py probe PLAN.json
      An inside or outside host: runs the probes of PLAN (a JSON list) in order and prints one
      JSON object per probe. A probe is {"kind", "tag", "dst", "dport", "sport"?, "id"?}:
        tcp   connect (from sport if given), send the tag, read the answer: "ok" when the
              server echoed the tag back
        udp   the same over UDP (three tries)
        ping  an ICMP echo request with identifier `id` and the tag as payload (raw socket):
              "ok" when its reply came back with the same identifier
        ttl-udp, ttl-ping   the UDP datagram or echo request sent with TTL `ttl`, expected to
              expire beyond the router: the ICMP time-exceeded that comes back is parsed
              ("error": outer source, type, code, checksum valid; "inner": the quoted IPv4
              header's source, destination, protocol, header checksum valid, and its ports or
              echo identifier, and whether the quoted UDP checksum is valid)

Standard library only.
"""

import json
import select
import socket
import struct
import sys
import time

IP_RECVERR = 11


def csum(data):
    """The Internet checksum of `data` (an odd length padded with a zero byte)."""
    data += b"\0" * (len(data) & 1)
    total = sum(int.from_bytes(data[i:i + 2], "big") for i in range(0, len(data), 2))
    total = (total & 0xFFFF) + (total >> 16)
    total += total >> 16
    return ~total & 0xFFFF


def out(obj):
    print(json.dumps(obj, sort_keys=True), flush=True)


def serve(tcp_ports, udp_ports):
    udp = []
    for p in udp_ports:
        s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        s.setsockopt(socket.SOL_IP, 8, 1)  # IP_PKTINFO: the local address a datagram came to
        s.bind(("0.0.0.0", p))
        udp.append(s)
    icmp = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    tcp = []
    for p in tcp_ports:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind(("0.0.0.0", p))
        s.listen(64)
        tcp.append(s)
    while True:
        r, _, _ = select.select(udp + tcp + [icmp], [], [])
        for s in r:
            if s is icmp:
                pkt, _ = s.recvfrom(65535)
                ihl = (pkt[0] & 15) * 4
                typ, _, _, ident, _ = struct.unpack("!BBHHH", pkt[ihl:ihl + 8])
                payload = pkt[ihl + 8:]
                if typ == 8 and payload.startswith(b"tag:"):
                    out({"proto": "icmp", "tag": payload[4:].decode(errors="replace"),
                         "src": socket.inet_ntoa(pkt[12:16]), "id": ident})
            elif s in udp:
                data, anc, _, peer = s.recvmsg(2048, 256)
                dst = None
                for lvl, typ, val in anc:
                    if lvl == socket.SOL_IP and typ == 8:
                        dst = socket.inet_ntoa(val[8:12])
                tag = data.decode(errors="replace")
                out({"proto": "udp", "tag": tag, "src": peer[0], "sport": peer[1], "dst": dst,
                     "dport": s.getsockname()[1]})
                # Answer from the address it came to (a port forward's target may be a
                # secondary address).
                info = struct.pack("i4s4s", 0, socket.inet_aton(dst or "0.0.0.0"), b"\0" * 4)
                s.sendmsg([data], [(socket.SOL_IP, 8, info)], 0, peer)
            else:
                c, peer = s.accept()
                c.settimeout(3)
                try:
                    data = c.recv(256)
                    local = c.getsockname()
                    out({"proto": "tcp", "tag": data.decode(errors="replace"), "src": peer[0],
                         "sport": peer[1], "dst": local[0], "dport": local[1]})
                    c.sendall(data)
                except OSError:
                    pass
                c.close()


def tcp_probe(p):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    if p.get("sport"):
        s.bind(("0.0.0.0", p["sport"]))
    s.settimeout(3)
    try:
        s.connect((p["dst"], p["dport"]))
        s.sendall(p["tag"].encode())
        got = s.recv(256)
        # Wait for the server's close, so that the server is the side left in TIME_WAIT.
        while s.recv(256):
            pass
        return {"ok": got == p["tag"].encode()}
    except OSError as e:
        return {"ok": False, "why": str(e)}
    finally:
        s.close()


def udp_probe(p):
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    if p.get("sport"):
        s.bind(("0.0.0.0", p["sport"]))
    s.settimeout(1)
    try:
        for _ in range(3):
            s.sendto(p["tag"].encode(), (p["dst"], p["dport"]))
            try:
                if s.recv(256) == p["tag"].encode():
                    return {"ok": True}
            except socket.timeout:
                pass
        return {"ok": False, "why": "no answer"}
    except OSError as e:
        return {"ok": False, "why": str(e)}
    finally:
        s.close()


def echo_request(ident, seq, payload):
    hdr = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    return struct.pack("!BBHHH", 8, 0, csum(hdr + payload), ident, seq) + payload


def ping_probe(p):
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    payload = b"tag:" + p["tag"].encode()
    try:
        for seq in range(1, 4):
            s.sendto(echo_request(p["id"], seq, payload), (p["dst"], 0))
            deadline = time.monotonic() + 1
            while time.monotonic() < deadline:
                r, _, _ = select.select([s], [], [], max(0, deadline - time.monotonic()))
                if not r:
                    break
                pkt = s.recv(65535)
                ihl = (pkt[0] & 15) * 4
                typ, _, _, ident, _ = struct.unpack("!BBHHH", pkt[ihl:ihl + 8])
                if typ == 0 and ident == p["id"] and pkt[ihl + 8:] == payload:
                    return {"ok": True}
        return {"ok": False, "why": "no echo reply"}
    finally:
        s.close()


def parse_error(pkt):
    """An ICMP error (with its IPv4 header), parsed; None if it is not one."""
    ihl = (pkt[0] & 15) * 4
    icmp = pkt[ihl:]
    if len(icmp) < 8 + 20 or icmp[0] not in (3, 11):
        return None
    inner = icmp[8:]
    iihl = (inner[0] & 15) * 4
    proto = inner[9]
    q = {"src": socket.inet_ntoa(inner[12:16]), "dst": socket.inet_ntoa(inner[16:20]), "proto": proto,
         "ttl": inner[8], "ip_csum_ok": csum(inner[:iihl]) == 0}
    l4 = inner[iihl:]
    if proto in (6, 17) and len(l4) >= 4:
        q["sport"], q["dport"] = struct.unpack("!HH", l4[:4])
    if proto == 17 and len(l4) >= 8:
        ulen, ucsum = struct.unpack("!HH", l4[4:8])
        if ulen == len(l4) and ucsum != 0:
            ph = inner[12:20] + struct.pack("!BBH", 0, 17, ulen)
            q["udp_csum_ok"] = csum(ph + l4) == 0
    if proto == 1 and len(l4) >= 8:
        q["type"], q["id"] = l4[0], struct.unpack("!H", l4[4:6])[0]
    return {"error": {"src": socket.inet_ntoa(pkt[12:16]), "type": icmp[0], "code": icmp[1],
                      "csum_ok": csum(icmp) == 0}, "inner": q}


def ttl_probe(p):
    """Sends a probe with a small TTL and returns the ICMP error that quotes it."""
    raw = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
    try:
        for seq in range(1, 4):
            if p["kind"] == "ttl-udp":
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                s.bind(("0.0.0.0", p["sport"]))
                s.setsockopt(socket.SOL_IP, socket.IP_TTL, p["ttl"])
                s.sendto(p["tag"].encode(), (p["dst"], p["dport"]))
                s.close()
            else:
                s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
                s.setsockopt(socket.SOL_IP, socket.IP_TTL, p["ttl"])
                s.sendto(echo_request(p["id"], seq, b"tag:" + p["tag"].encode()), (p["dst"], 0))
                s.close()
            deadline = time.monotonic() + 1
            while time.monotonic() < deadline:
                r, _, _ = select.select([raw], [], [], max(0, deadline - time.monotonic()))
                if not r:
                    break
                e = parse_error(raw.recv(65535))
                if e and e["inner"]["dst"] == p["dst"]:
                    e["ok"] = True
                    return e
        return {"ok": False, "why": "no ICMP error"}
    finally:
        raw.close()


def probe(plan):
    run = {"tcp": tcp_probe, "udp": udp_probe, "ping": ping_probe, "ttl-udp": ttl_probe, "ttl-ping": ttl_probe}
    for p in plan:
        r = run[p["kind"]](p)
        r["tag"] = p["tag"]
        out(r)


def syn_flood(src, dst, dport, first, count):
    """Sends `count` TCP SYNs from `src`, source ports `first` up, to `dst`:`dport` (a raw
    IPv4 socket, each SYN a new connection)."""
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_RAW)
    a, b = socket.inet_aton(src), socket.inet_aton(dst)
    for i in range(count):
        tcp = struct.pack("!HHIIBBHHH", first + i, dport, 1000 + i, 0, 5 << 4, 0x02, 64240, 0, 0)
        c = csum(a + b + struct.pack("!BBH", 0, 6, len(tcp)) + tcp)
        tcp = tcp[:16] + struct.pack("!H", c) + tcp[18:]
        ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(tcp), i & 0xFFFF, 0, 64, 6, 0, a, b)
        s.sendto(ip + tcp, (dst, 0))
    s.close()


def ports(arg):
    return [int(x) for x in arg.split(",") if x]


def main():
    a = sys.argv[1:]
    if a[:1] == ["serve"]:
        opts = dict(zip(a[1::2], a[2::2]))
        serve(ports(opts.get("--tcp", "")), ports(opts.get("--udp", "")))
    elif a[:1] == ["syn-flood"] and len(a) == 6:
        syn_flood(a[1], a[2], int(a[3]), int(a[4]), int(a[5]))
    elif a[:1] == ["probe"] and len(a) == 2:
        with open(a[1]) as f:
            probe(json.load(f))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
