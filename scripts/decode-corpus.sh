#!/usr/bin/env bash
# Records a corpus of real frames between two network namespaces.
set -euo pipefail
out=${1:?usage: gen.sh OUT.pcap}
a=dcA$$; b=dcB$$
cleanup() { ip netns del $a 2>/dev/null || true; ip netns del $b 2>/dev/null || true; }
trap cleanup EXIT
ip netns add $a; ip netns add $b
ip link add veth0 netns $a type veth peer name veth1 netns $b
ip -n $a link set veth0 address 02:00:00:00:0a:01
ip -n $b link set veth1 address 02:00:00:00:0b:01
ip -n $a addr add 10.9.0.1/24 dev veth0; ip -n $b addr add 10.9.0.2/24 dev veth1
ip -n $a addr add fd09::1/64 dev veth0 nodad; ip -n $b addr add fd09::2/64 dev veth1 nodad
ip -n $a link set veth0 up; ip -n $b link set veth1 up; ip -n $a link set lo up; ip -n $b link set lo up
ip netns exec $a ethtool -K veth0 tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
ip netns exec $b ethtool -K veth1 tx off rx off tso off gso off gro off >/dev/null 2>&1 || true
ip netns exec $a tcpdump -U -n -i veth0 -w "$out" 2>/dev/null & td=$!
sleep 1
ip netns exec $a ping -c 2 -i 0.2 10.9.0.2 >/dev/null
ip netns exec $a ping -c 1 -s 3000 10.9.0.2 >/dev/null
ip netns exec $a ping -6 -c 2 -i 0.2 fd09::2 >/dev/null
ip netns exec $b python3 - <<'PY' &
import socket
s=socket.socket(); s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s.bind(('0.0.0.0',5555)); s.listen(1)
c,_=s.accept(); d=c.recv(100); c.sendall(b'pong:'+d); c.close()
s6=socket.socket(socket.AF_INET6); s6.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1); s6.bind(('::',5556)); s6.listen(1)
c,_=s6.accept(); d=c.recv(100); c.sendall(d); c.close()
u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.bind(('0.0.0.0',7777)); d,a=u.recvfrom(100); u.sendto(d,a)
PY
sleep 0.5
ip netns exec $a python3 - <<'PY'
import socket,time
s=socket.create_connection(('10.9.0.2',5555)); s.sendall(b'hello!'); s.recv(100); s.close()
time.sleep(0.3)
s=socket.create_connection(('fd09::2',5556)); s.sendall(b'six'); s.recv(100); s.close()
time.sleep(0.3)
u=socket.socket(socket.AF_INET,socket.SOCK_DGRAM); u.sendto(b'x'*20,('10.9.0.2',7777)); u.recvfrom(100)
u.sendto(b'y'*5,('10.9.0.2',7778))   # port unreachable
u6=socket.socket(socket.AF_INET6,socket.SOCK_DGRAM); u6.sendto(b'z'*9,('fd09::2',7779))  # port unreachable v6
time.sleep(0.3)
try:
    socket.create_connection(('10.9.0.2',5999),timeout=1)   # RST
except Exception: pass
u.sendto(b'w'*3000,('10.9.0.2',7778))  # fragmented UDP
PY
sleep 0.5
ip netns exec $a ping -c 1 -t 1 -W 1 10.9.0.77 >/dev/null 2>&1 || true   # ARP who-has with no answer
sleep 1.2
kill $td; wait $td 2>/dev/null || true
