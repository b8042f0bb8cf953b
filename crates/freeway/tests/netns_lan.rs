//! A bridge safe on a real LAN, end to end through network namespaces (the shared test bed:
//! hosts h1, h2, h3 on AF_PACKET ports of a Freeway in the switch namespace), with real
//! frames from the hosts' own stacks and raw sockets:
//!
//! * an STP BPDU (802.1D, to 01:80:c2:00:00:00) is never forwarded; on a port with BPDU
//!   guard it disables the port, the log says why, and `ctl link set dev P up` enables it;
//! * IGMP snooping: a querier's query makes its port a router port, a host that joins a
//!   group (`IP_ADD_MEMBERSHIP`: the kernel sends the reports) becomes a member, and a
//!   stream to the group reaches the member but not a host that did not join;
//! * a loop of two Freeway ports through a Linux bridge in another namespace, with storm
//!   control, stays within the storm-control rate while h1 and h2 keep talking.
//!
//! One worker, so that frames from one port are handled in order: each "nothing arrived"
//! is checked by a listener that runs until a sentinel frame sent after the traffic arrives,
//! never by waiting for a while.

#[macro_use]
mod netbed;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use netbed::*;

/// One `[[port]]` on the switch end `name`, access VLAN 1, with `extra` settings.
fn port(name: &str, extra: &str) -> String {
    format!(
        "\n[[port]]\nname = \"{name}\"\nkind = \"afpacket\"\nafpacket = {{ iface = \"{name}\" }}\nvlan = {{ mode = \"access\", vlan = 1 }}\n{extra}"
    )
}

/// Sends raw frames (hex) out of eth0 of host `h`.
fn send_frames(bed: &Bed, h: &str, frames: &[String]) {
    let script = "import socket,sys\ns=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\ns.bind(('eth0',0))\n\
                  for x in sys.argv[1:]:\n    s.send(bytes.fromhex(x))\n";
    let mut args = vec!["python3", "-c", script];
    args.extend(frames.iter().map(String::as_str));
    let o = bed.exec(h, &args);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
}

fn host_mac(h: &str) -> String {
    format!("02000000000{}", &h[1..])
}

/// A frame to `dst` from host `h`, padded to 60 bytes.
fn raw(dst: &str, h: &str, rest: &str) -> String {
    let mut f = format!("{dst}{}{rest}", host_mac(h));
    while f.len() < 120 {
        f.push_str("00");
    }
    f
}

/// The sentinel: a broadcast of the local experimental ethertype saying END.
fn sentinel(h: &str) -> String {
    raw("ffffffffffff", h, "88b5454e44")
}

/// An IEEE 802.1D configuration BPDU from host `h`.
fn bpdu(h: &str) -> String {
    raw(
        "0180c2000000",
        h,
        "0026424203000000000080000200000000010000000080000200000000018001000014000200",
    )
}

/// Starts a listener on eth0 of host `h` counting received frames to `mac` (hex; UDP only
/// if `udp`) until the sentinel; returns it once it listens.
fn listen(bed: &Bed, h: &str, mac: &str, udp: bool) -> Child {
    let script = "import socket,sys\nmac=bytes.fromhex(sys.argv[1]);udp=sys.argv[2]=='udp'\n\
                  s=socket.socket(socket.AF_PACKET,socket.SOCK_RAW,socket.htons(3))\ns.bind(('eth0',0))\n\
                  s.settimeout(30)\nprint('ready',flush=True)\nn=0\nwhile True:\n    f,a=s.recvfrom(65535)\n\
                  \x20   if a[2]==4: continue\n    if f[12:14]==b'\\x88\\xb5' and f[14:17]==b'END': break\n\
                  \x20   if f[0:6]==mac and (not udp or (f[12:14]==b'\\x08\\x00' and f[23]==17)): n+=1\nprint(n,flush=True)\n";
    spawn_ready(
        bed,
        h,
        &["python3", "-c", script, mac, if udp { "udp" } else { "any" }],
        "ready",
    )
}

/// Starts `cmd` in host `h` and returns once it printed the line `ready`.
fn spawn_ready(bed: &Bed, h: &str, cmd: &[&str], ready: &str) -> Child {
    let mut c = Command::new("ip")
        .args(["netns", "exec", &format!("fw-{h}{}", bed.suffix)])
        .args(cmd)
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 starts");
    let mut line = String::new();
    BufReader::new(c.stdout.as_mut().unwrap()).read_line(&mut line).unwrap();
    assert_eq!(line.trim(), ready, "{cmd:?} did not start");
    c
}

/// The last line a listener printed, as a number.
fn count(c: Child) -> u64 {
    let o = c.wait_with_output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    out.lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("listener said {out:?}"))
}

