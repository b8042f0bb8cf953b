"""Hand-made frames for the decoder's corpus (crates/freeway/tests/decode/synthetic.pcap):
what real traffic between two hosts rarely shows (ICMP errors of every kind and codes tcpdump
does not name, ICMP timestamp replies and router advertisements, Mobile IPv6 and router
renumbering, VLAN and QinQ tags, IPv6 extension headers and fragments, IGMP, MLD, STP,
malformed and cut frames).
Usage: python3 scripts/decode-corpus.py OUT.pcap"""
import struct, sys

def csum(b):
    if len(b) % 2: b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b)//2), b))
    while s >> 16: s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff

def ip4(src, dst, proto, payload, ttl=64, ident=1, flags_off=0, tos=0):
    h = struct.pack('!BBHHHBBH4s4s', 0x45, tos, 20+len(payload), ident, flags_off, ttl, proto, 0,
                    bytes(map(int, src.split('.'))), bytes(map(int, dst.split('.'))))
    h = h[:10] + struct.pack('!H', csum(h)) + h[12:]
    return h + payload

import ipaddress
def a6(x): return ipaddress.IPv6Address(x).packed
def ip6(src, dst, nh, payload, hlim=64):
    return struct.pack('!IHBB', 0x60000000, len(payload), nh, hlim) + a6(src) + a6(dst) + payload

def udp(sp, dp, data): return struct.pack('!HHHH', sp, dp, 8+len(data), 0) + data
def tcp(sp, dp, seq, ack, flags, win=512, opts=b'', data=b''):
    off = (20 + len(opts)) // 4
    return struct.pack('!HHIIBBHHH', sp, dp, seq, ack, off << 4, flags, win, 0, 0) + opts + data
def icmp(t, c, rest, body):
    m = struct.pack('!BBH', t, c, 0) + rest + body
    return m[:2] + struct.pack('!H', csum(m)) + m[4:]
def icmp6(t, c, rest, body):
    return struct.pack('!BBH', t, c, 0) + rest + body  # checksum not checked by tcpdump -n

def eth(dst, src, et, payload, vlans=()):
    d = bytes.fromhex(dst.replace(':', '')); s = bytes.fromhex(src.replace(':', ''))
    tags = b''.join(struct.pack('!HH', tpid, vid) for tpid, vid in vlans)
    return d + s + tags + struct.pack('!H', et) + payload

A, B = '02:00:00:00:0a:01', '02:00:00:00:0b:01'
frames = []
inner_udp = ip4('10.9.0.1', '10.9.5.5', 17, udp(40000, 33434, b'\0'*12), ttl=1)
frames.append(eth(B, A, 0x0800, ip4('10.9.0.254', '10.9.0.1', 1, icmp(11, 0, b'\0'*4, inner_udp))))
inner_tcp = ip4('10.9.0.1', '10.9.5.5', 6, tcp(40000, 80, 1000, 0, 0x02), ttl=63, flags_off=0x4000)
frames.append(eth(B, A, 0x0800, ip4('10.9.0.254', '10.9.0.1', 1, icmp(3, 4, struct.pack('!HH', 0, 1400), inner_tcp))))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.254', '10.9.0.1', 1, icmp(3, 1, b'\0'*4, inner_udp))))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.254', '10.9.0.1', 1, icmp(3, 0, b'\0'*4, inner_udp))))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.254', '10.9.0.1', 1, icmp(3, 13, b'\0'*4, inner_udp))))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.254', '10.9.0.1', 1, icmp(3, 2, b'\0'*4, inner_udp))))
echo = icmp(8, 0, struct.pack('!HH', 77, 5), b'a'*56)
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 1, echo), vlans=((0x8100, 20),)))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 17, udp(5000, 6000, b'q'*10)), vlans=((0x88a8, 100), (0x8100, 20))))
inner6 = ip6('fd09::1', 'fd09:5::5', 17, udp(40000, 33434, b'\0'*12), hlim=1)
frames.append(eth(B, A, 0x86dd, ip6('fd09::fe', 'fd09::1', 58, icmp6(3, 0, b'\0'*4, inner6))))
frames.append(eth(B, A, 0x86dd, ip6('fd09::fe', 'fd09::1', 58, icmp6(2, 0, struct.pack('!I', 1280), inner6))))
frames.append(eth(B, A, 0x86dd, ip6('fd09::fe', 'fd09::1', 58, icmp6(1, 1, b'\0'*4, inner6))))
frames.append(eth(B, A, 0x86dd, ip6('fd09::fe', 'fd09::1', 58, icmp6(1, 3, b'\0'*4, inner6))))
# IPv6 fragments of a UDP datagram.
body = udp(41000, 9000, b'f'*40)
frag1 = struct.pack('!BBHI', 17, 0, 0x0001, 0xabcd) + body[:24]
frag2 = struct.pack('!BBHI', 17, 0, 24, 0xabcd) + body[24:]
frames.append(eth(B, A, 0x86dd, ip6('fd09::1', 'fd09::2', 44, frag1)))
frames.append(eth(B, A, 0x86dd, ip6('fd09::1', 'fd09::2', 44, frag2)))
frames.append(eth(B, A, 0x88b5, b'\x01\x02' + b'\0'*44))
# IGMP v2 report and leave, v3 report.
frames.append(eth('01:00:5e:01:01:01', A, 0x0800, ip4('10.9.0.1', '239.1.1.1', 2, icmp(0x16, 0, bytes([239,1,1,1]), b''), ttl=1)))
frames.append(eth('01:00:5e:00:00:02', A, 0x0800, ip4('10.9.0.1', '224.0.0.2', 2, icmp(0x17, 0, bytes([239,1,1,1]), b''), ttl=1)))
rec = struct.pack('!BBH4s', 4, 0, 0, bytes([239,1,1,2]))
frames.append(eth('01:00:5e:00:00:16', A, 0x0800, ip4('10.9.0.1', '224.0.0.22', 2, icmp(0x22, 0, struct.pack('!HH', 0, 1), rec), ttl=1)))
frames.append(eth('01:00:5e:00:00:01', A, 0x0800, ip4('10.9.0.254', '224.0.0.1', 2, icmp(0x11, 100, bytes(4), b''), ttl=1)))
# TCP with SACK, window scale, and a URG pointer; a FIN without ACK; a TCP to port 5555 with data and no ACK.
sack = bytes([1, 1, 5, 10]) + struct.pack('!II', 2000, 3000)
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 6, tcp(1234, 5555, 100, 900, 0x10, opts=bytes([1,1,8,10]) + struct.pack('!II', 5, 6) + sack + bytes([1,1])))))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 6, tcp(1234, 5555, 100, 0, 0x01))))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 6, tcp(1234, 5556, 100, 0, 0x28 | 0x10, data=b'zz'))))
# IPv4 non-first fragment of TCP, and a first fragment.
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 6, b'x'*32, ident=9, flags_off=0x2000)))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 6, b'x'*16, ident=9, flags_off=4)))
# Truncated: IPv4 header cut.
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 17, udp(1, 2, b'abc'))[:14]))
# ICMP echo with unknown type.
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 1, icmp(13, 0, b'\0'*4, b'\0'*12))))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 253, b'\0'*16)))
frames.append(eth(B, A, 0x86dd, ip6('fd09::1', 'fd09::2', 253, b'\0'*16)))
frames.append(eth(B, A, 0x86dd, ip6('fd09::1', 'fd09::2', 60, bytes([17, 0, 1, 4, 0, 0, 0, 0]) + udp(1, 2, b'ab'))))
frames.append(eth(B, A, 0x86dd, ip6('fd09::1', 'fd09::2', 0, bytes([6, 0, 1, 4, 0, 0, 0, 0]) + tcp(1, 2, 5, 6, 0x18, data=b'ab'))))
# Frames cut short on the wire (the IP length says more than the frame holds).
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 17, udp(1, 2, b'abcdef'))[:30]))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 6, tcp(1, 2, 5, 6, 0x18, data=b'abcdef'))[:40]))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 1, icmp(5, 1, bytes([10, 9, 0, 9]), ip4('10.9.0.1', '10.9.7.7', 17, udp(1, 2, b''))))))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 1, icmp(3, 3, bytes(4), ip4('10.9.0.1', '10.9.7.7', 6, tcp(1, 2, 5, 6, 2))))))
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 1, icmp(3, 10, bytes(4), ip4('10.9.0.1', '10.9.7.7', 6, tcp(1, 2, 5, 6, 2))))))
for t, body in [(134, bytes(8)), (130, bytes(20)), (131, bytes(16)), (137, bytes(32)), (200, bytes(4))]:
    frames.append(eth(B, A, 0x86dd, ip6('fe80::1', 'ff02::1', 58, icmp6(t, 0, bytes([64, 0, 0, 0]), body))))