/// Polls `ctl` until `f` holds of its reply (up to 20 s).
fn wait_for(bed: &Bed, words: &[&str], what: &str, f: impl Fn(&serde_json::Value) -> bool) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let r = bed.ctl(words);
        if f(&r) {
            return r;
        }
        assert!(Instant::now() < deadline, "{what}: {r}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn port_state(r: &serde_json::Value, name: &str) -> String {
    r["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["ifname"] == name)
        .map(|p| p["state"].as_str().unwrap().to_string())
        .unwrap()
}

/// Stops Freeway and returns what it logged.
fn stop_log(bed: &mut Bed) -> String {
    let child = bed.freeway.take().expect("running");
    let _ = Command::new("kill").args(["-INT", &child.id().to_string()]).status();
    let out = child.wait_with_output().expect("freeway exits");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}

#[test]
fn a_bpdu_is_never_forwarded_and_disables_a_guarded_port_until_it_is_enabled() {
    need_root!();
    let mut bed = Bed::up("bpdu");
    let cfg = format!(
        "workers = 1\n{}{}{}",
        port("h1", "bpdu_guard = true\n"),
        port("h2", ""),
        port("h3", "")
    );
    bed.start_ctl(&cfg);
    assert!(bed.ping("h1", "10.0.0.2"), "h1 pings h2");
    // A BPDU from h2 (no guard): dropped, never seen by h3; h2 stays up.
    let l = listen(&bed, "h3", "0180c2000000", false);
    send_frames(&bed, "h2", &[bpdu("h2"), sentinel("h2")]);
    assert_eq!(count(l), 0, "h3 saw the BPDU");
    let r = bed.ctl(&["link", "show"]);
    assert_eq!(port_state(&r, "h2"), "forwarding", "{r}");
    // A BPDU from h1 (guarded): the port goes down, and nothing passes it either way.
    send_frames(&bed, "h1", &[bpdu("h1")]);
    wait_for(&bed, &["link", "show"], "h1 disabled", |r| {
        port_state(r, "h1") == "disabled"
    });
    assert!(!bed
        .exec("h1", &["ping", "-c", "1", "-W", "1", "10.0.0.2"])
        .status
        .success());
    let stats = bed.ctl(&["stats"]);
    assert!(stats["data"]["bridge"]["bpdu_guard"].as_u64().unwrap() >= 1, "{stats}");
    // Enabled again.
    let r = bed.ctl(&["link", "set", "dev", "h1", "up"]);
    assert_eq!(r["data"]["was_disabled"], true, "{r}");
    assert!(bed.ping("h1", "10.0.0.2"), "h1 pings h2 again");
    let log = stop_log(&mut bed);
    assert!(
        log.contains("STP BPDU arrived on port \"h1\", which has BPDU guard"),
        "the log says why: {log}"
    );
}

/// The ones' complement checksum of `b`.
fn csum(b: &[u8]) -> u16 {
    let mut s: u32 = b
        .chunks(2)
        .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
        .sum();
    while s >> 16 != 0 {
        s = (s & 0xffff) + (s >> 16);
    }
    !(s as u16)
}

/// An IGMPv2 general query from host `h` (10.0.0.N) to 224.0.0.1.
fn igmp_query(h: &str) -> String {
    let n: u8 = h[1..].parse().unwrap();
    let mut igmp = [0x11, 10, 0, 0, 0, 0, 0, 0];
    let c = csum(&igmp).to_be_bytes();
    igmp[2..4].copy_from_slice(&c);
    let mut ip = vec![0x45, 0, 0, 28, 0, 0, 0, 0, 1, 2, 0, 0, 10, 0, 0, n, 224, 0, 0, 1];
    let c = csum(&ip).to_be_bytes();
    ip[10..12].copy_from_slice(&c);
    let hex: String = ip.iter().chain(&igmp).map(|b| format!("{b:02x}")).collect();
    raw("01005e000001", h, &format!("0800{hex}"))
}

#[test]
fn a_multicast_stream_reaches_members_only_once_igmp_is_snooped() {
    need_root!();
    let mut bed = Bed::up("igmp");
    let cfg = format!("workers = 1\n{}{}{}", port("h1", ""), port("h2", ""), port("h3", ""));
    bed.start_ctl(&cfg);
    assert!(bed.ping("h1", "10.0.0.2"), "h1 pings h2");
    // h2 is the multicast router: its query makes it a router port and the VLAN has a querier.
    send_frames(&bed, "h2", &[igmp_query("h2")]);
    wait_for(&bed, &["mdb", "show"], "h2 a router port", |r| {
        r["data"][0]["router"]["br0"]
            .as_array()
            .is_some_and(|a| a.iter().any(|p| p["port"] == "h2"))
    });
    // h1 joins 239.1.2.3: its kernel reports it.
    let receiver = "import socket,struct\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
                    s.setsockopt(socket.SOL_SOCKET,socket.SO_REUSEADDR,1)\ns.bind(('',5007))\n\
                    s.setsockopt(socket.IPPROTO_IP,socket.IP_ADD_MEMBERSHIP,struct.pack('4s4s',socket.inet_aton('239.1.2.3'),socket.inet_aton('10.0.0.1')))\n\
                    s.settimeout(30)\nprint('ready',flush=True)\nn=0\nwhile n<20:\n    s.recv(100)\n    n+=1\nprint(n,flush=True)\n";
    let member = spawn_ready(&bed, "h1", &["python3", "-c", receiver], "ready");
    let r = wait_for(&bed, &["mdb", "show"], "h1 a member", |r| {
        r["text"]
            .as_str()
            .unwrap()
            .contains("dev br0 port h1 grp 239.1.2.3 temp vid 1")
    });
    assert!(!r["text"].as_str().unwrap().contains("port h3 grp 239.1.2.3"), "{r}");
    // h2 streams to the group; h3, which did not join, hears nothing of it.
    let outsider = listen(&bed, "h3", "01005e010203", true);
    let sender = "import socket\ns=socket.socket(socket.AF_INET,socket.SOCK_DGRAM)\n\
                  s.setsockopt(socket.IPPROTO_IP,socket.IP_MULTICAST_IF,socket.inet_aton('10.0.0.2'))\n\
                  s.setsockopt(socket.IPPROTO_IP,socket.IP_MULTICAST_TTL,1)\n\
                  for i in range(20):\n    s.sendto(b'data%d'%i,('239.1.2.3',5007))\n";
    let o = bed.exec("h2", &["python3", "-c", sender]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(count(member), 20, "the member got the stream");
    send_frames(&bed, "h2", &[sentinel("h2")]);
    assert_eq!(count(outsider), 0, "a host that did not join got the stream");
    let s = bed.ctl(&["stats"]);
    assert!(s["data"]["bridge"]["mcast_snooped"].as_u64().unwrap() >= 20, "{s}");
    assert!(s["data"]["mdb"]["groups"].as_u64().unwrap() >= 1, "{s}");
    bed.stop();
}

#[test]
fn a_loop_through_a_linux_bridge_is_held_to_the_storm_control_rate() {
    need_root!();
    const RATE: u64 = 200;
    let mut bed = Bed::up("loop");
    let (sw, h3) = (format!("fw-sw{}", bed.suffix), format!("fw-h3{}", bed.suffix));
    // h3 becomes a Linux bridge joining the switch's h3 and a second link, h3b: a loop.
    let setup = format!(
        "ip -n {h3} link add eth1 type veth peer name h3b netns {sw} && \
         ip netns exec {h3} sysctl -qw net.ipv6.conf.all.disable_ipv6=1 && \
         ip -n {h3} link add br0 type bridge stp_state 0 mcast_snooping 0 && \
         ip -n {h3} link set eth0 master br0 && ip -n {h3} link set eth1 master br0 && \
         ip -n {h3} link set eth1 up && ip -n {h3} link set br0 up && ip -n {sw} link set h3b up"
    );
    let o = Command::new("sh").args(["-c", &setup]).output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // The loop's ports learn nothing: the copies of h1's and h2's broadcasts coming back
    // through the loop would move their addresses there.
    let storm = format!(
        "learning = false\nstorm_control = {{ broadcast = {RATE}, multicast = {RATE}, unknown_unicast = {RATE} }}\n"
    );
    let cfg = format!(
        "workers = 1\n{}{}{}{}",
        port("h1", ""),
        port("h2", ""),
        port("h3", &storm),
        port("h3b", &storm)
    );
    bed.start_ctl(&cfg);
    // A station behind h1 broadcasts without end: every frame circles the loop until storm
    // control drops it.
    let flood = "import socket,time\ns=socket.socket(socket.AF_PACKET,socket.SOCK_RAW)\ns.bind(('eth0',0))\n\
                 f=bytes.fromhex('ffffffffffff020000000099'+'88b5'+'53544f524d'+'00'*41)\nprint('ready',flush=True)\n\
                 while True:\n    s.send(f)\n    time.sleep(0.001)\n";
    let mut flooder = spawn_ready(&bed, "h1", &["python3", "-c", flood], "ready");
    let admitted = |s: &serde_json::Value| {
        let rx: u64 = s["data"]["ports"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["name"] == "h3" || p["name"] == "h3b")
            .map(|p| p["rx_packets"].as_u64().unwrap())
            .sum();
        rx - s["data"]["bridge"]["drop_storm"].as_u64().unwrap()
    };
    let storm_drops = |s: &serde_json::Value| s["data"]["bridge"]["drop_storm"].as_u64().unwrap();
    let t0 = Instant::now();
    let s0 = bed.ctl(&["stats"]);
    // Meanwhile h1 and h2 keep talking.
    let pinged = bed.ping("h1", "10.0.0.2");
    bed.transfer_intact("h1", "h2", 5003, 1);
    let s1 = bed.ctl(&["stats"]);
    let window = t0.elapsed().as_secs_f64();
    let _ = flooder.kill();
    let _ = flooder.wait();
    assert!(pinged, "h1 pings h2 during the storm");
    assert!(storm_drops(&s1) > storm_drops(&s0), "the loop was live: {s1}");
    // Two ports, three classes, each at most RATE a second plus a full bucket (a second's
    // worth): the bound holds however slowly this machine ran.
    let bound = (2.0 * 3.0 * RATE as f64 * (window + 1.0)) as u64 + 2 * 3 * RATE;
    let got = admitted(&s1) - admitted(&s0);
    assert!(
        got <= bound,
        "{got} frames taken in from the loop in {window:.2} s (at most {bound})"
    );
    bed.stop();
}