# An STP configuration BPDU (802.3 length, LLC 42/42/03) and an ARP of an unknown hardware type.
frames.append(eth('01:80:c2:00:00:00', A, 0x0026, bytes([0x42, 0x42, 0x03]) + bytes(35)))
frames.append(eth(B, A, 0x0806, bytes(28)))
frames.append(eth(B, A, 0x86dd, ip6('fd09::1', 'fd09::2', 59, b'')))

# ICMPv6 destination unreachables of codes tcpdump does not name (it dumps the message, and
# gives no length), router renumbering results, Mobile IPv6's home agent discovery and mobile
# prefix messages; ICMP timestamp replies, whole and cut short.
for c in (5, 6, 200):
    frames.append(eth(B, A, 0x86dd, ip6('fd09::fe', 'fd09::1', 58, icmp6(1, c, b'\0'*4, inner6))))
for c in (1, 2, 255):
    frames.append(eth(B, A, 0x86dd, ip6('fd09::fe', 'fd09::1', 58, icmp6(138, c, struct.pack('!I', 7), bytes(8)))))
for t in (144, 145, 146, 147):
    frames.append(eth(B, A, 0x86dd, ip6('fd09::fe', 'fd09::1', 58, icmp6(t, 0, struct.pack('!HH', 0x1234, 0), bytes(8)))))
for times in (struct.pack('!III', 86399999, 0, 3600000), struct.pack('!II', 1, 2)):
    frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 1, icmp(14, 0, struct.pack('!HH', 3, 9), times))))
# A timestamp reply whose datagram ends before its times, in a padded frame.
frames.append(eth(B, A, 0x0800, ip4('10.9.0.1', '10.9.0.2', 1, icmp(14, 0, struct.pack('!HH', 3, 9), bytes(4))) + bytes(12)))
# ICMP router advertisements: two addresses (a preference of -5), entries of 3 words, one
# address short of the count.
ra = struct.pack('!4sI', bytes([10, 9, 0, 1]), 0) + struct.pack('!4si', bytes([10, 9, 0, 2]), -5)
for n, size, life in ((2, 2, 7200), (1, 3, 61), (3, 2, 1800)):
    frames.append(eth('01:00:5e:00:00:01', A, 0x0800, ip4('10.9.0.1', '224.0.0.1', 1, icmp(9, 0, struct.pack('!BBH', n, size, life), ra), ttl=1)))
out = open(sys.argv[1], 'wb')
out.write(struct.pack('<IHHiIII', 0xa1b2c3d4, 2, 4, 0, 0, 262144, 1))
for i, f in enumerate(frames):
    out.write(struct.pack('<IIII', 1700000000 + i, 1000 * i, len(f), len(f)) + f)
